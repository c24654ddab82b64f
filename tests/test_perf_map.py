"""JIT code named from the runtime's /tmp/perf-PID.map, as perf report names it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from phasewatch.live.perf_map import PerfMap

JIT = ("function phaseMath(n){let s=0;for(let i=1;i<n;i++){s+=Math.sqrt(i)*((i&7)-3.5)/i;}"
       "return s;}\nlet t=0; const end=Date.now()+1500;"
       "while(Date.now()<end){t+=phaseMath(200000);} console.log(t>0);\n")


def test_node_jit_code_is_named_as_perf_names_it(tmp_path):
    if shutil.which("node") is None:
        pytest.skip("node is not installed (apt-get install nodejs)")
    script = tmp_path / "jit.js"
    script.write_text(JIT)
    out = tmp_path / "s.json"
    proc = subprocess.run([str(Path(sys.executable).parent / "phasewatch"), "run", "--no-catalog",
                           "--json", str(out), "--", "node", "--perf-basic-prof", str(script)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(out.read_text())
    shares = {}
    for row in summary["phases"]:
        for f in row["top_functions"]:
            shares[f["name"]] = shares.get(f["name"], 0) + f["share"] * row["intervals"]
    total = sum(row["intervals"] for row in summary["phases"])
    jit = sum(v for k, v in shares.items() if k.startswith("JS:") and "phaseMath" in k)
    assert jit > 0.5 * total, shares
    for written in Path("/tmp").glob("perf-*.map"):     # node's, for this script
        if str(script) in written.read_text(errors="replace"):
            written.unlink()


def test_a_perf_map_is_read_as_it_grows_and_a_strangers_is_not(tmp_path):
    path = tmp_path / "perf-1.map"
    path.write_text("1000 100 JS:*alpha /x.js:1\n2000 80 JS:~beta /x.js:9\n30")
    pm = PerfMap(os.getpid(), str(path))
    ips = np.array([0x1050, 0x2010, 0x2090, 0x3000], np.uint64)
    assert list(pm.lookup(ips)) == ["JS:*alpha", "JS:~beta", None, None]
    path.write_text(path.read_text() + "00 10 LazyCompile:gamma\n")
    assert list(pm.lookup(ips)) == ["JS:*alpha", "JS:~beta", None, "LazyCompile:gamma"]
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)
        assert list(PerfMap(os.getpid(), str(path)).lookup(ips)) == [None] * 4
