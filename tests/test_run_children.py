"""``phasewatch run`` names the functions of the programs CMD starts (children,
exec'd programs) from their own mappings: ``sh -c 'bzip2 …; perl …'`` shows
bzip2's and perl's functions, each in its phase, not ``[unknown]``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent / "phasewatch"
PERL = "my $s = 0; for my $i (1..25000000) { $s += $i * $i } print STDERR $s"


def test_children_are_symbolized_from_their_own_mappings(tmp_path):
    data = tmp_path / "data"
    data.write_bytes(np.random.default_rng(4).integers(0, 64, 6_000_000, np.uint8).tobytes())
    summary = tmp_path / "s.json"
    script = f"bzip2 -9 -c {data} > /dev/null; perl -e '{PERL}'"
    proc = subprocess.run([str(BIN), "run", "--no-pin", "--json", str(summary), "--",
                           "sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    phases = json.loads(summary.read_text())["phases"]
    named = {f["name"]: f["share"] for row in phases for f in row["top_functions"]}
    assert any(name.startswith(("BZ2_", "[libbz2", "[bzip2")) for name in named), named
    assert any(name.startswith(("Perl_", "[perl", "[libperl")) for name in named), named
    assert named.get("[unknown]", 0) < 0.5, named
    # bzip2's and perl's code run in different phases.
    tops = [row["top_functions"][0]["name"] for row in phases if row["top_functions"]]
    assert len(set(tops)) >= 2, phases
