"""powercap, cpufreq, cpuidle, hwmon, cpuinfo and the CPU model table, from tmp trees."""

from __future__ import annotations

import numpy as np
import pytest

from phasewatch.collectors import cpufreq, cpuidle, hwmon, powercap
from phasewatch.collectors.cpuinfo import (base_frequency_hz, online_cpus, parse_cpu_list,
                                           read_cpuinfo)
from phasewatch.core import cpumodels
from phasewatch.core.batch import MISSING

MAX_RANGE = 262143328850


def make_zone(root, name, zone, energy, max_range=MAX_RANGE):
    path = root / name
    path.mkdir(parents=True, exist_ok=True)
    (path / "name").write_text(zone + "\n")
    (path / "energy_uj").write_text(f"{energy}\n")
    (path / "max_energy_range_uj").write_text(f"{max_range}\n")
    return path


def test_energy_delta_across_the_wrap():
    prev = np.array([100, MAX_RANGE - 50, 7, 5], np.uint64)
    cur = np.array([350, 25, MISSING, 5], np.uint64)
    delta = powercap.energy_delta(prev, cur, MAX_RANGE)
    assert delta.tolist() == [250, 76, MISSING, 0]


def test_energy_reader_copies_package_energy_to_its_cpus(tmp_path):
    z0 = make_zone(tmp_path, "intel-rapl:0", "package-0", 1000)
    make_zone(tmp_path, "intel-rapl:1", "package-1", 2000)
    make_zone(tmp_path, "intel-rapl:0:0", "core", 3)
    reader = powercap.EnergyReader([0, 0, 1], str(tmp_path))
    out = np.zeros((3, 1), np.uint64)
    reader.read(out)
    assert out[:, 0].tolist() == [1000, 1000, 2000]
    (z0 / "energy_uj").write_text("1500\n")
    reader.read(out)
    assert out[:, 0].tolist() == [1500, 1500, 2000]
    assert powercap.core_zones(str(tmp_path))[0].name == "core"
    reader.close()


def test_energy_reader_without_rapl_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="no RAPL package zone"):
        powercap.EnergyReader([0], str(tmp_path))


def test_cpufreq_and_cpuidle(tmp_path):
    (tmp_path / "cpu3/cpufreq").mkdir(parents=True)
    (tmp_path / "cpu3/cpufreq/scaling_cur_freq").write_text("1800000\n")
    for i, (name, t) in enumerate([("POLL", 1), ("C1E", 20), ("C6", 300)]):
        d = tmp_path / f"cpu3/cpuidle/state{i}"
        d.mkdir(parents=True)
        (d / "name").write_text(name + "\n")
        (d / "time").write_text(f"{t}\n")
    assert cpufreq.scaling_cur_freq(3, str(tmp_path)) == 1800000
    assert cpufreq.scaling_cur_freq(4, str(tmp_path)) is None
    assert cpuidle.residency_us(3, str(tmp_path)) == {"POLL": 1, "C1E": 20, "C6": 300}
    assert cpuidle.residency_us(4, str(tmp_path)) == {}


def test_hwmon_vcore(tmp_path):
    dev = tmp_path / "hwmon2"
    dev.mkdir()
    (dev / "name").write_text("k10temp\n")
    (dev / "in0_label").write_text("Vcore\n")
    (dev / "in0_input").write_text("1093\n")
    found = hwmon.find_input("k10temp", "Vcore", str(tmp_path))
    assert hwmon.read_volts(found) == pytest.approx(1.093)
    assert hwmon.find_input("k10temp", "Vsoc", str(tmp_path)) is None


CPUINFO = """processor\t: 0
vendor_id\t: {vendor}
cpu family\t: {family}
model\t\t: {model}
model name\t: {name}
cpu MHz\t\t: 3000.000
flags\t\t: fpu tsc msr constant_tsc {flags}

processor\t: 1
vendor_id\t: {vendor}
"""


@pytest.mark.parametrize("vendor,family,model,flags,key,pperf", [
    ("GenuineIntel", 6, 0x5E, "aperfmperf", "intel-skylake+", True),
    ("GenuineIntel", 6, 0x3C, "aperfmperf", "intel-pre-skylake", False),
    ("AuthenticAMD", 0x19, 0x21, "aperfmperf", "amd-zen", False),
    ("AuthenticAMD", 0x15, 0x02, "aperfmperf", "amd-pre-zen", False),
    ("GenuineIntel", 6, 0x5E, "aperfmperf hypervisor", "virtual", False),
])
def test_cpu_models_from_cpuinfo(tmp_path, vendor, family, model, flags, key, pperf):
    (tmp_path / "cpuinfo").write_text(CPUINFO.format(vendor=vendor, family=family, model=model,
                                                     name="Test CPU", flags=flags))
    info = read_cpuinfo(str(tmp_path))
    assert (info.vendor, info.family, info.model, info.model_name) == (vendor, family, model, "Test CPU")
    entry = info.cpu_model()
    assert entry.key == key
    assert entry.has_pperf == pperf and ("pperf" in entry.msr_columns) == pperf


def test_no_aperfmperf_flag_drops_those_columns():
    entry = cpumodels.lookup("GenuineIntel", 6, 0x5E, False, {"msr"})
    assert not entry.has_aperf_mperf and "aperf" not in entry.msr_columns
    assert "perf_status" in entry.msr_columns


def test_zen_voltage_comes_from_hwmon_not_an_msr():
    zen = cpumodels.lookup("AuthenticAMD", 0x17, 0x71)
    assert zen.voltage_source == "hwmon" and "perf_status" not in zen.msr_columns


def test_base_frequency_prefers_cpufreq(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/cpuinfo").write_text(CPUINFO.format(
        vendor="GenuineIntel", family=6, model=0x5E, name="x", flags=""))
    sys_root = tmp_path / "sys"
    assert base_frequency_hz(0, str(sys_root), str(tmp_path / "proc")) == (3e9, "cpuinfo MHz (constant TSC)")
    (sys_root / "devices/system/cpu/cpu0/cpufreq").mkdir(parents=True)
    (sys_root / "devices/system/cpu/cpu0/cpufreq/base_frequency").write_text("3100000\n")
    assert base_frequency_hz(0, str(sys_root), str(tmp_path / "proc"))[0] == 3.1e9


def test_cpu_lists(tmp_path):
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    (tmp_path / "devices/system/cpu").mkdir(parents=True)
    (tmp_path / "devices/system/cpu/online").write_text("0,2-3\n")
    assert online_cpus(str(tmp_path)) == [0, 2, 3]
