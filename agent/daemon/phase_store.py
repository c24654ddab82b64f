"""The daemon's phase catalogue: one file, the same one ``run`` uses
(:mod:`phasewatch.formats.catalog`), in the daemon's state directory.

Each target's program is keyed as ``run`` keys it: a process target by its
executable (``/proc/PID/exe``: the GNU build-id, else path and size), a
live CPU target by its CPU (``cpu:N``; its phases mix whatever ran there).
What goes wrong costs the catalogue, never the daemon: a damaged file is
moved aside (one line) and a fresh one begun, another user's file is
refused (one line) and the daemon goes on without one, and a write that
fails (a full disk) is counted in ``phasewatch_catalog_write_errors_total``
and said once, until writes succeed again.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

from ..errors import UserError
from ..formats.catalog import FILE_NAME, Catalog, default_path, program_key
from .phase_ids import ProgramPhases

#: What a failing catalogue may raise: it ends the catalogue's use, never the daemon.
CATALOG_ERRORS = (sqlite3.Error, OSError)


def catalog_path(configured: str | None) -> Path:
    """The catalogue file: the configured one, else in systemd's
    ``StateDirectory=`` (``$STATE_DIRECTORY``), else the user's state
    folder (``$XDG_STATE_HOME/phasewatch``)."""
    if configured:
        return Path(configured)
    state = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    return Path(state) / FILE_NAME if state else default_path()


def process_program(pid: int) -> tuple[str, str]:
    """(key, path) of the program a process runs."""
    return program_key(f"/proc/{pid}/exe")


def cpu_program(cpu_target: str) -> tuple[str, str]:
    return f"cpu:{cpu_target[3:]}", f"[{cpu_target}]"


class DaemonCatalog:
    """The catalogue as the daemon's workers share it: one connection, one
    lock, each program's phases in memory while a target runs it."""

    def __init__(self, path: str | os.PathLike, log):
        self.path = Path(path)
        self.log = log
        self.write_errors = 0
        self._failing = False
        self._lock = threading.Lock()
        self._programs: dict[str, ProgramPhases] = {}
        self._users: dict[str, int] = {}
        self.catalog: Catalog | None = None
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            catalog = Catalog(self.path, warn=self._say)
        except (OSError, ValueError) as exc:
            self.log(f"phase catalogue {self.path} not used: "
                     f"{getattr(exc, 'strerror', None) or exc}")
            return
        except UserError as exc:        # not a regular file
            self.log(f"phase catalogue not used: {exc}")
            return
        self.catalog = catalog if catalog.usable else None

    def _say(self, line: str) -> None:
        """A line from the catalogue: each failing write is counted, and
        said only when writes start failing."""
        if "not updated" in line:
            self.write_errors += 1
            if self._failing:
                return
            self._failing = True
        self.log(line)

    @property
    def usable(self) -> bool:
        return self.catalog is not None

    def program(self, program: str, path: str, profile: str, keep: int) -> ProgramPhases:
        """The program's phases under ``profile``, read from the catalogue
        when no target runs it yet; held until :meth:`release`."""
        key = f"{program}|{profile}"
        with self._lock:
            if key not in self._programs:
                phases, next_id = [], 0
                if self.catalog is not None:
                    try:
                        phases = self.catalog.phases(key, keep)
                        next_id = self.catalog.next_id(key)
                    except CATALOG_ERRORS as exc:
                        self.log(f"phase catalogue {self.path}: cannot read {path}'s phases "
                                 f"({exc}); its ids start after the daemon's")
                self._programs[key] = ProgramPhases(program, path, profile, phases, next_id, keep)
            self._users[key] = self._users.get(key, 0) + 1
            return self._programs[key]

    def release(self, program: ProgramPhases) -> None:
        """A target of the program ended; the last lets go of it, where the
        catalogue holds all it knew (else it stays, so that no id is given
        twice while the daemon runs)."""
        key = f"{program.program}|{program.profile}"
        with self._lock:
            self._users[key] = self._users.get(key, 1) - 1
            if self._users[key] <= 0 and self.catalog is not None and not self._failing:
                self._programs.pop(key, None)
                self._users.pop(key, None)

    def save(self, program: ProgramPhases, phases) -> bool:
        """The program's phases (and its next id) in one transaction."""
        if self.catalog is None:
            return False
        with self._lock:
            try:
                ok = self.catalog.save(program.program, program.path, program.profile,
                                       program.next_id, phases)
            except CATALOG_ERRORS as exc:
                self._say(f"catalogue {self.path} not updated: {exc}")
                return False
        if ok and self._failing:
            self._failing = False
            self.log(f"catalogue {self.path} written again")
        return ok

    def close(self) -> None:
        with self._lock:
            if self.catalog is not None:
                self.catalog.close()
                self.catalog = None
