"""A real C++ program's long function names: its phase table fits an
80-column terminal, and its report page keeps the heatmaps wide in Chromium."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from phasewatch.formats.trace import TraceReader

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "phasewatch"
SOURCE = ROOT / "tests" / "workloads" / "templates.cc"
CHROMIUM = "/usr/bin/chromium"
@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    """tests/workloads/templates.cc, built here with g++ as a PIE with symbols."""
    if shutil.which("g++") is None:
        pytest.fail("the C++ test program needs g++ (apt-get install g++)")
    out = tmp_path_factory.mktemp("cxx") / "templates"
    subprocess.run(["g++", "-O2", "-g", "-fno-omit-frame-pointer", "-pie", "-fPIE",
                    "-o", str(out), str(SOURCE)], check=True)
    return out


@pytest.fixture(scope="module")
def watched(program, tmp_path_factory):
    """``phasewatch run`` of the program with COLUMNS=80, writing a report
    and a recording too."""
    report = tmp_path_factory.mktemp("cxx-report")
    env = {**os.environ, "COLUMNS": "80",
           "XDG_STATE_HOME": str(tmp_path_factory.mktemp("state"))}
    proc = subprocess.run([str(BIN), "run", "--report", str(report), "--record",
                           str(report / "run.arrow"), "--", str(program),
                           "--scale", "0.8"], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr, report


def table_rows(text: str) -> tuple[list[str], list[list[list[str]]]]:
    """The table's header and, per row, each column's lines (rich's box:
    a row goes on while its first cell is empty)."""
    lines = [line for line in text.splitlines() if line.startswith(("┃", "│"))]
    header = [c.strip() for c in lines[0].strip("┃").split("┃")]
    rows: list[list[list[str]]] = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip("│").split("│")]
        if cells[0] or not rows:
            rows.append([[] for _ in cells])
        for column, cell in zip(rows[-1], cells):
            if cell:
                column.append(cell)
    return header, rows


def test_cxx_phase_table_fits_80_columns(watched):
    text, _ = watched
    table = [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]
    assert table, text
    assert max(len(line) for line in table) <= 80, text
    header, rows = table_rows(text)
    assert header[-1] == "top functions", text
    for row in rows:
        assert all(len(cell) <= 2 for cell in row), f"a cell of more than two lines:\n{text}"
    for k, name in enumerate(header):
        assert any(row[k] != ["-"] for row in rows), f"the column {name} is all dashes:\n{text}"
    functions = " ".join(" ".join(row[-1]) for row in rows)
    # shortened as perf report shortens them, and further where the kernel
    # column (a loaded host's scheduler time) takes width
    assert "<>::fold" in functions or "…::fold" in functions, text
    assert "<>::mix" in functions or "…::mix" in functions, text
    assert "<" not in functions.replace("<>", ""), text
    assert "std::allocator" not in text and "(std::vector" not in text, text


def test_cxx_report_keeps_the_heatmaps_wide(watched, tmp_path):
    _, report = watched
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (packaging/apt-packages.txt)")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox",
                                                                    "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto((report / "index.html").as_uri())
        page.wait_for_selector("#phase-figure .main-svg", timeout=60_000)
        plots = page.evaluate("""() => [...document.querySelectorAll(
            '#phase-figure .draglayer .nsewdrag')].map(r => r.getBoundingClientRect())
            .map(b => ({left: b.left, width: b.width}))""")
        table = page.evaluate("document.getElementById('phase-table').getBoundingClientRect().width")
        functions = page.inner_text("#phase-table")
        page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
        browser.close()
    assert plots, "no plot drawn"
    # every row of the figure, the code signature's labelled heatmap included,
    # takes most of the page's width
    assert min(b["width"] for b in plots) > 0.7 * 1200, plots
    assert table <= 1200, table
    assert "Accumulator<>::fold" in functions and "std::allocator" not in functions, functions


def test_replay_names_the_top_functions_the_recording_maps(watched):
    _, report = watched
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([str(BIN), "replay", str(report / "run.arrow")], capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    header, rows = table_rows(proc.stdout)
    assert header[-1] == "top functions", proc.stdout
    functions = " ".join(" ".join(row[-1]) for row in rows)
    assert "Accumulator<>::fold" in functions and "Mixer<>::mix" in functions, proc.stdout
    assert max(len(line) for line in proc.stdout.splitlines() if line[:1] in "┏┃┡│└") <= 80, \
        proc.stdout
    proc = subprocess.run([str(BIN), "replay", "--json", str(report / "run.arrow")],
                          capture_output=True, text=True)
    phases = json.loads(proc.stdout)["phases"]
    names = [f["name"] for row in phases for f in row["top_functions"]]
    assert any("Accumulator<unsigned long, double" in n and "::fold(" in n for n in names), names


def test_instructions_not_counted_are_not_shown_as_0(watched):
    text, report = watched
    reader = TraceReader(str(report / "run.arrow"))
    counted = "instructions" in reader.signals
    reader.close()
    for left_out in [line for line in text.splitlines()
                     if line.startswith("left out: the trailing")]:     # where there is a tail
        assert ("instructions not counted" in left_out) == (not counted), left_out
        assert " 0 instructions" not in left_out, left_out
    proc = subprocess.run([str(BIN), "replay", "--json", "--output", str(report / "r.jsonl"),
                           str(report / "run.arrow")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    tail = json.loads(proc.stdout)["partial_interval"]
    assert tail is None or (tail["instructions"] is None) == (not counted), tail
    rows = [json.loads(line) for line in (report / "r.jsonl").read_text().splitlines()]
    assert all((r["instructions"] is None) == (not counted) for r in rows), rows[:3]
