"""``phasewatch replay`` and ``convert`` as a user runs them, bad input included."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "phasewatch"
JSON_KEYS = ["index", "t_start_ns", "t_end_ns", "instructions", "cycles", "samples",
             "distance", "phase", "new_phase", "tentative", "no_data", "predicted_next",
             "predicted_after_change", "expected_remaining_intervals", "expected_remaining_s",
             "confidence"]


def phasewatch(*args, check=True):
    proc = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    d = tmp_path_factory.mktemp("example")
    for fmt in ([], ["--csv"]):
        name = "ex.csv" if fmt else "ex.arrow"
        subprocess.run([sys.executable, str(ROOT / "tools" / "make_example_trace.py"),
                        "--out", str(d / name), *fmt], check=True, capture_output=True)
    return d


def results(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_replay_writes_json_lines_with_exactly_the_design_keys(example, tmp_path):
    out = tmp_path / "r.jsonl"
    phasewatch("replay", example / "ex.arrow", "--output", out)
    rows = results(out)
    assert len(rows) == len(json.loads((example / "ex.labels.json").read_text()))
    assert all(list(r) == JSON_KEYS for r in rows)
    assert [r["index"] for r in rows] == list(range(len(rows)))
    assert rows[0]["distance"] is None and rows[0]["new_phase"] is True


def test_replay_predicts_each_next_phase_and_scores_what_it_wrote(example, tmp_path):
    out = tmp_path / "r.jsonl"
    summary = json.loads(phasewatch("replay", example / "ex.arrow", "--output", out,
                                    "--json").stdout)["prediction"]
    rows = results(out)
    pairs = list(zip(rows, rows[1:]))
    right = sum(a["predicted_next"] == b["phase"] for a, b in pairs)
    assert summary["next_scored"] == len(pairs)
    assert summary["next_accuracy"] == pytest.approx(right / len(pairs))
    changes = [(a, b) for a, b in pairs if a["phase"] != b["phase"]]
    assert summary["changes"] == len(changes) > 0
    assert summary["change_accuracy"] == pytest.approx(
        sum(a["predicted_after_change"] == b["phase"] for a, b in changes) / len(changes))
    for r in rows:
        assert r["expected_remaining_s"] == pytest.approx(
            r["expected_remaining_intervals"] * (r["t_end_ns"] - r["t_start_ns"]) / 1e9, abs=1e-6)
        assert set(r["confidence"]) == {"next", "after_change", "remaining"}


def test_csv_and_converted_trace_replay_alike(example, tmp_path):
    converted = tmp_path / "converted.anything"
    phasewatch("convert", example / "ex.csv", converted)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    phasewatch("replay", example / "ex.csv", "--detector", "vpf-ip", "--output", a)
    phasewatch("replay", converted, "--detector", "vpf-ip", "--output", b)
    assert results(a) == results(b)


def test_thesis_parameters_give_thesis_quality(example):
    proc = phasewatch("replay", example / "ex.csv", "--json", "--detector", "vpf",
                      "--threshold", "0.25", "--labels", example / "ex.labels.json")
    summary = json.loads(proc.stdout)
    assert summary["quality_cpi_cov"] < summary["run_cpi_cov"] / 10
    assert len(summary["phases"]) == 3               # compute-a and -b share a signature
    assert summary["ari"] > 0.6


def test_the_default_detector_reads_the_ips_the_trace_has(example):
    first = phasewatch("replay", example / "ex.csv").stdout.splitlines()[0]
    assert "detector vpf-ip (the default with IP samples)," in first
    chosen = phasewatch("replay", example / "ex.csv", "--detector", "vpf-ip").stdout
    assert "detector vpf-ip, threshold" in chosen.splitlines()[0]
    summary = json.loads(phasewatch("replay", example / "ex.csv", "--json").stdout)
    assert len(summary["phases"]) == 4


def test_vpf_ip_tells_apart_phases_that_share_a_signature(example):
    proc = phasewatch("replay", example / "ex.arrow", "--json", "--detector", "vpf-ip",
                      "--labels", example / "ex.labels.json")
    summary = json.loads(proc.stdout)
    assert len(summary["phases"]) == 4
    assert summary["ari"] == pytest.approx(1.0)


def test_table_reports_quality_and_ari(example):
    out = phasewatch("replay", example / "ex.arrow", "--labels", example / "ex.labels.json").stdout
    assert "quality: mean per-phase CoV of CPI" in out
    assert "adjusted Rand index" in out
    header = out.split("phases", 1)[1].splitlines()[2]
    for column in ("CPI", "CoV CPI", "voltage mV", "pfreq MHz"):     # the example has them all
        assert column in header, header


def test_interval_options(example, tmp_path):
    out = tmp_path / "r.jsonl"
    phasewatch("replay", example / "ex.arrow", "--interval-instructions", 200_000_000,
               "--output", out)
    assert len(results(out)) == 100
    phasewatch("replay", example / "ex.arrow", "--interval-ms", 250, "--output", out)
    rows = results(out)
    assert all(r["t_end_ns"] - r["t_start_ns"] >= 249_000_000 for r in rows[1:])


def test_truncated_trace_replays_with_warning(example, tmp_path):
    data = (example / "ex.arrow").read_bytes()
    cut = tmp_path / "cut.arrow"
    cut.write_bytes(data[: len(data) // 2])
    proc = phasewatch("replay", cut)
    assert "was not closed" in proc.stderr or "cut off mid-write" in proc.stderr


def bad(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


HEADER = "t_ns,cpu,tid,ip,perf_status,aperf,mperf,pperf,tsc,instructions,cycles\n"
ROW = "1000000,0,1,4198400,36756330126848,3000000,3000000,2796424,3000000,6529856,3000000\n"


@pytest.mark.parametrize("name,content,expect", [
    ("empty.csv", "", "empty file"),
    ("short.csv", HEADER + ROW + "2000000,0,1\n", ":3: expected 11 cells, found 3"),
    ("missing.csv", HEADER.replace(",pperf", "") + ROW, ":1: missing column(s) pperf"),
    ("word.csv", HEADER + ROW + ROW.replace("4198400", "41984OO"), ":3: column 'ip': '41984OO' is not an integer"),
    ("negative.csv", HEADER + ROW.replace("6529856", "-5"), ":2: column 'instructions': -5 is outside"),
    ("header.csv", HEADER, "no samples after the header"),
    ("binary.bin", bytes(range(256)) * 4, "not a trace"),
])
@pytest.mark.parametrize("command", ["replay", "convert"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, name, content, expect, command):
    path = bad(tmp_path, name, content)
    args = [command, path] + ([tmp_path / "out.arrow"] if command == "convert" else [])
    proc = phasewatch(*args, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and expect in lines[0] and str(path) in lines[0], proc.stderr


def test_missing_file_and_bad_labels(tmp_path, example):
    proc = phasewatch("replay", tmp_path / "nope.arrow", check=False)
    assert proc.returncode == 2 and "no such file" in proc.stderr
    labels = bad(tmp_path, "labels.json", "[1, 2]")
    proc = phasewatch("replay", example / "ex.arrow", "--labels", labels, check=False)
    assert proc.returncode == 2 and "2 labels" in proc.stderr and "Traceback" not in proc.stderr


def test_convert_to_a_full_disk_fails_cleanly(example):
    proc = phasewatch("convert", example / "ex.csv", "/dev/full", check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "/dev/full" in proc.stderr


def test_vpf_on_ip_only_samples_says_what_to_use(tmp_path):
    csv = bad(tmp_path, "ip.csv", "t_ns,cpu,tid,ip\n1,0,1,4198400\n")
    proc = phasewatch("replay", csv, check=False)
    assert proc.returncode == 2 and "missing column" in proc.stderr


def test_bundled_example_is_what_the_generator_makes(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tools" / "make_example_trace.py"), "--csv",
                    "--out", str(tmp_path / "synthetic-skylake.csv")], check=True, capture_output=True)
    for name in ("synthetic-skylake.csv", "synthetic-skylake.labels.json"):
        assert (tmp_path / name).read_bytes() == (ROOT / "examples" / name).read_bytes(), name
