"""The live status line (phasewatch.live.status)."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import threading
import time

import pytest
from rich.console import Console

from phasewatch.live.status import StatusLine, format_elapsed, status_wanted

ANSI_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(shown: str) -> str:
    """Terminal output without its control sequences (styles, cursor moves)."""
    return ANSI_CONTROL.sub("", shown)


@pytest.fixture
def terminal(monkeypatch):
    """A real pseudo-terminal: (file writing to it, function reading what it shows)."""
    monkeypatch.setenv("TERM", "xterm-256color")
    master, slave = pty.openpty()
    tty = os.fdopen(slave, "w", buffering=1)

    def shown(wait: float = 0.0) -> str:
        time.sleep(wait)
        data = b""
        while select.select([master], [], [], 0.05)[0]:
            data += os.read(master, 65536)
        return data.decode(errors="replace")

    yield tty, shown
    tty.close()
    os.close(master)


def test_quiet_when_stdout_is_not_a_terminal(monkeypatch, terminal):
    tty, shown = terminal
    monkeypatch.setattr("sys.stdout", io.StringIO())
    status = StatusLine(console=Console(file=tty))
    assert not status.enabled
    with status:
        status.update(intervals=3, phase=1, phases=1)
        time.sleep(0.4)
    assert shown() == ""


def test_quiet_on_a_dumb_terminal(monkeypatch, terminal):
    tty, shown = terminal
    monkeypatch.setenv("TERM", "dumb")
    monkeypatch.setattr("sys.stdout", tty)
    assert not status_wanted(tty, Console(file=tty))
    with StatusLine(console=Console(file=tty)) as status:
        status.update(intervals=3)
        time.sleep(0.4)
    assert shown() == ""


def test_live_line_on_a_terminal_shows_and_refreshes_the_fields(monkeypatch, terminal):
    tty, shown = terminal
    monkeypatch.setattr("sys.stdout", tty)
    status = StatusLine("abab", console=Console(file=tty), refresh_per_second=10)
    assert status.enabled
    with status:
        status.update(intervals=7, phase=2, phases=3, dropped=0)
        first = plain(shown(wait=0.4))
        status.update(intervals=8, dropped=5)
        second = plain(shown(wait=0.4))
    after = shown()
    assert "abab" in first and "intervals 7" in first and "phase 2 of 3" in first
    assert "dropped 0" in first
    assert "intervals 8" in second and "dropped 5" in second
    assert "\x1b[2K" in after  # transient: the line is erased on stop


def test_forced_terminal_console_renders_into_a_buffer():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=100)
    with StatusLine(console=console, enabled=True, refresh_per_second=10) as status:
        status.update(intervals=12, phase=0, phases=2, dropped=1)
        time.sleep(0.3)
    out = plain(buffer.getvalue())
    assert "intervals 12" in out and "phase 0 of 2" in out and "dropped 1" in out


def test_render_before_any_phase():
    status = StatusLine(enabled=False)
    text = status.render().plain
    assert "intervals 0" in text and "phase - of 0" in text and "dropped 0" in text


def test_updates_from_many_threads():
    status = StatusLine(enabled=False)

    def bump(worker: int):
        for i in range(1000):
            status.update(intervals=i, phase=worker)

    threads = [threading.Thread(target=bump, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    fields = status.fields()
    assert fields["intervals"] == 999 and fields["phase"] in range(4)


def test_unknown_field_is_refused():
    with pytest.raises(TypeError, match="colour"):
        StatusLine(enabled=False).update(colour="red")


def test_elapsed_time_formats():
    assert format_elapsed(7.25) == "7.2 s"
    assert format_elapsed(59.94) == "59.9 s"
    assert format_elapsed(125) == "2:05"
    assert format_elapsed(3725) == "1:02:05"
