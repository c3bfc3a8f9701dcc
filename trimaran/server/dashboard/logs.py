"""The last lines of a container's log, read from the files the shim writes (as the log API does)."""

from __future__ import annotations

from trimaran.runtime import NodeAPI

TAIL_LINES = 60
_TAIL_BYTES = 64 * 1024


def log_tail(runtime: NodeAPI, namespace: str, pod: str, container: str | None,
             lines: int = TAIL_LINES) -> str | None:
    """The last ``lines`` lines of the container's latest attempt; None when it has no log (yet).
    Right after a rotation the live file is nearly empty: the end of the rotated one comes first."""
    try:
        files = runtime.log_files(namespace, pod, container)
    except OSError:
        return None
    chunks: list[bytes] = []
    wanted, cut = _TAIL_BYTES, False
    for path in reversed(files):
        try:
            with path.open("rb") as fh:
                # Only the end: a long training log must not be read whole on every refresh.
                size = fh.seek(0, 2)
                fh.seek(max(0, size - wanted))
                chunks.append(fh.read())
        except OSError:
            continue
        wanted -= len(chunks[-1])
        if wanted <= 0:
            cut = size > len(chunks[-1])
            break
    if not chunks:
        return None
    text = b"".join(reversed(chunks)).decode(errors="replace").splitlines()
    if cut:
        text = text[1:]  # the first line is cut
    return "\n".join(text[-lines:]) or None
