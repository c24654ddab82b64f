"""Hostile and careless input, one named case each: every one ends with one
line on stderr and exit status 2 (or 0 where the input is in fact fine, 127
for a command that does not exist), and no input file changes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from cliutil import call
from phasewatch.formats import metadata as md, outputs
from phasewatch.formats.schema import Sampling
from phasewatch.formats.trace import META_KEY, TraceReader

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "synthetic-skylake.csv"
BIN = Path(sys.executable).parent / "phasewatch"


def refused(*argv, inputs=(), status=2, match=None) -> str:
    """Run ``phasewatch ARGV``: it must end with ``status`` and one line
    (matching ``match``), and leave ``inputs`` as they were."""
    before = {Path(p): Path(p).read_bytes() for p in inputs}
    got, _, err = call(*argv)
    assert got == status, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    if match:
        assert match in err, err
    for p, data in before.items():
        assert p.read_bytes() == data, f"{p} changed"
    return err


@pytest.fixture
def small_csv(tmp_path) -> Path:
    path = tmp_path / "small.csv"
    path.write_bytes(b"".join(EXAMPLE.read_bytes().splitlines(keepends=True)[:400]))
    return path


@pytest.fixture
def small_trace(tmp_path, small_csv) -> Path:
    path = tmp_path / "small.arrow"
    assert call("convert", small_csv, path)[0] == 0
    return path


def with_cell(csv: Path, line: int, column: str, value: str) -> Path:
    lines = csv.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[line - 1].split(",")
    cells[header.index(column)] = value
    lines[line - 1] = ",".join(cells)
    out = csv.with_name(f"{column}-{line}.csv")
    out.write_text("\n".join(lines) + "\n")
    return out


# --- memory safety --------------------------------------------------------------

@pytest.mark.parametrize("cpu", ["-1", "2147483647", "100000000"])
def test_csv_cpu_out_of_range_is_refused_with_its_line(small_csv, cpu):
    bad = with_cell(small_csv, 20, "cpu", cpu)
    refused("replay", bad, inputs=[bad], match=f"{bad}:20: column 'cpu': {cpu} is not a CPU id")


def test_csv_negative_tid_is_refused_with_its_line(small_csv):
    bad = with_cell(small_csv, 7, "tid", "-5")
    refused("replay", bad, inputs=[bad], match=":7: column 'tid': -5 is not a thread id")


def test_arrow_cpu_of_2_to_the_40_is_refused_not_truncated(tmp_path):
    path = tmp_path / "wide.arrow"
    schema = pa.schema([("t_ns", pa.int64()), ("cpu", pa.int64())],
                       metadata={META_KEY: json.dumps(md.new(base_freq_mhz=3000.0)).encode()})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as w:
        w.write_batch(pa.record_batch([pa.array([0, 1]), pa.array([0, 2**40])], schema=schema))
    refused("replay", path, inputs=[path], match="column 'cpu' is int64")


# --- never destroy an input -----------------------------------------------------

def test_replay_output_onto_its_own_trace_is_refused(small_trace):
    refused("replay", small_trace, "--output", small_trace, inputs=[small_trace],
            match="is the input")


@pytest.mark.parametrize("link", [os.symlink, os.link])
def test_convert_onto_a_link_to_its_input_is_refused(small_trace, tmp_path, link):
    target = tmp_path / "link.arrow"
    link(small_trace, target)
    refused("convert", small_trace, target, inputs=[small_trace], match="is the input")


def test_record_and_output_naming_one_file_are_refused(tmp_path):
    out = tmp_path / "same"
    refused("run", "--record", out, "--output", out, "--", "true", match="two outputs")
    assert not out.exists()


def test_run_record_onto_the_program_it_runs_is_refused(tmp_path):
    prog = tmp_path / "prog"
    shutil.copy("/bin/true", prog)
    refused("run", "--record", prog, "--", prog, inputs=[prog], match="is the input")


def test_run_of_a_missing_command_leaves_the_old_trace(small_trace):
    refused("run", "--record", small_trace, "--", "/no/such/program", inputs=[small_trace],
            status=127, match="no such file")


def test_replay_output_replaces_an_old_file_only_when_complete(small_trace, tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_text("old\n")
    os.chmod(out, 0o640)
    assert call("replay", small_trace, "--output", out)[0] == 0
    assert out.read_text().count("\n") > 1 and json.loads(out.read_text().splitlines()[0])
    assert (out.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []


# --- disk full, broken pipe, FIFO ---------------------------------------------

def test_replay_output_to_a_full_disk_still_prints_the_summary(small_trace):
    status, out, err = call("replay", small_trace, "--output", "/dev/full")
    assert status == 2 and "quality:" in out
    assert err.strip() == "phasewatch replay: cannot write /dev/full: No space left on device"


def test_convert_to_a_full_disk_is_one_line(small_csv):
    refused("convert", small_csv, "/dev/full", inputs=[small_csv], match="No space left")


def test_standard_output_on_a_full_disk_is_one_line(small_trace):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([str(BIN), "replay", str(small_trace), "--json"], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr == "phasewatch replay: cannot write standard output: No space left on device\n"


def test_a_closed_pipe_on_standard_output_exits_quietly(small_trace):
    proc = subprocess.Popen([str(BIN), "replay", str(small_trace)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.read(1)
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and err == b""


def test_run_recording_to_a_full_disk_still_prints_the_summary():
    proc = subprocess.run([str(BIN), "run", "--no-pin", "--interval-ms", "100", "--record",
                           "/dev/full", "--", "sleep", "0.5"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "quality:" in proc.stderr and "trace: /dev/full" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == \
        "phasewatch run: cannot write /dev/full: No space left on device"


def test_convert_onto_a_full_filesystem_keeps_the_old_file(tiny_filesystem):
    old = tiny_filesystem / "t.arrow"
    old.write_bytes(b"an older trace")
    err = refused("convert", EXAMPLE, old, inputs=[EXAMPLE], match="No space left on device")
    assert "removed" in err
    assert old.read_bytes() == b"an older trace"
    assert [p.name for p in tiny_filesystem.iterdir()] == ["t.arrow"]


def test_a_fifo_without_a_reader_is_refused_after_the_timeout(small_trace, tmp_path, monkeypatch):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    monkeypatch.setattr(outputs, "FIFO_TIMEOUT_S", 0.3)
    refused("replay", small_trace, "--output", fifo, match="no process read within 0.3 s")


def test_a_fifo_with_a_reader_gets_the_results(small_trace, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert call("replay", small_trace, "--output", fifo)[0] == 0
    reader.join(30)
    assert json.loads(got[0].splitlines()[0])["index"] == 0


# --- trace metadata -------------------------------------------------------------

WRONG_METADATA = [
    ("base_freq_mhz", "3000"), ("base_freq_mhz", [3000]), ("base_freq_mhz", 0),
    ("base_freq_mhz", float("nan")), ("base_freq_mhz", -1.0), ("base_freq_mhz", float("inf")),
    ("interval", "x"), ("interval", []), ("interval", None), ("interval", {"ns": -1}),
    ("interval", {"kind": "bytes"}), ("interval", {"instructions": "100"}),
    ("interval", {"instructions": 0}), ("histograms", "x"), ("histograms", {"voltage_bins": "32"}),
    ("histograms", {"voltage_mv": [1080, 962]}), ("histograms", {"ip_bins": 33}),
    ("histograms", {"text_range": "a"}), ("histograms", {"voltage_mv": None}),
    ("signals", ["t_ns"]), ("signals", {"c3": "csv"}), ("cpu", "intel"), ("cpu", []),
    ("counter_scope", "process"), ("text_range", [5, 1]), ("format_version", "1"),
    ("mappings", [{"start": "0"}]),
]


def trace_with(tmp_path, meta) -> Path:
    path = tmp_path / "m.arrow"
    schema = pa.schema([("t_ns", pa.int64()), ("cpu", pa.int32())],
                       metadata={META_KEY: json.dumps(meta).encode()})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as w:
        w.write_batch(pa.record_batch([pa.array([0, 10**6], pa.int64()),
                                       pa.array([0, 0], pa.int32())], schema=schema))
    return path


@pytest.mark.parametrize("field,value", WRONG_METADATA)
def test_wrong_metadata_is_refused_naming_the_field(tmp_path, field, value):
    meta = md.new(base_freq_mhz=3000.0, signals={"t_ns": "csv", "cpu": "csv"})
    meta[field] = value
    path = trace_with(tmp_path, meta)
    refused("replay", path, "--detector", "vpf-ip", inputs=[path], match=f"trace field '{field}")


def test_newer_metadata_with_unknown_keys_and_mappings_is_read(tmp_path):
    meta = md.new(base_freq_mhz=3000.0, signals={"t_ns": "csv", "cpu": "csv"},
                  mappings=[{"start": 4096, "end": 8192, "offset": 0, "path": "/bin/x", "t_ns": 5}],
                  from_the_future={"anything": [1, 2]})
    meta["histograms"]["new_knob"] = 3
    reader = TraceReader(str(trace_with(tmp_path, meta)))
    assert reader.metadata["mappings"][0]["path"] == "/bin/x"
    reader.close()


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    """A real recording of a real command, with its ``sampling`` metadata."""
    path = tmp_path_factory.mktemp("recording") / "r.arrow"
    got, _, err = call("run", "-q", "--record", path, "--", sys.executable, "-c",
                       "sum(i * i for i in range(2_000_000))")
    assert got == 0, err
    return path


def with_sampling(recording: Path, folder: Path, key: str, value) -> Path:
    """A copy of ``recording`` (and its side table) whose ``sampling.KEY`` is ``value``."""
    table = pa.ipc.open_file(str(recording)).read_all()
    meta = json.loads(table.schema.metadata[META_KEY])
    assert key in meta["sampling"], meta["sampling"]
    meta["sampling"][key] = value
    out = folder / f"{key}.arrow"
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta)})
    with pa.OSFile(str(out), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    shutil.copy(f"{recording}.mappings.jsonl", f"{out}.mappings.jsonl")
    return out


@pytest.mark.parametrize("key,value,allowed", [
    ("sample_rate_hz", 1e-300, "[0.001, 1e+06]"), ("sample_rate_hz", 1e300, "[0.001, 1e+06]"),
    ("sample_rate_hz", 0, "[0.001, 1e+06]"), ("sample_rate_hz", "1000", "[0.001, 1e+06]"),
    ("realtime_offset_ns", "soon", f"[0, {2**62}]"),
    ("realtime_offset_ns", -1, f"[0, {2**62}]"),
    ("realtime_offset_ns", 2**63 - 1, f"[0, {2**62}]"),
    ("sample_period", 0, f"[1, {2**63 - 1}]")])
# Intervals of 20 samples: the recording, however short a loaded host makes
# it, has complete intervals to compare, so the metadata is what is refused.
@pytest.mark.parametrize("command", [["diff", "{good}", "{bad}", "--interval-samples", "20"],
                                     ["replay", "{bad}", "--pprof", "{out}"]])
def test_bad_sampling_metadata_is_one_line_naming_field_file_and_range(
        recording, tmp_path, key, value, allowed, command):
    bad = with_sampling(recording, tmp_path, key, value)
    out = tmp_path / "p.pb"
    argv = [a.format(good=recording, bad=bad, out=out) for a in command]
    err = refused(*argv, inputs=[recording, bad], match=f"{bad}: trace field 'sampling.{key}'")
    assert f"(allowed: {allowed})" in err, err
    assert not out.exists()


def test_a_recordings_own_sampling_metadata_is_read_typed(recording):
    reader = TraceReader(str(recording))
    sampling = Sampling.of(reader.metadata["sampling"])
    reader.close()
    assert sampling.period_ns == 1_000_000 and sampling.sample_rate_hz == 1000
    assert 0 < sampling.realtime_offset_ns <= time.time_ns()



def known_phase(profile: str, **changes) -> dict:
    """A phase as ``known_phases`` keeps it, shaped to ``profile`` (its
    layout's bounds: the last is the width, one segment between each two)."""
    bounds = profile.partition(":")[2].split(",")
    segments = len(bounds) - 1
    phase = {"id": 0, "width": int(bounds[-1]), "index": [0], "value": [1.0],
             "members": [1] * segments, "mean_samples": [8.0] * segments, "joins": 1,
             "cpi_n": 0, "log_cpi": 0.0, "cpi_last": 0.0, "cpi_d2": 0.0}
    return {**phase, **changes}


#: ``known_phases`` (the catalogue's phases the run started from) of the
#: recording's own profile, so that a replay seeds its classifier from them.
WRONG_KNOWN_PHASES = {
    "not an object": lambda profile: "x",
    "next id beyond 64 bits": lambda profile: {"profile": profile, "next_id": 10**30, "phases": []},
    "phases an object": lambda profile: {"profile": profile, "phases": {"a": 1}},
    "phase without keys": lambda profile: {"profile": profile, "phases": [{}]},
    "id beyond 64 bits": lambda profile: {"profile": profile,
                                          "phases": [known_phase(profile, id=2**70)]},
    "negative id": lambda profile: {"profile": profile, "phases": [known_phase(profile, id=-3)]},
    "index beyond the width": lambda profile: {
        "profile": profile, "phases": [known_phase(profile, index=[10**9])]},
    "width unlike the profile": lambda profile: {
        "profile": profile, "phases": [known_phase(profile, width=5, index=[225])]},
    "members unlike the profile": lambda profile: {
        "profile": profile, "phases": [known_phase(profile, members=[1, 1], mean_samples=[1.0, 1.0])]},
}


@pytest.fixture(scope="module")
def seeded_recording(tmp_path_factory) -> Path:
    """A recording of a run that started from its catalogue's phases (a second
    run of one program): it has ``known_phases``."""
    folder = tmp_path_factory.mktemp("seeded")
    for name in ("first.arrow", "r.arrow"):
        got, _, err = call("run", "-q", "--interval-ms", "20", "--catalog", folder / "c.sqlite",
                           "--record", folder / name, "--", sys.executable, "-c",
                           "sum(i * i for i in range(2_000_000))")
        assert got == 0, err
    return folder / "r.arrow"


@pytest.mark.parametrize("case", WRONG_KNOWN_PHASES)
def test_bad_known_phases_metadata_is_one_line_or_left_out(seeded_recording, tmp_path, case):
    """Class "typed metadata all the way down": the phases a recording's run
    started from were read untyped, and a wrong one was a traceback."""
    recording = seeded_recording
    table = pa.ipc.open_file(str(recording)).read_all()
    meta = json.loads(table.schema.metadata[META_KEY])
    meta["known_phases"] = WRONG_KNOWN_PHASES[case](meta["known_phases"]["profile"])
    bad = tmp_path / "k.arrow"
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta)})
    with pa.OSFile(str(bad), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    shutil.copy(f"{recording}.mappings.jsonl", f"{bad}.mappings.jsonl")
    if case == "members unlike the profile":     # well typed: the phase is left out
        status, _, err = call("replay", bad)
        assert status == 0 and "Traceback" not in err, err
        return
    refused("replay", bad, inputs=[bad], match=f"{bad}: trace field 'known_phases")


# --- options ------------------------------------------------------------------

@pytest.mark.parametrize("option,value", [
    ("--interval-ms", "nan"), ("--interval-ms", "inf"), ("--interval-ms", "1e-9"),
    ("--interval-ms", "1e300"), ("--interval-ms", "9.3e12"), ("--base-mhz", "-1"),
    ("--base-mhz", "nan"), ("--base-mhz", "1e6"), ("--threshold", "2"), ("--threshold", "nan"),
    ("--interval-instructions", "0"), ("--interval-instructions", "1e3")])
def test_out_of_range_options_are_refused_by_the_parser(small_csv, option, value):
    refused("replay", small_csv, option, value, inputs=[small_csv], match=f"argument {option}")


def test_labels_named_in_invalid_utf8_is_one_line(small_trace):
    name = os.fsdecode(b"\xff\xfe-labels")
    refused("replay", small_trace, "--labels", name, match="cannot read labels")


def test_labels_file_in_invalid_utf8_is_one_line(small_trace, tmp_path):
    labels = tmp_path / "l.json"
    labels.write_bytes(b'["a", "\xff"]')
    refused("replay", small_trace, "--labels", labels, inputs=[labels], match="not UTF-8")


# --- CSV ----------------------------------------------------------------------

def test_csv_header_with_spaces_and_a_bom_reads_as_without(small_csv, tmp_path):
    lines = small_csv.read_bytes().split(b"\n", 1)
    spaced = tmp_path / "spaced.csv"
    spaced.write_bytes(b"\xef\xbb\xbf" + lines[0].replace(b",", b" , ") + b"\n" + lines[1])
    plain = call("replay", small_csv, "--json")
    odd = call("replay", spaced, "--json")
    assert plain[0] == odd[0] == 0
    assert json.loads(plain[1]) == json.loads(odd[1])


def test_csv_cell_longer_than_the_csv_limit_is_named_with_its_line(small_csv):
    bad = with_cell(small_csv, 9, "ip", "7" * 200_000)
    refused("replay", bad, inputs=[bad], match=":9:")


# --- hardware values ---------------------------------------------------------------

def test_probe_flags_a_voltage_read_from_random_bytes(tmp_path):
    fake = tmp_path / "msr"
    fake.write_bytes(np.random.default_rng(0).bytes(4096))
    status, out, _ = call("probe", "--json", "--msr-path", str(fake))
    row = next(r for r in json.loads(out)["signals"] if r["key"] == "voltage")
    assert status == 0 and row["implausible"] and row["value"] is None and not row["available"]


def test_probe_refuses_a_malformed_path_template():
    refused("probe", "--msr-path", "/dev/cpu/{cpu/msr", match="not a path template")


# --- signals during run ------------------------------------------------------------

def child_of(pid: int, timeout: float = 60.0) -> int:
    """The pid of ``pid``'s first child once it runs ``sleep``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                try:
                    if Path(f"/proc/{child}/cmdline").read_bytes().startswith(b"sleep"):
                        return int(child)
                except FileNotFoundError:
                    pass
        time.sleep(0.05)
    raise AssertionError("the command never started")


def gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGHUP, signal.SIGQUIT])
def test_the_command_does_not_outlive_a_killed_agent(signum):
    agent = subprocess.Popen([str(BIN), "run", "--no-pin", "--", "sleep", "120"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    command = None
    try:
        command = child_of(agent.pid)
        agent.send_signal(signum)
        agent.wait(30)
        assert gone(command), "the command outlived the agent"
    finally:
        agent.kill()
        agent.wait()
        if command is not None and not gone(command, timeout=0):
            os.kill(command, signal.SIGKILL)        # the orphan this test found


@pytest.mark.parametrize("delay", [1.0, 2.5, "started"])
def test_sigint_at_any_moment_ends_cleanly(tmp_path, delay):
    trace, out = tmp_path / "t.arrow", tmp_path / "r.jsonl"
    agent = subprocess.Popen([str(BIN), "run", "--no-pin", "--interval-ms", "100",
                              "--record", str(trace), "--output", str(out), "--", "sleep", "20"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if delay == "started":
            child_of(agent.pid)
            time.sleep(0.5)
        else:
            time.sleep(delay)
        agent.send_signal(signal.SIGINT)
        _, err = agent.communicate(timeout=60)
    finally:
        agent.kill()
    assert "Traceback" not in err and agent.returncode in (130, 2), (agent.returncode, err)
    if trace.exists():
        reader = TraceReader(str(trace))
        list(reader.batches())
        assert not reader.truncated
    if out.exists():
        for line in out.read_text().splitlines():
            json.loads(line)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".partial")] == []
    if delay == "started":
        assert trace.exists() and out.exists()


@pytest.mark.parametrize("values", ["[1e308, 1e308]", "[-1, 2]", "[Infinity, 2]"])
def test_eval_cpi_out_of_range_is_one_line(tmp_path, values):
    """CPI that no core has: squares of 1e308 overflowed into numpy's
    RuntimeWarnings (six lines) and a CoV of nan."""
    labels, cpi = tmp_path / "l.json", tmp_path / "cpi.json"
    labels.write_text("[0, 1]")
    cpi.write_text(values)
    refused("eval", labels, labels, "--cpi", cpi, inputs=[labels, cpi], match="out of range")


def test_eval_cpi_unknown_as_nan_is_taken(tmp_path):
    labels, cpi = tmp_path / "l.json", tmp_path / "cpi.json"
    labels.write_text("[0, 1]")
    cpi.write_text("[NaN, 2]")
    status, out, err = call("eval", labels, labels, "--cpi", cpi)
    assert status == 0 and err == "" and "CoV of CPI 0.0000" in out, err
