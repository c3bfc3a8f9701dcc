"""The dashboard's HTML building blocks.

Every function here returns markup; every value that came from a user (names, messages, log
lines, parameter values) goes through :func:`esc` on the way in, so a page never carries a
stored string as markup. There is no script on any page: charts are SVG drawn on the server and
pages that show something still running reload themselves with a meta refresh.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import NamedTuple
from urllib.parse import quote

from trimaran.api.printers import age

PREFIX = "/dashboard"
REFRESH_SECONDS = 2

# Headers of every page: nothing but our own inline styles and data: images, no framing, and no
# referrer (the first request of a browser session may carry the token in its query string).
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                               "base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1f2937;background:#f9fafb}
header{background:#0f172a;color:#e5e7eb;padding:8px 20px}header a{color:#e5e7eb;margin-right:12px}
main{padding:12px 20px;max-width:1280px}h1{font-size:20px;margin:8px 0}h2{font-size:16px;margin:20px 0 6px}
table{border-collapse:collapse;background:#fff;margin:4px 0}
th,td{border:1px solid #e5e7eb;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f3f4f6}tr.best td{background:#fef3c7}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px;margin:4px 0}dt{font-weight:600}dd{margin:0}
pre{background:#111827;color:#e5e7eb;padding:8px;overflow:auto;max-height:420px;margin:4px 0}
.state-Succeeded,.state-Complete,.state-Running,.state-Ready{color:#047857}.state-Failed{color:#b91c1c}
.state-EarlyStopped,.state-MetricsUnavailable,.state-Killed{color:#6b7280}
.muted{color:#6b7280}.chart{background:#fff;border:1px solid #e5e7eb;margin:4px 0}
.legend span{display:inline-block;width:22px;height:0;margin:0 4px 3px 12px;vertical-align:middle}
.sw-best{border-top:3px solid #d97706}.sw-stopped{border-top:2px dashed #9ca3af}
.sw-failed{border-top:2px dotted #dc2626}.sw-other{border-top:2px solid #2563eb}
"""


def esc(value: object) -> str:
    """``value`` as text that cannot be read as markup (``None`` as nothing)."""
    return "" if value is None else html.escape(str(value), quote=True)


def url(*segments: str) -> str:
    """A dashboard path; each segment is percent-encoded, so a name cannot add a path or query."""
    return "/".join([PREFIX, *(quote(s, safe="") for s in segments)])


def link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


def state(text: str) -> str:
    """A status word, coloured by what it means."""
    return f'<span class="state-{esc(text)}">{esc(text)}</span>'


def fmt(value: object) -> str:
    """A number as a person reads it in a table (6 significant digits), else the value as text."""
    return f"{value:.6g}" if isinstance(value, float) else esc(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], row_classes: Sequence[str] | None = None,
          empty: str = "none") -> str:
    """A table of cells that are already markup; headers are text."""
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{esc(row_classes[i])}"' if row_classes and row_classes[i] else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>")
    if not body:
        return f'<p class="muted">{esc(empty)}</p>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def fields(pairs: Iterable[tuple[str, str]]) -> str:
    """Label/value pairs; values are already markup."""
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


def message(text: str | None) -> str:
    """A condition's message: its first line, and the rest (e.g. a log tail) folded beneath it."""
    if not text:
        return ""
    first, _, rest = text.partition("\n")
    if not rest:
        return esc(first)
    return f"<details><summary>{esc(first)}</summary><pre>{esc(rest)}</pre></details>"


def conditions(obj: dict) -> str:
    rows = [[esc(c.get("type")), esc(c.get("status")), esc(c.get("reason")),
             esc(c.get("lastTransitionTime")), message(c.get("message"))]
            for c in (obj.get("status") or {}).get("conditions") or []]
    return table(["type", "status", "reason", "last transition", "message"], rows)


def events(items: list[dict]) -> str:
    rows = [[esc(e.get("type")), esc(e.get("reason")), esc(age(e.get("lastTimestamp"))), esc(e.get("count", 1)),
             message(e.get("message"))] for e in items]
    return table(["type", "reason", "age", "count", "message"], rows, empty="no events")


def log_block(text: str | None, missing: str) -> str:
    return f"<pre>{esc(text)}</pre>" if text else f'<p class="muted">{esc(missing)}</p>'


class Page(NamedTuple):
    """What a page shows; ``refresh`` while something on it still runs."""

    title: str
    body: str
    refresh: bool = False


def document(page: Page) -> str:
    """The whole HTML document of ``page``; a refreshing page reloads itself every couple of seconds."""
    meta = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if page.refresh else ""
    note = f'<span class="muted">refreshing every {REFRESH_SECONDS}s</span>' if page.refresh else ""
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">{meta}'
            f"<title>{esc(page.title)} · Trimaran</title><style>{_STYLE}</style></head><body>"
            f'<header><a href="{PREFIX}/"><b>Trimaran</b></a><a href="{PREFIX}/runs">Pipeline runs</a>{note}</header>'
            f"<main><h1>{esc(page.title)}</h1>{page.body}</main></body></html>")
