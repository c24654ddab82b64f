"""The perf_event source against real child processes and real perf events."""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

from phasewatch.collectors import perf_event as pe, perf_msr
from phasewatch.collectors.perf_source import PerfSource, interval_ends
from phasewatch.core.batch import concat
from phasewatch.errors import UserError
from phasewatch.live.child import Child

BUSY = [sys.executable, "-c", "n = 0\nfor i in range(15_000_000): n += i"]


def hardware_pmu_reason() -> str | None:
    """None where cycles can really be counted, else why not."""
    try:
        fd = pe.perf_event_open(pe.Attr(pe.TYPE_HARDWARE, pe.HW_CPU_CYCLES,
                                        flags={"exclude_kernel", "exclude_hv"}), 0, -1)
    except OSError as exc:
        return f"no hardware PMU here (perf_event_open of cycles: {os.strerror(exc.errno)})"
    os.close(fd)
    return None


NO_PMU = hardware_pmu_reason()


def executable_ranges(pid: int) -> list[tuple[int, int]]:
    ranges = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            addr, perms = line.split()[:2]
            if "x" in perms:
                lo, hi = (int(x, 16) for x in addr.split("-"))
                ranges.append((lo, hi))
    return ranges


def sample_child(argv, **kwargs):
    """Run argv to the end under a PerfSource; the batches, the child's
    executable mappings (seen while it ran) and its rusage."""
    child = Child.start(argv, pin=False)
    kwargs.setdefault("wakeup", 64)     # batches while it runs, to see its mappings
    src = PerfSource(pid=child.pid, enable_on_exec=True, **kwargs)
    child.release()
    batches, maps = [], []
    try:
        for batch in src.batches():
            batches.append(batch)
            if not maps:
                try:
                    maps = executable_ranges(child.pid)
                except OSError:
                    pass
    finally:
        src.close()
    _, status, usage = os.wait4(child.pid, 0)
    return concat(batches), maps, usage, src


def test_cpu_clock_samples_a_child_at_1khz_of_its_cpu_time():
    batch, maps, usage, src = sample_child(BUSY, event="cpu-clock")
    user_s = usage.ru_utime
    assert user_s > 0.5
    rate = len(batch) / user_s
    assert 800 < rate < 1150, (len(batch), user_s)
    assert src.stats()["lost_samples"] == 0


def test_samples_are_the_childs_own_tids_and_ips():
    batch, maps, usage, src = sample_child(BUSY, event="cpu-clock")
    child_tids = set(batch["tid"].tolist())
    assert len(child_tids) == 1
    assert maps, "the child's mappings were never seen"
    ip = batch["ip"]
    inside = np.zeros(len(ip), bool)
    for lo, hi in maps:
        inside |= (ip >= lo) & (ip < hi)
    assert inside.mean() > 0.95
    assert (ip < 2**63).all()                  # user space only by default


def test_batches_are_time_ordered_columns_on_monotonic_clock():
    start = time.monotonic_ns()
    batch, *_ = sample_child(BUSY, event="cpu-clock")
    end = time.monotonic_ns()
    t = batch["t_ns"]
    assert (np.diff(t) >= 0).all()
    assert start <= t[0] and t[-1] <= end
    assert batch.signals[:4] == ("t_ns", "cpu", "tid", "ip")


def test_threads_are_followed(abab):
    batch, *_ = sample_child([str(abab), "0.3", "--threads", "3"], event="cpu-clock")
    assert len(set(batch["tid"].tolist())) >= 3


def test_readers_wake_per_batch_not_per_sample():
    child = Child.start(BUSY, pin=False)
    src = PerfSource(pid=child.pid, enable_on_exec=True, event="cpu-clock", wakeup=64)
    child.release()
    sizes = [len(b) for b in src.batches()]
    src.close()
    child.wait()
    assert np.median(sizes) >= 32, sizes


def test_msr_pmu_counters_ride_in_each_sample():
    cols = perf_msr.available_columns()
    if "tsc" not in cols:
        pytest.skip("the kernel's msr PMU exposes no tsc event here")
    batch, *_ = sample_child(BUSY, event="cpu-clock")
    assert "tsc" in batch
    per_cpu = batch["cpu"] == batch["cpu"][0]
    tsc = batch["tsc"][per_cpu].astype(np.int64)
    assert (np.diff(tsc) >= 0).all() and tsc[-1] > tsc[0]


def test_system_wide_on_given_cpus():
    src = PerfSource(cpus=[0], event="cpu-clock", include_kernel=True)
    child = Child.start(["taskset", "-c", "0"] + BUSY[:2]
                        + ["import time\nt=time.time()\nwhile time.time()-t<0.5: pass"], pin=False)
    child.release()
    got, deadline = [], time.monotonic() + 1.0
    for batch in src.batches():
        got.append(batch)
        if time.monotonic() > deadline:
            break
    src.close()
    child.wait()
    batch = concat(got)
    assert set(batch["cpu"].tolist()) == {0}
    assert len(batch) > 500                    # cpu 0 is sampled, idle or busy
    assert child.pid in set(batch["tid"].tolist()) or len(set(batch["tid"].tolist())) > 1


def test_interval_ends_every_n_events():
    """Software task-clock stands in for instructions here: one row per 50 ms."""
    child = Child.start(BUSY, pin=False)
    src = interval_ends(child.pid, event="task-clock", instructions=50_000_000,
                        enable_on_exec=True, include_kernel=True)
    child.release()
    ends = concat(list(src.batches()))
    src.close()
    _, _, usage = os.wait4(child.pid, 0)
    expected = (usage.ru_utime + usage.ru_stime) / 0.05
    assert abs(len(ends) - expected) <= max(3, 0.2 * expected), (len(ends), expected)


def test_unknown_process_is_a_one_line_error():
    with pytest.raises(UserError, match="no process 999999999"):
        PerfSource(pid=999_999_999)


def test_unknown_event_is_a_one_line_error():
    with pytest.raises(UserError, match="unknown sampling event"):
        PerfSource(pid=os.getpid(), event="bogus")


def test_auto_falls_back_to_cpu_clock_without_a_pmu():
    if NO_PMU is None:
        pytest.skip("this host has a hardware PMU, so auto picks cycles")
    with PerfSource(pid=os.getpid()) as src:
        assert src.event == "cpu-clock"
        assert "instructions" not in src.counted


@pytest.mark.skipif(NO_PMU is not None, reason=NO_PMU or "")
def test_cycles_sampling_carries_instructions_and_cycles():
    batch, maps, usage, src = sample_child(BUSY)
    assert src.event == "cycles"
    assert {"instructions", "cycles"} <= set(batch.signals)
    for tid in set(batch["tid"].tolist()):
        mine = batch["tid"] == tid
        ins = batch["instructions"][mine].astype(np.int64)
        cyc = batch["cycles"][mine].astype(np.int64)
        assert (np.diff(ins) >= 0).all() and (np.diff(cyc) > 0).all()
    assert len(batch) > 0.5 * usage.ru_utime * 1000 / 3   # any sane clock: > ~170 Hz


@pytest.mark.skipif(NO_PMU is not None, reason=NO_PMU or "")
def test_instruction_overflow_every_n_instructions():
    child = Child.start(BUSY, pin=False)
    src = interval_ends(child.pid, instructions=100_000_000, enable_on_exec=True)
    child.release()
    ends = concat(list(src.batches()))
    src.close()
    child.wait()
    assert len(ends) >= 5         # 15M iterations of a Python loop are billions of instructions
