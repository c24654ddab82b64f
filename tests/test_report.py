"""``phasewatch report``: the page in a real browser with the network off, the
PNG, the figure's data against plain computations, and bad input."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, strategies as st
from matplotlib.image import imread

from phasewatch.core.classify import threshold_history
from phasewatch.core.intervals import IntervalBlock
from phasewatch.core.params import DetectorParams, Params, histogram_params_of, interval_params_of
from phasewatch.core.pipeline import Intervals, Pipeline
from phasewatch.report.figure import ColumnSums, FigureRecorder, column_modes, matched_codes
from phasewatch.report.png import WIDTH_PX, height_px

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "phasewatch"
EXAMPLE = ROOT / "examples" / "synthetic-skylake.csv"
LABELS = ROOT / "examples" / "synthetic-skylake.labels.json"
CHROMIUM = "/usr/bin/chromium"


def phasewatch(*args):
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("trace") / "ex.arrow"
    proc = phasewatch("convert", EXAMPLE, path)
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.fixture(scope="module")
def report_dir(trace, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    proc = phasewatch("report", trace, "--out", out, "--detector", "vpf-ip", "--labels", LABELS)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (packaging/apt-packages.txt)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        yield b
        b.close()


def open_offline(browser, page_path: Path):
    """The page, with every request that is not for a local file refused;
    returns the page, its console errors and the refused requests."""
    context = browser.new_context(offline=True, viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors, refused = [], []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            refused.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(page_path.as_uri())
    page.wait_for_selector("#phase-figure .main-svg", timeout=60_000)
    return page, errors, refused


def test_page_in_chromium_offline_has_the_figure_and_the_table(browser, report_dir, tmp_path):
    page, errors, refused = open_offline(browser, report_dir / "index.html")
    traces = page.evaluate("""() => document.getElementById('phase-figure').data.map(
        t => ({type: t.type, name: t.name || '', uid: t.uid || ''}))""")
    heatmaps = [t for t in traces if t["type"] == "heatmap" and "band" not in t["uid"]]
    assert [t["name"] for t in heatmaps] == ["core voltage", "productive frequency",
                                             "code signature"]
    assert any(t["type"] == "scatter" and t["name"] == "threshold" for t in traces)
    assert any(t["type"] == "scatter" and t["name"] == "distance" for t in traces)
    assert {t["uid"] for t in traces} >= {"phase-band", "predicted-band", "truth-band"}
    assert "phase predicted on the interval before (right for" in page.inner_text("#phase-figure")
    assert page.locator("#phase-table tr").count() == 1 + 4   # header and 4 phases
    assert "adjusted Rand index against the ground truth: 1.0000" in page.inner_text("#notes")
    # the rendered figure has drawn heatmap images, and the hover layer is live
    assert page.locator("#phase-figure .hm image").count() >= 3
    shot = tmp_path / "page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert imread(shot).shape[1] == 1400
    assert errors == [] and refused == []
    page.context.close()


def test_png_has_the_expected_size_and_is_not_blank(report_dir):
    image = imread(report_dir / "phases.png")
    # three heatmaps, distance, phase band, predicted band, truth band
    rows = 7
    assert image.shape[1] == WIDTH_PX
    assert image.shape[0] > 200 * rows / 2
    assert image[..., :3].std() > 0.1
    colours = np.unique((image[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50


def test_png_height_follows_the_rows(trace, tmp_path):
    out = tmp_path / "vpf"
    assert phasewatch("report", trace, "--detector", "vpf", "--out", out).returncode == 0
    image = imread(out / "phases.png")
    # vpf: two heatmaps, distance, phase band, predicted band; no truth
    fig = _figure_with_rows(heatmaps=2, truth=False)
    assert image.shape[:2] == (height_px(fig), WIDTH_PX)


def _figure_with_rows(heatmaps: int, truth: bool):
    from phasewatch.report.figure import Heatmap, PhaseFigure
    one = np.zeros(1)
    return PhaseFigure(1, 1, one, one, [Heatmap("v", "v", "", one, one)] * heatmaps, one, one,
                       one.astype(np.int64), one.astype(np.int64) if truth else None,
                       predicted=one.astype(np.int64))


def test_predicted_band_holds_the_predictions_replay_writes(trace, tmp_path):
    from phasewatch.report.figure import predicted_phases
    results = tmp_path / "r.jsonl"
    proc = phasewatch("replay", trace, "--detector", "vpf-ip", "--output", results, "--json")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(x) for x in results.read_text().splitlines()]
    predicted, accuracy = predicted_phases(np.array([r["phase"] for r in rows]))
    assert predicted.tolist() == [rows[0]["phase"]] + [r["predicted_next"] for r in rows[:-1]]
    assert accuracy == pytest.approx(json.loads(proc.stdout)["prediction"]["next_accuracy"])


def test_results_file_with_its_trace_draws_the_results_phases(trace, tmp_path):
    results = tmp_path / "r.jsonl"
    assert phasewatch("replay", trace, "--detector", "vpf-ip", "--output", results).returncode == 0
    rows = [json.loads(x) for x in results.read_text().splitlines()]
    # draw the results of vpf-ip over a replay with vpf: the band is the results'
    proc = phasewatch("report", results, "--trace", trace, "--out", tmp_path / "rep")
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "rep" / "index.html").read_text()
    assert text.count("<tr>") == 1 + len({r["phase"] for r in rows}) == 5


@pytest.mark.parametrize("case", ["no trace", "mismatched", "empty results", "empty run",
                                  "labels length"])
def test_bad_input_gets_one_line_and_exit_2(case, trace, tmp_path):
    results = tmp_path / "r.jsonl"
    phasewatch("replay", trace, "--output", results)
    lines = results.read_text().splitlines()
    out = tmp_path / "out"
    if case == "no trace":
        args = [results, "--out", out]
    elif case == "mismatched":
        results.write_text("\n".join(lines[:-3]) + "\n")
        args = [results, "--trace", trace, "--out", out]
    elif case == "empty results":
        results.write_text("")
        args = [results, "--trace", trace, "--out", out]
    elif case == "empty run":
        csv = tmp_path / "short.csv"
        head = EXAMPLE.read_text().splitlines()[:3]
        csv.write_text("\n".join(head) + "\n")
        args = [csv, "--out", out]
    else:
        labels = tmp_path / "labels.json"
        labels.write_text(json.dumps(json.loads(LABELS.read_text())[:-1]))
        args = [trace, "--labels", labels, "--out", out]
    proc = phasewatch("report", *args)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (out / "index.html").exists()


def test_simpoint_labels_are_read_as_ground_truth(trace, tmp_path):
    labels = json.loads(LABELS.read_text())
    names = {name: i for i, name in enumerate(dict.fromkeys(labels))}
    simpoint = tmp_path / "t.labels"
    simpoint.write_text("".join(f"{names[x]} 0.{i % 7}\n" for i, x in enumerate(labels)))
    proc = phasewatch("report", trace, "--detector", "vpf-ip", "--labels", simpoint,
                      "--out", tmp_path / "rep")
    assert proc.returncode == 0, proc.stderr
    assert "ground truth: 1.0000" in (tmp_path / "rep" / "index.html").read_text()


# -- the figure's data --------------------------------------------------------


@given(st.integers(1, 3000), st.sampled_from([2, 8, 64]))
def test_column_sums_match_a_reshape_sum(n, max_columns):
    rows = np.random.default_rng(n).random((n, 3))
    sums = ColumnSums(3, max_columns)
    for part in np.array_split(rows, 5):
        sums.add(part)
    per = sums.per
    assert sums.columns <= max_columns
    assert per == 1 or -(-n // (per // 2)) > max_columns  # the smallest width that fits
    padded = np.vstack([rows, np.zeros((-n % per, 3))])
    np.testing.assert_allclose(sums.result(), padded.reshape(-1, per, 3).sum(axis=1))


def test_column_modes_take_the_most_frequent_label():
    labels = np.array([3, 3, 1, 1, 1, 2, 5, 5])
    assert column_modes(labels, 4).tolist() == [1, 5]
    assert column_modes(labels, 1).tolist() == labels.tolist()


def test_truth_labels_take_the_colour_of_the_phase_they_overlap_most():
    truth = np.array([0, 0, 0, 1, 1, 2, 2, 2])
    phase = np.array([1, 1, 1, 0, 0, 0, 1, 1])
    # label 0 ↔ phase 1 (3), label 1 ↔ phase 0 (2); label 2 gets a new colour
    assert matched_codes(truth, 3, phase).tolist() == [1, 0, 2]


def test_adaptive_threshold_history_ends_where_the_classifier_did(trace):
    from phasewatch.formats.tracefiles import open_trace
    source = open_trace(str(trace))
    meta = source.metadata
    params = Params(interval=interval_params_of(meta), histograms=histogram_params_of(meta),
                    detector=DetectorParams(detector="vpf-ip", adaptive=True))
    pipeline = Pipeline.for_trace(meta, params)
    parts = [pipeline.feed(b) for b in source.batches()]
    iv = Intervals.join(parts)
    history = threshold_history(iv.distance, iv.new_phase, params.detector, iv.statuses)
    assert history[0] == params.detector.threshold
    assert len(np.unique(history)) >= 2  # it moved
    # the last interval's threshold, moved once more if it joined, is the classifier's
    last = threshold_history(np.append(iv.distance, 0.0), np.append(iv.new_phase, True),
                             params.detector, np.append(iv.statuses, 0))[-1]
    assert last == pytest.approx(pipeline.threshold)


def test_200000_intervals_are_drawn_in_at_most_2000_columns(browser, tmp_path):
    """A long run stays responsive: the page gets aggregated columns and says so."""
    from phasewatch.report.folder import write_report
    n, width = 200_000, 32 + 64 + 32
    bounds = np.array([0, 32, 96, 128])
    params = Params(detector=DetectorParams(detector="vpf-ip"))
    recorder = FigureRecorder(params, bounds, np.ones(3, np.bool_))
    rng = np.random.default_rng(1)
    phase_of = (np.arange(n) // 5000) % 3
    for lo in range(0, n, 20_000):
        k = 20_000
        profiles = np.zeros((k, width))
        which = phase_of[lo:lo + k]
        profiles[np.arange(k), 10 + 5 * which] = 1.0
        profiles[np.arange(k), 32 + 20 + 10 * which] = 1.0
        profiles[np.arange(k), 96 + rng.integers(0, 32, k)] = 1.0
        t = np.arange(lo, lo + k, dtype=np.int64) * 100_000_000
        block = IntervalBlock(t, t + 100_000_000, np.full(k, 10**8), np.full(k, 10**8),
                              np.full(k, 100), profiles, np.full((k, 3), 100), np.zeros(k),
                              np.zeros(k))
        iv = Intervals(np.arange(lo, lo + k), t, t + 100_000_000, block.instructions,
                       block.cycles, block.samples, rng.random(k) * 0.2, which,
                       np.zeros(k, np.bool_), np.zeros(k), np.zeros(k),
                       profiles=block.profiles, segment_samples=block.segment_samples)
        recorder.add(iv)
    iv = recorder.intervals()
    figure = recorder.figure(iv.phase, iv.distance, iv.new_phase)
    assert figure.columns <= 2000 and figure.per_column == 128
    assert figure.heatmaps[0].values.shape == (figure.columns, 32)
    # columns of one phase keep its histogram whole
    assert figure.heatmaps[0].values[0, 10] == pytest.approx(1.0)
    from phasewatch.report.folder import phase_rows
    write_report(str(tmp_path), figure, "long run", [], phase_rows(iv, None))
    html_bytes = (tmp_path / "index.html").stat().st_size
    assert html_bytes < 12_000_000
    page, errors, refused = open_offline(browser, tmp_path / "index.html")
    assert "each column is 128 consecutive intervals" in page.inner_text("#notes")
    assert errors == [] and refused == []
    page.context.close()


def test_run_report_draws_a_live_run(abab, tmp_path):
    if shutil.which("perf") is None and not Path("/proc/sys/kernel/perf_event_paranoid").exists():
        pytest.skip("no perf_event on this kernel")
    out = tmp_path / "live"
    proc = subprocess.run([str(BIN), "run", "--detector", "vpf-ip", "--interval-ms", "100",
                           "--report", out, "--", abab, "1.0"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    text = (out / "index.html").read_text()
    assert "region_a" in text and "region_b" in text
    assert imread(out / "phases.png").shape[1] == WIDTH_PX


def test_a_report_never_overwrites_its_input(trace, tmp_path):
    """A trace that sits where the page would go is refused, and stays as it was."""
    out = tmp_path / "rep"
    out.mkdir()
    inside = out / "index.html"
    inside.symlink_to(trace)
    before = Path(trace).read_bytes()
    proc = phasewatch("report", inside, "--out", out)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert Path(trace).read_bytes() == before and inside.is_symlink()


def test_predicted_band_takes_the_run_s_own_predictions_where_it_made_them():
    from phasewatch.report.figure import predicted_phases
    phase = np.array([0, 0, 1, 1, 0])
    made = np.array([0, 1, 1, 0, 0])       # what a run predicted (say, from a catalogue's memory)
    predicted, accuracy = predicted_phases(phase, made)
    assert predicted.tolist() == [0, 0, 1, 1, 0]
    assert accuracy == 1.0
    fresh, _ = predicted_phases(phase, made[:3])     # not one per phase: predicted afresh
    assert fresh.tolist() == [0, 0, 0, 1, 1]
