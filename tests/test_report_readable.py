"""The report reads at a glance: the code signature shows its hottest few
dozen entries, each labelled with the code in it; a page of 1,000 intervals
stays under 1 MB; the x axis offers seconds as well as intervals."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from phasewatch.core.intervals import IntervalBlock
from phasewatch.core.params import DetectorParams, Params
from phasewatch.core.pipeline import Intervals
from phasewatch.report.figure import TOP_CODE_ENTRIES, FigureRecorder
from phasewatch.report.folder import phase_rows, write_report
from phasewatch.report.page import build_figure

BIN = Path(sys.executable).parent / "phasewatch"
VOLTAGE, PFREQ, CODE = 32, 64, 1024


def recorded(n: int = 1000, seed: int = 2) -> tuple[FigureRecorder, Intervals]:
    """``n`` intervals of 100 ms, three phases, every code entry visited."""
    bounds = np.array([0, VOLTAGE, VOLTAGE + PFREQ, VOLTAGE + PFREQ + CODE])
    recorder = FigureRecorder(Params(detector=DetectorParams(detector="vpf-ip")), bounds,
                              np.ones(3, np.bool_))
    rng = np.random.default_rng(seed)
    which = (np.arange(n) // 100) % 3
    profiles = rng.random((n, int(bounds[-1])))
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        profiles[:, lo:hi] /= profiles[:, lo:hi].sum(axis=1, keepdims=True)
    profiles[np.arange(n), bounds[2] + 7 * which] += 5.0        # each phase's hot entry
    t = np.arange(n, dtype=np.int64) * 100_000_000
    k = np.full(n, 100)
    block = IntervalBlock(t, t + 100_000_000, k, k, k, profiles, np.full((n, 3), 100),
                          np.zeros(n), np.zeros(n))
    iv = Intervals(np.arange(n), t, t + 100_000_000, k, k, k, rng.random(n) * 0.2, which,
                   np.zeros(n, np.bool_), np.zeros(n), np.zeros(n),
                   profiles=block.profiles, segment_samples=block.segment_samples)
    recorder.add(iv)
    return recorder, recorder.intervals()


def test_a_page_of_1000_intervals_is_under_a_megabyte(tmp_path):
    recorder, iv = recorded()
    figure = recorder.figure(iv.phase, iv.distance, iv.new_phase)
    write_report(str(tmp_path), figure, "a thousand intervals", [], phase_rows(iv, None))
    assert (tmp_path / "index.html").stat().st_size <= 1_000_000
    assert (tmp_path / "plotly.min.js").stat().st_size > 1_000_000   # the script, once, beside it


def test_the_code_signature_shows_its_hottest_entries_labelled():
    recorder, iv = recorded()
    recorder.name_entries = lambda entries: {e: f"function_{e}" for e in entries}
    code = recorder.figure(iv.phase, iv.distance, iv.new_phase).heatmaps[-1]
    assert code.values.shape == (1000, TOP_CODE_ENTRIES)
    assert code.shown == f"hottest {TOP_CODE_ENTRIES} of {CODE} entries"
    assert {f"function_{e} (#{e})" for e in (0, 7, 14)} == set(code.labels[-3:])
    totals = code.values.sum(axis=0)
    assert (np.diff(totals) >= 0).all()          # hottest last: drawn on top


def test_the_x_axis_offers_seconds():
    recorder, iv = recorded(n=50)
    figure = recorder.figure(iv.phase, iv.distance, iv.new_phase)
    plot = build_figure(figure)
    buttons = {b.label: b.args for b in plot.layout.updatemenus[0].buttons}
    seconds = buttons["x: seconds"][0]["x"]
    assert len(seconds) == len(plot.data)
    assert seconds[0][:3] == [0.0, 0.1, 0.2]
    assert buttons["x: interval"][0]["x"][0][:3] == [0, 1, 2]
    assert "seconds from the start" in buttons["x: seconds"][1].values()


def test_a_live_run_labels_code_rows_with_its_functions(abab, tmp_path):
    out = tmp_path / "live"
    proc = subprocess.run([str(BIN), "run", "--detector", "vpf-ip", "--interval-samples", "100",
                           "--report", out, "--", abab, "0.6"], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stderr
    text = (out / "index.html").read_text()
    assert re.search(r'"region_a[^"]* \(#\d+\)"', text), "no code row named region_a"
    assert re.search(r'"region_b[^"]* \(#\d+\)"', text), "no code row named region_b"
    assert not re.search(r'"entry \d+"', text), "a code row (region or line) left unnamed"
    assert (out / "index.html").stat().st_size <= 1_000_000
    assert json.dumps("plotly.min.js")[1:-1] in text
