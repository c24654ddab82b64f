"""The systemd unit: systemd-analyze verify passes, the hardening is there, and
``make install-system-files`` puts every file where systemd looks."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from phasewatch.daemon import config as daemon_config

ROOT = Path(__file__).resolve().parents[1]
UNIT = ROOT / "systemd" / "phasewatchd.service"
VENV = Path(sys.executable).parent.parent


def install_files(destdir: Path, prefix: Path) -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT), "install-system-files", f"DESTDIR={destdir}",
                    f"PREFIX={prefix}"], check=True, capture_output=True)
    return destdir / "etc"


def unit_settings(text: str) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def test_make_installs_the_unit_config_and_modules(tmp_path):
    etc = install_files(tmp_path, Path("/srv/pw"))
    unit = (etc / "systemd/system/phasewatchd.service").read_text()
    assert "ExecStart=/srv/pw/bin/phasewatchd --config /etc/phasewatch/phasewatch.toml" in unit
    assert daemon_config.load(str(etc / "phasewatch/phasewatch.toml")) == daemon_config.Config()
    assert (etc / "modules-load.d/phasewatch.conf").read_text().split("\n")[-3:-1] == ["msr", "phasewatch"]
    (etc / "phasewatch/phasewatch.toml").write_text("[detector]\nthreshold = 0.3\n")
    install_files(tmp_path, Path("/srv/pw"))          # an existing config is kept
    assert "0.3" in (etc / "phasewatch/phasewatch.toml").read_text()


def test_the_unit_passes_systemd_analyze_verify(tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    etc = install_files(tmp_path, VENV)       # ExecStart must name an executable that exists
    unit = etc / "systemd/system/phasewatchd.service"
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "phasewatchd.service" not in proc.stderr, proc.stderr


def test_the_unit_is_hardened_and_says_why_for_each_capability():
    text = UNIT.read_text()
    s = unit_settings(text)
    assert s["Type"] == ["notify"] and s["Restart"] == ["on-failure"] and "WatchdogSec" in s
    for key in ("NoNewPrivileges", "ProtectHome", "PrivateTmp"):
        assert s[key] == ["yes"], key
    assert s["ProtectSystem"] == ["strict"]
    assert s["DevicePolicy"] == ["closed"]
    assert s["DeviceAllow"] == ["char-cpu/msr r", "/dev/phasewatch rw"]
    capabilities = s["CapabilityBoundingSet"][0].split()
    assert capabilities and "CAP_SYS_ADMIN" not in capabilities
    comments = [line for line in text.splitlines() if line.startswith("#")]
    for cap in capabilities:
        reason = [c for c in comments if re.match(rf"#\s+{cap}\s+\S", c)]
        assert reason, f"{cap} has no stated reason"


def test_the_unit_bounds_the_daemons_memory():
    text = UNIT.read_text()
    keys = dict(line.split("=", 1) for line in text.splitlines() if "=" in line
                and not line.startswith("#"))
    assert keys["MemoryMax"].endswith(("M", "G")) and keys["MemoryHigh"].endswith(("M", "G"))
