"""The one table renderer of the harness: markdown tables for the generated pages (leaderboards, report,
comparison, bench page) and aligned text tables for the terminal (``harness bench``, ``harness list``), the
latter drawn by ``tabulate``.

Cells arrive formatted (the pages choose their decimals), so nothing is parsed as a number: a cell is printed as
given. Markdown tables are written compact (``| a | b |``, no padding): a renderer aligns them, and a changed
number changes one line of a committed page, not the padding of its whole table.

A markdown cell is text: what a record names (a dataset, a loss, its hyper-parameters, a metric) is free text from
the user, so a cell is escaped (:func:`escape`) unless the page built it as markdown itself (:class:`Markup`: a
link to a record, bold), from escaped parts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from tabulate import tabulate


class Markup(str):
    """Markdown a page wrote itself (a record's link, a bold best mean, *published*), whose record-derived parts it
    escaped (:func:`escape`): a table prints it as it is. A plain ``str`` is text, escaped; so is what a ``Markup``
    turns into when concatenated (a plain ``str``), which fails safe: shown with backslashes, never rendered."""

    __slots__ = ()


# Where GitHub's markdown (CommonMark with its tables, strikethrough and math) or HTML would act on a run of text;
# each is matched only where it would act, so that an ordinary name keeps its bytes and a committed page its diff:
_ACTIVE = (
    r"[\\`*~$]"  # an escape, a code span, emphasis, strikethrough, math: anywhere
    r"|<(?=[A-Za-z/!?])"  # an HTML tag, comment or declaration, or an autolink <scheme:...>; "<=" or "< 3" is text
    r"|&(?=#?\w+;)"  # an entity or character reference ("&lt;" would print "<"); "a & b" is text
    r"|(?<!\S)#"  # a heading's closing sequence ("## blobs #" prints "blobs"); "C#" is text
    r"|_+"  # emphasis by underscores, unless inside a word: see _escaped
)
# A link or an image, "[x](url)": a page defines no reference ("[x]: url" starts a line, which no name does), so a
# bracket links only right before "(" ("[-5.00, -5.00]" is text). A page writes no "(" right after escaped text.
_TEXT = re.compile(_ACTIVE + r"|\](?=\()")
_ALT = re.compile(_ACTIVE + r"|[\[\]]")  # in an image's alt text, any bracket would end or nest it


def _escaped(match: re.Match[str]) -> str:
    found = match.group()
    if found[0] == "_":
        # A run of underscores between two letters or digits can neither open nor close emphasis (CommonMark's
        # flanking rules, which GitHub follows): eps_supinfonce and tau_plus=0.1 print as they are, unescaped,
        # as the committed pages have them. Elsewhere (_x_, __init__) each is escaped.
        text, start, end = match.string, match.start(), match.end()
        if start > 0 and end < len(text) and text[start - 1].isalnum() and text[end].isalnum():
            return found
        return "\\_" * len(found)
    return "\\" + found


def escape(text: object, *, brackets: bool = False) -> str:
    """``text`` as markdown that prints it literally: every character markdown or HTML would act on is
    backslash-escaped where it would act (GitHub shows ``\\[`` as ``[``), so that a record named ``[x](http://evil)``,
    ``<b>x</b>`` or ``*x*`` prints as that, not as a link, bold or emphasis. A bare URL stays one that GitHub links:
    its text is the address itself, so nothing is hidden. A line break becomes a space: a heading or a bullet is one
    line, whatever a loss parameter holds (pipes are the table's, :func:`markdown`). ``brackets``: every bracket
    too (an image's alt text)."""
    return (_ALT if brackets else _TEXT).sub(_escaped, " ".join(str(text).splitlines()))


# What makes a bullet's text a block of its own: a nested ordered list ("1. x", "2) x"), a nested list or a
# thematic break ("- x", "+ x", "---"), a quote ("> x"), GitHub's task box ("[ ] x"). ("#" and "*" escape() escapes.)
_BLOCK_START = re.compile(r"\d{1,9}(?=[.)](?:\s|$))|(?=[-+>]|\[[ xX]\](?:\s|$))")


def bullet(text: str) -> str:
    """``text`` (markdown: escaped, :func:`escape`, or built by the page) as one bullet of a page: one line, and
    its start escaped where markdown would read it as a block inside the bullet (a record named ``1. x``, ``> x``
    or ``[ ] x`` prints as that, not as a list, a quote or a checkbox). Leading spaces go: four would start code."""
    text = " ".join(text.splitlines()).lstrip()
    start = _BLOCK_START.match(text)
    return "- " + (text if start is None else f"{text[:start.end()]}\\{text[start.end():]}")


def code(text: object) -> str:
    """``text`` as a markdown code span (no escape acts inside one): fenced by one backtick more than its longest
    run of backticks, so that none inside it ends the span early, and padded where it starts or ends with one. A
    line break becomes a space, as in :func:`escape`: a span in prose is one line, else its next line would start
    a heading or a bullet of the page (a bench file's device or command)."""
    text = " ".join(str(text).splitlines())
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text[:1] == "`" or text[-1:] == "`" or (text[:1] == " " and text[-1:] == " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _markdown_cell(value: object) -> str:
    text = value if isinstance(value, Markup) else escape(value)
    # A pipe would end the cell and a line break the row: a newline, and what else ends a line (a carriage
    # return, Unicode's line separator: str.splitlines), or a value could forge a line of the page.
    return " ".join(text.replace("|", "\\|").splitlines())


def _markdown_row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(map(_markdown_cell, cells)) + " |"


def markdown(columns: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A GitHub-flavoured markdown table, one string per line: header, separator, rows. A cell is text, escaped
    (:func:`escape`), unless it is :class:`Markup`."""
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
