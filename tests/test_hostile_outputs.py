"""Every file a command reads or writes is on one list: a recording's side
tables (``T.mappings.jsonl``, ``T.energy.jsonl``) go with it as an input and
as an output, so no output of a command may land on one, and none may land
on another output.  Each case is the real command on real files: refused
before the command runs, in one line with exit status 2, nothing changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "phasewatch"
#: A short program that takes CPU time, so that it has samples.
BUSY = [sys.executable, "-c", "import time\nwhile time.process_time() < 0.3: pass"]
SIDE_TABLES = (".mappings.jsonl", ".energy.jsonl")


def phasewatch(*argv, timeout: float = 120, user: str | None = None,
               cwd=None) -> subprocess.CompletedProcess:
    prefix = (["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups"]
              if user else [])
    return subprocess.run([*prefix, str(BIN), *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


def refused(proc: subprocess.CompletedProcess, match: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert match in proc.stderr, proc.stderr


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    """A real recording with its side table of mappings."""
    trace = tmp_path_factory.mktemp("recorded") / "t.arrow"
    done = phasewatch("run", "--no-pin", "-q", "--interval-ms", "50", "--record", trace, "--",
                      *BUSY)
    assert done.returncode == 0, done.stderr
    assert Path(f"{trace}.mappings.jsonl").stat().st_size > 0
    return trace


@pytest.fixture
def own_recording(tmp_path, recording) -> Path:
    for path in recording.parent.glob("t.arrow*"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path / "t.arrow"


# --- an output on an input's side table ------------------------------------------------

INPUT_SIDE_CASES = {
    "replay --output": lambda t, out: ("replay", t, "--output", out),
    "replay --pprof": lambda t, out: ("replay", t, "--pprof", out),
    "convert": lambda t, out: ("convert", t, out),
}


@pytest.mark.parametrize("suffix", SIDE_TABLES)
@pytest.mark.parametrize("case", INPUT_SIDE_CASES)
def test_an_output_on_a_side_table_of_the_input_is_refused(own_recording, case, suffix):
    before = snapshot(own_recording.parent)
    proc = phasewatch(*INPUT_SIDE_CASES[case](own_recording, f"{own_recording}{suffix}"))
    refused(proc, "is the side table of the input")
    assert snapshot(own_recording.parent) == before


def test_the_recording_replays_as_before_after_the_refusals(own_recording):
    first = phasewatch("replay", own_recording, "--json")
    for suffix in SIDE_TABLES:
        phasewatch("replay", own_recording, "--output", f"{own_recording}{suffix}")
        phasewatch("convert", own_recording, f"{own_recording}{suffix}")
    again = phasewatch("replay", own_recording, "--json")
    assert first.returncode == again.returncode == 0, again.stderr
    assert first.stdout == again.stdout


def test_an_output_on_the_side_table_of_a_linked_input_is_refused(own_recording, tmp_path):
    link = tmp_path / "link.arrow"
    link.symlink_to(own_recording)
    before = snapshot(tmp_path)
    # replay reads the table beside the file the link names
    refused(phasewatch("replay", link, "--output", f"{own_recording}.mappings.jsonl"),
            "is the side table of the input")
    assert snapshot(tmp_path) == before


def test_replaying_many_traces_onto_a_side_table_of_one_of_them_is_refused(own_recording):
    # t.arrow.energy.arrow's results go to t.arrow.energy.jsonl: t.arrow's energy table.
    folder = own_recording.parent
    shutil.copy(own_recording, folder / "t.arrow.energy.arrow")
    before = snapshot(folder)
    refused(phasewatch("replay", own_recording, folder / "t.arrow.energy.arrow",
                       "--output", folder), "is the side table of the input")
    assert snapshot(folder) == before


# --- an output on the side table of the recording the same command writes ---------

RUN_OUTPUTS = ("--pprof", "--json", "--output")


@pytest.mark.parametrize("suffix", SIDE_TABLES)
@pytest.mark.parametrize("option", RUN_OUTPUTS)
def test_run_refuses_an_output_on_its_own_recordings_side_table(tmp_path, option, suffix):
    trace = tmp_path / "r.arrow"
    marker = tmp_path / "ran"
    proc = phasewatch("run", "--no-pin", "--record", trace, option, f"{trace}{suffix}", "--",
                      "touch", marker)
    refused(proc, "is where the side table of")
    assert not marker.exists(), "the command ran"
    assert list(tmp_path.iterdir()) == []


def test_the_order_of_the_options_does_not_matter(tmp_path):
    trace = tmp_path / "r.arrow"
    proc = phasewatch("run", "--no-pin", "--pprof", f"{trace}.mappings.jsonl", "--record", trace,
                      "--", "true")
    refused(proc, "is where the side table of")
    assert list(tmp_path.iterdir()) == []


# --- where an output cannot go, said before the command runs ---------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to become another user")


@pytest.fixture
def shared():
    """A folder ``nobody`` can reach and write (pytest's own are root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="phasewatch-shared-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@needs_root
@pytest.mark.parametrize("option", ["--pprof", "--output", "--json"])
def test_run_refuses_an_existing_output_in_an_unwritable_folder_before_it_runs(shared, option):
    locked = shared / "locked"
    locked.mkdir()
    target = locked / "out"
    target.write_text("theirs\n")
    target.chmod(0o666)           # the file may be written, the folder may not
    locked.chmod(0o755)
    marker = shared / "ran"
    proc = phasewatch("run", "--no-pin", "--no-catalog", option, target, "--", "touch", marker,
                      user="nobody")
    refused(proc, "permission denied")
    assert not marker.exists(), "the command ran before the output was refused"
    assert target.read_text() == "theirs\n"


@needs_root
def test_a_users_file_rewritten_by_root_stays_the_users(tmp_path):
    profile = tmp_path / "p.pb.gz"
    profile.write_bytes(b"old")
    os.chown(profile, 65534, 65534)
    done = phasewatch("run", "--no-pin", "-q", "--pprof", profile, "--", *BUSY)
    assert done.returncode == 0, done.stderr
    st = profile.stat()
    assert (st.st_uid, st.st_gid) == (65534, 65534)
    assert profile.read_bytes() != b"old"


# --- a folder of traces ------------------------------------------------------------------

@needs_root
def test_replay_of_a_folder_with_an_unreadable_trace_names_it(shared, own_recording):
    folder = shared / "traces"
    folder.mkdir()
    for name in ("a.arrow", "b.arrow"):
        shutil.copy(own_recording, folder / name)
    folder.chmod(0o755)
    (folder / "b.arrow").chmod(0o600)     # root's: nobody may not read it
    proc = phasewatch("replay", folder, "--detector", "vpf-ip", user="nobody", cwd=shared)
    refused(proc, f"{folder}/b.arrow: permission denied")


def test_replay_of_a_folder_of_one_trace_writes_its_results_into_a_folder(own_recording,
                                                                          tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    shutil.copy(own_recording, folder / "a.arrow")
    shutil.copy(f"{own_recording}.mappings.jsonl", folder / "a.arrow.mappings.jsonl")
    alone = tmp_path / "alone.jsonl"
    assert phasewatch("replay", folder / "a.arrow", "--output", alone).returncode == 0
    out = tmp_path / "results"
    done = phasewatch("replay", folder, "--output", out)
    assert done.returncode == 0, done.stderr
    assert out.is_dir()
    assert [p.name for p in out.iterdir()] == ["a.jsonl"]
    assert (out / "a.jsonl").read_bytes() == alone.read_bytes()


def test_run_refuses_a_recording_where_its_report_goes(tmp_path):
    folder = tmp_path / "report"
    marker = tmp_path / "ran"
    proc = phasewatch("run", "--no-pin", "--record", folder / "index.html", "--report", folder,
                      "--", "touch", marker)
    refused(proc, "named as two outputs")
    assert not marker.exists(), "the command ran"
    assert not folder.exists(), "the report's folder was made for a refused run"


# --- a catalogue that is some other file ----------------------------------------------

def another_database(path: Path) -> None:
    import sqlite3
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users(name TEXT)")
    db.execute("INSERT INTO users VALUES ('x')")
    db.commit()
    db.close()


NOT_CATALOGUES = {
    "text": lambda path: path.write_text("a user's notes\n"),
    "another program's SQLite database": another_database,
}
CATALOGUE_USES = {
    "run --catalog": lambda f: ("run", "--no-pin", "-q", "--catalog", f, "--", *BUSY),
    "catalog list": lambda f: ("catalog", "list", "--catalog", f),
    "catalog merge": lambda f: ("catalog", "merge", f, "--catalog", f.parent / "c" / "c.sqlite"),
}


@pytest.mark.parametrize("use", CATALOGUE_USES)
@pytest.mark.parametrize("kind", NOT_CATALOGUES)
def test_a_catalogue_path_on_another_file_is_refused_and_the_file_left_as_it_is(tmp_path, kind,
                                                                                 use):
    """The catalogue is read and written in place: a text file was moved
    aside and a catalogue put under its name, and another program's SQLite
    database got the catalogue's tables (by `catalog list` too)."""
    other = tmp_path / "mine.db"
    NOT_CATALOGUES[kind](other)
    (tmp_path / "c").mkdir()
    before = snapshot(tmp_path)
    refused(phasewatch(*CATALOGUE_USES[use](other), cwd=tmp_path), "not a phase catalogue")
    assert snapshot(tmp_path) == before


# --- an output on the catalogue's journals ---------------------------------------------

@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("command", ["catalog export", "run --output"])
def test_an_output_on_the_catalogues_journal_is_refused(tmp_path, command, suffix):
    """SQLite keeps journals beside the catalogue, reads them back and deletes
    them when it closes: `catalog export C-wal` exited 0 and its file was
    gone."""
    catalog = tmp_path / "c.sqlite"
    made = phasewatch("run", "--no-pin", "-q", "--catalog", catalog, "--", *BUSY)
    assert made.returncode == 0, made.stderr
    before = snapshot(tmp_path)
    out = f"{catalog}{suffix}"
    argv = (("catalog", "export", out, "--catalog", catalog) if command == "catalog export"
            else ("run", "--no-pin", "-q", "--catalog", catalog, "--output", out, "--", *BUSY))
    refused(phasewatch(*argv), "side table of")
    assert snapshot(tmp_path) == before


# --- a report's folder where an input, a side table or another output is ---------------

@pytest.mark.parametrize("suffix", SIDE_TABLES)
def test_a_report_folder_on_a_side_table_of_the_input_is_refused_and_not_made(own_recording,
                                                                              suffix):
    """The folder was checked only for the files in it: `report T --out
    T.energy.jsonl` made a folder where the recording's side table goes."""
    out = Path(f"{own_recording}{suffix}")
    before = snapshot(own_recording.parent)
    refused(phasewatch("report", own_recording, "--out", out), "is the side table of the input")
    assert snapshot(own_recording.parent) == before and not out.is_dir()


@pytest.mark.parametrize("clash", ["--record's side table", "--output"])
def test_run_refuses_a_report_folder_on_another_output_and_makes_none(tmp_path, clash):
    """The folder was made before the outputs were checked, and left behind
    by the refusal."""
    if clash == "--output":
        argv, folder = ("--output", tmp_path / "o.jsonl"), tmp_path / "o.jsonl"
    else:
        argv, folder = ("--record", tmp_path / "r.arrow"), tmp_path / "r.arrow.mappings.jsonl"
    proc = phasewatch("run", "--no-pin", "-q", "--no-catalog", *argv, "--report", folder, "--",
                      *BUSY)
    refused(proc, str(folder.name))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["index.html", "phases.png"])
def test_report_refuses_its_own_input_in_its_folder_before_reading_it(own_recording, name):
    """The outputs were checked only when written: the trace was read first,
    and its warnings (a side table missing) came before the refusal."""
    folder = own_recording.parent / "rep"
    folder.mkdir()
    trace = folder / name
    shutil.copy(own_recording, trace)
    before = snapshot(folder)
    refused(phasewatch("report", trace, "--out", folder), "is the input")
    assert snapshot(folder) == before


# --- export's prefix on a FIFO or a folder -------------------------------------------------

@pytest.mark.parametrize("kind", ["FIFO", "directory"])
def test_an_export_prefix_that_is_a_fifo_or_folder_is_refused_and_nothing_made(tmp_path, kind):
    """`-o /dev/null` made /dev/null.simpoints and /dev/null.weights (as root):
    a prefix on something that is not a file was meant as the output itself."""
    labels = tmp_path / "l.json"
    labels.write_text("[0, 0, 1, 1, 0]")
    target = tmp_path / "out"
    if kind == "FIFO":
        os.mkfifo(target)
    else:
        target.mkdir()
    before = sorted(tmp_path.iterdir())
    refused(phasewatch("export", "--simpoints", labels, "-o", target),
            f"{target}: a {kind}: -o takes a prefix for two files")
    assert sorted(tmp_path.iterdir()) == before

