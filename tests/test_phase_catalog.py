"""The phase catalogue: the same behaviour keeps its id and name from run to
run, ids are never given twice, catalogues travel between hosts, and what a
host does to the file (damage, another owner, a full disk, kill -9) costs at
most the update, never the run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from phasewatch.core.classify import KnownPhase
from phasewatch.core.params import DetectorParams, Params, histogram_params_of, interval_params_of
from phasewatch.core.pipeline import Pipeline
from phasewatch.formats import synthetic
from phasewatch.formats.catalog import SQLITE_HEADER, Catalog, CatalogPhase


#: A catalogue damaged past reading: SQLite's header, then no database.
DAMAGED = SQLITE_HEADER + b"not a database, " * 100

PHASEWATCH = [sys.executable, "-m", "phasewatch.cli"]
PARTS = {"fa", "fb", "fc"}


@pytest.fixture(scope="module")
def sequence(abab) -> Path:
    return abab.parent / "sequence"


def run(sequence: Path, order: str, tmp_path: Path, catalog: Path | str | None,
        seconds: float = 0.5) -> dict:
    """One ``phasewatch run`` of the sequence program: its phases by name -> id."""
    out = tmp_path / f"run-{order}-{time.monotonic_ns()}.json"
    where = ["--no-catalog"] if catalog is None else ["--catalog", str(catalog)]
    proc = subprocess.run([*PHASEWATCH, "run", "--detector", "vpf-ip", *where,
                           "--json", str(out), "--", str(sequence), order, str(seconds)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stderr.splitlines() if "catalogue" in line]
    return {"ids": {row["name"]: row["phase"] for row in json.loads(out.read_text())["phases"]},
            "said": said}


@pytest.mark.parametrize("orders", [("ABCAB", "ABCAB", "CABAB"), ("CABAB", "ABCAB", "BCA")])
def test_each_part_keeps_its_id_and_name_in_every_run(sequence, tmp_path, orders):
    catalog = tmp_path / "catalog.sqlite"
    runs = [run(sequence, order, tmp_path, catalog)["ids"] for order in orders]
    for ids in runs:
        assert PARTS <= set(ids), runs
    assert all({name: ids[name] for name in PARTS} == {name: runs[0][name] for name in PARTS}
               for ids in runs), runs


def test_the_same_build_run_from_another_folder_keeps_its_ids_and_names(sequence, tmp_path):
    """The catalogue knows a program by its build id, and its phases by their
    code: a copy elsewhere (a fresh build folder, another host's layout) is
    the same program with the same phases, not new ones."""
    catalog = tmp_path / "catalog.sqlite"
    (tmp_path / "elsewhere").mkdir()
    moved = Path(shutil.copy2(sequence, tmp_path / "elsewhere" / sequence.name))
    first = run(sequence, "ABC", tmp_path, catalog)["ids"]
    then = run(moved, "CAB", tmp_path, catalog)["ids"]
    assert PARTS <= set(first) and {name: then.get(name) for name in PARTS} == \
        {name: first[name] for name in PARTS}, (first, then)
    assert len(Catalog(catalog).phases(Catalog(catalog).programs()[0]["key"])) == len(first)


def test_a_recording_replays_to_the_ids_its_run_took_from_the_catalogue(sequence, tmp_path):
    catalog = tmp_path / "catalog.sqlite"
    run(sequence, "CAB", tmp_path, catalog)
    trace, live = tmp_path / "t.arrow", tmp_path / "live.jsonl"
    proc = subprocess.run([*PHASEWATCH, "run", "-q", "--detector", "vpf-ip", "--catalog",
                           str(catalog), "--record", str(trace), "--output", str(live), "--",
                           str(sequence), "BA", "0.5"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    replayed = tmp_path / "replay.jsonl"
    proc = subprocess.run([*PHASEWATCH, "replay", str(trace), "--output", str(replayed)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert replayed.read_text() == live.read_text()
    assert {json.loads(line)["phase"] for line in live.read_text().splitlines()} >= {1, 2}


def test_without_the_catalogue_ids_follow_the_order_of_appearance(sequence, tmp_path):
    first = run(sequence, "CAB", tmp_path, None)["ids"]
    assert first["fc"] == 0 and first["fa"] == 1 and first["fb"] == 2
    assert not any(tmp_path.rglob("*.sqlite"))


def known(pid: int, width: int, segments: int, hot: int) -> KnownPhase:
    centroid = np.zeros(width)
    centroid[hot] = 1.0
    return KnownPhase(pid, centroid, np.full(segments, 4), np.full(segments, 30.0), 4)


def test_ids_are_never_given_twice():
    meta = synthetic.eight_phase_metadata(100_000_000)
    params = Params(interval=interval_params_of(meta), histograms=histogram_params_of(meta),
                    detector=DetectorParams(detector="vpf-ip"))
    pipeline = Pipeline.for_trace(meta, params)
    state, width = pipeline.classifier, pipeline.layout.width
    segments = len(pipeline.layout.bounds) - 1
    state.seed([known(0, width, segments, 10), known(3, width, segments, 20)], next_id=7)
    assert sorted(p.id for p in state.known()) == [0, 3]
    assert state.next_id == 7 and state.n_phases == 0
    with pytest.raises(ValueError):
        state.seed([], next_id=0)


def test_a_run_reads_no_more_of_its_program_than_the_classifier_holds(tmp_path, monkeypatch):
    """A program may have up to 1024 phases in the catalogue; a run starts
    from the most recently seen that its classifier holds (half of
    max_phases), and reads no more than max_phases of them."""
    from phasewatch.live.phase_catalog import RunCatalog
    meta = synthetic.eight_phase_metadata(100_000_000)
    params = Params(interval=interval_params_of(meta), histograms=histogram_params_of(meta),
                    detector=DetectorParams(detector="vpf-ip", max_phases=8))
    pipeline = Pipeline.for_trace(meta, params)
    width, segments = pipeline.layout.width, len(pipeline.layout.bounds) - 1
    run_catalog = RunCatalog(str(tmp_path / "c.sqlite"), "/bin/true", warn=print)
    phases = [CatalogPhase(known(i, width, segments, i), f"p{i}", 1, 1.0, float(i))
              for i in range(40)]
    assert run_catalog.catalog.save(run_catalog.program, "/bin/true", pipeline.profile, 40, phases)
    read = []
    real = Catalog.phases
    monkeypatch.setattr(Catalog, "phases", lambda self, key, limit=-1: read.append(
        len(found := real(self, key, limit))) or found)
    run_catalog.seed(pipeline)
    assert read == [8]
    assert sorted(p.id for p in pipeline.classifier.known()) == [36, 37, 38, 39]
    assert pipeline.classifier.next_id == 40
    run_catalog.close()


def test_the_catalogue_next_id_never_goes_back(tmp_path):
    catalog = Catalog(tmp_path / "c.sqlite")
    phase = CatalogPhase(known(0, 4, 1, 0), "fa", 3, 1.0, 2.0)
    assert catalog.save("prog", "/bin/prog", "vpf-ip:0,4", 5, [phase])
    assert catalog.save("prog", "/bin/prog", "vpf-ip:0,4", 2, [phase])
    assert catalog.next_id("prog|vpf-ip:0,4") == 5
    [kept] = catalog.phases("prog|vpf-ip:0,4")
    assert (kept.name, kept.intervals, kept.first_seen, kept.last_seen) == ("fa", 6, 1.0, 2.0)
    catalog.close()


def test_a_catalogue_merged_from_another_host_gives_its_ids_and_names(sequence, tmp_path):
    host_a, host_b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    ids_a = run(sequence, "ABC", tmp_path, host_a)["ids"]
    ids_b = run(sequence, "CAB", tmp_path, host_b)["ids"]
    assert {n: ids_a[n] for n in PARTS} != {n: ids_b[n] for n in PARTS}
    exported = tmp_path / "a.json"
    for argv in (["export", str(exported), "--catalog", str(host_a)],
                 ["import", str(exported), "--catalog", str(host_b)]):
        proc = subprocess.run([*PHASEWATCH, "catalog", *argv], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    after = run(sequence, "BCA", tmp_path, host_b)["ids"]
    assert {n: after[n] for n in PARTS} == {n: ids_a[n] for n in PARTS}


def test_merging_a_catalogue_file_takes_its_ids(sequence, tmp_path):
    host_a, host_b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    ids_a = run(sequence, "BAC", tmp_path, host_a)["ids"]
    run(sequence, "CBA", tmp_path, host_b)
    proc = subprocess.run([*PHASEWATCH, "catalog", "merge", str(host_a), "--catalog", str(host_b)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "3 phases of 1 programs" in proc.stdout, proc.stderr
    listed = subprocess.run([*PHASEWATCH, "catalog", "show", str(sequence), "--catalog",
                             str(host_b)], capture_output=True, text=True)
    for name in PARTS:
        assert f"│ {ids_a[name]}     │ {name}" in listed.stdout, listed.stdout


def merge(source: Path, into: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*PHASEWATCH, "catalog", "merge", str(source), "--catalog", str(into)],
                          capture_output=True, text=True)


def test_merging_reads_what_a_writer_still_holds_in_its_log_and_writes_nothing_beside(
        sequence, tmp_path):
    """The source is only read: with its write-ahead log where a daemon is
    still writing it (a phase renamed there and not yet in the file), and
    with no log or shared memory left beside it where there was none."""
    host_a, host_b = tmp_path / "a" / "a.sqlite", tmp_path / "b.sqlite"
    host_a.parent.mkdir()
    run(sequence, "BAC", tmp_path, host_a)
    run(sequence, "CBA", tmp_path, host_b)
    writer = sqlite3.connect(host_a, isolation_level=None)
    try:
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("UPDATE phases SET name = 'renamed' WHERE id = (SELECT min(id) FROM phases)")
        assert Path(f"{host_a}-wal").stat().st_size > 0
        # the shared memory beside a log is SQLite's readers' marks: its bytes may move
        held = lambda: {p.name: p.name.endswith("-shm") or p.read_bytes()  # noqa: E731
                        for p in host_a.parent.iterdir()}
        before = held()
        proc = merge(host_a, host_b)
        assert proc.returncode == 0, proc.stderr
        assert held() == before
    finally:
        writer.close()
    merged = Catalog(host_b)
    [program] = merged.programs()
    assert "renamed" in [p.name for p in merged.phases(program["key"])]
    merged.close()
    proc = merge(host_a, tmp_path / "c.sqlite")     # the writer gone: the file as it is
    assert proc.returncode == 0 and sorted(p.name for p in host_a.parent.iterdir()) == ["a.sqlite"]


@pytest.mark.parametrize("source", ["damaged", "fifo", "missing"])
def test_a_merge_source_that_is_no_catalogue_is_refused_and_left_as_it_is(tmp_path, source):
    """One line about the file to merge (not the --catalog advice the
    catalogue itself gets); a damaged source is not moved aside."""
    given = tmp_path / "given" / "other.sqlite"
    given.parent.mkdir()
    if source == "damaged":
        given.write_bytes(DAMAGED)
    elif source == "fifo":
        os.mkfifo(given)
    before = sorted(given.parent.iterdir())
    proc = merge(given, tmp_path / "c.sqlite")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"phasewatch catalog: {given}: ") and line.endswith(
        "give another phase catalogue file to merge"), line
    assert sorted(given.parent.iterdir()) == before
    if source == "damaged":
        assert given.read_bytes() == DAMAGED


def test_a_damaged_catalogue_is_moved_aside_and_the_run_goes_on(sequence, tmp_path):
    catalog = tmp_path / "catalog.sqlite"
    catalog.write_bytes(DAMAGED)
    got = run(sequence, "AB", tmp_path, catalog)
    assert len(got["said"]) == 1 and "moved aside" in got["said"][0]
    [aside] = tmp_path.glob("catalog.sqlite.corrupt-*")
    assert aside.read_bytes() == DAMAGED
    assert run(sequence, "BA", tmp_path, catalog)["ids"] == got["ids"]


def test_a_catalogue_of_another_user_is_refused(sequence, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    catalog = tmp_path / "catalog.sqlite"
    run(sequence, "AB", tmp_path, catalog)
    os.chown(catalog, 65534, 65534)
    before = catalog.read_bytes()
    got = run(sequence, "BA", tmp_path, catalog)
    assert len(got["said"]) == 1 and "belongs to another user" in got["said"][0]
    assert got["ids"]["fb"] == 0        # not seeded: ids in order of appearance
    assert catalog.read_bytes() == before


def test_a_full_disk_stops_the_update_not_the_run(sequence, tmp_path, tiny_filesystem):
    catalog = tiny_filesystem / "catalog.sqlite"
    first = run(sequence, "AB", tmp_path, catalog)["ids"]
    try:
        with open(tiny_filesystem / "filler", "wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    except OSError:
        pass                            # the disk is full
    got = run(sequence, "CAB", tmp_path, catalog)
    assert {n: got["ids"][n] for n in ("fa", "fb")} == {n: first[n] for n in ("fa", "fb")}
    assert len(got["said"]) == 1 and "not updated" in got["said"][0]
    kept = Catalog(catalog, create=False)
    assert sorted(p.name for p in kept.phases(kept.programs()[0]["key"])) == ["fa", "fb"]
    kept.close()


WRITER = """
import sys, numpy as np
from phasewatch.core.classify import KnownPhase
from phasewatch.formats.catalog import Catalog, CatalogPhase
catalog = Catalog(sys.argv[1])
k = 0
while True:
    phases = [CatalogPhase(KnownPhase(i, np.full(2048, float(k)), np.full(5, 4), np.full(5, 30.0), 4),
                           f"f{i}", 1, 1.0, float(k)) for i in range(k % 50 + 1)]
    catalog.save("prog", "/bin/prog", "vpf-ip:0,2048", k + 1, phases)
    k += 1
    print(k, flush=True)
"""


def test_kill_9_mid_write_loses_at_most_the_last_update(tmp_path):
    path = tmp_path / "catalog.sqlite"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE,
                              text=True)
    for _ in range(40):                 # forty updates done, then killed mid-way
        writer.stdout.readline()
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    catalog = Catalog(path)
    next_id = catalog.next_id("prog|vpf-ip:0,2048")
    phases = catalog.phases("prog|vpf-ip:0,2048")
    assert next_id >= 40
    # every phase of the last whole update carries that update's centroid
    last = next_id - 1
    assert all(p.known.centroid[0] == last for p in phases if p.last_seen == last)
    assert len([p for p in phases if p.last_seen == last]) == last % 50 + 1
    catalog.close()


def test_a_non_export_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else"}')
    proc = subprocess.run([*PHASEWATCH, "catalog", "import", str(bad), "--catalog",
                           str(tmp_path / "c.sqlite")], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "not a phasewatch-catalog export" in proc.stderr


def test_pprof_carries_each_phase_name_beside_its_id(sequence, tmp_path):
    if shutil.which("go") is None:
        pytest.skip("go is not installed (apt-get install golang-go)")
    profile = tmp_path / "p.pb.gz"
    proc = subprocess.run([*PHASEWATCH, "run", "-q", "--catalog", str(tmp_path / "c.sqlite"),
                           "--pprof", str(profile), "--", str(sequence), "ABC", "0.5"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    tags = subprocess.run(["go", "tool", "pprof", "-tags", str(profile)], capture_output=True,
                          text=True, check=True).stdout
    names = tags.split("phase_name:", 1)[1].split("\n\n", 1)[0]
    assert {line.rsplit(": ", 1)[1] for line in names.splitlines() if ": " in line} >= PARTS
    focused = subprocess.run(["go", "tool", "pprof", "-top", "-tagfocus", "phase_name=^fb$",
                              str(profile)], capture_output=True, text=True, check=True).stdout
    shares = top_shares(focused)
    # The interval where B hands over to C may be B's, a few of fc's samples with it.
    assert max(shares, key=shares.get) == "fb" and shares.get("fc", 0.0) < 10.0, focused


def top_shares(top: str) -> dict[str, float]:
    """Each function's flat share (%) in the rows of ``go tool pprof -top``."""
    rows = [line.split() for line in top.splitlines()]
    return {row[5]: float(row[1].rstrip("%")) for row in rows
            if len(row) == 6 and row[1].endswith("%") and row[2].endswith("%")}


def test_distances_to_many_phases_at_once_are_those_one_by_one():
    from phasewatch.formats.catalog import profile_distance_of, profile_distances_of
    profile = "vpf-ip:0,32,96,2144,2208,2228"
    rng = np.random.default_rng(5)

    def phase(i):
        centroid = rng.random(2228) * (rng.random(2228) < 0.05)
        members = rng.integers(0, 3, 5)
        return KnownPhase(i, centroid, members, np.full(5, 30.0), 4)
    phases = [phase(i) for i in range(40)]
    one, many = profile_distance_of(profile), profile_distances_of(profile)
    centroids = np.stack([p.centroid for p in phases])
    members = np.stack([p.members for p in phases])
    for a in phases[:10]:
        expected = [one(a, b) for b in phases]
        assert np.allclose(many(a, centroids, members), expected), a.id
