"""A model's versions on disk, loaded and swapped as TF Serving does.

Layout: ``base/<integer version>/...`` (TF Serving); a base path that holds the model directly (a file, or a
directory with no integer subdirectories: KServe's layout) is version 1. The repository polls the base path
every ``poll_interval`` seconds and applies the version policy with TF Serving's availability-preserving
rule: a new version is loaded (on a thread, while the old one serves), then published with one assignment,
and only then are the versions the policy no longer wants retired. A retired version is closed when its last
in-flight request releases it. A version that fails to load is reported (state END with its error) and
retried only when its files change; what was serving keeps serving.

Each worker process has its own repository and polls on its own: workers may switch versions up to one poll
interval apart, and each holds its own copy of the model (sub-millisecond models then need no IPC).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trimaran.serving.config import VersionPolicy
from trimaran.serving.errors import NotFound, NotReady
from trimaran.serving.runtimes import Model, load_model

log = logging.getLogger("trimaran.serving")

# TF Serving's ManagedState names, as GET /v1/models/NAME reports them.
START, LOADING, AVAILABLE, END = "START", "LOADING", "AVAILABLE", "END"


class ModelVersion:
    """One loaded version. Requests hold a reference while they use it; ``retire`` closes it after the last."""

    __slots__ = ("model", "version", "refs", "retired", "dispatcher", "__weakref__")

    def __init__(self, model: Model, version: str) -> None:
        self.model = model
        self.version = version
        self.refs = 0
        self.retired = False
        self.dispatcher: Any = None  # set by the data plane: the version's batching and execution

    def acquire(self) -> ModelVersion:
        self.refs += 1
        return self

    def release(self) -> None:
        self.refs -= 1
        if self.retired and self.refs == 0:
            self._close()

    def retire(self) -> None:
        self.retired = True
        if self.refs == 0:
            self._close()

    def _close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.close()
        try:
            self.model.close()
        except Exception:
            log.exception("closing model %s version %s failed", self.model.name, self.version)


@dataclass
class VersionStatus:
    """What ``GET /v1/models/NAME`` says of one version."""

    version: str
    state: str
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "state": self.state,
                "status": {"error_code": "UNKNOWN" if self.error else "OK", "error_message": self.error}}


def scan(base: Path) -> dict[int, Path]:
    """The versions at ``base``: integer subdirectories, else the base itself as version 1 (if non-empty)."""
    if base.is_file():
        return {1: base}
    try:
        entries = list(os.scandir(base))
    except OSError:
        return {}
    versions = {int(e.name): Path(e.path) for e in entries if e.name.isdigit() and e.is_dir()}
    if versions:
        return versions
    if any(not e.name.startswith(".") for e in entries):
        return {1: base}
    return {}


def fingerprint(path: Path) -> tuple:
    """Names, sizes and modification times of the files under ``path``: a failed version is retried when
    this changes (a copy that was still being written when the poll saw it)."""
    if path.is_file():
        st = path.stat()
        return ((path.name, st.st_size, st.st_mtime_ns),)
    found = []
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            found.append((os.path.relpath(os.path.join(root, name), path), st.st_size, st.st_mtime_ns))
    return tuple(sorted(found))


class ModelRepository:
    """The versions of one model under a base path, kept in line with the disk.

    Args:
        name: the model's name.
        base_path: the model directory or file (``--model-dir``).
        policy: which versions to serve.
        model_format: the KServe modelFormat, or None to detect it per version.
        load_options: passed to ``load_model`` (the custom runtime's ``predictor_host``...).
        on_loaded: called on the event loop with each ModelVersion before it is published (the data plane
            attaches its dispatcher there).
    """

    def __init__(self, name: str, base_path: str | Path, policy: VersionPolicy, *, model_format: str | None = None,
                 load_options: dict[str, Any] | None = None,
                 on_loaded: Callable[[ModelVersion], None] | None = None) -> None:
        self.name = name
        self.base = Path(base_path)
        self.policy = policy
        self.model_format = model_format
        self.load_options = load_options or {}
        self.on_loaded = on_loaded
        # Replaced, never mutated, so that a request sees one consistent set (and the event loop is the only
        # writer: no lock).
        self.loaded: dict[str, ModelVersion] = {}
        self.latest: ModelVersion | None = None
        self.status: dict[int, VersionStatus] = {}
        self.reason = "the model has not been loaded yet"
        self._failed: dict[int, tuple] = {}
        self._stopping = False

    # -- what requests see ----------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.latest is not None

    def get(self, version: str | None = None) -> ModelVersion:
        """The version to serve a request with (the latest loaded when None), acquired: call ``release()``.

        Raises NotFound for a version that does not exist and NotReady for one that is not loaded.
        """
        if not version:
            current = self.latest
            if current is None:
                raise NotReady(f"model {self.name!r} is not ready: {self.reason}")
            return current.acquire()
        found = self.loaded.get(version)
        if found is not None:
            return found.acquire()
        status = self.status.get(int(version)) if version.isdigit() else None
        if status is None:
            raise NotFound(f"model {self.name!r} has no version {version!r}")
        detail = f": {status.error}" if status.error else ""
        raise NotReady(f"version {version} of model {self.name!r} is not available ({status.state}{detail})")

    def versions(self) -> list[str]:
        """Loaded versions, newest first."""
        return sorted(self.loaded, key=int, reverse=True)

    def version_status(self, version: str | None = None) -> list[dict[str, Any]]:
        """TF Serving's ``model_version_status`` list (one version's, or all, newest first)."""
        if version is not None:
            status = self.status.get(int(version)) if version.isdigit() else None
            if status is None:
                raise NotFound(f"model {self.name!r} has no version {version!r}")
            return [status.to_json()]
        return [self.status[v].to_json() for v in sorted(self.status, reverse=True)]

    # -- keeping in line with the disk ----------------------------------------------------------------------
    async def run(self, poll_interval: float) -> None:
        """Poll until ``stop``; with ``poll_interval`` 0, load once."""
        while not self._stopping:
            try:
                await self.poll()
            except Exception:
                log.exception("model %s: scanning %s failed", self.name, self.base)
            if poll_interval <= 0:
                return
            await asyncio.sleep(poll_interval)

    async def poll(self) -> None:
        """One pass: load the versions the policy wants and lacks, then retire those it no longer wants."""
        loop = asyncio.get_running_loop()
        present = await loop.run_in_executor(None, scan, self.base)
        wanted = self.policy.select(list(present))
        stamps = {}
        for number in wanted:
            if str(number) not in self.loaded:
                stamps[number] = await loop.run_in_executor(None, fingerprint, present[number])
                if self._failed.get(number) != stamps[number]:
                    self.status[number] = VersionStatus(str(number), START)  # loads after the newer ones
        for number in sorted(stamps, reverse=True):
            key = str(number)
            stamp = stamps[number]
            if self._stopping or self._failed.get(number) == stamp:
                continue
            self.status[number] = VersionStatus(key, LOADING)
            started = time.monotonic()
            try:
                model = await loop.run_in_executor(None, self._load, present[number], key)
            except Exception as exc:
                message = str(exc) or type(exc).__name__
                self._failed[number] = stamp
                self.status[number] = VersionStatus(key, END, message)
                log.error("model %s version %s failed to load: %s", self.name, key, message)
                continue
            self._failed.pop(number, None)
            loaded = ModelVersion(model, key)
            if self.on_loaded is not None:
                self.on_loaded(loaded)
            self._publish({**self.loaded, key: loaded})
            self.status[number] = VersionStatus(key, AVAILABLE)
            log.info("model %s version %s loaded (%s) in %.2f s", self.name, key, model.platform,
                     time.monotonic() - started)
        # Availability first: retire unwanted versions only once a wanted one serves.
        if any(str(v) in self.loaded for v in wanted):
            for key in [k for k in self.loaded if int(k) not in wanted]:
                self._retire(key, reason="no longer wanted by the version policy "
                                         f"({self.policy})" if int(key) in present else "removed from disk")
        for number in [n for n in self.status if n not in present and str(n) not in self.loaded]:
            del self.status[number]
            self._failed.pop(number, None)
        self._update_reason(present)

    def _load(self, path: Path, version: str) -> Model:
        return load_model(path, name=self.name, version=version, model_format=self.model_format,
                          **self.load_options)

    def _publish(self, loaded: dict[str, ModelVersion]) -> None:
        self.loaded = loaded
        self.latest = loaded[max(loaded, key=int)] if loaded else None

    def _retire(self, key: str, reason: str) -> None:
        version = self.loaded[key]
        self._publish({k: v for k, v in self.loaded.items() if k != key})
        self.status[int(key)] = VersionStatus(key, END)
        log.info("model %s version %s unloaded: %s", self.name, key, reason)
        version.retire()

    def _update_reason(self, present: dict[int, Path]) -> None:
        if self.latest is not None:
            reason = ""
        elif not self.base.exists():
            reason = f"model path {self.base} does not exist"
        elif not present:
            reason = f"no model version under {self.base}"
        else:
            errors = [f"version {s.version}: {s.error}" for s in self.status.values() if s.error]
            reason = "; ".join(errors) if errors else "no version allowed by the version policy " \
                                                      f"({self.policy}) is on disk"
        if reason != self.reason and reason:
            log.warning("model %s is not ready: %s", self.name, reason)
        self.reason = reason

    def stop(self) -> None:
        """Stop polling and retire every version (each closes after its in-flight requests)."""
        self._stopping = True
        for key in list(self.loaded):
            version = self.loaded[key]
            self._publish({k: v for k, v in self.loaded.items() if k != key})
            version.retire()
