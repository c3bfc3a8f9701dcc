"""KServe's storage initializer, run inside a pod as its init container ``storage-initializer``::

    python -m trimaran.serving.storage.initializer SRC DEST [SRC DEST ...]

downloads each URI into its directory (the pod's own volume: ``/mnt/models`` for a model), an
archive unpacked safely (`trimaran.serving.storage._archive`), as the pod's user inside its
sandbox. What was in DEST before is removed first (a restarted pod starts clean).

Credentials are the variables KServe's webhook gives its initializer (`Credentials.from_env`), plus
``STORAGE_CONFIG``/``STORAGE_OVERRIDE_CONFIG`` for KServe's ``storage:`` form;
``TRIMARAN_CREDENTIALS_ORIGIN`` says where they came from. Progress goes to stdout (a line every
two seconds while bytes arrive); a failure's one-line cause goes to stderr and to the termination
log, so the pod's init container status and the InferenceService's condition carry it; the exit
code is then 1 (2 for a usage error).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from trimaran.serving.storage import Credentials, InvalidStorageUri, StorageError, human_bytes, storage_for
from trimaran.serving.storage._pod import ORIGIN_VARIABLE
from trimaran.serving.storage._storage_config import storage_config_env

TERMINATION_LOG = Path("/dev/termination-log")
_STAGING = ".storage-initializer"
_PROGRESS_SECONDS = 2.0


def main(argv: list[str]) -> int:
    if not argv or len(argv) % 2:
        print("usage: python -m trimaran.serving.storage.initializer SRC DEST [SRC DEST ...]", file=sys.stderr)
        return 2
    for uri, dest in zip(argv[::2], argv[1::2], strict=True):
        try:
            download(uri, Path(dest))
        except (InvalidStorageUri, StorageError) as exc:
            fail(str(exc))
            return 1
        except OSError as exc:
            fail(f"{uri}: cannot write {dest}: {exc}")
            return 1
    return 0


def download(uri: str, dest: Path) -> None:
    """Download ``uri`` into the directory ``dest`` (emptied first). Raises StorageError."""
    env = {**os.environ, **storage_config_env(os.environ.get("STORAGE_CONFIG"),
                                              os.environ.get("STORAGE_OVERRIDE_CONFIG"))}
    origin = os.environ.get(ORIGIN_VARIABLE) or "the pod's environment"
    storage = storage_for(uri)
    credentials = Credentials.from_env(env, origin=f"the storage initializer's env ({origin})")
    _empty(dest)
    print(f"downloading {uri} into {dest}", flush=True)
    started = time.monotonic()
    staging = dest / _STAGING
    out = staging / "model"
    out.mkdir(parents=True)
    reported = [0.0]

    def progress(done: int, total: int | None) -> None:
        now = time.monotonic()
        if done and now - reported[0] >= _PROGRESS_SECONDS:
            reported[0] = now
            told = f"{human_bytes(done)} of {human_bytes(total)}" if total is not None else human_bytes(done)
            print(f"downloading {uri}: {told}", flush=True)

    try:
        snapshot = storage.snapshot(credentials)
        progress(0, snapshot.total_bytes)
        storage.download(snapshot, out, credentials, progress)
        for child in out.iterdir():
            child.rename(dest / child.name)
    except BaseException:
        _empty(dest)  # half a model is no model: the server must not load what is there
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    files = sum(1 for p in dest.rglob("*") if p.is_file() and not p.is_symlink())
    print(f"downloaded {uri}: {files} files in {dest} in {time.monotonic() - started:.1f}s", flush=True)


def _empty(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for child in dest.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def fail(message: str) -> None:
    """Say why on stderr and in the termination log (the kubelet's message for this container)."""
    print(message, file=sys.stderr, flush=True)
    try:
        with open(TERMINATION_LOG, "w") as handle:
            handle.write(message)
    except OSError:
        pass  # run by hand, outside a pod: stderr says it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
