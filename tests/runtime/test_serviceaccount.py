"""In-cluster configuration: a real pod's `kubernetes` client reaches an HTTPS API with its namespace's token."""

from __future__ import annotations

import json
import ssl
import tempfile
import textwrap
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from trimaran.runtime import LocalRuntime, ServiceAccountAccess, sandbox_available
from trimaran.runtime.local import ContainerStatus
from trimaran.runtime.serviceaccount import MOUNT_PATH
from trimaran.server.tls import ensure_pki
from trimaran.server.tokens import TokenStore

from .helpers import make_pod, wait_for
from .test_local import PY, REPO

pytestmark = pytest.mark.skipif(not sandbox_available(), reason="bubblewrap is not installed")


class FakeApi:
    """An HTTPS server that answers pod lists and records who asked for what."""

    def __init__(self, home: Path) -> None:
        self.requests: list[tuple[str, str | None]] = []
        pki = ensure_pki(home)
        self.ca_cert = pki.ca_cert
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                api.requests.append((self.path, self.headers.get("Authorization")))
                body = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(pki.cert, pki.key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api(tmp_path: Path) -> Iterator[FakeApi]:
    server = FakeApi(tmp_path / "api-home")
    yield server
    server.stop()


def _runtime(home: Path, api: FakeApi) -> tuple[LocalRuntime, TokenStore]:
    tokens = TokenStore(home)
    runtime = LocalRuntime(home)
    runtime.service_account = ServiceAccountAccess("127.0.0.1", api.port, api.ca_cert, tokens.service_account_token)
    return runtime, tokens


def _run(runtime: LocalRuntime, pod: dict) -> tuple[ContainerStatus, str]:
    uid = pod["metadata"]["uid"]
    runtime.start_pod(pod, attempt=0)

    def done() -> ContainerStatus | None:
        status = runtime.pod_status(uid).containers["main"]
        return status if status.state == "terminated" else None

    status = wait_for(done, 60, f"pod {pod['metadata']['name']} to finish")
    log = runtime.log_path(pod["metadata"]["namespace"], pod["metadata"]["name"]).read_text()
    return status, log


def _pod(name: str, namespace: str, code: str, **spec: object) -> dict:
    pod = make_pod(name, [{"name": "main", "command": [PY, "-c", textwrap.dedent(code)]}], **spec)
    pod["metadata"]["namespace"] = namespace
    return pod


def test_incluster_client_lists_pods_with_its_namespace_token(tmp_path: Path, api: FakeApi) -> None:
    runtime, tokens = _runtime(tmp_path / "home", api)
    pod = _pod("client", "team-a", """
        import os, socket
        from kubernetes import client, config
        config.load_incluster_config()
        namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
        pods = client.CoreV1Api().list_namespaced_pod(namespace)
        print("pods", len(pods.items), "namespace", namespace)
        print("api", socket.gethostbyname("kubernetes.default.svc"), os.environ["KUBERNETES_SERVICE_PORT_HTTPS"])
    """)
    status, log = _run(runtime, pod)
    assert status.exit_code == 0, log
    assert "pods 0 namespace team-a" in log
    assert f"api 127.0.0.1 {api.port}" in log
    [(path, authorization)] = api.requests
    scheme, _, token = (authorization or "").partition(" ")
    assert path == "/api/v1/namespaces/team-a/pods"
    assert scheme.lower() == "bearer"  # the client writes "bearer"
    assert token == tokens.service_account_token("team-a")
    principal = tokens.authenticate(token)
    assert principal is not None and principal.namespaces == {"team-a"}


def test_automount_false_gives_the_service_env_but_no_token(tmp_path: Path, api: FakeApi) -> None:
    runtime, _ = _runtime(tmp_path / "home", api)
    pod = _pod("no-token", "team-a", """
        import os
        print("mounted", os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token"))
        print("host", os.environ["KUBERNETES_SERVICE_HOST"], "url", os.environ["API"])
    """, automountServiceAccountToken=False)
    pod["spec"]["containers"][0]["env"] = [{"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST)"}]
    status, log = _run(runtime, pod)
    assert status.exit_code == 0, log
    assert "mounted False" in log
    assert "host 127.0.0.1 url https://127.0.0.1" in log


def test_pods_cannot_read_other_pods_tokens_or_the_keys(api: FakeApi) -> None:
    # Outside /tmp, which every sandbox replaces anyway: the home must be on a path pods see.
    parent = REPO / ".trimaran-test"
    parent.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent) as home_dir:
        home = Path(home_dir)
        runtime, tokens = _runtime(home, api)
        tokens.service_account_token("team-a")  # makes pki/sa.key, the key that signs every namespace's token
        first = _pod("first", "team-a", "print('done')")
        assert _run(runtime, first)[0].exit_code == 0
        others = sorted(str(p) for p in (home / "pods").rglob("token"))
        assert others and (home / "pki" / "sa.key").exists()
        second = _pod("second", "team-b", f"""
            import os
            for path in {others!r} + [{str(home / "pki" / "sa.key")!r}]:
                print("visible" if os.path.exists(path) else "hidden", path)
            print("own", open("{MOUNT_PATH}/token").read())
        """)
        status, log = _run(runtime, second)
        assert status.exit_code == 0, log
        assert "visible" not in log
        assert f"own {tokens.service_account_token('team-b')}" in log
        for uid in runtime.known_pods():
            runtime.stop_pod(uid, grace_seconds=0)


def test_the_pods_own_variables_override_the_service_ones() -> None:
    from trimaran.runtime.env import resolve_env

    pod = make_pod("p", [{"name": "main", "command": ["true"],
                          "env": [{"name": "KUBERNETES_SERVICE_PORT", "value": "8443"}]}])
    service = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    env = resolve_env(pod, pod["spec"]["containers"][0], lambda *_: None, service_env=service)
    assert env == {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "8443"}
