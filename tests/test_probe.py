"""`phasewatch probe`: real command, real files, real perf events."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from test_collectors_msr import file_value, write_msrs

from phasewatch.collectors import budget, registry
from phasewatch.collectors.kernel_modules import load_hint
from phasewatch.collectors.probe import Roots, probe
from phasewatch.core import kernels

SIGNALS = {"voltage", "aperf", "mperf", "pperf", "tsc", "c3", "c6", "c7", "instructions",
           "cycles", "ip", "energy_package", "energy_core", "cpufreq", "cpuidle"}


def run_probe(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "phasewatch.cli", "probe", *args],
                          capture_output=True, text=True, timeout=60)


def rows(result: dict) -> dict[str, dict]:
    return {r["key"]: r for r in result["signals"]}


def test_json_reads_back_voltage_and_counters_from_fake_msr_files(tmp_path):
    path = tmp_path / "cpu0" / "msr"
    written = {"perf_status": (8192 << 32) | 0x2100, "mperf": 5_000_000_000,
               "aperf": 4_000_000_001, "pperf": 3_500_000_002, "tsc": 123_456_789_012,
               "c3": 11, "c6": 22_000, "c7": 33_000_000}
    write_msrs(path, written)
    proc = run_probe("--json", "--msr-path", str(tmp_path / "cpu{cpu}" / "msr"))
    assert proc.returncode == 0, proc.stderr
    got = rows(json.loads(proc.stdout))
    assert got["voltage"]["available"] and got["voltage"]["value"] == pytest.approx(1.0)
    assert got["voltage"]["unit"] == "V"
    for name in ("aperf", "pperf", "tsc", "c7"):          # highest of each adjacent run: exact
        assert got[name]["value"] == written[name], name
        assert str(path) in got[name]["source"]
    for name in ("mperf", "c3", "c6"):                    # share bytes with the next register
        assert got[name]["value"] == file_value(path, name), name
        assert got[name]["value"] & 0xFF == written[name] & 0xFF
    # The sampler's rate, measured here and fitted to the CPU budget.
    rate = json.loads(proc.stdout)["register_rate"]
    assert rate["requested_hz"] == 1000 and rate["rate_hz"] in budget.RATES_HZ
    assert got["voltage"]["rate"].startswith(f"{rate['rate_hz']} Hz per CPU (sampler")


def test_voltage_of_a_second_value(tmp_path):
    write_msrs(tmp_path / "cpu0" / "msr", {"perf_status": (8847 << 32) | 0x2400})
    got = rows(probe(msr_path=str(tmp_path / "cpu{cpu}" / "msr")))
    assert got["voltage"]["value"] == pytest.approx(8847 / 8192)


def test_every_signal_has_a_row_and_every_missing_one_a_reason():
    proc = run_probe("--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    got = rows(result)
    assert set(got) == SIGNALS
    for key, row in got.items():
        if row["available"]:
            assert row["source"] and row["rate"], key
        else:
            assert row["reason"] and ":" in row["reason"], key


def test_instruction_pointer_sampling_is_available_here():
    got = rows(probe())
    assert got["ip"]["available"], got["ip"]["reason"]
    assert "1 kHz" in got["ip"]["rate"]


def test_missing_msr_device_names_the_module(tmp_path):
    got = rows(probe(msr_path=str(tmp_path / "nothing{cpu}")))
    assert not got["c6"]["available"]
    assert f"no {tmp_path}/nothing0: {load_hint('msr')}" in got["c6"]["reason"]


def test_no_hardware_pmu_is_named_in_a_vm():
    got = rows(probe())
    host = probe()["host"]
    if got["cycles"]["available"]:
        pytest.skip("this host has a hardware PMU")
    reason = got["cycles"]["reason"]
    if host["virtual"]:
        assert reason.startswith("no hardware PMU: virtual machine")
    else:
        assert "PMU" in reason or "perf_event_paranoid" in reason


def test_sysfs_fallbacks_from_a_tmp_tree(tmp_path):
    cpu = tmp_path / "sys/devices/system/cpu"
    (cpu / "cpu0/cpufreq").mkdir(parents=True)
    (cpu / "cpu0/cpufreq/scaling_cur_freq").write_text("2100000\n")
    for i, (name, t) in enumerate([("POLL", 5), ("C1", 1000), ("C6", 77777)]):
        (cpu / f"cpu0/cpuidle/state{i}").mkdir(parents=True)
        (cpu / f"cpu0/cpuidle/state{i}/name").write_text(name + "\n")
        (cpu / f"cpu0/cpuidle/state{i}/time").write_text(f"{t}\n")
    zone = tmp_path / "powercap/intel-rapl:0"
    (zone / "intel-rapl:0:0").mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "energy_uj").write_text("123456789\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    core = tmp_path / "powercap/intel-rapl:0:0"
    core.mkdir()
    (core / "name").write_text("core\n")
    (core / "energy_uj").write_text("4242\n")
    (core / "max_energy_range_uj").write_text("262143328850\n")
    roots = Roots(sys=str(tmp_path / "sys"), powercap=str(tmp_path / "powercap"))
    got = rows(probe(msr_path=str(tmp_path / "none{cpu}"), roots=roots))
    assert got["cpufreq"]["value"] == 2100000
    assert got["cpuidle"]["value"] == {"POLL": 5, "C1": 1000, "C6": 77777}
    assert got["energy_package"]["value"] == 123456789
    assert got["energy_core"]["value"] == 4242


def test_plain_text_lists_every_signal():
    proc = run_probe()
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    if lines[-2].startswith("register sampler: registers at "):     # where the msr entry offers
        del lines[-2]
    assert len(lines) == 1 + len(SIGNALS) + 1 + len(registry.REGISTRY) + 1
    assert lines[1 + len(SIGNALS)].startswith("sources (run --source auto takes ")
    assert lines.pop() == f"kernels: {kernels.status()}"
    del lines[1 + len(SIGNALS)]
    assert all(line.split()[0] in ("yes", "no") for line in lines[1:])
