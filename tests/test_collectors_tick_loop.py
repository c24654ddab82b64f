"""The register sampler's compiled tick loop and the CPU budget, over fake MSR
files and a fake powercap tree."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from test_collectors_msr import template, write_msrs

from phasewatch.collectors import budget, hwmon, msr, powercap, registry, tick_loop
from phasewatch.collectors.sampler import Sampler
from phasewatch.core.batch import MISSING, concat
from phasewatch.core.decode import F, DecoderState, decode


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    if tick_loop.load() is None:
        if shutil.which("cc") is None and shutil.which("gcc") is None:
            pytest.skip("no C compiler to build the tick loop")
        tick_loop.build()
    return tick_loop.load()


def sample(sampler) -> "object":
    with sampler:
        return concat(list(sampler.batches()))


def test_compiled_ticks_read_what_the_python_loop_reads(tmp_path, library):
    for cpu in (0, 1):
        write_msrs(tmp_path / f"cpu{cpu}" / "msr", {"tsc": 1000 + cpu, "aperf": 7 * (cpu + 1),
                                                    "perf_status": (8192 << 32) | cpu})
    columns = ("perf_status", "aperf", "tsc")
    batches = {}
    for compiled in (True, False):
        sampler = Sampler([0, 1], [msr.MsrReader([0, 1], columns, template(tmp_path))],
                          max_ticks=150, batch_ticks=64, compiled=compiled)
        batches[compiled] = sample(sampler)
        assert (sampler._loop is not None) == compiled
        assert sampler.stats()["ticks"] == 150
    fast, slow = batches[True], batches[False]
    assert len(fast) == len(slow) == 300
    for name in ("cpu",) + columns:
        assert fast[name].tolist() == slow[name].tolist(), name
    assert fast["tsc"].tolist() == [1000, 1001] * 150
    # 1 kHz deadlines: never sooner than a period apart (load only delays a
    # tick); the precision is benchmarks/bench_ticks.py's.
    gaps = np.diff(fast["t_ns"][::2])
    assert np.median(gaps) >= 0.95 * 1_000_000


def test_compiled_ticks_read_decimal_counters_and_count_what_fails(tmp_path, library):
    write_msrs(tmp_path / "cpu0" / "msr", {"tsc": 5})
    zone = tmp_path / "powercap" / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text("262143328850\n")
    (zone / "energy_uj").write_text("123456789\n")
    energy = powercap.EnergyReader([0], str(tmp_path / "powercap"))
    registers = msr.MsrReader([0], ("tsc", "c7"), template(tmp_path))
    os.truncate(tmp_path / "cpu0" / "msr", 0x3FE)     # c7 (0x3FE) now reads short
    sampler = Sampler([0], [registers, energy], max_ticks=20, batch_ticks=8)
    batch = sample(sampler)
    assert sampler._loop is not None
    assert batch["energy_pkg_uj"].tolist() == [123456789] * 20
    assert batch["tsc"].tolist() == [5] * 20
    assert batch["c7"].tolist() == [int(MISSING)] * 20
    assert sampler.stats()["errors"] == 20 and sampler.lost_cpus == []


def test_a_library_older_than_its_source_is_not_loaded(tmp_path, library):
    stale = tick_loop.build(tmp_path / "_tick_loop.so")
    assert tick_loop.load(stale) is not None
    old = os.stat(tick_loop.SOURCE).st_mtime - 60
    os.utime(stale, (old, old))
    assert tick_loop.load(stale) is None


def test_the_rate_fits_the_register_share_of_the_budget():
    # 30 µs a tick for one CPU: 1 kHz takes 3 %, 50 Hz 0.15 % (within 0.2 %).
    assert budget.fitting_rate(1000, 30e-6, 1) == 50
    # The same tick over 64 CPUs costs 64 times less per CPU: 1 kHz fits.
    assert budget.fitting_rate(1000, 30e-6, 64) == 1000
    # Nothing fits: the lowest rate, never above what was asked for.
    assert budget.fitting_rate(1000, 1.0, 1) == budget.RATES_HZ[-1]
    assert budget.fitting_rate(1, 1.0, 1) == 1


def test_a_rate_over_budget_while_running_goes_down_a_step_or_more():
    assert budget.lower_rate(50, 0.0021) == 25          # just over: one step
    assert budget.lower_rate(100, 0.008) == 25          # four times over: 100 -> 25
    assert budget.lower_rate(2, 0.01) == 2              # the bottom of the ladder


def test_the_sampler_measures_its_ticks_and_says_why_it_lowered_the_rate(tmp_path, library):
    for cpu in (0, 1):
        write_msrs(tmp_path / f"cpu{cpu}" / "msr", {"tsc": 1})
    host = registry.Host(msr_path=template(tmp_path))
    sampler = registry.open_sampler(host, registry.Target(cpus=[0, 1]))
    try:
        chosen = sampler.metadata["register_rate"]
        assert chosen["requested_hz"] == 1000 and chosen["cpus"] == 2
        assert chosen["requested_tick_cost_us"] > 0
        # The rate fits the measured cost, and the sampler ticks at it.
        # (what the budget leaves it while the rest of the agent is not yet measured)
        assert chosen["allowed_share_per_cpu"] == budget.register_share()
        assert chosen["rate_hz"] == budget.fitting_rate(
            1000, chosen["requested_tick_cost_us"] / 1e6, 2, budget.register_share())
        assert sampler.metadata["sample_rate_hz"] == chosen["rate_hz"]
        assert sampler.period_ns == 1_000_000_000 // chosen["rate_hz"]
        assert chosen["lowered"] == (chosen["rate_hz"] < 1000)
        if chosen["lowered"]:
            assert "lowered from 1000 Hz" in chosen["said"]
    finally:
        sampler.close()


def test_what_the_rest_of_the_agent_takes_is_not_left_to_the_registers():
    # The budget is 0.5 % with a fifth kept in hand: 0.4 % in all.
    assert budget.register_share(0.0) == budget.REGISTER_SHARE
    assert budget.register_share(0.0025) == pytest.approx(0.0015)
    assert budget.register_share(0.005) == 0.0
    # Until the rest is measured, it is taken to cost 0.3 %.
    assert budget.register_share() == pytest.approx(0.001)
    # A step up only where the ticks would still take at most 0.8 of the share.
    assert budget.higher_rate(10, 1000, 0.0005, 0.002) == 20        # 0.1 % at 20 Hz
    assert budget.higher_rate(20, 1000, 0.0014, 0.002) == 20        # 0.175 % at 25 Hz: no
    assert budget.higher_rate(20, 1000, 0.0010, 0.002) == 25        # 0.125 % at 25 Hz
    assert budget.higher_rate(500, 500, 0.0001, 0.002) == 500       # never past the request
    assert budget.higher_rate(10, 1000, 0.0, 0.002) == 10           # nothing measured yet


def burn(stop, share: float) -> None:
    """Spin ``share`` of every 100 ms until ``stop`` is set."""
    import time
    while not stop.is_set():
        end = time.thread_time() + 0.1 * share
        while time.thread_time() < end:
            pass
        stop.wait(0.1 * (1 - share))


def test_the_sampler_gives_way_to_the_rest_of_the_agent_and_takes_it_back(tmp_path, library):
    import threading
    import time
    write_msrs(tmp_path / "cpu0" / "msr", {"tsc": 1})
    host = registry.Host(msr_path=template(tmp_path))
    sampler = registry.open_sampler(host, registry.Target(cpus=[0]))
    stop = threading.Event()
    burner = threading.Thread(target=burn, args=(stop, 0.05), daemon=True)   # 5 % of a core

    def rate_after(windows: int) -> dict:
        deadline = time.monotonic() + windows * 1.5 + 5
        seen = 0
        while seen < windows and time.monotonic() < deadline:
            if sampler.next_batch(timeout=0.5) not in (None,):
                seen += 1
        return dict(sampler.metadata["register_rate"])

    try:
        sampler.start()
        burner.start()
        busy = rate_after(6)
        assert busy["allowed_share_per_cpu"] == 0.0, busy
        assert busy["rate_hz"] == budget.RATES_HZ[-1], busy
        assert "may take 0.00 %" in busy["said"]
        stop.set()
        burner.join()
        idle = rate_after(6)
        assert idle["allowed_share_per_cpu"] == pytest.approx(budget.REGISTER_SHARE), idle
    finally:
        stop.set()
        sampler.close()


def test_registers_join_ip_samples_however_far_the_budget_lowers_their_rate(tmp_path, library):
    from phasewatch.collectors.merge import MergedSource
    write_msrs(tmp_path / "cpu0" / "msr", {"tsc": 1})
    sampler = registry.open_sampler(registry.Host(msr_path=template(tmp_path)),
                                    registry.Target(cpus=[0]))
    merged = MergedSource.__new__(MergedSource)
    merged.secondary, merged.tolerance_ns = sampler, registry.MERGE_TOLERANCE_NS
    try:
        sampler.set_rate(10)
        assert merged._tolerance() == 200_000_000         # readings 100 ms apart
        sampler.set_rate(25)                               # readings taken at 10 Hz still count
        assert merged._tolerance() == 200_000_000
    finally:
        sampler.close()


def test_hwmon_core_voltage_is_sampled_and_decoded(tmp_path, library):
    """AMD Zen's core voltage (k10temp's Vcore, in mV) read each tick beside
    the registers, by the compiled loop and the Python one alike, and decoded
    as the voltage where no register reports it."""
    for n, (name, label, value) in enumerate((("nvme", "Composite", "38000"),
                                               ("k10temp", "Vcore", "1093"))):
        dev = tmp_path / "hwmon" / f"hwmon{n}"
        dev.mkdir(parents=True)
        (dev / "name").write_text(name + "\n")
        (dev / "in0_label").write_text(label + "\n")
        (dev / "in0_input").write_text(value + "\n")
    found = hwmon.find_input("k10temp", "Vcore", root=str(tmp_path / "hwmon"))
    assert found == tmp_path / "hwmon" / "hwmon1" / "in0_input"
    write_msrs(tmp_path / "cpu0" / "msr", {"tsc": 5, "aperf": 3, "mperf": 3})
    for compiled in (True, False):
        readers = [msr.MsrReader([0], ("aperf", "mperf", "tsc"), template(tmp_path)),
                   hwmon.VoltageReader(1, found)]
        batch = sample(Sampler([0], readers, max_ticks=20, batch_ticks=8, compiled=compiled))
        assert batch["vcore_mv"].tolist() == [1093] * 20
        from_hwmon = decode(batch, DecoderState(), 3000.0, voltage_from_perf_status=False)
        assert from_hwmon[F["voltage_mv"]].tolist() == [1093.0] * 20
        assert np.isnan(decode(batch, DecoderState(), 3000.0)[F["voltage_mv"]]).all()
