"""The one table renderer of the harness: markdown tables for the generated pages (leaderboards, report,
comparison, bench page) and aligned text tables for the terminal (``harness bench``, ``harness list``), the
latter drawn by ``tabulate``.

Cells arrive formatted (the pages choose their decimals), so nothing is parsed as a number: a cell is printed as
given. Markdown tables are written compact (``| a | b |``, no padding): a renderer aligns them, and a changed
number changes one line of a committed page, not the padding of its whole table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tabulate import tabulate


def _markdown_cell(value: object) -> str:
    # A pipe would end the cell and a line break the row: a newline, and what else ends a line (a carriage
    # return, Unicode's line separator: str.splitlines), or a value could forge a line of the page.
    return " ".join(str(value).replace("|", "\\|").splitlines())


def _markdown_row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(map(_markdown_cell, cells)) + " |"


def markdown(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A GitHub-flavoured markdown table, one string per line: header, separator, rows."""
    return [_markdown_row(columns), "|" + "---|" * len(columns), *map(_markdown_row, rows)]


def text(columns: Sequence[str], rows: Iterable[Sequence[object]], right: Sequence[bool] | None = None) -> str:
    """An aligned plain-text table with a dashed rule under the header; ``right[i]`` right-aligns column i
    (numbers)."""
    align = ["right" if r else "left" for r in right] if right is not None else None
    return tabulate([[str(cell) for cell in row] for row in rows], headers=list(columns), tablefmt="simple",
                    disable_numparse=True, colalign=align)


def pairs(rows: Iterable[tuple[str, str]]) -> list[str]:
    """``name  description`` lines, the names padded to one width, no header."""
    return tabulate(list(rows), tablefmt="plain", disable_numparse=True).splitlines()
