"""The phase catalogue: phases kept beyond a run, per program, in SQLite.

One database file (WAL mode) holds, for each program (its executable's
GNU build-id, or its path and size where it has none) and each way of
profiling it (detector and profile layout), every phase seen: its stable id,
its name, its centroid and counts, and when it was first and last seen.
A run starts from its program's phases (``ClassifierState.seed``), so the
same behaviour takes the same id and name in every run; ids are never given
twice, and a phase that is not seen again stays, up to
:data:`MAX_PHASES_PER_PROGRAM` per program (the least recently seen go first).

What goes wrong is one line and never the run: a file that is not a
catalogue (or is damaged) is moved aside and a fresh one begun; a file of
another user is refused; a full disk stops the update.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import quote

import numpy as np

from ..core.classify import KnownPhase
from ..errors import UserError
from .elf import ElfFile
from .outputs import check_outputs

FORMAT = "phasewatch-catalog"
VERSION = 1
MAX_PHASES_PER_PROGRAM = 1024
FILE_NAME = "catalog.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS programs(
    key TEXT PRIMARY KEY, program TEXT NOT NULL, path TEXT NOT NULL, profile TEXT NOT NULL,
    next_id INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS phases(
    program TEXT NOT NULL, id INTEGER NOT NULL, name TEXT NOT NULL,
    centroid BLOB NOT NULL, members BLOB NOT NULL, mean_samples BLOB NOT NULL,
    joins INTEGER NOT NULL, cpi_n INTEGER NOT NULL, log_cpi REAL NOT NULL,
    cpi_last REAL NOT NULL, cpi_d2 REAL NOT NULL, intervals INTEGER NOT NULL,
    first_seen REAL NOT NULL, last_seen REAL NOT NULL,
    PRIMARY KEY(program, id));
CREATE TABLE IF NOT EXISTS predictions(program TEXT PRIMARY KEY, memory TEXT NOT NULL);
"""
#: The tables of a catalogue.
_TABLES = {"meta", "programs", "phases", "predictions"}


@dataclass(frozen=True)
class CatalogPhase:
    """A phase as the catalogue keeps it."""

    known: KnownPhase
    name: str
    intervals: int
    first_seen: float
    last_seen: float


def _text(s: str) -> str:
    """A name as SQLite and JSON keep it: bytes that are not UTF-8 (file
    names, symbols) escaped as ``\\xNN``."""
    return s.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def default_path() -> Path:
    """``$XDG_STATE_HOME/phasewatch/catalog.sqlite`` (``~/.local/state`` by default)."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "phasewatch" / FILE_NAME


def program_key(executable: str) -> tuple[str, str]:
    """(key, path) of a program: its GNU build-id where the ELF has one, else
    its real path and size."""
    path = os.path.realpath(executable)
    build_id = _build_id(path)
    if build_id:
        return f"build-id:{build_id}", _text(path)
    try:
        size = os.stat(path).st_size
    except OSError:
        size = 0
    return f"path:{_text(path)}:{size}", _text(path)


def _build_id(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return ElfFile(f).build_id(".note.gnu.build-id")
    except (OSError, ValueError):
        return None


def profile_distance_of(profile: str):
    """The distance of two known phases under a profile key: the largest
    segment distance over the detector's segments both have."""
    from ..core.detectors import used_mask
    from ..core.histograms import (
        CUMULATIVE,
        cumulative_distance_reference,
        total_variation_distance_reference,
    )
    from ..core.intervals import SEGMENT_KINDS
    detector, _, bounds = profile.partition(":")
    bounds = [int(b) for b in bounds.split(",")]
    used = used_mask(detector)

    def distance(a: KnownPhase, b: KnownPhase) -> float:
        found = []
        for s in range(len(bounds) - 1):
            if used[s] and a.members[s] > 0 and b.members[s] > 0:
                lo, hi = bounds[s], bounds[s + 1]
                measure = (cumulative_distance_reference if SEGMENT_KINDS[s] == CUMULATIVE
                           else total_variation_distance_reference)
                found.append(measure(a.centroid[lo:hi], b.centroid[lo:hi]))
        return max(found) if found else 1.0
    return distance


def profile_distances_of(profile: str):
    """:func:`profile_distance_of` from one phase to many at once: their
    centroids and members as the rows of two matrices."""
    from ..core.detectors import used_mask
    from ..core.histograms import CUMULATIVE
    from ..core.intervals import SEGMENT_KINDS
    detector, _, bounds = profile.partition(":")
    bounds = [int(b) for b in bounds.split(",")]
    used = used_mask(detector)

    def distances(a: KnownPhase, centroids: np.ndarray, members: np.ndarray) -> np.ndarray:
        found = np.full(len(centroids), -1.0)
        for s in range(len(bounds) - 1):
            if not used[s] or a.members[s] <= 0:
                continue
            lo, hi = bounds[s], bounds[s + 1]
            diff = centroids[:, lo:hi] - a.centroid[lo:hi]
            if SEGMENT_KINDS[s] == CUMULATIVE:
                d = (np.abs(np.cumsum(diff, axis=1)).sum(axis=1) / (hi - lo - 1) if hi - lo > 1
                     else np.zeros(len(centroids)))
            else:
                d = 0.5 * np.abs(diff).sum(axis=1)
            found = np.where(members[:, s] > 0, np.maximum(found, d), found)
        return np.where(found < 0, 1.0, found)
    return distances


#: What to do about a catalogue path that cannot be one.
OWN_FILE = "give the catalogue's own file with --catalog, or --no-catalog"


def check_path(path: str, advice: str = OWN_FILE, output: bool = True) -> None:
    """Refuse, before anything runs, a catalogue path that cannot be one."""
    if output:
        check_outputs([path])
    if os.path.islink(path) or (os.path.exists(path) and not os.path.isfile(path)):
        raise UserError(f"{path}: not a regular file: {advice}")
    other = _something_else(path)
    if other:
        raise UserError(f"{path}: {other}, not a phase catalogue: left as it is; {advice}")


#: The first bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"


def _something_else(path: str) -> str | None:
    """What the file at ``path`` is, where it is plainly not a catalogue,
    damaged or whole: a file that is not SQLite, or a SQLite database with
    tables of its own.  Such a file is another program's or the user's, and
    is neither written nor moved aside; None for an empty file, a
    catalogue, or a SQLite file too damaged to tell (moved aside when opened)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError:
        return None         # missing, or unreadable: opening it says why
    if not head:
        return None
    if head != SQLITE_HEADER:
        return "not a SQLite file"
    try:
        # immutable: read the file as it is, making no journal beside it
        db = sqlite3.connect(f"file:{quote(os.fsencode(path))}?immutable=1", uri=True)
    except sqlite3.Error:
        return None
    try:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        theirs = sorted(tables - _TABLES)
        if theirs:
            return f"a SQLite database of tables {', '.join(theirs[:3])}"
        if "meta" in tables:
            row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
            if row is not None and row[0] != FORMAT:
                return f"a SQLite database of format {str(row[0])[:40]!r}"
    except sqlite3.Error:
        return None
    finally:
        db.close()
    return None


class Catalog:
    """An open catalogue file.  ``warn`` takes the one line of anything that
    goes wrong; the catalogue is then off (``usable`` False) and the run goes on."""

    def __init__(self, path: str | os.PathLike, warn=lambda line: None, create: bool = True):
        self.path = Path(path)
        self.warn = warn
        self.db: sqlite3.Connection | None = None
        #: Why the catalogue can be read but not written (a full disk), or None.
        self.unwritable: str | None = None
        self._open(create)

    @classmethod
    def for_reading(cls, path: str | os.PathLike, advice: str) -> "Catalog":
        """Another catalogue, only read (a merge's source): nothing is written
        beside it, and a damaged one is refused, not moved aside."""
        catalog = cls.__new__(cls)
        catalog.path, catalog.warn, catalog.unwritable = Path(path), None, "read only"
        if not catalog.path.exists():
            raise UserError(f"{path}: no such file: {advice}")
        check_path(str(path), advice, output=False)
        catalog.db = catalog._reading()
        if catalog.db is None:
            raise UserError(f"{path}: cannot be read as a phase catalogue: {advice}")
        return catalog

    @property
    def usable(self) -> bool:
        return self.db is not None

    def _open(self, create: bool) -> None:
        path = self.path
        if not path.exists() and not create:
            raise UserError(f"{path}: no catalogue there (a run with the catalogue on makes one)")
        check_path(str(path))
        if path.exists():
            st = path.lstat()
            if st.st_uid != os.geteuid():
                self.warn(f"catalogue {path} belongs to another user (uid {st.st_uid}): "
                          f"not used; give your own with --catalog or run with --no-catalog")
                return
        try:
            self.db = self._connect()
        except sqlite3.OperationalError as exc:     # a full disk, a read-only file system
            self.db = self._read_only() if path.exists() else None
            self.unwritable = f"{exc}"
            if self.db is None:
                self.warn(f"catalogue {path} cannot be used: {exc} (free space, or run with "
                          f"--no-catalog)")
            return
        except sqlite3.DatabaseError as exc:
            aside = self._move_aside()
            self.warn(f"catalogue {path} could not be read ({exc}): moved aside to {aside}, "
                      f"starting a fresh one")
            self.db = self._connect()

    def _connect(self) -> sqlite3.Connection:
        # The daemon's workers share one connection, each use under its lock.
        db = sqlite3.connect(self.path, timeout=10.0, isolation_level=None,
                             check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            row = db.execute("SELECT value FROM meta WHERE key = 'format'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('format', ?), ('version', ?)",
                           (FORMAT, str(VERSION)))
            elif row[0] != FORMAT:
                raise sqlite3.DatabaseError(f"format {row[0]!r}, not {FORMAT!r}")
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _read_only(self) -> sqlite3.Connection | None:
        """The catalogue as it is, for reading only, where nothing can be written."""
        return self._opened_for_reading("immutable=1")

    def _reading(self) -> sqlite3.Connection | None:
        """A connection that only reads: with the catalogue's write-ahead log
        where one is beside it (a daemon may be writing), else the file as it
        is, so that no log is made beside it."""
        if not Path(f"{self.path}-wal").exists():
            return self._read_only()
        return self._opened_for_reading("mode=ro")

    def _opened_for_reading(self, query: str) -> sqlite3.Connection | None:
        try:
            db = sqlite3.connect(f"file:{quote(os.fsencode(self.path))}?{query}", uri=True,
                                 check_same_thread=False)
            db.execute("SELECT count(*) FROM phases").fetchone()
            return db
        except sqlite3.Error:
            return None

    def _move_aside(self) -> Path:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        os.replace(self.path, aside)
        for suffix in ("-wal", "-shm"):
            Path(str(self.path) + suffix).unlink(missing_ok=True)
        return aside

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None

    # -- reading -------------------------------------------------------------

    def next_id(self, key: str) -> int:
        row = self.db.execute("SELECT next_id FROM programs WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def phases(self, key: str, limit: int = -1) -> list[CatalogPhase]:
        """The program's phases, the most recently seen first (at most ``limit``)."""
        rows = self.db.execute(
            "SELECT id, name, centroid, members, mean_samples, joins, cpi_n, log_cpi, cpi_last,"
            " cpi_d2, intervals, first_seen, last_seen FROM phases WHERE program = ?"
            " ORDER BY last_seen DESC, id LIMIT ?", (key, limit)).fetchall()
        return [_phase(r) for r in rows]

    def prediction_memory(self, key: str) -> dict | None:
        """What the phase predictor learnt of the program (core.predict), or None."""
        try:
            row = self.db.execute("SELECT memory FROM predictions WHERE program = ?",
                                  (key,)).fetchone()
            return json.loads(row[0]) if row else None
        except (sqlite3.Error, ValueError):     # an older file read only, or damaged text
            return None

    def programs(self) -> list[dict]:
        rows = self.db.execute(
            "SELECT p.key, p.program, p.path, p.profile, p.next_id, count(f.id), max(f.last_seen)"
            " FROM programs p LEFT JOIN phases f ON f.program = p.key"
            " GROUP BY p.key ORDER BY p.path, p.profile").fetchall()
        return [{"key": k, "program": prog, "path": path, "profile": profile, "next_id": nxt,
                 "phases": n, "last_seen": last} for k, prog, path, profile, nxt, n, last in rows]

    # -- writing -------------------------------------------------------------

    def save(self, program: str, path: str, profile: str, next_id: int,
             phases: list[CatalogPhase], prediction: dict | None = None) -> bool:
        """Add or update the program's phases (and what the phase predictor
        learnt of them) in one transaction; False (and the one line) where
        it could not be written."""
        key = f"{program}|{profile}"
        if self.unwritable:
            self.warn(f"catalogue {self.path} not updated: {self.unwritable} (free space, or "
                      f"run with --no-catalog)")
            return False
        try:
            with _transaction(self.db):
                self.db.execute(
                    "INSERT INTO programs VALUES (?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET"
                    " path = excluded.path, next_id = max(next_id, excluded.next_id)",
                    (key, program, path, profile, next_id))
                for p in phases:
                    self.db.execute(
                        "INSERT INTO phases VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                        " ON CONFLICT(program, id) DO UPDATE SET centroid = excluded.centroid,"
                        " members = excluded.members, mean_samples = excluded.mean_samples,"
                        " joins = excluded.joins, cpi_n = excluded.cpi_n,"
                        " log_cpi = excluded.log_cpi, cpi_last = excluded.cpi_last,"
                        " cpi_d2 = excluded.cpi_d2, intervals = intervals + excluded.intervals,"
                        " first_seen = min(first_seen, excluded.first_seen),"
                        " last_seen = max(last_seen, excluded.last_seen)",
                        _row(key, p))
                self.db.execute(
                    "DELETE FROM phases WHERE program = ? AND id NOT IN (SELECT id FROM phases"
                    " WHERE program = ? ORDER BY last_seen DESC LIMIT ?)",
                    (key, key, MAX_PHASES_PER_PROGRAM))
                if prediction is not None:
                    self.db.execute("INSERT INTO predictions VALUES (?, ?) ON CONFLICT(program)"
                                    " DO UPDATE SET memory = excluded.memory",
                                    (key, json.dumps(prediction)))
        except sqlite3.Error as exc:
            self.warn(f"catalogue {self.path} not updated: {exc} (free space, or run with "
                      f"--no-catalog)")
            return False
        return True

    def export(self) -> dict:
        """Every program and phase, as JSON-ready data."""
        out = []
        for prog in self.programs():
            out.append({**prog, "phases": [_exported(p) for p in self.phases(prog["key"])]})
        return {"format": FORMAT, "version": VERSION, "programs": out}

    def merge(self, data: dict, threshold: float) -> tuple[int, int]:
        """Take another catalogue's programs and phases (from :meth:`export`).
        Its ids and names win: a phase here within ``threshold`` of one of
        its is replaced by it, and a phase here whose id it uses moves to a
        new id.  Returns (programs, phases) taken."""
        if data.get("format") != FORMAT:
            raise UserError(f"not a {FORMAT} export (format {data.get('format')!r})")
        programs = phases = 0
        for prog in data.get("programs", []):
            try:
                program, path = str(prog["program"]), str(prog["path"])
                profile, their_next = str(prog["profile"]), int(prog["next_id"])
                theirs = [_imported(p) for p in prog.get("phases", [])]
            except (KeyError, TypeError, ValueError) as exc:
                raise UserError(f"a program in the export is malformed ({exc!r}): "
                                f"export it again") from None
            key = f"{program}|{profile}"
            kept, next_id = self._merged(key, profile, theirs, max(their_next, self.next_id(key)),
                                         threshold)
            try:
                with _transaction(self.db):
                    self.db.execute("DELETE FROM phases WHERE program = ?", (key,))
                    self.db.execute("DELETE FROM programs WHERE key = ?", (key,))
            except sqlite3.Error as exc:
                raise UserError(f"catalogue {self.path} could not be written: {exc}") from None
            if not self.save(program, path, profile, next_id, theirs + kept):
                raise UserError(f"catalogue {self.path} could not be written")
            programs += 1
            phases += len(theirs)
        return programs, phases

    def _merged(self, key, profile, theirs, next_id, threshold):
        """This catalogue's phases that none of ``theirs`` stands for, with
        the ids they now take, and the next id after all of them."""
        distance = profile_distance_of(profile)
        taken_ids = {p.known.id for p in theirs}
        kept = []
        for mine in self.phases(key):
            if any(distance(mine.known, p.known) <= threshold for p in theirs):
                continue
            if mine.known.id in taken_ids:
                mine = replace(mine, known=replace(mine.known, id=next_id))
                next_id += 1
            kept.append(mine)
        return kept, max([next_id, *(p.known.id + 1 for p in theirs + kept)])


class _transaction:
    def __init__(self, db):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, *rest):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False


def _blob(a: np.ndarray, dtype) -> bytes:
    return np.ascontiguousarray(a, dtype).tobytes()


def _row(key: str, p: CatalogPhase) -> tuple:
    k = p.known
    return (key, k.id, _text(p.name), _blob(k.centroid, np.float64), _blob(k.members, np.int64),
            _blob(k.mean_samples, np.float64), k.joins, k.cpi_n, k.log_cpi, k.cpi_last,
            k.cpi_d2, p.intervals, p.first_seen, p.last_seen)


def _phase(r) -> CatalogPhase:
    (pid, name, centroid, members, mean_samples, joins, cpi_n, log_cpi, cpi_last, cpi_d2,
     intervals, first, last) = r
    known = KnownPhase(int(pid), np.frombuffer(centroid, np.float64).copy(),
                       np.frombuffer(members, np.int64).copy(),
                       np.frombuffer(mean_samples, np.float64).copy(), int(joins), int(cpi_n),
                       float(log_cpi), float(cpi_last), float(cpi_d2))
    return CatalogPhase(known, name, int(intervals), float(first), float(last))


def _exported(p: CatalogPhase) -> dict:
    k = p.known
    return {"id": k.id, "name": p.name, "intervals": p.intervals, "first_seen": p.first_seen,
            "last_seen": p.last_seen, "centroid": k.centroid.tolist(),
            "members": k.members.tolist(), "mean_samples": k.mean_samples.tolist(),
            "joins": k.joins, "cpi_n": k.cpi_n, "log_cpi": k.log_cpi, "cpi_last": k.cpi_last,
            "cpi_d2": k.cpi_d2}


def _imported(d: dict) -> CatalogPhase:
    try:
        known = KnownPhase(int(d["id"]), np.asarray(d["centroid"], np.float64),
                           np.asarray(d["members"], np.int64),
                           np.asarray(d["mean_samples"], np.float64), int(d["joins"]),
                           int(d["cpi_n"]), float(d["log_cpi"]), float(d["cpi_last"]),
                           float(d["cpi_d2"]))
        return CatalogPhase(known, str(d["name"]), int(d["intervals"]), float(d["first_seen"]),
                            float(d["last_seen"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(f"a phase in the export is malformed ({exc!r}): export it again") from None


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1)
