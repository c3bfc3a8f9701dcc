"""``trimaran get``: the verb scripts call in loops, so it starts without the rest of the CLI.

It parses its own arguments with argparse and imports neither typer nor rich (together about
0.2 s of start-up): :func:`trimaran.cli.main` hands it ``get`` before loading them. The server
renders the rows, as for kubectl: a ``meta.k8s.io/v1`` Table built from each kind's printer
columns, so the columns are defined once, in the kind registry, for kubectl and for us.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Sequence

from trimaran.api.jsonpath import JSONPathError, render_template
from trimaran.cli.client import APIError, Client, KindRef

__all__ = ["run"]

TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
_GAP = "   "  # kubectl's column separator


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trimaran get", description="List resources, or show one (columns as kubectl shows them).")
    parser.add_argument("kind", help="kind, plural or short name: tfjob, pytorchjobs, job, pods, cm... "
                                     "(or KIND/NAME)")
    parser.add_argument("name", nargs="?", help="one object's name")
    parser.add_argument("-n", "--namespace", help="namespace (default: the kubeconfig context's)")
    parser.add_argument("-A", "--all-namespaces", action="store_true", help="list across all namespaces")
    parser.add_argument("-o", "--output", type=_output_format, metavar="FORMAT",
                        help="wide: every column; yaml, json: the objects; name: KIND/NAME lines; "
                             "jsonpath=TEMPLATE: fields, e.g. jsonpath='{.status.phase}' or "
                             "jsonpath='{range .items[*]}{.metadata.name}{\"\\n\"}{end}'")
    parser.add_argument("-w", "--watch", action="store_true", help="after listing, print changes as they happen")
    parser.add_argument("-l", "--selector", help="label selector: key=value, key!=value, key in (a,b), !key")
    return parser


def _output_format(text: str) -> str:
    if text in ("wide", "yaml", "json", "name") or text.startswith("jsonpath="):
        return text
    raise argparse.ArgumentTypeError(
        f"unsupported output format {text!r}: use wide, yaml, json, name or jsonpath=TEMPLATE")


def _layout(rows: Iterable[Sequence[str]], widths: Sequence[int]) -> list[str]:
    return [_GAP.join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _text(value: object) -> str:
    if value is None:
        return "<none>"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


class _Printer:
    """Table rows as kubectl prints them: the columns of priority 0 (all with ``-o wide``), a
    NAMESPACE column first across namespaces; the widths of the first page kept while watching."""

    def __init__(self, wide: bool, all_namespaces: bool, name_prefix: str = "") -> None:
        self.wide = wide
        self.all_namespaces = all_namespaces
        self.name_prefix = name_prefix  # "deployment.apps/" when several kinds are listed, as kubectl
        self.shown: list[int] | None = None
        self.header: list[str] = []
        self.widths: list[int] | None = None

    def rows(self, table: dict) -> list[list[str]]:
        if self.shown is None:
            columns = table.get("columnDefinitions") or []
            self.shown = [i for i, c in enumerate(columns) if self.wide or not c.get("priority")]
            self.header = [str(columns[i]["name"]).upper() for i in self.shown]
            if self.all_namespaces:
                self.header.insert(0, "NAMESPACE")
        out = []
        for row in table.get("rows") or []:
            cells = [_text(row["cells"][i]) for i in self.shown]
            if self.name_prefix and cells:
                cells[0] = self.name_prefix + cells[0]
            if self.all_namespaces:
                cells.insert(0, ((row.get("object") or {}).get("metadata") or {}).get("namespace", ""))
            out.append(cells)
        return out

    def first_page(self, table: dict) -> str:
        rows = self.rows(table)
        block = [self.header, *rows]
        self.widths = [max(len(r[i]) for r in block) for i in range(len(self.header))]
        return "\n".join(_layout(block, self.widths))

    def more(self, table: dict, deleted: bool) -> str:
        lines = _layout(self.rows(table), self.widths or [])
        return "\n".join(f"{line}{_GAP}(deleted)" if deleted else line for line in lines)


def _include_object(namespace: str | None, ref: KindRef) -> str:
    """What each Table row carries of its object: its metadata only across namespaces (the NAMESPACE
    column), else nothing (a tenth of the bytes to send and parse for 500 rows)."""
    return "Metadata" if namespace is None and ref.namespaced else "None"


def _table(client: Client, ref: KindRef, namespace: str | None, name: str | None, selector: str | None,
           ) -> dict:
    params = {"labelSelector": selector, "includeObject": _include_object(namespace, ref)}
    path = ref.path(namespace, name)
    resp = client.request("GET", path, params=params, accept=TABLE_ACCEPT)
    return json.loads(resp.read())


def _dump(client: Client, targets: Sequence[tuple[KindRef, str | None]], name: str | None,
          selector: str | None, fmt: str) -> str:
    """One object (a name given), else a List of every target kind's objects, in ``fmt`` (json,
    yaml or jsonpath=TEMPLATE)."""
    if name:
        ref, namespace = targets[0]
        data = client.get(ref, namespace, name)
        objects = [data]
    else:
        objects = [obj for ref, namespace in targets for obj in client.list(ref, namespace, selector)]
        data = {"apiVersion": "v1", "kind": "List", "items": objects}
    # As kubectl: field ownership is noise to a reader (kubectl shows it with --show-managed-fields).
    for obj in objects:
        (obj.get("metadata") or {}).pop("managedFields", None)
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False)
    if fmt.startswith("jsonpath="):
        return render_template(data, fmt[len("jsonpath="):])
    import yaml

    return yaml.safe_dump(data, sort_keys=False).rstrip("\n")


def _watch(client: Client, ref: KindRef, namespace: str | None, name: str | None, printer: _Printer,
           since: str | None) -> None:
    params = {"watch": "true", "timeoutSeconds": "3600", "resourceVersion": since,
              "fieldSelector": f"metadata.name={name}" if name else None,
              "includeObject": _include_object(namespace, ref)}
    resp = client.request("GET", ref.path(namespace), params=params, accept=TABLE_ACCEPT, stream=True,
                          timeout=3700)
    while True:
        line = resp.readline()
        if not line:
            return
        if not line.strip():
            continue
        event = json.loads(line)
        if event.get("type") not in ("ADDED", "MODIFIED", "DELETED"):
            continue
        table = event["object"]
        if printer.widths is None:
            print(printer.first_page(table), flush=True)
        else:
            print(printer.more(table, event["type"] == "DELETED"), flush=True)


def _qualified(ref: KindRef) -> str:
    """kubectl's ``kind.group`` (``deployment.apps``; ``service`` for the core group)."""
    return f"{ref.kind.lower()}.{ref.group}" if ref.group else ref.kind.lower()


def _namespace(client: Client, ref: KindRef, args: argparse.Namespace) -> str | None:
    return None if args.all_namespaces or not ref.namespaced else (args.namespace or client.namespace)


def _show(client: Client, ref: KindRef, args: argparse.Namespace, name: str | None, several: bool) -> bool:
    """Print one kind's objects; False when there were none (and nothing was printed)."""
    namespace = _namespace(client, ref, args)
    table = _table(client, ref, namespace, name, args.selector)
    if args.output == "name":
        lines = [f"{_qualified(ref)}/{row['cells'][0]}" for row in table.get("rows") or []]
        if lines:
            print("\n".join(lines))
        return bool(lines)
    printer = _Printer(wide=args.output == "wide", all_namespaces=namespace is None and ref.namespaced,
                       name_prefix=f"{_qualified(ref)}/" if several else "")
    if table.get("rows"):
        print(printer.first_page(table), flush=True)
    if args.watch:
        _watch(client, ref, namespace, name, printer, (table.get("metadata") or {}).get("resourceVersion"))
    return bool(table.get("rows"))


def run(argv: Sequence[str], kubeconfig: str | None = None, context: str | None = None) -> int:
    """``trimaran get ARGV``; the exit code. ``KIND,KIND`` lists several kinds, as kubectl."""
    args = _parser().parse_args(argv)
    kind, name = args.kind, args.name
    if "/" in kind and name is None:
        kind, _, name = kind.partition("/")
    kinds = [k for k in kind.split(",") if k]
    if len(kinds) > 1 and (args.watch or name):
        print("error: watch or name one kind at a time (trimaran get KIND NAME, trimaran get KIND -w)",
              file=sys.stderr)
        return 1
    try:
        client = Client.connect(kubeconfig=kubeconfig, context=context)
        refs = [client.resolve(k) for k in kinds]
        if args.output in ("yaml", "json") or (args.output or "").startswith("jsonpath="):
            targets = [(ref, _namespace(client, ref, args)) for ref in refs]
            text = _dump(client, targets, name, args.selector, args.output)
            # As kubectl, a jsonpath's output ends where the template ends: no newline of ours.
            print(text, end="" if args.output.startswith("jsonpath=") else "\n")
            return 0
        shown = False
        for ref in refs:
            if shown and args.output != "name":
                print()
            shown = _show(client, ref, args, name, several=len(refs) > 1) or shown
        if not shown and not args.watch:
            where = "any namespace" if args.all_namespaces else f"{args.namespace or client.namespace} namespace"
            print(f"No resources found in {where}.", file=sys.stderr)
    except (APIError, JSONPathError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `trimaran get pods | head`: the reader has what it wanted; say nothing, as kubectl.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 0
