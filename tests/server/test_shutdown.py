"""A stopping control plane ends open watches and idle kept-alive connections, so it finishes its
own shutdown (controllers stopped, store closed) instead of being killed while it waits on clients."""

from __future__ import annotations

import http.client
import os
import signal
from urllib.parse import urlparse

from tests.conftest import ControlPlaneHandle
from tests.helpers import poll


def test_sigterm_ends_watches_and_idle_connections(plane: ControlPlaneHandle) -> None:
    from trimaran.server.daemon import pid_alive, read_server_info

    server, token, context = plane.endpoint()
    url = urlparse(server)
    headers = {"Authorization": f"Bearer {token}"}
    idle = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=60)
    idle.request("GET", "/api/v1/namespaces/default/pods", headers=headers)
    assert idle.getresponse().read()  # kept alive, nothing more asked
    watch = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=60)
    watch.request("GET", "/api/v1/namespaces/default/pods?watch=1", headers=headers)
    stream = watch.getresponse()
    assert stream.status == 200

    pid = read_server_info(plane.home)["pid"]
    os.kill(pid, signal.SIGTERM)
    # The watch ends cleanly (end of the chunked body), well before the 15 s after which
    # `trimaran server stop` would kill the process.
    assert stream.read() == b""
    poll(lambda: not pid_alive(pid), timeout=10, what="the control plane to exit on its own")
    idle.close()
    watch.close()
