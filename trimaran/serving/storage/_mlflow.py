"""``models:/`` and ``runs:/``: an MLflow model named through a tracking server's REST API.

The tracking server is ``MLFLOW_TRACKING_URI`` (the predictor's env, as MLServer and KServe read it;
``MLFLOW_TRACKING_TOKEN`` or ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` when it asks for them). The URI
is resolved to an artifact location, whose files are listed and downloaded:

- ``models:/<name>/<version>``, ``models:/<name>/latest``, ``models:/<name>/<stage>``,
  ``models:/<name>@<alias>`` (the model registry), ``models:/m-<id>`` (an MLflow 3 logged model);
- ``runs:/<run_id>/<path>``: the run's artifacts under ``<path>``, else (MLflow 3, where
  ``log_model`` keeps a model beside the run) the run's logged model named by the path's first part.

Artifacts served by the tracking server (``mlflow-artifacts:``, its ``--serve-artifacts`` default)
are read through its artifact proxy; ``s3://`` and ``gs://`` artifact roots through those schemes,
with the same credentials. An artifact root only the server's own disk holds is refused, naming it.
The version is a digest of the tracking server, the artifact location and its files' names and
sizes, so ``models:/<name>/latest`` downloads again when a new version is registered.
"""

from __future__ import annotations

import base64
import hashlib
import json
import posixpath
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from trimaran.serving.storage._base import (
    Credentials,
    InvalidStorageUri,
    Progress,
    Snapshot,
    Storage,
    StorageError,
    check_size,
    safe_join,
)

__all__ = ["MlflowStorage"]

_TIMEOUT = 30.0
_CHUNK = 1 << 20
_ARTIFACTS_API = "/api/2.0/mlflow-artifacts/artifacts"
_VERSION = re.compile(r"[0-9]+")


class MlflowStorage(Storage):
    """One model directory that a tracking server names (see the module docstring)."""

    schemes = ("models", "runs")

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        scheme, _, rest = uri.partition(":/")
        self.kind = scheme.lower()
        parts = [p for p in rest.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise InvalidStorageUri(f"{uri}: '.' and '..' are not path parts of an MLflow URI")
        if self.kind == "runs":
            if len(parts) < 2:
                raise InvalidStorageUri(f"{uri}: runs:/ needs a run id and the model's path: runs:/<run_id>/<path>")
            self.run_id, self.path = parts[0], "/".join(parts[1:])
        else:
            if not parts or (len(parts) == 1 and "@" not in parts[0] and not parts[0].startswith("m-")):
                raise InvalidStorageUri(f"{uri}: models:/ needs models:/<name>/<version|stage|latest>, "
                                        "models:/<name>@<alias> or models:/<logged model id>")
            self.name, _, self.alias = parts[0].partition("@")
            self.reference = "/".join(parts[1:])

    # -- what the URI names ------------------------------------------------------------------
    def snapshot(self, credentials: Credentials) -> Snapshot:
        api = _TrackingApi(self.uri, credentials)
        location, inner = self._artifact_location(api)
        if inner is not None:
            snap = inner.snapshot(credentials)
            return Snapshot(version=f"mlflow:{_digest(api.base, location, snap.version)}",
                            total_bytes=snap.total_bytes, detail=(location, inner, snap))
        files = api.list_files(location)
        if not files:
            raise StorageError(f"{self.uri}: {location} holds no files")
        return Snapshot(version=f"mlflow:{_digest(api.base, location, sorted(files))}",
                        total_bytes=sum(size for _, size in files), detail=(location, None, files))

    def download(self, snapshot: Snapshot, dest: Path, credentials: Credentials, progress: Progress) -> None:
        location, inner, listed = snapshot.detail
        if inner is not None:
            inner.download(listed, dest, credentials, progress)
            return
        check_size(snapshot, self.uri)
        api = _TrackingApi(self.uri, credentials)
        done = 0
        for relative, _size in listed:
            target = safe_join(dest, relative, self.uri)
            target.parent.mkdir(parents=True, exist_ok=True)
            with api.open(location, relative) as response, open(target, "wb") as out:
                while chunk := response.read1(_CHUNK):
                    out.write(chunk)
                    done += len(chunk)
                    progress(done, snapshot.total_bytes)

    def _artifact_location(self, api: _TrackingApi) -> tuple[_Location, Storage | None]:
        """Where the model's files are: the tracking server's artifact proxy, or another scheme's storage."""
        if self.kind == "runs":
            return self._run_location(api, self.run_id, self.path)
        if self.name.startswith("m-") and not self.alias and not self.reference:
            return self._located(api, _logged_model(api, self.name)["artifact_uri"])
        version = self._registry_version(api)
        found = api.get("model-versions/get-download-uri", name=self.name, version=version)["artifact_uri"]
        return self._located(api, found)

    def _registry_version(self, api: _TrackingApi) -> str:
        if self.alias:
            return str(api.get("registered-models/alias", name=self.name, alias=self.alias)["model_version"]["version"])
        if _VERSION.fullmatch(self.reference):
            return self.reference
        stages = [] if self.reference.lower() == "latest" else [self.reference]
        versions = api.post("registered-models/get-latest-versions", name=self.name,
                            stages=stages).get("model_versions") or []
        if not versions:
            where = f"in stage {self.reference!r}" if stages else "at all"
            raise StorageError(f"{self.uri}: registered model {self.name!r} has no version {where}")
        return str(max(int(v["version"]) for v in versions))

    def _run_location(self, api: _TrackingApi, run_id: str, path: str) -> tuple[_Location, Storage | None]:
        run = api.get("runs/get", run_id=run_id)["run"]["info"]
        direct, inner = self._located(api, f"{run['artifact_uri'].rstrip('/')}/{path}")
        if inner is not None:
            try:
                inner.snapshot(api.credentials)
                return direct, inner
            except StorageError:
                pass
        elif api.list_files(direct):
            return direct, None
        # MLflow 3 keeps a logged model beside its run: runs:/<run>/<name> is the run's model of that name.
        name, _, rest = path.partition("/")
        token = None
        while True:
            page = api.post("logged-models/search", experiment_ids=[run["experiment_id"]],
                            filter=f"name = '{name}'", **({"page_token": token} if token else {}))
            for model in page.get("models") or []:
                info = model.get("info") or {}
                if info.get("source_run_id") == run_id and info.get("name") == name:
                    return self._located(api, f"{info['artifact_uri'].rstrip('/')}/{rest}".rstrip("/"))
            token = page.get("next_page_token")
            if not token:
                raise StorageError(f"{self.uri}: run {run_id} has no artifacts under {path!r} and no logged model "
                                   f"named {name!r}")

    def _located(self, api: _TrackingApi, artifact_uri: str) -> tuple[_Location, Storage | None]:
        scheme, sep, rest = artifact_uri.partition(":")
        scheme = scheme.lower()
        if scheme in ("runs", "models"):
            # A registry entry whose source is another MLflow URI.
            return MlflowStorage(artifact_uri)._artifact_location(api)
        if scheme == "mlflow-artifacts" and sep:
            if rest.startswith("//"):  # mlflow-artifacts://host:port/path names another artifact server
                netloc, _, path = rest[2:].partition("/")
                return _Location(f"http://{netloc}", path), None
            return _Location(api.base, rest.lstrip("/")), None
        if scheme in ("http", "https") and _ARTIFACTS_API in artifact_uri:
            base, _, path = artifact_uri.partition(_ARTIFACTS_API)
            return _Location(base, path.lstrip("/")), None
        if scheme in ("s3", "gs"):
            from trimaran.serving.storage import storage_for

            return _Location(api.base, artifact_uri), storage_for(artifact_uri)
        raise StorageError(f"{self.uri}: the tracking server keeps the model at {artifact_uri}, on its own disk, "
                           "which it does not serve; start it with --serve-artifacts (--artifacts-destination) or "
                           "an s3:// or gs:// artifact root", retriable=False)


class _Location:
    """A directory behind an MLflow artifact proxy (``base`` + ``/api/2.0/mlflow-artifacts/artifacts/`` + ``path``)."""

    def __init__(self, base: str, path: str) -> None:
        self.base = base.rstrip("/")
        self.path = path.strip("/")

    def artifact_path(self, relative: str) -> str:
        return posixpath.join(self.path, relative)

    def __repr__(self) -> str:
        return f"{self.base}{_ARTIFACTS_API}/{self.path}"


def _digest(*parts: Any) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _logged_model(api: _TrackingApi, model_id: str) -> dict:
    return api.get(f"logged-models/{urllib.parse.quote(model_id)}")["model"]["info"]


class _TrackingApi:
    """The tracking server's REST API, reached at the address ``credentials.hosts`` gives its host (a
    Service's name seen from the control plane), with the Host header the server expects."""

    def __init__(self, uri: str, credentials: Credentials) -> None:
        self.uri = uri
        tracking = credentials.mlflow_tracking_uri
        if not tracking:
            raise StorageError(f"{uri}: set MLFLOW_TRACKING_URI in the predictor's env to the MLflow tracking server "
                               "that resolves it (http://mlflow-server:5000, say)", retriable=False)
        parsed = urllib.parse.urlsplit(tracking)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise StorageError(f"{uri}: MLFLOW_TRACKING_URI={tracking} is not an http(s):// tracking server",
                               retriable=False)
        self.base = tracking.rstrip("/")
        self.credentials = credentials
        self.headers: dict[str, str] = {}
        if credentials.mlflow_tracking_token:
            self.headers["Authorization"] = f"Bearer {credentials.mlflow_tracking_token}"
        elif credentials.mlflow_tracking_username:
            pair = f"{credentials.mlflow_tracking_username}:{credentials.mlflow_tracking_password or ''}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()

    def get(self, method: str, **query: str) -> dict:
        return self._json(f"{self.base}/api/2.0/mlflow/{method}?{urllib.parse.urlencode(query)}", None)

    def post(self, method: str, **body: Any) -> dict:
        return self._json(f"{self.base}/api/2.0/mlflow/{method}", json.dumps(body).encode())

    def list_files(self, location: _Location) -> list[tuple[str, int]]:
        """(path relative to ``location``, size) of every file under it, depth first."""
        out: list[tuple[str, int]] = []
        pending = [""]
        while pending:
            relative = pending.pop()
            query = urllib.parse.urlencode({"path": location.artifact_path(relative).strip("/")})
            listed = self._json(f"{location.base}{_ARTIFACTS_API}?{query}", None).get("files") or []
            for entry in listed:
                name = posixpath.join(relative, posixpath.basename(entry["path"]))
                if entry.get("is_dir"):
                    pending.append(name)
                else:
                    out.append((name, int(entry.get("file_size") or 0)))
        return out

    def open(self, location: _Location, relative: str) -> Any:
        """The response streaming one file under ``location``."""
        return self._open(f"{location.base}{_ARTIFACTS_API}/{urllib.parse.quote(location.artifact_path(relative))}",
                          None)

    def _json(self, url: str, body: bytes | None) -> dict:
        with self._open(url, body) as response:
            try:
                return json.loads(response.read() or b"{}")
            except ValueError as exc:
                raise StorageError(f"{self.uri}: {url} did not answer JSON: {exc}") from None

    def _open(self, url: str, body: bytes | None) -> Any:
        parsed = urllib.parse.urlsplit(url)
        host = parsed.hostname or ""
        address = self.credentials.hosts.get(host)
        target = url
        headers = dict(self.headers)
        if address:
            # Connect to the Service's address, but name the host the server was configured for.
            headers["Host"] = parsed.netloc
            target = urllib.parse.urlunsplit(parsed._replace(netloc=address + (f":{parsed.port}" if parsed.port
                                                                               else "")))
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(target, data=body, headers=headers, method="POST" if body else "GET")
        try:
            return urllib.request.urlopen(request, timeout=_TIMEOUT)
        except urllib.error.HTTPError as exc:
            raise self._error(exc, url) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise StorageError(f"{self.uri}: cannot reach the MLflow tracking server {self.base}: {reason}") from None

    def _error(self, exc: urllib.error.HTTPError, url: str) -> StorageError:
        try:
            detail = json.loads(exc.read() or b"{}")
        except ValueError:
            detail = {}
        message = detail.get("message") or exc.reason
        code = detail.get("error_code") or f"HTTP {exc.code}"
        if exc.code in (401, 403):
            return StorageError(f"{self.uri}: the MLflow tracking server {self.base} refused access ({code}): "
                                f"{message}; set MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD")
        return StorageError(f"{self.uri}: MLflow at {self.base} answered {code}: {message}")
