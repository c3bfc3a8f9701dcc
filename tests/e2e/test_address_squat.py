"""A process that loops on bind() of the control plane's pod-facing addresses never gets a pod's
connection: across a kill -9 of the control plane the socket keeper holds them, and when the
keeper is gone too and the address is taken, the pods that were given it are stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

from tests.helpers import pod_network_on, poll
from trimaran.server.daemon import read_server_info, start_server
from trimaran.server.keeper import keeper_pid

# Loops on bind() of every address given (host:port ...) as an attacker would; writes each
# attempt and each connection it accepts into the directory given first.
SQUATTER = textwrap.dedent("""
    import os, socket, sys, time
    out, addresses = sys.argv[1], sys.argv[2:]
    held = {}
    while True:
        for address in addresses:
            if address in held:
                try:
                    conn, peer = held[address].accept()
                    with open(os.path.join(out, "accepted"), "a") as fh:
                        fh.write(f"{address} from {peer}\\n")
                    conn.close()
                except BlockingIOError:
                    pass
                continue
            host, port = address.rsplit(":", 1)
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, int(port)))
                sock.listen(64)
                sock.setblocking(False)
                held[address] = sock
                with open(os.path.join(out, "bound"), "a") as fh:
                    fh.write(address + "\\n")
            except OSError:
                sock.close()
        with open(os.path.join(out, "attempts"), "a") as fh:
            fh.write(".")
        time.sleep(0.02)
""")

# Waits for a go-ahead file, then calls the API (TLS against the pod's CA, its token) and Katib's
# DB manager at the addresses it was given when it started.
CLIENT = textwrap.dedent("""
    import os, ssl, time, urllib.request, grpc
    while not os.path.exists("/state/go"):
        time.sleep(0.05)
    sa = "/var/run/secrets/kubernetes.io/serviceaccount"
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    context = ssl.create_default_context(cafile=sa + "/ca.crt")
    request = urllib.request.Request(f"https://{host}:{port}/api/v1/namespaces/default/pods",
                                     headers={"Authorization": "Bearer " + open(sa + "/token").read()})
    with urllib.request.urlopen(request, context=context, timeout=30) as answer:
        print("api", answer.status, flush=True)
    with grpc.insecure_channel("katib-db-manager.kubeflow:6789") as channel:
        call = channel.unary_unary("/api.v1.beta1.DBManager/GetObservationLog")
        call(b"", timeout=30)
        print("katib ok", flush=True)
""")


def _pod(name: str, script: str, args: list[str], claim: str, restart: str = "Never") -> str:
    return textwrap.dedent(f"""
        apiVersion: v1
        kind: Pod
        metadata: {{name: {name}}}
        spec:
          restartPolicy: {restart}
          containers:
            - name: main
              image: python
              command: {json.dumps(["python", "-c", script, *args])}
              volumeMounts: [{{name: state, mountPath: /state}}]
          volumes:
            - {{name: state, persistentVolumeClaim: {{claimName: {claim}}}}}
        ---
    """)


def _addresses(home) -> list[str]:
    info = read_server_info(home)
    # On the pod network pods reach the control plane at the bridge's gateway; a pod's own 127.0.0.1
    # is its own (a squatting pod may bind it, to no effect).
    host = json.loads((home / "network.json").read_text())["gateway"] if pod_network_on(home) else "127.0.0.1"
    return [f"{host}:{info['podPort']}", info["katibDBManager"]]


def test_a_pod_squatting_the_addresses_never_gets_them_across_a_kill_minus_nine(plane, tmp_path):
    addresses = _addresses(plane.home)
    manifest = tmp_path / "pods.yaml"
    manifest.write_text(_pod("squatter", SQUATTER, ["/state", *addresses], "squat")
                        + _pod("client", CLIENT, [], "client"))
    plane.cli("apply", "-f", str(manifest))
    plane.cli("wait", "pod/squatter", "pod/client", "--for=condition=Ready", "--timeout=60s")
    squat = plane.home / "volumes/default/squat"
    poll(lambda: (squat / "attempts").exists(), timeout=30, what="the squatter to try")

    os.kill(int(read_server_info(plane.home)["pid"]), signal.SIGKILL)
    # The squatter keeps trying while no control plane runs: each round is one more dot.
    tried = len((squat / "attempts").read_text())
    poll(lambda: len((squat / "attempts").read_text()) > tried + 20, timeout=30, what="the squatter to try again")
    start_server(home=plane.home)

    assert _addresses(plane.home) == addresses, "the control plane kept its addresses"
    (plane.home / "volumes/default/client/go").write_text("")
    plane.cli("wait", "pod/client", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=60s")
    assert plane.log("client").split("\n")[:2] == ["api 200", "katib ok"]
    assert not (squat / "bound").exists(), (squat / "bound").read_text()
    assert not (squat / "accepted").exists()


def test_with_the_keeper_gone_the_pods_given_a_taken_address_are_stopped(plane, tmp_path):
    addresses = _addresses(plane.home)
    manifest = tmp_path / "pods.yaml"
    manifest.write_text(_pod("client", CLIENT, [], "client", restart="OnFailure"))
    plane.cli("apply", "-f", str(manifest))
    plane.cli("wait", "pod/client", "--for=condition=Ready", "--timeout=60s")
    before = plane.get("pod", "client")["status"]["containerStatuses"][0]["restartCount"]

    os.kill(int(read_server_info(plane.home)["pid"]), signal.SIGKILL)
    os.kill(keeper_pid(plane.home), signal.SIGKILL)
    out = tmp_path / "squat"
    out.mkdir()
    squatter = subprocess.Popen([sys.executable, "-c", SQUATTER, str(out), *addresses])
    try:
        poll(lambda: (out / "bound").exists() and len((out / "bound").read_text().split()) == 2, timeout=30,
             what="the squatter to take both addresses")
        start_server(home=plane.home)
        plane.__dict__.pop("_clients", None)  # this process's clients of the old address (the kubeconfig moved)
        assert not set(_addresses(plane.home)) & set(addresses), "the control plane moved"
        events = plane.cli("describe", "pod", "client").stdout
        assert "ControlPlaneAddressLost" in events and addresses[0] in events, events
        # Stopped, then restarted with the new addresses (OnFailure): it reaches the real control plane.
        poll(lambda: plane.get("pod", "client")["status"]["containerStatuses"][0]["restartCount"] > before,
             timeout=60, what="the client to be restarted")
        plane.cli("wait", "pod/client", "--for=condition=Ready", "--timeout=60s")
        (plane.home / "volumes/default/client/go").write_text("")
        plane.cli("wait", "pod/client", "--for=jsonpath={.status.phase}=Succeeded", "--timeout=60s")
        assert plane.log("client").split("\n")[:2] == ["api 200", "katib ok"]
        assert not (out / "accepted").exists(), (out / "accepted").read_text()
    finally:
        squatter.kill()
        squatter.wait()


def test_server_stop_ends_the_keeper(plane):
    from trimaran.server.daemon import stop_server

    pid = keeper_pid(plane.home)
    assert pid
    assert stop_server(plane.home)
    assert keeper_pid(plane.home) is None
    poll(lambda: not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z",
         timeout=10, what="the keeper to exit")
