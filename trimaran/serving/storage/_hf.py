"""``hf://owner/repo[:revision]``: a Hugging Face Hub model repository, with huggingface_hub."""

from __future__ import annotations

import shutil
from pathlib import Path

from trimaran.serving.storage._base import (
    Credentials,
    InvalidStorageUri,
    Progress,
    Snapshot,
    Storage,
    StorageError,
    check_size,
)

__all__ = ["HFStorage"]


class HFStorage(Storage):
    """A repository's files at a revision (a branch, tag or commit; default ``main``). The version
    is the commit the revision points at, so a moved branch downloads again and a pinned commit
    never does. ``hf_token`` for private or gated repositories; ``hf_endpoint`` (``HF_ENDPOINT``)
    for a mirror."""

    schemes = ("hf",)

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        rest = uri.split("://", 1)[1].strip("/")
        repo, _, revision = rest.partition(":")
        parts = repo.split("/")
        if len(parts) != 2 or not all(parts) or any(p in (".", "..") for p in parts):
            raise InvalidStorageUri("hf:// needs a repository: hf://<owner>/<repo>[:<revision>]")
        if _ and not revision:
            raise InvalidStorageUri("hf://<owner>/<repo>: the revision after ':' is empty")
        self.repo_id = repo
        self.revision = revision or "main"

    def snapshot(self, credentials: Credentials) -> Snapshot:
        from huggingface_hub import HfApi

        api = HfApi(endpoint=credentials.hf_endpoint, token=credentials.hf_token or False)
        try:
            info = api.model_info(self.repo_id, revision=self.revision, files_metadata=True)
        except Exception as exc:
            raise self._error(exc, credentials) from None
        sizes = [s.size for s in info.siblings or [] if s.size is not None]
        return Snapshot(version=f"hf:{info.sha}", total_bytes=sum(sizes) if sizes else None, detail=info.sha)

    def download(self, snapshot: Snapshot, dest: Path, credentials: Credentials, progress: Progress) -> None:
        from huggingface_hub import snapshot_download

        check_size(snapshot, self.uri)
        try:
            snapshot_download(self.repo_id, revision=snapshot.detail, local_dir=dest, endpoint=credentials.hf_endpoint,
                              token=credentials.hf_token or False)
        except Exception as exc:
            raise self._error(exc, credentials) from None
        # local_dir keeps the Hub's bookkeeping beside the files; the model directory is only the files.
        shutil.rmtree(dest / ".cache", ignore_errors=True)
        total = snapshot.total_bytes or sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
        progress(total, total)

    def _error(self, exc: Exception, credentials: Credentials) -> StorageError:
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

        where = credentials.hf_endpoint or "the Hugging Face Hub"
        if isinstance(exc, RevisionNotFoundError):
            return StorageError(f"{self.uri}: no revision {self.revision!r} in {self.repo_id} at {where}")
        if isinstance(exc, GatedRepoError):
            return StorageError(f"{self.uri}: {self.repo_id} is gated: an HF_TOKEN with access is needed")
        if isinstance(exc, RepositoryNotFoundError):
            hint = "" if credentials.hf_token else " (or it is private: give an HF_TOKEN in a Secret)"
            return StorageError(f"{self.uri}: no repository {self.repo_id} at {where}{hint}")
        return StorageError(f"{self.uri}: {where}: {type(exc).__name__}: {exc}")
