"""CLI tables as kubectl prints them: aligned columns, no trailing blanks."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from trimaran.cli.tables import print_table


def test_a_table_is_aligned_and_its_lines_end_at_their_last_character() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200, markup=False, color_system=None)
    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("NAME", "STATUS", "MESSAGE"):
        table.add_column(column)
    table.add_row("digits-predictor-00001", "Running", "")
    table.add_row("a", "Pending", "waiting for a long message to end")
    print_table(console, table)
    lines = out.getvalue().splitlines()
    assert lines == [line.rstrip() for line in lines], lines
    assert [line.split() for line in lines] == [
        ["NAME", "STATUS", "MESSAGE"], ["digits-predictor-00001", "Running"],
        ["a", "Pending", "waiting", "for", "a", "long", "message", "to", "end"]]
    status_at = lines[0].index("STATUS")
    assert all(line[status_at:].startswith(word) for line, word in zip(lines[1:], ("Running", "Pending"), strict=True))
