"""The API server binds loopback by default and demands a token when told to bind elsewhere."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import pytest


def _status(url: str, token: str | None = None) -> int:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_default_bind_is_loopback_without_token(plane):
    info = json.loads((plane.home / "server.json").read_text())
    assert info["url"].startswith("http://127.0.0.1:") and info["token"] is None
    assert _status(info["url"] + "/trimaran/v1/kinds/pods") == 200


def test_other_bind_address_requires_the_token(tmp_path):
    from trimaran.server.daemon import start_server, stop_server

    home = tmp_path / "home"
    # 127.0.0.2 is still this machine, but not the default address: the server must ask for a token.
    info = start_server(host="127.0.0.2", home=home)
    try:
        assert info["token"]
        assert oct(os.stat(home / "server.json").st_mode & 0o777) == "0o600"
        url = info["url"] + "/trimaran/v1/kinds/pods"
        assert _status(url) == 401
        assert _status(url, "wrong") == 401
        assert _status(url, info["token"]) == 200
        assert _status(info["url"] + "/healthz") == 200
    finally:
        stop_server(home)


@pytest.mark.parametrize("path", ["/trimaran/v1/kinds/widgets", "/trimaran/v1/kinds/pods/namespaces/default/nope"])
def test_bad_requests_get_a_4xx_with_a_message(plane, path):
    info = json.loads((plane.home / "server.json").read_text())
    try:
        urllib.request.urlopen(info["url"] + path, timeout=10)
        raise AssertionError("expected an HTTP error")
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
        body = json.loads(exc.read())
        assert body.get("message") or body.get("detail")
