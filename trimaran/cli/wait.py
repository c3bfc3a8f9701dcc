"""``trimaran wait``: block until objects have a condition, a field value, or are deleted, showing their state.

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
from trimaran.api.jsonpath import as_text, compile_path, values
from trimaran.cli.client import APIError, Client, KindRef
from trimaran.cli.render import experiment_progress, job_status, pod_status, training_state

__all__ = ["run"]

# How often the progress line's countdown is redrawn while no event arrives.
_REDRAW = 0.5


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trimaran wait",
        description="Wait until resources have a condition or a field value (or are deleted), with a live "
                    "view of their state.")
    parser.add_argument("targets", nargs="+", metavar="KIND/NAME | KIND [NAME...]",
                        help="KIND/NAME..., or KIND with names, -l SELECTOR or --all")
    parser.add_argument("--for", dest="for_", required=True, metavar="CONDITION",
                        help="condition=NAME[=true|false], jsonpath='{.status.phase}'=Running, or delete")
    parser.add_argument("--timeout", default="30s", help="for all of them together: e.g. 90s, 5m (default 30s)")
    parser.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    parser.add_argument("-l", "--selector", help="wait for each object of KIND with these labels")
    parser.add_argument("--all", action="store_true", help="wait for every object of KIND in the namespace")
    return parser


class _Wanted:
    """What ``--for`` asks of an object: a condition's status, or a JSONPath's value (any value
    when none is given)."""

    def __init__(self, spec: str) -> None:
        self.condition: tuple[str, str] | None = None
        self.path: str | None = None
        self.value: str | None = None
        if spec.startswith("condition="):
            condition, _, value = spec[len("condition="):].partition("=")
            self.condition = (condition.lower(), (value or "true").lower())
        elif spec.startswith("jsonpath="):
            text = spec[len("jsonpath="):]
            # A filter inside the path has its own '=', so the value is what follows the last '}='.
            path, sep, value = text.rpartition("}=") if text.startswith("{") else text.rpartition("=")
            if not sep:
                path, value = text, None
            elif text.startswith("{"):
                path += "}"
            self.path, self.value = path, value
            compile_path(path)
        else:
            raise ValueError(f"unrecognised --for {spec!r}: use condition=NAME, jsonpath='{{PATH}}'=VALUE or delete")

    def met(self, obj: dict) -> bool:
        if self.condition is not None:
            return any(c.get("type", "").lower() == self.condition[0]
                       and str(c.get("status")).lower() == self.condition[1]
                       for c in (obj.get("status") or {}).get("conditions") or [])
        found = values(obj, self.path or "")
        if self.value is None:
            return bool(found)
        return any(as_text(v) == self.value for v in found)


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


def _wait(client: Client, ref: KindRef, namespace: str | None, name: str, wanted: _Wanted | None,
          deadline: float, state_of: Callable[[dict], str], progress: _Progress) -> str | None:
    """None once the condition holds (or the object is gone), else the error to print."""
    label = f"{ref.kind.lower()}/{name}"
    while True:
        try:
            obj = client.get(ref, namespace, name)
        except APIError as exc:
            if exc.status == 404 and wanted is None:
                return None
            return str(exc)
        if wanted is not None and wanted.met(obj):
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
                if wanted is not None and wanted.met(obj):
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


def _targets(client: Client, args: argparse.Namespace) -> list[tuple[KindRef, str]]:
    """The (kind, name) pairs the arguments name, kubectl's way: all KIND/NAME, or a KIND then
    names, or a KIND with a selector or --all (listed once, at the start)."""
    if any("/" in t for t in args.targets):
        if not all("/" in t for t in args.targets):
            raise ValueError("there is no need to give a kind as a separate argument when passing "
                             "arguments in KIND/NAME form")
        pairs = [t.partition("/")[::2] for t in args.targets]
        return [(client.resolve(kind), name) for kind, name in pairs]
    ref = client.resolve(args.targets[0])
    names = list(args.targets[1:])
    if not names and (args.selector or args.all):
        namespace = (args.namespace or client.namespace) if ref.namespaced else None
        names = [o["metadata"]["name"] for o in client.list(ref, namespace, args.selector)]
        if not names:
            raise ValueError("no matching resources found")
    if not names:
        raise ValueError(f"wait needs a name: trimaran wait {ref.plural}/NAME --for=condition=Ready "
                         "(or -l SELECTOR, or --all)")
    return [(ref, name) for name in names]


def run(argv: Sequence[str], kubeconfig: str | None = None, context: str | None = None) -> int:
    """``trimaran wait ARGV``; the exit code."""
    args = _parser().parse_args(argv)
    try:
        wanted = None if args.for_ == "delete" else _Wanted(args.for_)
        deadline = time.monotonic() + parse_duration(args.timeout)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    progress = _Progress()
    try:
        client = Client.connect(kubeconfig=kubeconfig, context=context)
        for ref, name in _targets(client, args):
            namespace = (args.namespace or client.namespace) if ref.namespaced else None
            state_of = {"Job": job_status, "Pod": pod_status, "Experiment": experiment_progress}.get(
                ref.kind, training_state)
            failure = _wait(client, ref, namespace, name, wanted, deadline, state_of, progress)
            progress.clear()
            if failure is not None:
                print(f"error: {failure}", file=sys.stderr)
                return 1
            print(f"{ref.kind.lower()}/{name} {'condition met' if wanted is not None else 'deleted'}", flush=True)
    except (APIError, ValueError) as exc:
        progress.clear()
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        progress.clear()
        return 130
    return 0
