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

__all__ = ["Column", "ThrottledBar", "cell", "kv_table", "make_table", "print_renderable", "print_table", "progress",
           "stderr_stream"]

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
    ``overflow``, ``min_width``, ``style``...), made into one when the table is drawn."""

    __slots__ = ("header", "options")

    def __init__(self, header: str = "", **options: Any) -> None:
        self.header = header
        self.options = options

    def __repr__(self) -> str:
        return f"Column({self.header!r}, **{self.options!r})"


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


def print_table(columns: Sequence[str | Column], rows: Sequence[Sequence[Any]], *,
                max_width: int | None = None) -> None:
    """A table on standard output (:func:`print_renderable`), at most ``max_width`` columns wide if given."""
    table = make_table(columns)
    for row in rows:
        table.add_row(*(cell(v) for v in row))
    print_renderable(table, max_width=max_width)


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
