"""The executable mappings of a process, as ``/proc/PID/maps`` lists them.

psutil's ``memory_maps`` leaves out the file offsets and inodes that symbols
and the code map need, so the file is read here.  A process the agent may
not read (a setuid program started by a user) is left without mappings: its
code goes unnamed, and a warning says so once (for the first such process:
a shell loop over a setuid program would otherwise say it at every turn)."""

from __future__ import annotations

from typing import NamedTuple

from ..collectors import procfs
from ..console import warn

#: Processes whose maps were refused; the first was said.
_REFUSED: set[int] = set()


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
    """The executable mappings of ``pid`` (empty if it has gone or may not be read)."""
    return parse_maps(maps_text(pid) or "")


def maps_text(pid: int) -> str | None:
    """``/proc/PID/maps`` as the kernel wrote it; None if ``pid`` has gone or
    its maps are refused (said for the first process refused)."""
    try:
        return procfs.read(f"/proc/{pid}/maps")
    except (FileNotFoundError, ProcessLookupError):
        return None
    except PermissionError:
        if not _REFUSED:
            warn(f"cannot read /proc/{pid}/maps ({_name(pid)}): permission denied, as for a "
                 f"setuid program or another user's; its code goes unnamed, and so does "
                 f"that of any other process refused so")
        _REFUSED.add(pid)
        return None


def _name(pid: int) -> str:
    try:
        return procfs.read(f"/proc/{pid}/comm").rstrip("\n")
    except OSError:
        return "gone"


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
