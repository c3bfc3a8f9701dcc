"""The last lines of a container's log, read from the file the shim writes (as the log API does)."""

from __future__ import annotations

from trimaran.runtime import LocalRuntime

TAIL_LINES = 60
_TAIL_BYTES = 64 * 1024


def log_tail(runtime: LocalRuntime, namespace: str, pod: str, container: str | None,
             lines: int = TAIL_LINES) -> str | None:
    """The last ``lines`` lines of the container's latest attempt; None when it has no log (yet)."""
    try:
        path = runtime.log_path(namespace, pod, container)
        with path.open("rb") as fh:
            # Only the end of the file: a long training log must not be read whole on every refresh.
            size = fh.seek(0, 2)
            fh.seek(max(0, size - _TAIL_BYTES))
            data = fh.read()
    except OSError:
        return None
    text = data.decode(errors="replace").splitlines()
    if size > _TAIL_BYTES:
        text = text[1:]  # the first line is cut
    return "\n".join(text[-lines:]) or None
