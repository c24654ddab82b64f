"""SimPoint interop on a real program: valgrind exp-bbv's .bb replays with the
bbv detector, export --simpoints writes SimPoint's files, eval compares
labellings, and the SimPoint method finds a known clustering."""

import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from phasewatch.cli.main import main
from phasewatch.core.params import DetectorParams
from phasewatch.formats.bbvfile import read_bb, read_pc, read_symtab_mappings
from phasewatch.simpoint.bbvdetect import BbvDetector, project_matrix, project_reference
from phasewatch.simpoint.method import choose_k, simpoint

BIN = Path(sys.executable).parent / "phasewatch"


def phasewatch(*args, check=True):
    """The command as a user runs it, in a process of its own."""
    proc = subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}: {proc.stderr}")
    return proc


@pytest.fixture
def cli(capsys):
    """The command's main() in this process (no start-up cost); returns
    (exit status, stdout, stderr)."""
    def call(*args):
        status = main([str(a) for a in args])
        out = capsys.readouterr()
        return status, out.out, out.err
    return call


@pytest.fixture(scope="module")
def bzip2_bb(tmp_path_factory):
    """bzip2 -9 over 128 KiB of words then 128 KiB of random bytes, under
    valgrind exp-bbv with 10M-instruction intervals."""
    for tool in ("valgrind", "bzip2"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed (apt-get install {tool})")
    d = tmp_path_factory.mktemp("bbv")
    rng = random.Random(3)
    words = [b"phase", b"voltage", b"interval", b"kernel", b"sample", b"the", b"of"]
    text = b" ".join(rng.choice(words) for _ in range(30000))[:128 * 1024]
    (d / "input").write_bytes(text + rng.randbytes(128 * 1024))
    subprocess.run(["valgrind", "--tool=exp-bbv", "--interval-size=10000000",
                    f"--bb-out-file={d / 'bzip2.bb'}", f"--pc-out-file={d / 'bzip2.pc'}",
                    "--trace-symtab=yes", f"--log-file={d / 'valgrind.log'}",
                    "bzip2", "-9", "-c", str(d / "input")],
                   check=True, stdout=subprocess.DEVNULL)
    return d / "bzip2.bb"


def test_real_bb_replays_with_the_bbv_detector(bzip2_bb, tmp_path):
    t_lines = [l for l in bzip2_bb.read_text().splitlines() if l.startswith("T:")]
    out = tmp_path / "bzip2.jsonl"
    phasewatch("replay", bzip2_bb, "--detector", "bbv", "--output", out)
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert len(rows) == len(t_lines) >= 6
    assert [r["index"] for r in rows] == list(range(len(rows)))
    # exp-bbv ends an interval at the first block past each 10M instructions
    assert all(10_000_000 <= r["instructions"] < 10_001_000 for r in rows[:-1])
    phases = [r["phase"] for r in rows]
    assert len(set(phases)) >= 2, "text then random bytes take different code in bzip2"
    # the block addresses name bzip2's code in libbz2
    names = {fn for _, fn in read_pc(bzip2_bb.with_suffix(".pc")).values()}
    assert any(n.startswith("BZ2_") for n in names)


def test_block_addresses_fall_in_the_mappings_valgrind_reports(bzip2_bb):
    maps = read_symtab_mappings(str(bzip2_bb.parent / "valgrind.log"))
    lib = [m for m in maps if "libbz2" in m["path"]]
    assert len(lib) == 1 and lib[0]["end"] > lib[0]["start"]
    assert any(m["path"].endswith("/bzip2") for m in maps)
    assert not any("/valgrind/" in m["path"] for m in maps)
    blocks = read_pc(bzip2_bb.with_suffix(".pc")).values()
    bz2 = [a for a, fn in blocks if fn.startswith("BZ2_")]
    assert bz2 and all(lib[0]["start"] <= a < lib[0]["end"] for a in bz2)


def test_bbv_kernels_match_their_numpy_reference(bzip2_bb):
    bb = read_bb(str(bzip2_bb))
    c = bb.counts
    ref = project_reference(c.indptr, c.indices, c.data.astype(np.float64), 128, 99)
    np.testing.assert_allclose(project_matrix(c, 128, 99), ref, atol=1e-12)
    params = DetectorParams(detector="bbv", threshold=0.1)
    fast = BbvDetector(params).feed(c, bb.instructions)
    slow = BbvDetector(params).reference(c, bb.instructions)
    np.testing.assert_array_equal(fast[0], slow[0])
    np.testing.assert_allclose(fast[1][1:], slow[1][1:], atol=1e-9)


def test_export_writes_simpoints_files_in_simpoints_format(bzip2_bb, tmp_path, cli):
    out = tmp_path / "r.jsonl"
    assert cli("replay", bzip2_bb, "--output", out)[0] == 0
    labels = [json.loads(l)["phase"] for l in out.read_text().splitlines()]
    assert cli("export", "--simpoints", out, "--bb", bzip2_bb, "-o", tmp_path / "bz")[0] == 0
    points = (tmp_path / "bz.simpoints").read_text().splitlines()
    weights = (tmp_path / "bz.weights").read_text().splitlines()
    k = len(set(labels))
    assert len(points) == len(weights) == k
    # SimPoint's formats: "<interval> <cluster>" and "<weight> <cluster>"
    total = 0.0
    for p, line in enumerate(points):
        m = re.fullmatch(r"(\d+) (\d+)", line)
        assert m and int(m[2]) == p
        assert labels[int(m[1])] == p, "a phase's simulation point is one of its intervals"
    for p, line in enumerate(weights):
        m = re.fullmatch(r"(\d*\.\d+) (\d+)", line)
        assert m and int(m[2]) == p
        assert float(m[1]) == pytest.approx(labels.count(p) / len(labels), abs=1e-6)
        total += float(m[1])
    assert total == pytest.approx(1.0, abs=1e-5)


def test_simpoint_method_against_its_own_labels_on_the_real_bb(bzip2_bb, tmp_path, cli):
    result = simpoint(read_bb(str(bzip2_bb)).counts, max_k=5)
    assert result.k >= 2
    assert sorted(np.unique(result.labels)) == list(range(result.k))
    labels_file = tmp_path / "sp.labels"
    labels_file.write_text("".join(f"{l} 0.0\n" for l in result.labels))
    (tmp_path / "same.json").write_text(json.dumps([f"c{l}" for l in result.labels]))
    r = json.loads(cli("eval", labels_file, tmp_path / "same.json", "--json")[1])
    assert r["ari"] == pytest.approx(1.0) and r["nmi"] == pytest.approx(1.0)
    assert r["a"]["phases"] == r["b"]["phases"] == result.k


def test_eval_on_known_labellings(tmp_path, cli):
    a, b = tmp_path / "a.json", tmp_path / "b.labels"
    a.write_text(json.dumps([0, 0, 1, 1]))
    b.write_text("0 0.5\n1 0.5\n0 0.1\n1 0.2\n")
    (tmp_path / "cpi.json").write_text(json.dumps([1.0, 1.0, 2.0, 2.0]))
    r = json.loads(cli("eval", a, b, "--cpi", tmp_path / "cpi.json", "--json")[1])
    assert r["ari"] == pytest.approx(-0.5)          # the textbook value for this pair
    assert r["nmi"] == pytest.approx(0.0, abs=1e-12)
    assert r["a"]["cpi_cov"] == pytest.approx(0.0)  # A splits exactly where CPI changes
    assert r["b"]["cpi_cov"] == pytest.approx(1 / 3)
    assert r["one_phase_cpi_cov"] == pytest.approx(1 / 3)
    # results carry CPI: cycles / instructions
    res = tmp_path / "r.jsonl"
    res.write_text("".join(json.dumps({"index": i, "phase": p, "instructions": 100,
                                       "cycles": c, "distance": None}) + "\n"
                           for i, (p, c) in enumerate([(0, 100), (0, 100), (1, 300), (1, 300)])))
    r = json.loads(cli("eval", res, a, "--json")[1])
    assert r["ari"] == pytest.approx(1.0) and r["a"]["cpi_cov"] == pytest.approx(0.0)
    assert r["one_phase_cpi_cov"] == pytest.approx(0.5)


def synthetic_bbvs(sizes, blocks_per_phase=40, seed=0):
    """Phases that run disjoint sets of blocks, each interval a noisy draw."""
    rng = np.random.default_rng(seed)
    rows, truth = [], []
    for p, n in enumerate(sizes):
        base = np.zeros(blocks_per_phase * len(sizes) + 1)
        base[1 + p * blocks_per_phase:1 + (p + 1) * blocks_per_phase] = rng.uniform(1, 10, blocks_per_phase)
        for _ in range(n):
            rows.append(rng.poisson(base * 1000))
            truth.append(p)
    order = rng.permutation(len(rows))
    return sp.csr_matrix(np.array(rows)[order]), np.array(truth)[order]


def test_simpoint_method_finds_a_known_clustering():
    from sklearn.metrics import adjusted_rand_score
    counts, truth = synthetic_bbvs([30, 20, 25])
    result = simpoint(counts, max_k=8)
    assert result.k == 3
    assert adjusted_rand_score(truth, result.labels) == pytest.approx(1.0)
    assert sorted(result.weights.round(4)) == sorted(np.round([30 / 75, 20 / 75, 25 / 75], 4))
    for c, i in enumerate(result.simpoints):
        assert result.labels[i] == c
    one, _ = synthetic_bbvs([40])
    assert simpoint(one, max_k=6).k == 1


def test_bic_choice_takes_the_smallest_k_within_the_threshold():
    assert choose_k(np.array([0.0, 50.0, 95.0, 100.0])) == 3
    assert choose_k(np.array([0.0, 91.0, 95.0, 100.0])) == 2
    assert choose_k(np.array([5.0, 5.0])) == 1


@pytest.mark.parametrize("content, expect", [
    ("T:1:5 :x:3\n", "malformed basic-block entry"),
    ("T:1:5 :2:3\nQ:1:2\n", ":2: expected a 'T:id:count"),
    ("T:0:5\n", "block id 0"),
    ("T:\n", "no ':id:count' entries"),
])
def test_malformed_bb_is_one_line_and_exit_2(tmp_path, content, expect, cli):
    path = tmp_path / "bad.bb"
    path.write_text(content)
    status, _, err = cli("replay", path, "--detector", "bbv")
    assert status == 2
    assert err.count("\n") == 1 and expect in err


def test_malformed_bb_from_the_command_line_gives_no_traceback(tmp_path):
    path = tmp_path / "bad.bb"
    path.write_text("T:1:5 :2:3\nT:3:x\n")
    proc = phasewatch("replay", path, check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "bad.bb:2:" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_detector_mismatches_say_what_to_use(tmp_path, bzip2_bb, cli):
    status, _, err = cli("replay", bzip2_bb, "--detector", "vpf-ip")
    assert status == 2 and "--detector bbv" in err
    csv = tmp_path / "t.csv"
    csv.write_text("t_ns,cpu,tid,ip,perf_status,aperf,mperf,pperf,tsc,instructions,cycles\n"
                   "0,0,1,4096,0,0,0,0,0,0,0\n1000000,0,1,4096,0,1,1,1,3000000,10,10\n")
    status, _, err = cli("replay", csv, "--detector", "bbv")
    assert status == 2 and "SimPoint .bb" in err
    status, _, err = cli("eval", tmp_path / "missing.json", csv)
    assert status == 2 and err.count("\n") == 1
    (tmp_path / "a.json").write_text("[0, 1]")
    (tmp_path / "b.json").write_text("[0, 1, 1]")
    status, _, err = cli("eval", tmp_path / "a.json", tmp_path / "b.json")
    assert status == 2 and "2 intervals" in err
