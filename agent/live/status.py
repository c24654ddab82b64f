"""The live status line shown while ``phasewatch run`` watches a command.

One line, redrawn a few times a second by rich's ``Live`` from its own thread:
elapsed time, intervals, current phase, number of phases, dropped samples.
Any thread may call ``update(**fields)``.

The line is written to **stderr**, as everything the agent says, so that
stdout stays the watched command's.  It is shown only when both
stdout and stderr are terminals and ``TERM`` is not ``dumb``; otherwise the
status line writes nothing at all.  It is transient: stopping erases it, so the
final output starts on a clean line.  A watched command's terminal output
comes through :meth:`StatusLine.write_above` (see :mod:`.relay`), so that
the two never share a line.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import IO, TYPE_CHECKING

from ..console import rich_console

if TYPE_CHECKING:   # rich loads where a line is drawn: run -q and pipes go without it
    from rich.console import Console
    from rich.text import Text

#: The fields ``update`` accepts, with their values before the first update.
FIELDS = {"intervals": 0, "phase": None, "phases": 0, "dropped": 0, "implausible": 0}


def status_wanted(stdout: IO | None = None, console: "Console | None" = None) -> bool:
    """Whether a live line belongs on this terminal: stdout and the line's own
    output are terminals, and the terminal is not a dumb one (rich reads
    ``TERM=dumb`` or ``unknown`` as that)."""
    stdout = sys.stdout if stdout is None else stdout
    console = rich_console(stderr=True, soft_wrap=False) if console is None else console
    return _isatty(stdout) and console.is_terminal and not console.is_dumb_terminal


def _isatty(stream: IO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # detached or closed
        return False


def format_elapsed(seconds: float) -> str:
    """``7.25`` -> ``"7.2 s"``, ``125`` -> ``"2:05"``, ``3725`` -> ``"1:02:05"``."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class StatusLine:
    """The live line; use as a context manager, or ``start()`` / ``stop()``.

    ``label`` leads the line (e.g. the command's name).  ``enabled`` forces the
    line on or off; by default it follows ``status_wanted``."""

    def __init__(self, label: str = "phasewatch", *, console: "Console | None" = None,
                 enabled: bool | None = None, refresh_per_second: float = 4):
        self.label = label
        if console is None and enabled is not False:
            console = rich_console(stderr=True, soft_wrap=False)
        self.console = console
        self.enabled = status_wanted(console=self.console) if enabled is None else enabled
        self._fields = dict(FIELDS)
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._live = None
        self._refresh_per_second = refresh_per_second
        self._drawing = False                # between start() and stop()
        self._draw_lock = threading.Lock()

    def update(self, **fields) -> None:
        """Set some of ``intervals``, ``phase``, ``phases``, ``dropped``."""
        unknown = set(fields) - set(FIELDS)
        if unknown:
            raise TypeError(f"unknown status field(s): {', '.join(sorted(unknown))}")
        with self._lock:
            self._fields.update(fields)

    def fields(self) -> dict:
        with self._lock:
            return dict(self._fields)

    def render(self) -> "Text":
        """The line as it would be drawn now."""
        from rich.text import Text
        fields = self.fields()
        phase = "-" if fields["phase"] is None else str(fields["phase"])
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(self.label, style="bold")
        line.append(f"  {format_elapsed(time.monotonic() - self._started)}")
        line.append(f"  intervals {fields['intervals']}")
        line.append("  phase ")
        line.append(phase, style="bold cyan")
        line.append(f" of {fields['phases']}")
        line.append(f"  dropped {fields['dropped']}",
                    style="bold red" if fields["dropped"] else "")
        if fields["implausible"]:
            line.append(f"  implausible {fields['implausible']}", style="bold red")
        return line

    def start(self) -> "StatusLine":
        self._started = time.monotonic()
        with self._draw_lock:
            self._drawing = self.enabled
            self._show()
        return self

    def _show(self) -> None:
        if self._drawing and self._live is None:
            from rich.live import Live
            self._live = Live(get_renderable=self.render, console=self.console,
                              refresh_per_second=self._refresh_per_second, transient=True,
                              redirect_stdout=False, redirect_stderr=False)
            self._live.start()

    def _hide(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def write_above(self, fd: int, data: bytes) -> None:
        """Write a watched command's terminal output to ``fd``: the line is
        taken down first, and drawn again only once the output ends a line,
        so that the two never share one."""
        ends_line = data.endswith(b"\n")
        with self._draw_lock:
            self._hide()
            while data:
                data = data[os.write(fd, data):]
            if ends_line:
                self._show()

    def stop(self) -> None:
        with self._draw_lock:
            self._drawing = False
            self._hide()

    def __enter__(self) -> "StatusLine":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
