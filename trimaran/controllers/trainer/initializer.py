"""A TrainJob's dataset or model initializer, run in its pod: fetch ``$STORAGE_URI`` into the
workspace (``/workspace/dataset`` or ``/workspace/model``) with the storage of InferenceService
models (`trimaran.serving.storage`: ``hf://``, ``s3://``, ``gs://``, ``http(s)://``).

Usage: ``python -m trimaran.controllers.trainer.initializer dataset|model``. Credentials come
from the pod's environment (the step's ``env`` and ``secretRef``; ``ACCESS_TOKEN`` is taken as
Hugging Face's token, as upstream's initializers read it).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

WORKSPACE = Path(os.environ.get("TRIMARAN_WORKSPACE", "/workspace"))


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("dataset", "model"):
        print("usage: python -m trimaran.controllers.trainer.initializer dataset|model", file=sys.stderr)
        return 2
    what = argv[0]
    uri = os.environ.get("STORAGE_URI", "")
    if not uri:
        print(f"{what}-initializer: STORAGE_URI is not set", file=sys.stderr)
        return 2
    if os.environ.get("ACCESS_TOKEN") and not os.environ.get("HF_TOKEN"):
        os.environ["HF_TOKEN"] = os.environ["ACCESS_TOKEN"]
    from trimaran.serving.storage import InvalidStorageUri, StorageError, fetch  # here: usage errors stay fast

    target = WORKSPACE / what
    print(f"{what}-initializer: fetching {uri} into {target}", flush=True)
    try:
        fetched = fetch(uri, WORKSPACE / ".cache")
    except (InvalidStorageUri, StorageError) as exc:
        print(f"{what}-initializer: cannot fetch {uri}: {exc}", file=sys.stderr, flush=True)
        return 1
    partial = WORKSPACE / f".{what}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(fetched, partial, symlinks=True)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)  # a crash never leaves half a dataset where the trainer looks
    files = sum(1 for p in target.rglob("*") if p.is_file())
    print(f"{what}-initializer: {files} files in {target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
