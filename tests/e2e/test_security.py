"""Every request needs a token, loopback included; off loopback the API is still HTTPS with the home's CA."""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request


def _status(url: str, context: ssl.SSLContext, token: str | None = None) -> int:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_default_bind_is_loopback_and_still_wants_the_token(plane):
    info = json.loads((plane.home / "server.json").read_text())
    url, token, context = plane.endpoint()
    assert info["url"] == url and url.startswith("https://127.0.0.1:")
    assert "token" not in info, "server.json carries no token; the kubeconfig (0600) does"
    assert _status(url + "/api/v1/pods", context) == 401
    assert _status(url + "/api/v1/pods", context, "wrong") == 401
    assert _status(url + "/api/v1/pods", context, token) == 200
    assert _status(url + "/healthz", context) == 200
    for private in ("kubeconfig", "tokens.json", "server.json"):
        assert oct(os.stat(plane.home / private).st_mode & 0o777) == "0o600", private


def test_other_bind_address_serves_the_same_rules(tmp_path):
    from tests.conftest import ControlPlaneHandle
    from trimaran.server.daemon import start_server, stop_server

    home = tmp_path / "home"
    # 127.0.0.2 is still this machine, but not the default address.
    start_server(host="127.0.0.2", home=home)
    try:
        url, token, context = ControlPlaneHandle(home, {}).endpoint()
        assert url.startswith("https://127.0.0.2:")
        assert _status(url + "/api/v1/pods", context) == 401
        assert _status(url + "/api/v1/pods", context, token) == 200
        try:
            urllib.request.urlopen(url + "/healthz", timeout=10)
            raise AssertionError("the home's CA is not a public one: an unverified client must fail")
        except urllib.error.URLError as exc:
            assert "CERTIFICATE_VERIFY_FAILED" in str(exc.reason)
    finally:
        stop_server(home)


def test_bad_requests_get_a_status_with_a_message(plane):
    url, token, context = plane.endpoint()
    for path, code in (("/apis/kubeflow.org/v1/widgets", 404), ("/api/v1/namespaces/default/pods/nope", 404),
                       ("/apis/nowhere.io/v1/things", 404)):
        req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {token}"})
        try:
            urllib.request.urlopen(req, timeout=10, context=context)
            raise AssertionError("expected an HTTP error")
        except urllib.error.HTTPError as exc:
            assert exc.code == code
            body = json.loads(exc.read())
            assert body["kind"] == "Status" and body["code"] == code and body["message"]
