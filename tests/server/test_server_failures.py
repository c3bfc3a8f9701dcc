"""What the control plane says when something outside it fails: an unreadable store, a client that hangs up."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys

from tests.helpers import REPO, poll


def test_server_start_on_a_corrupt_store_says_why_and_what_to_do(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "trimaran.db").write_bytes(os.urandom(4096))
    env = dict(os.environ, TRIMARAN_HOME=str(home), PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-m", "trimaran.cli", "server", "start"], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    said = proc.stdout + proc.stderr
    assert "file is not a database" in said, said
    assert f"{home / 'trimaran.db'}" in said and "Move it aside" in said and "restore it from a backup" in said


def test_a_client_that_hangs_up_mid_body_is_one_line_in_the_log(plane):
    server, token, _ = plane.endpoint()
    host, port = server.removeprefix("https://").rsplit(":", 1)
    context = ssl._create_unverified_context()
    with context.wrap_socket(socket.create_connection((host, int(port)))) as conn:
        conn.sendall(f"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: {host}\r\n"
                     f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: 1000\r\n\r\n{{\"kind\":".encode())
        # The server has the request (it answers nothing yet: the body is not all there).
        conn.settimeout(0.5)
        try:
            conn.recv(1)
        except TimeoutError:
            pass
    log = plane.home / "server.log"
    line = poll(lambda: next((x for x in log.read_text().splitlines() if "went away before the body" in x), None),
                timeout=30, what="the disconnect to be logged")
    assert "POST /api/v1/namespaces/default/configmaps" in line
    assert "Traceback" not in log.read_text()
