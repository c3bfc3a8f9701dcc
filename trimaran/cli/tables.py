"""Tables as kubectl prints them: columns apart by spaces, each line ending at its last character."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["print_table"]


def print_table(console: Console, table: Table) -> None:
    """``table`` line by line without the spaces rich pads its last column with, so that a copied or
    piped table has no trailing blanks."""
    for line in console.render_lines(table, pad=False, new_lines=False):
        text = Text.assemble(*((segment.text, segment.style) for segment in line if not segment.control))
        text.rstrip()
        console.print(text, highlight=False, soft_wrap=True)
