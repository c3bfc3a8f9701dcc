"""``trimaran wait``: block until an object has a condition, or is deleted, showing its state.

Scripts and benchmarks call it right after ``apply``, so like ``get`` it parses its own arguments
and starts without typer and rich. It reads the object once, then follows a watch on that one
name, so the condition is seen as soon as the controller writes it rather than at the next poll;
a closed watch is reopened from the last resourceVersion, and an expired one (410) from a fresh
read.
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence

from trimaran.api.durations import parse_duration
from trimaran.cli.client import APIError, Client, KindRef
from trimaran.cli.render import experiment_progress, job_status, pod_status, training_state

__all__ = ["run"]

# How often the progress line's countdown is redrawn while no event arrives.
_REDRAW = 0.5


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trimaran wait",
        description="Wait until a resource has a condition (or is deleted), with a live view of its state.")
    parser.add_argument("kind", help="KIND/NAME or KIND")
    parser.add_argument("name", nargs="?")
    parser.add_argument("--for", dest="for_", required=True, metavar="CONDITION",
                        help="condition=NAME[=true|false], or delete")
    parser.add_argument("--timeout", default="30s", help="e.g. 90s, 5m, 1h (default 30s)")
    parser.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    return parser


def _condition_met(obj: dict, wanted: tuple[str, str]) -> bool:
    return any(c.get("type", "").lower() == wanted[0] and str(c.get("status")).lower() == wanted[1]
               for c in (obj.get("status") or {}).get("conditions") or [])


class _Progress:
    """One line on a terminal's stderr, redrawn in place; nothing when stderr is not a terminal."""

    def __init__(self) -> None:
        self.live = sys.stderr.isatty()
        self.width = 0

    def show(self, text: str) -> None:
        if self.live:
            sys.stderr.write("\r" + text.ljust(self.width))
            sys.stderr.flush()
            self.width = len(text)

    def clear(self) -> None:
        if self.live and self.width:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()
            self.width = 0


def _follow(client: Client, ref: KindRef, namespace: str | None, name: str, since: str | None,
            seconds: float, events: queue.Queue) -> None:
    """Put each watch event for ``name`` on ``events`` (a reader thread, so the main thread can
    redraw its countdown); an ``("ERROR", status)`` ends it."""
    params = {"watch": "true", "resourceVersion": since, "timeoutSeconds": str(max(1, int(seconds) + 1)),
              "fieldSelector": f"metadata.name={name}", "allowWatchBookmarks": "true"}
    try:
        resp = client.request("GET", ref.path(namespace), params=params, stream=True, timeout=seconds + 30)
        while True:
            line = resp.readline()
            if not line:
                break
            if line.strip():
                event = json.loads(line)
                events.put((event.get("type"), event.get("object") or {}))
    except (APIError, OSError, ValueError) as exc:
        events.put(("ERROR", {"message": str(exc)}))
        return
    events.put(("CLOSED", {}))


def _wait(client: Client, ref: KindRef, namespace: str | None, name: str, wanted: tuple[str, str] | None,
          seconds: float, state_of: Callable[[dict], str], progress: _Progress) -> str | None:
    """None once the condition holds (or the object is gone), else the error to print."""
    deadline = time.monotonic() + seconds
    label = f"{ref.kind.lower()}/{name}"
    while True:
        try:
            obj = client.get(ref, namespace, name)
        except APIError as exc:
            if exc.status == 404 and wanted is None:
                return None
            return str(exc)
        if wanted is not None and _condition_met(obj, wanted):
            return None
        since = (obj.get("metadata") or {}).get("resourceVersion")
        events: queue.Queue = queue.Queue()
        threading.Thread(target=_follow, args=(client, ref, namespace, name, since,
                                               max(deadline - time.monotonic(), 0.0), events),
                         daemon=True).start()
        while True:
            left = deadline - time.monotonic()
            progress.show(f"waiting for {label}: {state_of(obj) or 'Created'} ({max(int(left), 0)}s left)")
            if left <= 0:
                return f"timed out waiting for the condition on {ref.plural}/{name}"
            try:
                kind, seen = events.get(timeout=min(_REDRAW, left))
            except queue.Empty:
                continue
            if kind in ("ADDED", "MODIFIED"):
                obj = seen
                if wanted is not None and _condition_met(obj, wanted):
                    return None
            elif kind == "DELETED":
                if wanted is None:
                    return None
                obj = {}
            elif kind in ("CLOSED", "ERROR"):
                # A watch the server ended (its timeout, a 410, a restart): read again and reopen;
                # a brief pause keeps an API that is down from being called in a tight loop.
                time.sleep(0.2 if kind == "ERROR" else 0)
                break


def run(argv: Sequence[str], kubeconfig: str | None = None, context: str | None = None) -> int:
    """``trimaran wait ARGV``; the exit code."""
    args = _parser().parse_args(argv)
    kind, name = args.kind, args.name
    if "/" in kind and name is None:
        kind, _, name = kind.partition("/")
    if not name:
        print("error: wait needs a name: trimaran wait KIND/NAME --for=condition=Succeeded", file=sys.stderr)
        return 1
    if args.for_ == "delete":
        wanted = None
    elif args.for_.startswith("condition="):
        condition, _, value = args.for_[len("condition="):].partition("=")
        wanted = (condition.lower(), (value or "true").lower())
    else:
        print(f"error: unrecognised --for {args.for_!r}: use condition=NAME or delete", file=sys.stderr)
        return 1
    try:
        seconds = parse_duration(args.timeout)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    progress = _Progress()
    try:
        client = Client.connect(kubeconfig=kubeconfig, context=context)
        ref = client.resolve(kind)
        namespace = (args.namespace or client.namespace) if ref.namespaced else None
        state_of = {"Job": job_status, "Pod": pod_status, "Experiment": experiment_progress}.get(
            ref.kind, training_state)
        failure = _wait(client, ref, namespace, name, wanted, seconds, state_of, progress)
    except APIError as exc:
        failure = str(exc)
    except KeyboardInterrupt:
        progress.clear()
        return 130
    progress.clear()
    if failure is not None:
        print(f"error: {failure}", file=sys.stderr)
        return 1
    print(f"{ref.kind.lower()}/{name} {'condition met' if wanted is not None else 'deleted'}")
    return 0
