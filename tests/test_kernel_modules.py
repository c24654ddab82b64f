"""Fixes that load a module are offered only where the kernel loads modules:
on a kernel built without them (no /proc/modules, as on this VM) or one that
has stopped loading them, ``probe`` says so instead of ``modprobe msr``."""

import subprocess
import sys
from pathlib import Path

from phasewatch.collectors.kernel_modules import cannot_load, load_hint

BIN = Path(sys.executable).parent / "phasewatch"


def test_probe_suggests_modprobe_only_where_modules_load():
    proc = subprocess.run([str(BIN), "probe"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    if Path("/proc/modules").exists():
        if not Path("/dev/cpu/0/msr").exists():
            assert "modprobe msr" in proc.stdout, proc.stdout
    else:
        assert "modprobe" not in proc.stdout, proc.stdout
        assert "cannot load modules (no /proc/modules); msr must be built in" in proc.stdout


def test_the_hint_follows_proc(tmp_path):
    (tmp_path / "sys/kernel").mkdir(parents=True)
    assert cannot_load(str(tmp_path)) == "cannot load modules (no /proc/modules)"
    assert "modprobe" not in load_hint("msr", proc=str(tmp_path))
    (tmp_path / "modules").write_text("")
    assert cannot_load(str(tmp_path)) is None
    assert load_hint("msr", proc=str(tmp_path)) == "load the msr module (modprobe msr)"
    assert load_hint("intel_rapl_msr", "RAPL driver", proc=str(tmp_path)) == \
        "load the RAPL driver (modprobe intel_rapl_msr)"
    (tmp_path / "sys/kernel/modules_disabled").write_text("1\n")
    assert load_hint("msr", proc=str(tmp_path)) == \
        "this kernel loads no more modules (kernel.modules_disabled = 1); msr must be built in"
