"""Human output of the operations commands: tables drawn by ``rich``, progress bars by ``click``.

* :func:`print_table` draws a :class:`rich.table.Table` (a header, a rule under it, no outer box) on
  standard output. Cells are plain text (never rich markup: a queue named ``[default]`` or a JSON
  value prints as is), with their control characters shown as escapes (:func:`laraq.logtext.visible`:
  a cell is one line; :func:`kv_table` keeps the line breaks of the values it is told are multi-line),
  so a class name, queue name or exception text from a job never reaches the terminal raw. Colours only on a terminal; piped output is plain text without trailing
  blanks. The width is the terminal's; elsewhere ``$COLUMNS`` (how tests pin it), else unbounded, so a
  pipe or a log gets every column whole (never cut to 80).
* :func:`progress` is ``click.progressbar`` on standard error, drawn only when standard error is a
  terminal (so pipes, logs, ``--json`` and tests never see it), and redrawn at most four times a
  second however fast the items go (:class:`ThrottledBar`), plus once at the end.

Machine output (``--json``) does not come through here: it is :func:`laraq.cli.ops.emit_json`.

``rich`` (about a quarter of ``laraq status``'s own start-up) is imported when a table is drawn, not when
a command that may draw one is loaded: :class:`Column` only records a column's header and options.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TextIO

import click

from laraq.logtext import visible

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table
    from rich.text import Text

__all__ = ["Column", "ThrottledBar", "cell", "fit_widths", "kv_table", "make_table", "output_width", "print_list",
           "print_renderable", "print_table", "progress", "shorten_middle", "stderr_stream"]

#: Seconds between two redraws of a progress bar.
REDRAW_INTERVAL = 0.25


def stdout_stream() -> TextIO:
    return sys.stdout


def stderr_stream() -> TextIO:
    return sys.stderr


def _is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Column:
    """A table column: its header and the options of :class:`rich.table.Column` (``justify``, ``no_wrap``,
    ``overflow``, ``min_width``, ``style``...), made into one when the table is drawn.

    How :func:`print_table` fits it into a narrow width: ``key`` (the identifying column: a queue, a class,
    a uuid; the first column when none is marked) is never dropped nor wrapped, only shortened in the
    middle as a last resort; a right-justified column is a number and is never cut; ``wrap`` (prose:
    properties, reasons, fixes; by default any other ``overflow="fold"`` column) wraps over lines; ``whole``
    (an id to paste into another command, a time) is never cut either; any other column is shortened in
    the middle."""

    __slots__ = ("header", "key", "options", "whole", "wrap")

    def __init__(self, header: str = "", *, key: bool = False, wrap: bool | None = None, whole: bool = False,
                 **options: Any) -> None:
        self.header = header
        self.key = key
        self.whole = whole
        self.wrap = (options.get("overflow") == "fold" and not key) if wrap is None else wrap
        self.options = options

    @property
    def number(self) -> bool:
        """Drawn at its full width, never shortened: a right-justified column (a number) or a ``whole`` one."""
        return self.whole or self.options.get("justify") == "right"

    def __repr__(self) -> str:
        return f"Column({self.header!r}, key={self.key}, wrap={self.wrap}, **{self.options!r})"


def cell(value: Any, *, multiline: bool = False) -> Text:
    """One table cell as literal text (``None`` prints empty), its control characters escaped (one line
    unless ``multiline``). A :class:`rich.text.Text` is taken as built: its maker escaped what it holds."""
    from rich.text import Text  # start-up: rich only when a table is drawn

    if isinstance(value, Text):
        return value
    return Text("" if value is None else visible(str(value), multiline=multiline))


def make_table(columns: Sequence[str | Column], *, show_header: bool = True) -> Table:
    """A clean table: a header, one rule under it, columns two spaces apart, no outer frame."""
    # start-up: rich only when a table is drawn
    from rich import box
    from rich.table import Column as RichColumn  # start-up: as above
    from rich.table import Table  # start-up: as above

    cols = [RichColumn(c.header, **c.options) if isinstance(c, Column) else RichColumn(c) for c in columns]
    return Table(*cols, box=box.SIMPLE_HEAD if show_header else None, show_edge=False, pad_edge=False,
                 show_header=show_header, header_style="bold", padding=(0, 1))


def print_renderable(renderable: RenderableType, *, max_width: int | None = None) -> None:
    """Render on standard output; on a terminal with colours, elsewhere as plain stripped text. ``max_width``:
    never wider than that many columns (a narrower terminal or ``$COLUMNS`` still wins)."""
    from rich.console import Console  # start-up: rich only when a table is drawn

    out = stdout_stream()
    tty = _is_tty(out)
    buffer = io.StringIO()
    width = None if tty else _width()
    if max_width is not None:
        terminal = shutil.get_terminal_size((max_width, 24)).columns if tty else max_width
        width = min(max_width, width or terminal, terminal)
    console = Console(file=buffer, force_terminal=tty, no_color=not tty, color_system="auto" if tty else None,
                      markup=False, highlight=False, emoji=False, soft_wrap=False, width=width)
    console.print(renderable)
    text = "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())
    click.echo(text, file=out, color=tty)


#: The width of a table that is not drawn on a terminal (a pipe, a file, a log) and no ``$COLUMNS``:
#: wide enough that no column is cut; trailing blanks are stripped, so narrow tables stay narrow.
UNBOUNDED_WIDTH = 4000


def _width() -> int:
    """A non-terminal's width: ``$COLUMNS`` when set (how tests pin it), else :data:`UNBOUNDED_WIDTH`,
    so piped output keeps every column in full instead of rich's 80."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    return UNBOUNDED_WIDTH


def output_width() -> int:
    """The width tables are fitted to: the terminal's on a terminal, else :func:`_width`."""
    out = stdout_stream()
    if _is_tty(out):
        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit() and int(columns) > 0:
            return int(columns)
        try:
            return os.get_terminal_size(out.fileno()).columns or 80
        except (OSError, ValueError, AttributeError):
            return 80
    return _width()


#: Columns are drawn three cells apart (``padding=(0, 1)`` and the blank divider of ``SIMPLE_HEAD``).
GAP = 3
#: The narrowest a shortened text column or a wrapped prose column gets (its header is never cut).
MIN_TEXT, MIN_KEY = 8, 16
#: What a shortened or wrapped column (an identifying one) keeps before any goes down to its minimum.
BALANCED, KEY_BALANCED = 16, 32


def shorten_middle(text: Text, width: int) -> Text:
    """``text`` in at most ``width`` cells, its middle replaced by ``…`` (both ends of a name are
    telling: ``App\\Jobs\\…\\SendInvoice``, ``9f3c…a2e1``)."""
    from rich.text import Text  # start-up: rich only when a table is drawn

    if text.cell_len <= width or width < 3:
        return text
    keep = width - 1
    head = keep - keep // 2
    tail = keep // 2
    plain = text.plain
    while head > 0 and Text(plain[:head]).cell_len > keep - keep // 2:
        head -= 1
    while tail > 0 and Text(plain[len(plain) - tail:]).cell_len > keep // 2:
        tail -= 1
    return Text.assemble(text[:head], "…", text[len(plain) - tail:] if tail else "")


def _minimum(column: Column) -> int:
    header = len(column.header)
    if column.number:
        return header
    return max(header, MIN_KEY if column.key else MIN_TEXT)


def fit_widths(columns: Sequence[Column], cells: Sequence[Sequence[Text]], width: int) -> list[int] | None:
    """Each column's width so that the table fits in ``width`` cells, or None when it cannot (then it is
    drawn as a list). Numbers keep their width; text columns give way widest first (prose wraps, other
    text is shortened in the middle), none below :data:`BALANCED` cells (an identifying one :data:`KEY_BALANCED`) while another is wider, the
    identifying column last at equal widths; no header is ever cut."""
    natural = [max([len(c.header), *(row[i].cell_len for row in cells)]) for i, c in enumerate(columns)]
    room = width - GAP * (len(columns) - 1)
    widths = list(natural)
    shrinkable = [i for i, c in enumerate(columns) if not c.number]
    # first every text column gives way, widest first, down to a readable BALANCED width (prose before
    # the identifying column at equal widths); then down to its minimum
    for floor in (lambda i: max(_minimum(columns[i]), KEY_BALANCED if columns[i].key else BALANCED),
                  lambda i: max(_minimum(columns[i]), BALANCED),
                  lambda i: _minimum(columns[i])):
        while sum(widths) > room:
            wide = [i for i in shrinkable if widths[i] > floor(i)]
            if not wide:
                break
            widest = max(wide, key=lambda i: (widths[i], not columns[i].key, columns[i].wrap))
            widths[widest] -= 1
    return widths if sum(widths) <= room else None


def print_table(columns: Sequence[str | Column], rows: Sequence[Sequence[Any]], *, width: int | None = None,
                max_width: int | None = None) -> None:
    """Draw ``rows`` under ``columns`` fitted to the output's width (:func:`output_width`, or ``width``; at
    most ``max_width`` when given): text columns shortened in the middle, prose wrapped, numbers whole, the
    identifying column always there; when even that does not fit, each row becomes a block of
    ``header: value`` lines (:func:`print_list`)."""
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    if cols and not any(c.key for c in cols):
        first = cols[0]
        cols[0] = Column(first.header, key=True, wrap=False, whole=first.whole, **first.options)
    cells = [[cell(v) for v in row] for row in rows]
    limit = output_width() if width is None else width
    if max_width is not None:
        limit = min(limit, max_width)
    widths = fit_widths(cols, cells, limit)
    if widths is None:
        print_list(cols, cells, limit)
        return
    drawn = []
    for c, w in zip(cols, widths, strict=True):
        options = dict(c.options, width=w, min_width=None)
        if c.wrap:
            options.update(overflow="fold", no_wrap=False)
        else:
            options.update(no_wrap=True, overflow="ellipsis")
        drawn.append(Column(c.header, **options))
    table = make_table(drawn)
    for row in cells:
        table.add_row(*(t if c.wrap or c.number else shorten_middle(t, w)
                        for t, c, w in zip(row, cols, widths, strict=True)))
    print_renderable(table)


def print_list(columns: Sequence[Column], cells: Sequence[Sequence[Text]], width: int) -> None:
    """The table as a list, for a width too narrow for its columns: per row, the identifying values on
    one line (shortened in the middle only if they alone are wider than the line), then the other
    columns as ``header: value`` pairs packed into lines indented by two (a pair wider than a line wraps)."""
    import textwrap  # start-up: only for a list

    lines: list[str] = []
    for row in cells:
        keys = [(c.header, t.plain) for t, c in zip(row, columns, strict=True) if c.key]
        head = "  ".join(value for _, value in keys)
        if len(head) <= width:
            lines.append(head)
        else:  # one identifying value a line, the first one unlabelled
            for n, (header, value) in enumerate(keys):
                text = value if n == 0 else f"  {header}: {value}"
                lines.append(shorten_middle(cell(text), width).plain if len(text) > width else text)
        current = ""
        for t, c in zip(row, columns, strict=True):
            if c.key or not t.plain:
                continue
            item = f"{c.header}: {t.plain}"
            if current and 2 + len(current) + 2 + len(item) <= width:
                current += "  " + item
                continue
            if current:
                lines.append("  " + current)
            current = item
            if 2 + len(item) > width:
                lines.extend(textwrap.wrap(item, width, initial_indent="  ", subsequent_indent="    ",
                                           break_long_words=True, break_on_hyphens=False))
                current = ""
        if current:
            lines.append("  " + current)
    click.echo("\n".join(line.rstrip() for line in lines), file=stdout_stream())


def kv_table(pairs: Sequence[tuple[str, Any]], *, multiline: Collection[str] = ()) -> Table:
    """Two columns, no header: a right-aligned bold name and its value (``laraq show``); the values of the
    names in ``multiline`` keep their line breaks."""
    table = make_table([Column("name", justify="right", style="bold", no_wrap=True),
                        Column("value", overflow="fold")], show_header=False)
    for name, value in pairs:
        table.add_row(cell(name), cell(value, multiline=name in multiline))
    return table


class ThrottledBar:
    """Collects ``update(n)`` calls and passes them to the bar at most once per ``interval`` seconds."""

    def __init__(self, bar: Any, interval: float = REDRAW_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.bar, self.interval, self.clock = bar, interval, clock
        self.pending = 0
        self.last = clock()

    def update(self, n: int = 1) -> None:
        self.pending += n
        now = self.clock()
        if now - self.last >= self.interval:
            self.flush()
            self.last = now

    def flush(self) -> None:
        if self.pending:
            self.bar.update(self.pending)
            self.pending = 0


@contextlib.contextmanager
def progress(length: int | None, label: str, *, enabled: bool = True, interval: float = REDRAW_INTERVAL,
             clock: Callable[[], float] = time.monotonic) -> Iterator[ThrottledBar]:
    """``click.progressbar`` on standard error, hidden unless that is a terminal (and ``enabled``);
    yields a :class:`ThrottledBar` (call ``update(n)`` per item, as often as you like)."""
    stream = stderr_stream()
    show = enabled and bool(length) and _is_tty(stream)
    with click.progressbar(length=max(int(length or 0), 0), label=label, file=stream, hidden=not show,
                           show_pos=True) as bar:
        throttled = ThrottledBar(bar, interval, clock)
        try:
            yield throttled
        finally:
            throttled.flush()
