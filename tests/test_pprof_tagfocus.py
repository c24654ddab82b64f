"""``go tool pprof -tagfocus phase=1`` takes phase 1 alone, not 10 to 19: the
phase id is a numeric label, which pprof compares as a number (a string
label would be matched as a regexp, "1" within "13")."""

import collections
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from phasewatch.formats.pprof import read_profile

BIN = Path(sys.executable).parent / "phasewatch"
PARTS = 14
#: A program of PARTS parts, each in a function of its own for a quarter second.
SOURCE = "\n".join([
    "#include <time.h>",
    "static volatile unsigned long sink;",
    *(f"__attribute__((noinline)) void part{n}(void) {{ clock_t end = clock() + CLOCKS_PER_SEC / 4;"
      f" unsigned long h = {n}; while (clock() < end) for (int i = 0; i < 20000; i++)"
      f" h = h * 6364136223846793005ul + {n + 1}; sink = h; }}" for n in range(PARTS)),
    "int main(void) {",
    *(f"    part{n}();" for n in range(PARTS)),
    "    return 0;",
    "}"])


def phases_of(profile) -> collections.Counter:
    """Samples per numeric ``phase`` label."""
    strings = profile.string_table
    found = collections.Counter()
    for sample in profile.sample:
        for label in sample.label:
            if strings[label.key] == "phase":
                found[label.num if not label.str else strings[label.str]] += sample.value[0]
    return found


def test_tagfocus_phase_1_takes_phase_1_not_phases_10_to_19(tmp_path):
    if shutil.which("go") is None:
        pytest.skip("go is not installed (apt-get install golang-go)")
    if shutil.which("gcc") is None:
        pytest.fail("the test program needs gcc (apt-get install gcc)")
    (tmp_path / "parts.c").write_text(SOURCE)
    program = tmp_path / "parts"
    subprocess.run(["gcc", "-O2", "-g", "-o", str(program), str(tmp_path / "parts.c")], check=True)
    profile = tmp_path / "p.pb.gz"
    proc = subprocess.run([str(BIN), "run", "-q", "--no-catalog", "--pprof", str(profile), "--",
                           str(program)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    whole = phases_of(read_profile(str(profile)))
    assert any(str(p).startswith("1") and len(str(p)) > 1 for p in whole), \
        f"fewer than 11 phases, nothing to tell phase 1 from: {whole}"
    cut = tmp_path / "phase1.pb.gz"
    cut.write_bytes(subprocess.run(["go", "tool", "pprof", "-tagfocus=phase=1", "-proto",
                                    str(profile)], capture_output=True, check=True,
                                   timeout=120).stdout)
    assert phases_of(read_profile(str(cut))) == {1: whole[1]}, whole
