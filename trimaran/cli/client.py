"""A small HTTP client for the control plane, on the standard library so the CLI starts fast."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson


@dataclass(frozen=True)
class KindRef:
    kind: str
    group: str
    plural: str
    namespaced: bool


class APIError(Exception):
    def __init__(self, status: int, message: str, body: dict | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body or {}


class Client:
    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token

    @classmethod
    def connect(cls, home: Path | None = None, autostart: bool = True) -> Client:
        """Connect to the running control plane, starting one when none runs and ``autostart``."""
        from trimaran.server.daemon import read_server_info, running_server, start_server

        info = read_server_info(home)
        if info is None or not _pid_alive(info.get("pid")):
            if not autostart:
                raise APIError(503, "no control plane is running: start one with `trimaran server start`")
            info = start_server(home=home)
        elif running_server(home) is None:
            if not autostart:
                raise APIError(503, "the control plane does not answer: restart it with `trimaran server start`")
            info = start_server(home=home)
        return cls(info["url"], info.get("token"))

    def _request(self, method: str, path: str, body: object | None = None, params: dict | None = None,
                 timeout: float = 60.0):
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items() if v is not None})
        req = urllib.request.Request(self.url + path + (f"?{query}" if query else ""), method=method)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            req.add_header("Content-Type", "application/json")
        try:
            return urllib.request.urlopen(req, data=data, timeout=timeout)
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                parsed = json.loads(raw)
                message = parsed.get("message") or parsed.get("detail") or raw.decode()
            except ValueError:
                parsed, message = None, raw.decode(errors="replace")
            if isinstance(message, list):  # FastAPI's own validation errors
                message = "; ".join(str(m.get("msg", m)) for m in message)
            raise APIError(exc.code, str(message), parsed) from None
        except urllib.error.URLError as exc:
            raise APIError(503, f"cannot reach the control plane at {self.url}: {exc.reason}") from None

    def _json(self, method: str, path: str, body: object | None = None, params: dict | None = None) -> dict:
        with self._request(method, path, body, params) as resp:
            return orjson.loads(resp.read())

    def apply(self, manifests: list[dict], namespace: str | None = None, dry_run: bool = False) -> dict:
        return self._json("POST", "/trimaran/v1/apply",
                          {"manifests": manifests, "namespace": namespace, "dryRun": dry_run})

    def resolve(self, name: str) -> KindRef:
        """The kind a user's word names (kind, plural, short name), as the server's registry reads it."""
        data = self._json("GET", f"/trimaran/v1/resolve/{name}")
        return KindRef(data["kind"], data["group"], data["plural"], data["namespaced"])

    def list(self, kind: str, namespace: str | None = None, selector: str | None = None) -> list[dict]:
        return self._json("GET", f"/trimaran/v1/kinds/{kind}",
                          params={"namespace": namespace, "labelSelector": selector})["items"]

    def get(self, kind: str, namespace: str, name: str) -> dict:
        return self._json("GET", f"/trimaran/v1/kinds/{kind}/namespaces/{namespace or '-'}/{name}")

    def delete(self, kind: str, namespace: str, name: str) -> dict:
        return self._json("DELETE", f"/trimaran/v1/kinds/{kind}/namespaces/{namespace or '-'}/{name}")

    def events(self, kind: str | None = None, namespace: str | None = None, name: str | None = None) -> list[dict]:
        return self._json("GET", "/trimaran/v1/events",
                          params={"kind": kind, "namespace": namespace, "name": name})["items"]

    def log(self, namespace: str, pod: str, container: str | None = None, previous: bool = False,
            follow: bool = False) -> Iterator[bytes]:
        params = {"container": container, "previous": str(previous).lower(), "follow": str(follow).lower()}
        resp = self._request("GET", f"/trimaran/v1/namespaces/{namespace}/pods/{pod}/log", params=params,
                             timeout=3600 if follow else 60)
        with resp:
            while True:
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
                if not chunk:
                    return
                yield chunk

    def watch(self, kinds: list[str], since: int | None = None, timeout: float = 300.0) -> Iterator[dict]:
        resp = self._request("GET", "/trimaran/v1/watch",
                             params={"kinds": ",".join(kinds), "since": since, "timeout": timeout},
                             timeout=timeout + 30)
        with resp:
            for line in resp:
                if line.strip():
                    yield json.loads(line)


def owned_by(obj: dict, uid: str) -> bool:
    """Whether ``obj`` lists the object with ``uid`` among its owners."""
    return any(ref.get("uid") == uid for ref in obj["metadata"].get("ownerReferences") or [])


def _pid_alive(pid: object) -> bool:
    from trimaran.server.daemon import pid_alive

    try:
        return pid_alive(int(pid))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
