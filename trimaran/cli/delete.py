"""``trimaran delete``: delete objects by kind and name or by manifest, and wait until their pods stop.

Like ``get`` it starts without typer and rich: scripts and tests clean up in loops. The control plane's
garbage collector stops the pods; this waits for that by default, as a user expects the processes gone.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from trimaran.cli.client import APIError, Client, owned_by

__all__ = ["run"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trimaran delete",
        description="Delete resources by kind and name, or those a manifest names. Their pods are stopped.")
    parser.add_argument("kind", nargs="?", help="kind, plural or short name (or KIND/NAME)")
    parser.add_argument("name", nargs="?", help="the object's name")
    parser.add_argument("-f", "--filename", action="append", help="file, directory or - for stdin (repeatable)")
    parser.add_argument("-n", "--namespace", help="namespace (default: the manifest's, else 'default')")
    parser.add_argument("--wait", action=argparse.BooleanOptionalAction, default=True,
                        help="wait until the resource's processes are gone (default: --wait)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for them (default 60)")
    return parser


def _targets(args: argparse.Namespace) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of each object to delete. Raises ValueError with what is wrong."""
    if args.filename:
        from trimaran.api import ManifestError, load_manifests

        targets = []
        try:
            for source in args.filename:
                for m in load_manifests(source, text=sys.stdin.read() if source == "-" else None):
                    meta = m.object.get("metadata") or {}
                    targets.append((m.object["kind"], args.namespace or meta.get("namespace") or "default",
                                    meta["name"]))
        except ManifestError as exc:
            raise ValueError(str(exc)) from None
        return targets
    if not args.kind:
        raise ValueError("delete needs KIND NAME or -f FILE")
    kind, name = args.kind, args.name
    if "/" in kind and name is None:
        kind, _, name = kind.partition("/")
    if not name:
        raise ValueError("delete needs a name: trimaran delete KIND NAME")
    return [(kind, args.namespace or "default", name)]


def _wait_pods_gone(client: Client, ns: str, uid: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    live = sys.stderr.isatty()
    try:
        while time.monotonic() < deadline:
            pods = [p for p in client.list("Pod", ns) if p["metadata"]["uid"] == uid or owned_by(p, uid)]
            if not pods:
                return
            if live:
                sys.stderr.write(f"\rwaiting for {len(pods)} pod(s) to stop...")
                sys.stderr.flush()
            time.sleep(0.1)
        print(f"pods of {uid} still stopping after {timeout:.0f}s", file=sys.stderr)
    finally:
        if live:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def run(argv: Sequence[str], kubeconfig: str | None = None, context: str | None = None) -> int:
    """``trimaran delete ARGV``; the exit code (1 when any object could not be deleted)."""
    args = _parser().parse_args(argv)
    try:
        targets = _targets(args)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    try:
        client = Client.connect(kubeconfig=kubeconfig, context=context)
    except (APIError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    status = 0
    for kind, ns, name in targets:
        try:
            ref = client.resolve(kind)
            deleted = client.delete(ref.kind, ns, name)
        except APIError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
            continue
        print(f"{ref.kind.lower()}/{name} deleted", flush=True)
        if args.wait:
            _wait_pods_gone(client, ns, deleted["uid"], args.timeout)
    return status
