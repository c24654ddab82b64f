"""The executable mappings of a process, as ``/proc/PID/maps`` lists them.

psutil's ``memory_maps`` leaves out the file offsets and inodes that symbols
and the code map need, so the file is read here."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class Mapping(NamedTuple):
    start: int
    end: int
    offset: int
    path: str  # file path, or a name in brackets such as "[vdso]"
    inode: int

    @property
    def is_file(self) -> bool:
        return self.inode != 0 and self.path.startswith("/")


def read_maps(pid: int) -> list[Mapping]:
    """The executable mappings of ``pid`` (empty if it has gone)."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return parse_maps(text)


def parse_maps(text: str) -> list[Mapping]:
    """The executable mappings listed in a ``/proc/PID/maps`` text."""
    mappings = []
    for line in text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or "x" not in fields[1]:
            continue
        start, end = (int(part, 16) for part in fields[0].split("-"))
        path = fields[5].strip() if len(fields) > 5 else ""
        mappings.append(Mapping(start, end, int(fields[2], 16), path, int(fields[4])))
    return mappings
