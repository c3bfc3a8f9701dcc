"""Requests cannot starve the control plane: watches and log follows are bounded per client and
freed as soon as their client goes; connections that never finish a request hold nothing."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import urllib.parse
from collections.abc import Callable

import pytest

from tests.conftest import ControlPlaneHandle
from tests.helpers import poll

LIMIT = 30
CM = "/api/v1/namespaces/default/configmaps"


class Api:
    """Raw HTTPS requests to one control plane: each stream is a socket the test holds and closes."""

    def __init__(self, plane: ControlPlaneHandle) -> None:
        url, self.token, self.context = plane.endpoint()
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port

    def connect(self) -> ssl.SSLSocket:
        sock = socket.create_connection((self.host, self.port), timeout=30)
        return self.context.wrap_socket(sock, server_hostname=self.host)

    def open(self, path: str) -> tuple[ssl.SSLSocket, int, str]:
        """Send a GET; return the socket, the status and what came with the headers."""
        sock = self.connect()
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
                     f"Accept: application/json\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(65536)
            if not chunk:
                break
            head += chunk
        return sock, int(head.split(b" ", 2)[1]), head.decode(errors="replace")

    def get(self, path: str) -> tuple[int, str]:
        """A whole response: its status, and its headers and body as text."""
        conn = http.client.HTTPSConnection(self.host, self.port, timeout=30, context=self.context)
        try:
            conn.request("GET", path, headers={"Authorization": f"Bearer {self.token}"})
            resp = conn.getresponse()
            body = resp.read() if resp.status != 200 or "watch=true" not in path else b""
            return resp.status, "".join(f"{k}: {v}\n" for k, v in resp.getheaders()) + body.decode()
        finally:
            conn.close()

    def longrunning(self) -> dict[str, float]:
        status, text = self.get("/metrics")
        assert status == 200, text
        found = {}
        for line in text.splitlines():
            if line.startswith("apiserver_longrunning_requests{"):
                labels, value = line.rsplit(" ", 1)
                if 'subresource="log"' in labels or 'verb="WATCH"' in labels:  # not exec's CONNECT series
                    found["log" if 'subresource="log"' in labels else "watch"] = float(value)
        return found


@pytest.fixture
def flooded(plane_with: Callable[..., ControlPlaneHandle]) -> tuple[ControlPlaneHandle, Api]:
    plane = plane_with(TRIMARAN_MAX_STREAMS_PER_CLIENT=str(LIMIT))
    return plane, Api(plane)


def test_watches_and_follows_are_bounded_per_client_and_freed_when_the_client_goes(flooded) -> None:
    plane, api = flooded
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "talker"}, "spec": {"containers": [
        {"name": "main", "image": "x", "command": ["python", "-c", "import time; print('hi', flush=True); "
                                                                  "time.sleep(300)"]}]}}
    path = plane.home.parent / "talker.json"
    path.write_text(json.dumps(pod))
    plane.cli("apply", "-f", str(path))
    poll(lambda: (plane.get("pod", "talker").get("status") or {}).get("phase") == "Running", timeout=60,
         what="the pod to run")
    follows = [api.open("/api/v1/namespaces/default/pods/talker/log?follow=true") for _ in range(5)]
    watches = [api.open(f"{CM}?watch=true") for _ in range(LIMIT - 5)]
    streams = follows + watches
    try:
        assert all(status == 200 for _, status, _ in streams)
        assert poll(lambda: api.longrunning() == {"watch": LIMIT - 5, "log": 5} or None, timeout=20,
                    what="the metrics to count every stream")
        # One more of either is refused, with the time to retry after, and lists still answer at once.
        for extra in (f"{CM}?watch=true", "/api/v1/namespaces/default/pods/talker/log?follow=true"):
            status, text = api.get(extra)
            assert status == 429 and "retry-after: 1" in text.lower() and "TooManyRequests" in text, text
        started = time.monotonic()
        status, _ = api.get(CM)
        assert status == 200 and time.monotonic() - started < 10
    finally:
        for sock, _, _ in streams:
            sock.close()
    poll(lambda: api.longrunning() == {"watch": 0, "log": 0}, timeout=20, what="every stream to be freed")
    assert api.get(f"{CM}?watch=true&timeoutSeconds=-5")[0] == 200  # bounded, not refused


def test_connections_that_never_finish_a_request_hold_nothing(flooded) -> None:
    plane, api = flooded
    slow = []
    for _ in range(5):
        sock = api.connect()
        sock.sendall(f"GET {CM} HTT".encode())  # half a request line, then silence
        slow.append(sock)
    try:
        started = time.monotonic()
        status, _ = api.get(CM)
        assert status == 200 and time.monotonic() - started < 10
        # Endless headers are cut off, not buffered.
        sock = api.connect()
        sock.sendall(f"GET {CM} HTTP/1.1\r\nHost: x\r\n".encode())
        answer = b""
        try:
            for _ in range(2048):
                sock.sendall(b"X-Pad: " + b"a" * 1024 + b"\r\n")
            answer = sock.recv(4096)
        except (ConnectionError, ssl.SSLError):
            answer = answer or b"closed"
        finally:
            sock.close()
        assert answer.startswith(b"HTTP/1.1 431") or answer == b"closed", answer
        assert api.get(CM)[0] == 200
    finally:
        for sock in slow:
            sock.close()


def test_a_request_whose_headers_do_not_arrive_in_time_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control plane's HTTP protocol under uvicorn (the deadline shortened from 32 s)."""
    import asyncio
    import threading

    import uvicorn

    from trimaran.server import connections

    monkeypatch.setattr(connections, "HEADER_TIMEOUT", 0.5)

    async def app(scope: dict, receive: object, send: Callable) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    listener = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, http=connections.GuardedHttpProtocol, log_level="warning",
                                           lifespan="off"))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[listener])), daemon=True)
    thread.start()
    try:
        poll(lambda: server.started, timeout=10, what="uvicorn to start")
        # Silence, half a request line, and half a second request on a kept-alive connection.
        for sent in (b"", b"GET / HTT", b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HT"):
            with socket.create_connection(listener.getsockname(), timeout=10) as sock:
                sock.sendall(sent)
                started, received = time.monotonic(), b""
                while chunk := sock.recv(4096):
                    received += chunk
                assert time.monotonic() - started < 5
                assert received.count(b"200 OK") == sent.count(b"\r\n\r\n")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
