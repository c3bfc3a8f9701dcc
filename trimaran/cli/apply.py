"""``trimaran apply``: store the objects of manifests, all or none.

Like ``get`` and ``wait`` it starts without typer and rich: it is the first call of every script
and benchmark. Manifests are read here (YAML documents, directories, stdin) without the models;
the server validates and answers with each field's problem.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from trimaran.cli.client import APIError, Client

__all__ = ["run"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trimaran apply",
        description="Create or update resources from manifests. A file with any invalid document stores nothing.")
    parser.add_argument("-f", "--filename", action="append", required=True,
                        help="file, directory or - for stdin (repeatable)")
    parser.add_argument("-n", "--namespace", help="namespace (default: the manifest's, else 'default')")
    parser.add_argument("--dry-run", action="store_true", help="validate only; store nothing")
    return parser


def run(argv: Sequence[str], kubeconfig: str | None = None, context: str | None = None) -> int:
    """``trimaran apply ARGV``; the exit code."""
    from trimaran.api import ManifestError, load_manifests

    args = _parser().parse_args(argv)
    manifests = []
    try:
        for source in args.filename:
            text = sys.stdin.read() if source == "-" else None
            for manifest in load_manifests(source, text=text):
                manifests.append({"location": manifest.location, "object": manifest.object})
                for warning in manifest.warnings:
                    print(f"{manifest.location}: Warning: {warning}", file=sys.stderr)
    except ManifestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    if not manifests:
        print("error: no objects passed to apply", file=sys.stderr)
        return 1
    try:
        client = Client.connect(kubeconfig=kubeconfig, context=context)
        result = client.apply(manifests, namespace=args.namespace, dry_run=args.dry_run)
    except (APIError, RuntimeError) as exc:
        for warning in (getattr(exc, "body", None) or {}).get("warnings", []):
            print(warning, file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for warning in result.get("warnings", []):
        print(warning, file=sys.stderr)
    for stored in result["results"]:
        group = f".{stored['group']}" if stored.get("group") else ""
        print(f"{stored['kind'].lower()}{group}/{stored['name']} {stored['action']}")
    return 0
