"""``phasewatch diff`` of short real runs, as a perf user makes them: names in
brackets (a stripped program's ``[spin]``) stay in the table, columns the
host measured nothing for are left out, a run with no complete interval is
one line naming the fix, and where nothing pairs the table says why."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from phasewatch.formats.tracefiles import open_trace

BIN = Path(sys.executable).parent / "phasewatch"
SPIN = r"""
#include <stdlib.h>
#include <time.h>
static volatile unsigned long sink;
int main(int argc, char **argv) {
    clock_t end = clock() + atof(argv[1]) * CLOCKS_PER_SEC;
    unsigned long h = 1;
    while (clock() < end)
        for (int i = 0; i < 100000; i++)
            h = h * 6364136223846793005ul + 1;
    sink = h;
    return 0;
}
"""


def phasewatch(*args):
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Recordings of a stripped C program: two of about a second, one of 50 ms."""
    if shutil.which("gcc") is None:
        pytest.fail("the test program needs gcc (apt-get install gcc)")
    d = tmp_path_factory.mktemp("short")
    (d / "spin.c").write_text(SPIN)
    subprocess.run(["gcc", "-O2", "-s", "-o", str(d / "spin"), str(d / "spin.c")], check=True)
    for name, seconds in (("a", "1"), ("b", "1"), ("short", "0.05")):
        proc = phasewatch("run", "-q", "--record", d / f"{name}.arrow", "--", d / "spin", seconds)
        assert proc.returncode == 0, proc.stderr
    return d


def test_a_stripped_programs_bracketed_name_stays_in_the_table(runs):
    proc = phasewatch("diff", runs / "a.arrow", runs / "b.arrow")
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("phases paired", 1)[1]
    assert "[spin]" in table, proc.stdout
    header = next(line for line in table.splitlines() if line.startswith("┃"))
    with_values = [n for n in ("CPI", "mV", "pfreq MHz", "J") if f" {n} " in header]
    for name in with_values:     # a column kept is one the host measured
        column = [c.strip() for c in header.strip("┃").split("┃")].index(name)
        cells = [line.strip("│").split("│")[column].strip()
                 for line in table.splitlines() if line.startswith("│")]
        assert any(c != "-" for c in cells), (name, proc.stdout)


def test_a_run_without_a_complete_interval_is_one_line_naming_the_fix(runs):
    proc = phasewatch("diff", runs / "short.arrow", runs / "b.arrow")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "short.arrow" in lines[0] and "no complete interval" in lines[0]
    assert "--interval-samples" in lines[0], lines
    shorter = phasewatch("diff", runs / "short.arrow", runs / "b.arrow", "--interval-samples", "10")
    assert shorter.returncode == 0, shorter.stderr


def test_where_nothing_pairs_the_table_says_why(runs):
    other = runs / "python.arrow"
    proc = phasewatch("run", "-q", "--record", other, "--", sys.executable, "-c",
                      "import time\nt = time.process_time()\n"
                      "while time.process_time() - t < 1: sum(i * i for i in range(1000))")
    assert proc.returncode == 0, proc.stderr
    proc = phasewatch("diff", runs / "short.arrow", other, "--interval-samples", "10")
    assert proc.returncode == 0, proc.stderr
    said = [line for line in proc.stdout.splitlines() if line.startswith("nothing paired")]
    assert len(said) == 1, proc.stdout
    assert "apart, beyond the threshold 0.200" in said[0] and "--threshold" in said[0], said
    reader = open_trace(str(runs / "short.arrow"))     # its side table's mappings too
    mapped = bool(reader.metadata.get("mappings"))
    reader.close()
    unmapped = [line for line in proc.stdout.splitlines() if "recorded no mappings" in line]
    assert len(unmapped) == (not mapped), proc.stdout
    paired = phasewatch("diff", runs / "a.arrow", runs / "b.arrow")
    assert "nothing paired" not in paired.stdout, paired.stdout
