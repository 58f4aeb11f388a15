"""What the CLI prints on a terminal, made to fit its width: the one place consoles are made and tables are fitted.

Every command's table goes through :func:`fit` (or :func:`print_table`), and every command's prose through
:func:`print_lines`, so at 80 columns (or any width) one rule holds everywhere:

- a cell wraps only at spaces, never inside a word: a column is at least as wide as the longest word of its header
  and its cells, so run ids, variant ids and numbers stay whole (Rich on its own shrinks the widest columns
  below that and cuts ``r0001`` to ``r00…`` or folds ``0.008669`` across two lines);
- when the columns' words cannot all fit, whole columns are left out first, in the order the command names
  (the least needed first), and a footer says which: ``columns left out at 80 columns: ...``;
- prose lines wrap at the width with a hanging indent under their bullet (``- ``) or their label column.

Rich is imported inside the functions: the core modules that describe what they print (the estimate's
:class:`Block`) import this module without paying for Rich.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

WIDE = 100_000  # a width no table reaches: for measuring a table's own width
COMFORT = 12  # a prose column narrower than this stands a word or two per line: a column goes first


def console(stderr: bool = False) -> Console:
    """The console a command prints through (its width: the terminal's, or ``COLUMNS``, or 80 when piped)."""
    from rich.console import Console

    class _Console(Console):
        @property
        def prose_width(self) -> int | None:
            """Where prose wraps: the terminal's width, or COLUMNS; None (whole lines, as a file or a grep
            wants them) when the output is piped and no width was asked for. Tables fit ``width`` always."""
            return self.width if self.is_terminal or os.environ.get("COLUMNS", "").isdigit() else None

        def on_broken_pipe(self) -> None:
            # A closed reader (`cockpit runs | head`) is the CLI's to handle, once, quietly (cli.reader_gone).
            raise BrokenPipeError

    return _Console(stderr=stderr)


@dataclass
class Block:
    """A table a core module describes without Rich: headers, rows of plain cells, and the order in which
    columns may be left out when the terminal is too narrow (headers; the others are never left out)."""

    headers: list[str]
    rows: list[list[str]]
    right: set[str] = field(default_factory=set)  # headers of right-aligned (number) columns
    drop: list[str] = field(default_factory=list)
    title: str = ""


def _min_max(con: Console, renderables: Iterable[object]) -> tuple[int, int]:
    from rich.measure import Measurement

    lo = hi = 1
    options = con.options.update_width(WIDE)
    for r in renderables:
        if r is None or r == "":
            continue
        m = Measurement.get(con, options, r)  # type: ignore[arg-type]
        lo, hi = max(lo, m.minimum), max(hi, m.maximum)
    return lo, hi


def _plain(header: object) -> str:
    from rich.text import Text

    return header.plain if isinstance(header, Text) else Text.from_markup(str(header)).plain


def fit(table: Table, width: int, con: Console, drop: Sequence[str] = ()) -> list[str]:
    """Give every column of ``table`` a width such that the whole table fits ``width`` and no word is cut; leave
    out the columns named in ``drop`` (by header, in that order) while the words alone cannot fit. Returns the
    headers left out, in the order they went."""
    from rich.measure import Measurement

    cols = list(table.columns)
    ranges = {id(c): _min_max(con, [c.header, *c.cells]) for c in cols}
    cells_hi = {id(c): _min_max(con, list(c.cells))[1] for c in cols}
    for c in cols:  # measure the borders and padding once, with every column at its narrowest
        c.width = ranges[id(c)][0]
    overhead = Measurement.get(con, con.options.update_width(WIDE), table).maximum - sum(c.width or 0 for c in cols)
    dropped: list[str] = []
    order = [h for h in drop]

    def words(floor: int = 0) -> int:
        """The narrowest the table can be: every column its longest word wide, or ``floor`` (at most its
        widest cell) so that prose cells do not stand one word per line."""
        return sum(max(ranges[id(c)][0], min(cells_hi[id(c)], floor)) for c in table.columns) + overhead

    # a column goes while the others cannot keep COMFORT characters of prose per line, then while their words
    # alone cannot fit
    while words(COMFORT) > width and order:
        name = order.pop(0)
        hit = next((c for c in table.columns if _plain(c.header).replace("\n", " ") == name), None)
        if hit is not None and len(table.columns) > 1:
            table.columns.remove(hit)
            dropped.append(name)
        if hit is not None:  # the borders and padding of one column fewer
            overhead = (
                Measurement.get(con, con.options.update_width(WIDE), table).maximum
                - sum(c.width or 0 for c in table.columns)
                if table.columns
                else 0
            )
    for i, c in enumerate(table.columns):
        c._index = i  # noqa: SLF001 - Rich numbers its columns; one was removed
    floor = COMFORT if words(COMFORT) <= width else 0
    start = {id(c): max(ranges[id(c)][0], min(cells_hi[id(c)], floor)) for c in table.columns}
    spare = width - words(floor)
    # the spare room goes to the columns nearest to one line each first, so short ones stop wrapping
    for c in sorted(table.columns, key=lambda c: ranges[id(c)][1] - start[id(c)]):
        lo, hi = start[id(c)], ranges[id(c)][1]
        grow = max(0, min(hi - lo, spare))
        c.width = lo + grow
        spare -= grow
    for c in table.columns:
        c.no_wrap = False  # every column is at least its longest word wide: it wraps at spaces only
        c.overflow = "fold"  # only a word wider than the whole terminal is ever folded
        c.min_width = c.max_width = None
    return dropped


def left_out_note(dropped: Sequence[str], width: int) -> str:
    """The footer under a table whose columns did not all fit."""
    return f"columns left out at {width} columns: {', '.join(dropped)}; widen the terminal or use --json"


def print_table(con: Console, table: Table, drop: Sequence[str] = (), note: str = "") -> list[str]:
    """Fit the table to the console's width, print it, and say which columns were left out (``note``: what to
    use instead of ``--json`` where the command has none)."""
    dropped = fit(table, con.width, con, drop)
    con.print(table)
    if dropped:
        text = left_out_note(dropped, con.width)
        if note:
            text = text.replace("use --json", note)
        con.print(text, style="dim", highlight=False, markup=False)
    return dropped


def block_table(b: Block) -> Table:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=escape(b.title) if b.title else None, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for h in b.headers:
        t.add_column(escape(h), justify="right" if h in b.right else "left")
    for row in b.rows:
        t.add_row(*(escape(c) for c in row))
    return t


_LABEL = re.compile(r"^(\s*)(\S.{0,30}?\s{2,})\S")  # "  label     value": continue under the value
_BULLET = re.compile(r"^(\s*)([-*] |\d+\. )")


def hang(line: str) -> int:
    """Where a wrapped line's continuation starts: under a bullet's text, a label's value, or the indent."""
    if m := _BULLET.match(line):
        return len(m.group(1)) + len(m.group(2))
    if m := _LABEL.match(line):
        return len(m.group(1)) + len(m.group(2))
    return len(line) - len(line.lstrip(" "))


def wrap(line: str, width: int | None) -> list[str]:
    """One line of prose wrapped at ``width`` at spaces, with its hanging indent; a word longer than the line
    stays whole on a line of its own."""
    from rich.cells import cell_len

    if width is None or cell_len(line) <= width or not line.strip():
        return [line]
    indent = min(hang(line), width // 2)
    out = textwrap.wrap(
        line,
        width=width,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
        drop_whitespace=True,
    )
    lead = len(line) - len(line.lstrip(" "))
    return [(" " * lead + out[0].lstrip(" ")) if out else line, *out[1:]]


def print_lines(con: Console, lines: Iterable[str | Block], drop_note: str = "") -> None:
    """Print prose lines wrapped to the console's width and :class:`Block` tables fitted to it; fenced code
    (a chart drawn in characters) and Markdown tables (``| a | b |``) are kept apart from the prose: the
    tables become fitted tables, the fences are printed as they are."""
    from rich.markup import escape

    pending: list[str] = []
    fenced = False
    prose = getattr(con, "prose_width", con.width)  # a Console made elsewhere (a test's) wraps at its width

    def flush_table() -> None:
        if not pending:
            return
        rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in pending]
        rows = [r for r in rows if not all(set(c) <= set("-: ") and c for c in r)]  # the |---|---| rule
        pending.clear()
        if not rows:
            return
        head, body = rows[0], rows[1:]
        numbers = {h for i, h in enumerate(head) if body and all(_number(r[i]) for r in body if i < len(r) and r[i])}
        b = Block(head, [r + [""] * (len(head) - len(r)) for r in body], right=numbers, drop=list(reversed(head[1:])))
        print_table(con, block_table(b), b.drop, drop_note)

    for item in lines:
        if isinstance(item, Block):
            flush_table()
            print_table(con, block_table(item), item.drop, drop_note)
            continue
        if item.lstrip().startswith("```"):
            fenced = not fenced
            flush_table()
            con.print(escape(item), highlight=False, crop=False, soft_wrap=True)
            continue
        if fenced:  # a chart: its grid fits (60 wide), a long legend wraps
            for part in wrap(item, prose):
                con.print(escape(part), highlight=False, crop=False, soft_wrap=True)
            continue
        if item.lstrip().startswith("|") and item.rstrip().endswith("|"):
            pending.append(item)
            continue
        flush_table()
        for part in wrap(item, prose):
            con.print(escape(part), highlight=False, soft_wrap=True)
    flush_table()


_NUMBER = re.compile(r"^[-+]?[\d,]*\.?\d+(e[-+]?\d+)?\s*(%|x|s|MiB|GB|h)?$")


def _number(cell: str) -> bool:
    return bool(_NUMBER.match(cell.strip()))
