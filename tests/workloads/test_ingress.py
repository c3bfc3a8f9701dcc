"""networking.k8s.io/v1 Ingress and IngressClass with the real kubectl against a real control plane, and
real HTTP to the address the Ingress's status gives (loopback): two Services behind two paths and a host
rule, Exact and element-wise Prefix matching, a 404 where nothing matches, a backend change followed,
an unknown class left unserved with an event, TLS served with its Secret's certificate (by SNI),
upstream's words for bad input."""

from __future__ import annotations

import datetime
import json
import shutil
import socket
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ControlPlaneHandle, shared_plane
from tests.helpers import pod_network_on, poll
from trimaran.api import ManifestError, validate
from trimaran.cli.client import Client
from trimaran.controllers.workloads.ingressproxy import Backend, PathRule, RouteTable

NS = "default"
# Answers "<NAME> <path>" on every path.
SERVER = """
import http.server, os
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = (os.environ["NAME"] + " " + self.path).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", int(os.environ["PORT"])), H).serve_forever()
"""

plane = shared_plane("ingress")
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is installed by .ci/run")


def kubectl(plane: ControlPlaneHandle, tmp_path: Path, *args: str, stdin: str | None = None,
            ok: bool = True) -> subprocess.CompletedProcess:
    env = dict(plane.env, KUBECONFIG=str(plane.home / "kubeconfig"), KUBECACHEDIR=str(tmp_path / "kc"),
               HOME=str(tmp_path))
    done = subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, timeout=90, input=stdin)
    if ok:
        assert done.returncode == 0, done.stderr
    return done


def backend(name: str) -> list[dict]:
    """A Deployment answering as ``name`` and its Service (port 80, named ``web``)."""
    container = {"name": "web", "image": "python", "command": ["python", "-c", SERVER, "--port=$(PORT)"],
                 "ports": [{"name": "http", "containerPort": 8080}], "env": [{"name": "NAME", "value": name}],
                 "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 1}}
    return [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NS},
             "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                      "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}}}},
            {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": NS},
             "spec": {"selector": {"app": name}, "ports": [{"name": "web", "port": 80, "targetPort": "http"}]}}]


def path(path: str, kind: str, service: str, port: dict) -> dict:
    return {"path": path, "pathType": kind, "backend": {"service": {"name": service, "port": port}}}


def ingress(name: str, spec: dict) -> dict:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": name, "namespace": NS},
            "spec": spec}


def get(url: str, host: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def events(plane: ControlPlaneHandle, tmp_path: Path, name: str) -> list[dict]:
    out = kubectl(plane, tmp_path, "get", "events", "-n", NS, "--field-selector",
                  f"involvedObject.kind=Ingress,involvedObject.name={name}", "-o", "json").stdout
    return json.loads(out)["items"]


def test_matching_follows_the_apis_rules() -> None:
    """Hosts exact, then wildcard (one label), then none; the longest path; Exact over Prefix at a tie."""
    def to(name: str) -> Backend:
        return Backend((f"{name}:1",), name)
    table = RouteTable()
    table.add("a.example.com", PathRule("Prefix", "/", to("exact-host")))
    table.add("*.example.com", PathRule("Prefix", "/", to("wildcard")))
    table.add("*.example.com", PathRule("Prefix", "/w/x", to("wildcard-longer")))
    table.add(None, PathRule("Prefix", "/p", to("prefix")))
    table.add(None, PathRule("Exact", "/p", to("exact")))
    table.add(None, PathRule("ImplementationSpecific", "/q/", to("q")))
    assert table.route("A.example.com:8080", "/anything") == to("exact-host")
    assert table.route("b.example.com", "/w/x/y") == to("wildcard-longer")
    assert table.route("b.example.com", "/w/xy") == to("wildcard")
    assert table.route("c.b.example.com", "/p") == to("exact"), "a wildcard matches one label only"
    assert table.route("other", "/p/") == to("prefix")
    assert table.route("other", "/q") == to("q"), "a trailing / is ignored"
    assert table.route("other", "/qq") is None
    table.default = to("default")
    assert table.route("other", "/qq") == to("default")


def test_validation_has_upstreams_words() -> None:
    bad = ingress("bad", {"rules": [
        {"host": "10.1.2.3", "http": {"paths": [
            path("foo", "Prefix", "a", {"number": 80}),
            {"path": "/x", "backend": {"service": {"name": "a", "port": {"number": 80}}}},
            {"path": "/y", "pathType": "Exact",
             "backend": {"service": {"name": "a", "port": {"number": 80}}, "resource": {"kind": "K", "name": "r"}}},
            path("/z//w", "Prefix", "a", {"name": "web", "number": 80}),
            path("/v", "Regex", "a", {})]}},
        {"host": "*.*.example.com"}]})
    with pytest.raises(ManifestError) as caught:
        validate(bad)
    text = str(caught.value)
    rule = "spec.rules[0]"
    for line in (f'{rule}.host: Invalid value: "10.1.2.3": must be a DNS name, not an IP address',
                 f'{rule}.http.paths[0].path: Invalid value: "foo": must be an absolute path',
                 f"{rule}.http.paths[1].pathType: Required value: pathType must be specified",
                 f'{rule}.http.paths[2].backend: Invalid value: "": cannot set both resource and service backends',
                 f"{rule}.http.paths[3].path: Invalid value: \"/z//w\": must not contain '//'",
                 f'{rule}.http.paths[3].backend: Invalid value: "": cannot set both port name & port number',
                 f'{rule}.http.paths[4].pathType: Unsupported value: "Regex": supported values: "Exact", '
                 f'"ImplementationSpecific", "Prefix"',
                 f"{rule}.http.paths[4].backend: Required value: port name or number is required",
                 'spec.rules[1].host: Invalid value: "*.*.example.com": a wildcard DNS-1123 subdomain must start'):
        assert line in text, text
    with pytest.raises(ManifestError, match="either `defaultBackend` or `rules` must be specified"):
        validate(ingress("empty", {}))
    with pytest.raises(ManifestError, match='spec.controller: Invalid value: "nginx": must be a domain-prefixed path'):
        validate({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "c"},
                  "spec": {"controller": "nginx"}})


@needs_kubectl
def test_rules_route_real_requests_to_services(plane: ControlPlaneHandle, api: Client, tmp_path: Path) -> None:
    out = kubectl(plane, tmp_path, "get", "ingressclass").stdout.splitlines()
    assert out[0].split() == ["NAME", "CONTROLLER", "PARAMETERS", "AGE"]
    assert out[1].split()[:3] == ["trimaran", "trimaran.dev/ingress", "<none>"]

    api.apply([{"object": o} for o in backend("alpha") + backend("beta")])
    web = ingress("web", {"rules": [
        {"host": "app.example.com", "http": {"paths": [path("/a", "Prefix", "alpha", {"number": 80}),
                                                       path("/b", "Exact", "beta", {"name": "web"})]}},
        {"http": {"paths": [path("/shared/", "ImplementationSpecific", "beta", {"number": 80})]}}]})
    kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps(web))  # no class: the default class's

    stored = poll(lambda: (i := api.get("Ingress", NS, "web")).get("status", {}).get("loadBalancer", {}).get(
        "ingress") and i, timeout=30, what="the Ingress's address")
    assert stored["spec"]["ingressClassName"] == "trimaran"
    lb, = stored["status"]["loadBalancer"]["ingress"]
    assert lb["ip"] == "127.0.0.1"
    base = f"http://127.0.0.1:{lb['ports'][0]['port']}"
    table = kubectl(plane, tmp_path, "get", "ingress", "web").stdout.splitlines()
    assert table[0].split() == ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]
    assert table[1].split()[:5] == ["web", "trimaran", "app.example.com", "127.0.0.1", "80"]

    poll(lambda: get(f"{base}/a/x?q=1", "app.example.com") == (200, "alpha /a/x?q=1"), timeout=60,
         what="alpha to answer through the Ingress")
    described = kubectl(plane, tmp_path, "describe", "ingress", "web").stdout
    assert "Ingress Class:    trimaran" in described and "app.example.com" in described, described
    assert "alpha:80 (" in described, described
    poll(lambda: get(f"{base}/b", "app.example.com") == (200, "beta /b"), timeout=60, what="beta to answer")
    assert get(f"{base}/a", "app.example.com:80") == (200, "alpha /a")
    assert get(f"{base}/b/x", "app.example.com")[0] == 404, "Exact matches the whole path only"
    assert get(f"{base}/ab", "app.example.com")[0] == 404, "Prefix matches whole path elements"
    assert get(f"{base}/shared", "other.example.com") == (200, "beta /shared"), "a rule without a host: any host"
    assert get(f"{base}/shared/deeper", "app.example.com") == (200, "beta /shared/deeper")
    assert get(f"{base}/a", "other.example.com")[0] == 404, "the host rule's paths are that host's"

    # The backend changed: followed without a restart.
    kubectl(plane, tmp_path, "patch", "ingress", "web", "--type=json", "-p", json.dumps(
        [{"op": "replace", "path": "/spec/rules/0/http/paths/0/backend/service/name", "value": "beta"}]))
    poll(lambda: get(f"{base}/a", "app.example.com") == (200, "beta /a"), timeout=30, what="the new backend")

    # Its Service's endpoints gone: 503, until they are back.
    kubectl(plane, tmp_path, "scale", "deployment", "beta", "--replicas=0")
    poll(lambda: get(f"{base}/a", "app.example.com")[0] == 503, timeout=60, what="503 with no endpoints")
    kubectl(plane, tmp_path, "scale", "deployment", "beta", "--replicas=1")
    poll(lambda: get(f"{base}/a", "app.example.com") == (200, "beta /a"), timeout=60, what="the endpoints back")

    # A defaultBackend takes what no rule matches.
    kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps(ingress("fallback", {
        "ingressClassName": "trimaran", "defaultBackend": {"service": {"name": "alpha", "port": {"number": 80}}}})))
    poll(lambda: get(f"{base}/nothing", "nowhere.example.com") == (200, "alpha /nothing"), timeout=30,
         what="the default backend")
    assert get(f"{base}/b", "app.example.com") == (200, "beta /b"), "rules still win over the default"
    kubectl(plane, tmp_path, "delete", "ingress", "fallback", "web")
    poll(lambda: get(f"{base}/b", "app.example.com")[0] == 404, timeout=30, what="routes gone with the Ingresses")


@needs_kubectl
def test_unknown_class_is_not_served(plane: ControlPlaneHandle, api: Client, tmp_path: Path) -> None:
    lost = ingress("lost", {"ingressClassName": "nope",
                            "rules": [{"http": {"paths": [path("/", "Prefix", "alpha", {"number": 80})]}}]})
    kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps(lost))
    said = poll(lambda: [e for e in events(plane, tmp_path, "lost") if e["reason"] == "IngressClassNotFound"],
                timeout=30, what="the unknown class's event")
    assert said[0]["type"] == "Warning" and 'IngressClass "nope" not found' in said[0]["message"]
    assert not api.get("Ingress", NS, "lost").get("status", {}).get("loadBalancer", {}).get("ingress")

    refused = kubectl(plane, tmp_path, "create", "-f", "-", ok=False, stdin=json.dumps(ingress("bad", {
        "rules": [{"http": {"paths": [path("foo", "Prefix", "alpha", {"number": 80})]}}]})))
    assert refused.returncode != 0
    assert 'spec.rules[0].http.paths[0].path: Invalid value: "foo": must be an absolute path' in refused.stderr
    kubectl(plane, tmp_path, "delete", "ingress", "lost")


def self_signed(host: str, directory: Path) -> tuple[Path, Path]:
    """A certificate for ``host`` signed by its own key: (certificate, key) PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / f"{host}.crt", directory / f"{host}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def get_tls(port: int, host: str, path: str, cafile: Path) -> tuple[int, str]:
    """GET over TLS from loopback, with ``host`` as the SNI name, the certificate's name and the Host."""
    context = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


@needs_kubectl
def test_tls_sections_are_served_with_their_secrets(plane: ControlPlaneHandle, api: Client,
                                                   tmp_path: Path) -> None:
    api.apply([{"object": o} for o in backend("alpha")])
    cert, key = self_signed("s.example.com", tmp_path)
    kubectl(plane, tmp_path, "create", "secret", "tls", "s-cert", f"--cert={cert}", f"--key={key}")
    secure = ingress("secure", {"tls": [{"hosts": ["s.example.com"], "secretName": "s-cert"},
                                        {"hosts": ["m.example.com"], "secretName": "missing"}],
                                "rules": [{"host": "s.example.com",
                                           "http": {"paths": [path("/", "Prefix", "alpha", {"number": 80})]}}]})
    kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps(secure))
    stored = poll(lambda: (i := api.get("Ingress", NS, "secure")).get("status", {}).get("loadBalancer", {}).get(
        "ingress") and i, timeout=30, what="the Ingress's address")
    http_port, https_port = (p["port"] for p in stored["status"]["loadBalancer"]["ingress"][0]["ports"])
    row = kubectl(plane, tmp_path, "get", "ingress", "secure", "--no-headers").stdout.split()
    assert row[1:4] == ["trimaran", "s.example.com", "127.0.0.1"] and "80, 443" in " ".join(row)

    poll(lambda: get_tls(https_port, "s.example.com", "/x", cert) == (200, "alpha /x"), timeout=60,
         what="alpha over TLS")
    assert get(f"http://127.0.0.1:{http_port}/y", "s.example.com") == (200, "alpha /y"), "and over plain HTTP"
    with pytest.raises(ssl.SSLError):
        get_tls(https_port, "other.example.com", "/", cert)  # no certificate covers it
    said = poll(lambda: [e for e in events(plane, tmp_path, "secure") if e["reason"] == "TLSSecretNotFound"],
                timeout=30, what="the missing secret's event")
    assert 'Secret "default/missing" does not exist' in said[0]["message"]

    # The Secret replaced: the new certificate is served.
    cert2, key2 = self_signed("s.example.com", tmp_path / "kc")
    kubectl(plane, tmp_path, "delete", "secret", "s-cert")
    kubectl(plane, tmp_path, "create", "secret", "tls", "s-cert", f"--cert={cert2}", f"--key={key2}")
    poll(lambda: _verifies(https_port, cert2), timeout=30, what="the new certificate")
    kubectl(plane, tmp_path, "delete", "ingress", "secure")


def _verifies(port: int, cafile: Path) -> bool:
    try:
        return get_tls(port, "s.example.com", "/", cafile)[0] == 200
    except ssl.SSLError:
        return False


# From a pod: the default route's gateway (the host on the pod network), the Ingress's port, a Host.
FROM_A_POD = """
import os, socket, struct, urllib.request
routes = [line.split() for line in open("/proc/net/route").read().splitlines()[1:]]
gateway = next(socket.inet_ntoa(struct.pack("<L", int(r[2], 16))) for r in routes if r[1] == "00000000")
url = f"http://{gateway}:{os.environ['PORT']}/a/from-pod"
request = urllib.request.Request(url, headers={"Host": "pod.example.com"})
print(urllib.request.urlopen(request, timeout=10).read().decode())
"""


@needs_kubectl
def test_pods_reach_the_ingress_at_their_gateway(plane: ControlPlaneHandle, api: Client, tmp_path: Path) -> None:
    if not pod_network_on(plane.home):
        pytest.skip("no pod network in this home: pods reach the ingress on loopback, as the host does")
    api.apply([{"object": o} for o in backend("alpha")])
    kubectl(plane, tmp_path, "create", "-f", "-", stdin=json.dumps(ingress("inside", {"rules": [
        {"host": "pod.example.com", "http": {"paths": [path("/a", "Prefix", "alpha", {"number": 80})]}}]})))
    stored = poll(lambda: (i := api.get("Ingress", NS, "inside")).get("status", {}).get("loadBalancer", {}).get(
        "ingress") and i, timeout=30, what="the Ingress's address")
    port = stored["status"]["loadBalancer"]["ingress"][0]["ports"][0]["port"]
    poll(lambda: get(f"http://127.0.0.1:{port}/a", "pod.example.com")[0] == 200, timeout=60, what="alpha ready")
    client = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "caller", "namespace": NS},
              "spec": {"restartPolicy": "Never", "containers": [{
                  "name": "main", "image": "python", "command": ["python", "-c", FROM_A_POD],
                  "env": [{"name": "PORT", "value": str(port)}]}]}}
    api.create("Pod", NS, client)
    phase = poll(lambda: api.get("Pod", NS, "caller").get("status", {}).get("phase") in ("Succeeded", "Failed")
                 and api.get("Pod", NS, "caller")["status"]["phase"], timeout=60, what="the caller pod to end")
    logs = kubectl(plane, tmp_path, "logs", "caller").stdout
    assert phase == "Succeeded" and logs.strip() == "alpha /a/from-pod", logs
    kubectl(plane, tmp_path, "delete", "pod", "caller", "--wait=false")
    kubectl(plane, tmp_path, "delete", "ingress", "inside")


@needs_kubectl
def test_kubectl_create_ingress(plane: ControlPlaneHandle, api: Client, tmp_path: Path) -> None:
    """kubectl's generator sends protobuf: decoded, defaulted to the default class."""
    kubectl(plane, tmp_path, "create", "ingress", "made", "--rule=made.example.com/api*=alpha:80,tls=made-cert",
            "--rule=/exact=beta:web", "--default-backend=alpha:80")
    spec = api.get("Ingress", NS, "made")["spec"]
    assert spec == {
        "ingressClassName": "trimaran",
        "defaultBackend": {"service": {"name": "alpha", "port": {"number": 80}}},
        "tls": [{"hosts": ["made.example.com"], "secretName": "made-cert"}],
        "rules": [{"host": "made.example.com", "http": {"paths": [path("/api", "Prefix", "alpha", {"number": 80})]}},
                  {"http": {"paths": [path("/exact", "Exact", "beta", {"name": "web"})]}}]}
    kubectl(plane, tmp_path, "delete", "ingress", "made")


def test_the_ports_and_routes_outlive_a_restart(fresh_plane: ControlPlaneHandle) -> None:
    from trimaran.server.daemon import start_server, stop_server

    api = fresh_plane.client()
    api.create("Service", NS, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ghost", "namespace": NS},
                               "spec": {"selector": {"app": "ghost"}, "ports": [{"port": 80}]}})
    api.create("Ingress", NS, ingress("kept", {"defaultBackend": {"service": {"name": "ghost",
                                                                             "port": {"number": 80}}}}))

    def served() -> tuple[int, int] | None:
        lb = api.get("Ingress", NS, "kept").get("status", {}).get("loadBalancer", {}).get("ingress")
        if not lb:
            return None
        port = lb[0]["ports"][0]["port"]
        try:
            status = get(f"http://127.0.0.1:{port}/", "any.example.com")[0]
        except (urllib.error.URLError, OSError):  # not listening yet: the controllers are starting
            return None
        return (port, status) if status == 503 else None  # routed: the Service has no endpoint yet
    port, _ = poll(served, timeout=30, what="the Ingress served")
    api.close()
    stop_server(fresh_plane.home)
    start_server(home=fresh_plane.home)
    api = fresh_plane.client()
    try:
        assert poll(served, timeout=30, what="the Ingress served again")[0] == port
    finally:
        api.close()
