"""Property-based fuzzing of everything that reads user input: the CSV reader,
the trace (Arrow) reader, the metadata schema and the command-line parser.

Each generated case asserts the same three things: exit status 0 or 2, no
traceback, and every input file byte-identical afterwards.  Commands are called
in-process (``cli.main``) with their output captured; the number of cases run
is printed at the end of the session (tests/conftest.py)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from cliutil import call
from phasewatch.cli import main as cli
from phasewatch.core.batch import CSV_COLUMNS, OPTIONAL_CSV_COLUMNS, RAW_DTYPES
from phasewatch.core.params import DetectorParams, Params, histogram_params_of, interval_params_of
from phasewatch.core.pipeline import Pipeline
from phasewatch.errors import UserError
from phasewatch.formats import metadata as md, schema
from phasewatch.formats.trace import META_KEY

FUZZ = settings(max_examples=120, suppress_health_check=[HealthCheck.too_slow,
                                                         HealthCheck.data_too_large])


def check_run(argv: list[str], inputs: list[Path]) -> tuple[int, str, str]:
    before = {p: p.read_bytes() for p in inputs}
    status, out, err = call(*argv)
    assert status in (0, 2), (status, err)
    assert "Traceback" not in err, err
    if status == 2:     # split on newlines only: a generated name may hold U+0085 or U+2028
        assert err.strip("\n").split("\n")[-1].startswith("phasewatch"), err
    for p, data in before.items():
        assert p.read_bytes() == data, f"{p} changed"
    return status, out, err


# --- CSV ----------------------------------------------------------------------

cell = st.one_of(
    st.integers(0, 10**6).map(str),
    st.integers(-2**70, 2**70).map(str),
    st.integers(0, 2**64).map(hex),
    st.sampled_from(["", " ", "nan", "-1", " 7 ", "0x", "1e3", "\"5\"", "4294967296",
                     "2147483647", "-2147483649"]),
    st.text(max_size=6),
)


@st.composite
def csv_bytes(draw) -> bytes:
    names = list(CSV_COLUMNS) + draw(st.lists(st.sampled_from(OPTIONAL_CSV_COLUMNS + ("x", "")),
                                              max_size=3))
    if draw(st.booleans()):
        names = draw(st.permutations(names))
    if draw(st.integers(0, 9)) == 0:
        del names[draw(st.integers(0, len(names) - 1))]
    sep = draw(st.sampled_from([",", ", ", " ,", ","]))
    rows = []
    t = 0
    for _ in range(draw(st.integers(0, 25))):
        if draw(st.integers(0, 4)):
            t += draw(st.integers(0, 3_000_000))
            values = {n: str(t) if n in ("t_ns", "tsc") else
                      str(draw(st.integers(0, 3))) if n == "cpu" else
                      str(draw(st.integers(0, 2**31))) for n in names}
            if draw(st.integers(0, 5)) == 0:
                values[draw(st.sampled_from(names))] = draw(cell)
            row = [values[n] for n in names]
        else:
            row = draw(st.lists(cell, min_size=0, max_size=len(names) + 2))
        rows.append(sep.join(row))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = newline.join([sep.join(names)] + rows) + draw(st.sampled_from(["", newline]))
    bom = b"\xef\xbb\xbf" if draw(st.integers(0, 4)) == 0 else b""
    return bom + text.encode("utf-8", "surrogatepass")


@FUZZ
@given(data=csv_bytes(), detector=st.sampled_from(["vpf", "vpf-ip"]),
       base=st.sampled_from([None, "3000", "1"]))
def test_csv_reader(data, detector, base, fuzz_count):
    fuzz_count("csv reader")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d, "in.csv")
        path.write_bytes(data)
        argv = ["replay", str(path), "--detector", detector, "--interval-instructions", "1000000",
                "--output", str(Path(d, "out.jsonl"))]
        argv += ["--base-mhz", base] if base else []
        status, _, _ = check_run(argv, [path])
        out = Path(d, "out.jsonl")
        if status == 0:
            for line in out.read_text().splitlines():
                json.loads(line)
        else:
            assert not out.exists()
        assert [p.name for p in Path(d).iterdir() if p.name.endswith(".partial")] == []


# --- Arrow traces -------------------------------------------------------------

json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-2**65, 2**65) | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=6)

#: Where a generated value may replace part of a valid trace's metadata.
META_PATHS = [("base_freq_mhz",), ("signals",), ("interval",), ("interval", "kind"),
              ("interval", "ns"), ("interval", "instructions"), ("histograms",),
              ("histograms", "voltage_mv"), ("histograms", "voltage_bins"),
              ("histograms", "ip_bins"), ("histograms", "ip_fold_groups"),
              ("histograms", "pfreq_mhz"), ("histograms", "text_range"), ("text_range",),
              ("cpu",), ("cpu", "model_key"), ("counter_scope",), ("mappings",),
              ("format",), ("format_version",), ("newer_key",), ("sampling",),
              ("sampling", "sample_rate_hz"), ("sampling", "realtime_offset_ns")]


def valid_meta(signals) -> dict:
    return md.new(base_freq_mhz=3000.0, signals={n: "csv" for n in signals})


@st.composite
def mutated_meta(draw, signals):
    meta = valid_meta(signals)
    if draw(st.integers(0, 9)) == 0:
        return draw(json_value)
    for _ in range(draw(st.integers(0, 2))):
        path = draw(st.sampled_from(META_PATHS))
        target = meta
        for key in path[:-1]:
            if not isinstance(target.get(key), dict):
                target[key] = {}
            target = target[key]
        target[path[-1]] = draw(json_value)
    return meta


@st.composite
def arrow_columns(draw):
    names = ["t_ns", "cpu"] + draw(st.lists(st.sampled_from(
        [n for n in RAW_DTYPES if n not in ("t_ns", "cpu")]), unique=True, max_size=14))
    n = draw(st.integers(0, 40))
    cols = {}
    for name in names:
        dtype = RAW_DTYPES[name]
        if name in ("cpu", "tid") and draw(st.integers(0, 5)) == 0:
            dtype = np.dtype(np.int64)      # a writer other than phasewatch's
        cols[name] = draw(hnp.arrays(dtype, n))
    cols["t_ns"] = np.sort(cols["t_ns"]) if draw(st.booleans()) else cols["t_ns"]
    return cols


@FUZZ
@given(cols=arrow_columns(), data=st.data(), cut=st.none() | st.floats(0, 1),
       detector=st.sampled_from(["vpf", "vpf-ip"]))
def test_arrow_reader(cols, data, cut, detector, fuzz_count):
    fuzz_count("arrow reader")
    meta = data.draw(mutated_meta(list(cols)))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d, "in.arrow")
        schema = pa.schema([pa.field(n, pa.from_numpy_dtype(c.dtype)) for n, c in cols.items()],
                           metadata={META_KEY: json.dumps(meta).encode()})
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            writer.write_batch(pa.RecordBatch.from_arrays(
                [pa.array(c) for c in cols.values()], schema=schema))
        if cut is not None:
            raw = path.read_bytes()
            path.write_bytes(raw[:int(len(raw) * cut)])
        check_run(["replay", str(path), "--detector", detector, "--interval-ms", "1"], [path])


# --- the metadata schema --------------------------------------------------------

@settings(max_examples=400)
@given(data=st.data())
def test_metadata_validator(data, fuzz_count):
    fuzz_count("metadata validator")
    signals = list(CSV_COLUMNS)
    meta = data.draw(mutated_meta(signals))
    try:
        checked = schema.validate(meta, signals, "t.arrow")
    except UserError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("t.arrow: trace ")
        return
    # What the schema accepts, the pipeline must be able to run on.
    params = Params(interval=interval_params_of(checked), histograms=histogram_params_of(checked),
                    detector=DetectorParams())
    assert schema.Sampling.of(checked.get("sampling")).period_ns >= 1000
    base = checked.get("base_freq_mhz")
    assert base is None or (math.isfinite(base) and base > 0)
    Pipeline.for_trace(checked, params).finish()


# --- the command line ---------------------------------------------------------

option_value = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "1e-9", "1e300", "9.3e12", "-1", "0", "0.5", "1",
                     "100", "3000", "1e15", "1e16", "abc", "", "0x10", "\udcff"]),
    st.floats().map(repr), st.integers().map(str), st.text(max_size=6))
option_name = st.sampled_from(["--interval-ms", "--interval-instructions", "--threshold",
                               "--base-mhz", "--detector", "--labels", "--output", "--adaptive",
                               "--json", "--cpu", "--bogus"])


@FUZZ
@given(tokens=st.lists(st.tuples(option_name, option_value), max_size=4),
       command=st.sampled_from(["replay", "convert", "run", "probe"]))
def test_cli_parser(tokens, command, fuzz_count, tmp_path_factory):
    fuzz_count("command line")
    d = tmp_path_factory.mktemp("cli")
    trace = d / "in.csv"
    trace.write_bytes(Path(__file__).parent.parent.joinpath(
        "examples/synthetic-skylake.csv").read_bytes()[:20000].rsplit(b"\n", 1)[0] + b"\n")
    argv = [command]
    for name, value in tokens:
        argv += [name] if name in ("--adaptive", "--json") else [name, value]
    if command == "run":
        # parse only: a run that parses would start a program
        try:
            cli.build_parser().parse_args(argv + ["--", "true"])
        except SystemExit as exc:
            assert exc.code == 2
        return
    positional = {"replay": [str(trace)], "convert": [str(trace), str(d / "out.arrow")],
                  "probe": []}[command]
    with contextlib.chdir(d):       # a generated --output name lands here
        check_run(argv[:1] + positional + argv[1:], [trace])


# --- side tables, .bb files, results and labels ------------------------------------

SMALL_TRACE = Path(__file__).parent.parent / "examples" / "synthetic-skylake.csv"
mapping_value = st.one_of(json_value, st.integers(-1, 2**64 + 1), st.just(2**70))


@st.composite
def side_table_bytes(draw) -> bytes:
    rows = []
    for _ in range(draw(st.integers(0, 4))):
        row = {"start": 4096, "end": 8192, "offset": 0, "path": "/bin/x", "t_ns": 1}
        for key in draw(st.lists(st.sampled_from(list(row) + ["extra"]), max_size=3)):
            row[key] = draw(mapping_value)
        for key in draw(st.lists(st.sampled_from(list(row)), max_size=1)):
            row.pop(key, None)
        rows.append(json.dumps(row).encode())
    data = b"\n".join(rows) + draw(st.sampled_from([b"\n", b"", b"\n{\"start\": 1", b"\xff\n"]))
    if draw(st.booleans()) and data:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([data[at] ^ (1 << draw(st.integers(0, 7)))]) + data[at + 1:]
    return data


@FUZZ
@given(side=side_table_bytes())
def test_side_table_reader(side, fuzz_count, tmp_path_factory):
    fuzz_count("side table")
    d = tmp_path_factory.mktemp("side")
    trace = d / "t.csv"
    trace.write_bytes(SMALL_TRACE.read_bytes()[:30000].rsplit(b"\n", 1)[0] + b"\n")
    table = d / "t.csv.mappings.jsonl"
    table.write_bytes(side)
    check_run(["replay", str(trace), "--detector", "vpf-ip", "--interval-ms", "5"],
              [trace, table])


bb_entry = st.tuples(st.one_of(st.integers(0, 50), st.integers(0, 2**70)),
                     st.one_of(st.integers(0, 10**6), st.integers(0, 2**70)))


@st.composite
def bb_text(draw) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            lines.append(draw(st.text(max_size=12)))
        elif kind == 1:
            lines.append("# comment")
        else:
            entries = draw(st.lists(bb_entry, min_size=0, max_size=5))
            lines.append("T" + "".join(f":{b}:{c} " for b, c in entries))
    return "\n".join(lines) + "\n"


@FUZZ
@given(text=bb_text(), command=st.sampled_from(["replay", "export"]))
def test_bb_reader(text, command, fuzz_count, tmp_path_factory):
    fuzz_count(".bb file")
    d = tmp_path_factory.mktemp("bb")
    bb = d / "x.bb"
    bb.write_text(text, errors="surrogateescape")
    if command == "replay":
        check_run(["replay", str(bb), "--output", str(d / "r.jsonl")], [bb])
        return
    labels = d / "l.json"
    n = sum(1 for line in text.splitlines() if line.startswith("T"))
    labels.write_text(json.dumps([i % 2 for i in range(max(n, 1))]))
    check_run(["export", "--simpoints", str(labels), "--bb", str(bb), "-o", str(d / "o")],
              [bb, labels])


@st.composite
def results_text(draw) -> str:
    rows = []
    for i in range(draw(st.integers(1, 6))):
        row = {"index": i, "t_end_ns": 1000 * (i + 1), "instructions": 100, "cycles": 150,
               "phase": i % 2, "distance": 0.1, "new_phase": i == 0}
        for key in draw(st.lists(st.sampled_from(list(row)), max_size=2)):
            row[key] = draw(mapping_value)
        rows.append(json.dumps(row))
    if draw(st.booleans()):
        rows.append(draw(st.sampled_from(["[" * 5000, "null", "[1]", "{", "7"])))
    return "\n".join(rows) + "\n"


labels_text = st.one_of(
    st.lists(json_value, max_size=6).map(json.dumps),
    st.lists(st.tuples(st.integers(-2, 2**70), st.floats() | st.text(max_size=3)), max_size=6)
    .map(lambda rows: "".join(f"{a} {b}\n" for a, b in rows)),
    st.integers(1, 20_000).map(lambda depth: "[" * depth + "]" * depth),
)


@FUZZ
@given(a=st.one_of(results_text(), labels_text), b=st.one_of(results_text(), labels_text),
       command=st.sampled_from(["eval", "export"]))
def test_results_and_labels_readers(a, b, command, fuzz_count, tmp_path_factory):
    fuzz_count("results and labels")
    d = tmp_path_factory.mktemp("labels")
    pa_, pb = d / "a.txt", d / "b.txt"
    pa_.write_text(a)
    pb.write_text(b)
    argv = (["eval", str(pa_), str(pb)] if command == "eval"
            else ["export", "--simpoints", str(pa_), "-o", str(d / "o")])
    check_run(argv, [pa_, pb])


# --- the daemon's config and its reload ---------------------------------------------------

from phasewatch.daemon import config as daemon_config  # noqa: E402
from phasewatch.daemon.service import Daemon  # noqa: E402

config_value = st.one_of(
    st.sampled_from(["inf", "-inf", "nan", "1e-300", "1e300", "0", "-1", "3000000000",
                     "100000000000000000000000", '"x"', "[]", "[1, 2]", "true", "{}", '"all"',
                     "[" * 200 + "]" * 200, '"tcp://127.0.0.1:1"', '"127.0.0.1:0"']),
    st.integers(-2**70, 2**70).map(str), st.floats(allow_nan=False).map(repr))
config_key = st.sampled_from([(t, k) for t, table in daemon_config.TABLES.items()
                              for k in table.__struct_fields__]
                             + [("source", "bogus"), ("sinks", "x")])


@st.composite
def config_bytes(draw) -> bytes:
    by_table: dict[str, list[str]] = {}
    for (table, key), value in draw(st.lists(st.tuples(config_key, config_value), max_size=4)):
        by_table.setdefault(table, []).append(f"{key} = {value}")
    text = "".join(f"[{t}]\n" + "\n".join(lines) + "\n" for t, lines in by_table.items())
    data = text.encode()
    tail = draw(st.sampled_from([b"", b"# r\xe9glages\n", b"[detector\n", b"\x00"]))
    return data + tail


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(data=config_bytes())
def test_daemon_config_and_reload(data, fuzz_count, tmp_path_factory):
    """Any config file is a checked Config or one UserError line; a reload of
    it keeps the running config unless it is accepted."""
    fuzz_count("daemon config and reload")
    path = tmp_path_factory.mktemp("cfg") / "phasewatch.toml"
    path.write_bytes(data)
    try:
        config = daemon_config.load(str(path))
    except UserError as exc:
        assert "\n" not in str(exc)
        config = None
    running = daemon_config.Config(detector="vpf-ip")
    args = type("Args", (), {"replay": None, "replay_speed": None, "metrics": None,
                             "zmq": None, "record": None, "zmq_samples": False})()
    daemon = Daemon(running, str(path), args)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        daemon.reload()
    if config is None or "reload refused" in err.getvalue():
        assert daemon.config is running, err.getvalue()
    assert "Traceback" not in err.getvalue()
