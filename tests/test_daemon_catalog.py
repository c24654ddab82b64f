"""phasewatchd's phase catalogue against what a host does to it: a damaged
file, another user's file, a full disk and kill -9 each cost at most the
catalogue's update, never the daemon, and each is said in one line."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest
from daemon_identity import Watched, config, own_copy, parts

from phasewatch.formats.catalog import SQLITE_HEADER, Catalog


#: A catalogue damaged past reading: SQLite's header, then no database.
DAMAGED = SQLITE_HEADER + b"not a database, " * 100


@pytest.fixture(scope="module")
def sequence(abab) -> Path:
    return abab.parent / "sequence"


def said(err: str, words: str) -> list[str]:
    return [line for line in err.splitlines() if words in line]


def catalogue_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "catalogue" in line]


def phases_in(path: Path) -> dict[str, int]:
    kept = Catalog(path, create=False)
    try:
        return {p.name: p.known.id for prog in kept.programs() for p in kept.phases(prog["key"])}
    finally:
        kept.close()


@pytest.mark.slow
def test_a_damaged_catalogue_is_moved_aside_and_the_daemon_starts_afresh(sequence, tmp_path):
    program = own_copy(sequence, tmp_path)
    catalog = tmp_path / "catalog.sqlite"
    catalog.write_bytes(DAMAGED)
    with Watched(config(tmp_path, program, catalog)) as w:
        ran = w.run(program, "AB")
        got = parts(ran)
        code, err = w.stop()
    assert code == 0 and got is not None, (ran, err)
    assert len(catalogue_lines(err)) == 1 and "moved aside" in catalogue_lines(err)[0], err
    [aside] = tmp_path.glob("catalog.sqlite.corrupt-*")
    assert aside.read_bytes() == DAMAGED
    assert {n: phases_in(catalog)[n] for n in got} == got


@pytest.mark.slow
def test_a_catalogue_of_another_user_is_refused_and_left_alone(sequence, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    program = own_copy(sequence, tmp_path)
    catalog = tmp_path / "catalog.sqlite"
    conf = config(tmp_path, program, catalog)
    with Watched(conf) as w:
        first = parts(w.run(program, "BA"))
    os.chown(catalog, 65534, 65534)
    before = catalog.read_bytes()
    with Watched(conf) as w:
        got = parts(w.run(program, "AB"))
        code, err = w.stop()
    assert code == 0 and first is not None and got is not None, err
    lines = catalogue_lines(err)
    assert len(lines) == 1 and "belongs to another user" in lines[0], err
    assert got == {"fa": 0, "fb": 1} != first       # not seeded: ids in order of appearance
    assert catalog.read_bytes() == before


@pytest.mark.slow
def test_a_full_disk_stops_catalogue_writes_with_a_metric_not_the_daemon(
        sequence, tmp_path, small_filesystem):
    program = own_copy(sequence, tmp_path)
    catalog = small_filesystem / "catalog.sqlite"
    conf = config(tmp_path, program, catalog)
    with Watched(conf) as w:
        first = parts(w.run(program, "AB"))
    try:
        with open(small_filesystem / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass                            # the disk is full
    with Watched(conf) as w:
        ids = w.run(program, "CAB")     # fc is new: its id cannot be written
        errors = w.daemon.metric("phasewatch_catalog_write_errors_total")
        w.run(program, "C")
        assert w.daemon.proc.poll() is None
        more = w.daemon.metric("phasewatch_catalog_write_errors_total")
        code, err = w.stop()
    assert code == 0, err
    assert parts(ids) == first and "fc" in ids, (ids, first)
    assert errors >= 1 and more >= errors, (errors, more)
    lines = said(err, "not updated")
    assert len(lines) == 1 and str(catalog) in lines[0], err
    assert "fc" not in phases_in(catalog)


@pytest.mark.slow
def test_kill_9_loses_no_id_the_daemon_gave(sequence, tmp_path):
    program = own_copy(sequence, tmp_path)
    catalog = tmp_path / "catalog.sqlite"
    conf = config(tmp_path, program, catalog)
    w = Watched(conf).__enter__()
    try:
        seen = w.run(program, "ABC")
        proc = __import__("subprocess").Popen([str(program), "CBACBA", "0.5"])
        time.sleep(1.0)                 # mid-run: the daemon writes as phases change
        os.kill(w.daemon.proc.pid, signal.SIGKILL)
        w.daemon.proc.wait()
        proc.wait(timeout=60)
    finally:
        w.stop()
    db = sqlite3.connect(catalog)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    kept = phases_in(catalog)
    # Every id and name that went out in an event is in the catalogue.
    assert all(kept.get(name) == next(iter(ids)) for name, ids in seen.items()), (seen, kept)
    with Watched(conf) as w:
        again = w.run(program, "CBA")
    assert {n: again[n] for n in ("fa", "fb", "fc")} == {n: seen[n] for n in ("fa", "fb", "fc")}
