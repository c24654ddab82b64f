"""On a terminal, ``run``'s status line never shares a line with what the
command writes: the command's output is relayed through pseudo-terminals of
its own, and the line is taken down before it and drawn again after it.

The agent runs on a real pseudo-terminal; what it writes is played on a small
screen model (carriage return, newline, cursor up, erase line) and each line
the command wrote must stand alone on the screen."""

from __future__ import annotations

import os
import pty
import re
import sys
from pathlib import Path

BIN = Path(sys.executable).parent / "phasewatch"
SCRIPT = ("for i in 1 2 3 4 5 6; do echo \"hello $i\" >&2; echo \"out $i\"; "
          "i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done; done")
CSI = re.compile(rb"\x1b\[([?0-9;]*)([A-Za-z])")


def screen(data: bytes) -> list[str]:
    """The lines a terminal shows after ``data`` (no scrolling region, no wrap)."""
    lines, row, col, i = [[]], 0, 0, 0
    while i < len(data):
        m = CSI.match(data, i)
        if m:
            arg, op = m.group(1), m.group(2)
            if op == b"A":
                row = max(row - int(arg or 1), 0)
            elif op == b"K":
                del lines[row][0 if arg == b"2" else col:]
            i = m.end()
            continue
        ch = data[i:i + 1]
        i += 1
        if ch == b"\r":
            col = 0
        elif ch == b"\n":
            row += 1
            while len(lines) <= row:
                lines.append([])
        elif ch >= b" ":
            line = lines[row]
            line.extend([" "] * (col - len(line) + 1))
            line[col] = ch.decode("latin-1")
            col += 1
    return ["".join(line).rstrip() for line in lines]


def on_a_terminal(argv: list[str]) -> bytes:
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["TERM"] = "xterm"
        os.execv(argv[0], argv)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    os.close(fd)
    return out


def test_the_status_line_never_shares_a_line_with_the_command():
    raw = on_a_terminal([str(BIN), "run", "--", "sh", "-c", SCRIPT])
    assert b"intervals" in raw                        # the status line was drawn
    shown = screen(raw)
    for n in range(1, 7):
        assert f"hello {n}" in shown, shown
        assert f"out {n}" in shown, shown
    mixed = [line for line in shown if "dropped" in line and ("hello" in line or "out " in line)]
    assert not mixed, mixed
