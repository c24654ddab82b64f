"""The one registry of sources: ``probe`` reports it, ``run --source`` and
:func:`open_source` open from it, ``auto`` takes what ``probe`` says it takes,
here and on fake device trees."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_collectors_msr import write_msrs

from phasewatch.collectors import registry
from phasewatch.collectors.kernel_modules import load_hint
from phasewatch.collectors.merge import MergedSource, asof_join
from phasewatch.collectors.msr import MsrReader
from phasewatch.collectors.perf_source import PerfSource
from phasewatch.collectors.probe import Roots, probe
from phasewatch.collectors.sampler import Sampler
from phasewatch.core.batch import MISSING, SampleBatch
from phasewatch.core.source import STATS_KEYS, Reader, Sink, Source
from phasewatch.errors import UserError
from phasewatch.formats.results import PhaseSummary, ResultsSink

BIN = Path(sys.executable).parent / "phasewatch"
BUSY = "import time\nend = time.monotonic() + 0.5\nwhile time.monotonic() < end: pass"


def phasewatch(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *map(str, args)], capture_output=True, text=True,
                          timeout=180)


@pytest.fixture
def fake_msr(tmp_path):
    from phasewatch.collectors.cpuinfo import online_cpus
    for cpu in online_cpus():
        write_msrs(tmp_path / f"cpu{cpu}" / "msr",
                   {"perf_status": (8000 << 32) | 0x2000, "aperf": 1 << 20,
                    "mperf": 1 << 20, "pperf": 1 << 19, "tsc": 1 << 30})
    return str(tmp_path / "cpu{cpu}" / "msr")


def taken_by_run(summary: dict) -> str:
    """The registry entry a run took: ``perf+msr`` is the msr entry with perf's IPs."""
    return summary["source"].split("+")[-1]


def test_run_takes_what_probe_says_auto_takes_on_this_host(tmp_path):
    said = json.loads(phasewatch("probe", "--json").stdout)
    proc = phasewatch("run", "--json", tmp_path / "s.json", "--", sys.executable, "-c", BUSY)
    assert proc.returncode == 0, proc.stderr
    assert taken_by_run(json.loads((tmp_path / "s.json").read_text())) == said["auto"]
    assert {s["name"] for s in said["sources"]} == set(registry.REGISTRY)


def test_auto_takes_the_msrs_of_a_fake_tree_in_probe_and_run(fake_msr, tmp_path):
    said = probe(msr_path=fake_msr)
    assert said["auto"] == "msr"
    msr_offer = {s["name"]: s for s in said["sources"]}["msr"]
    assert {"perf_status", "pperf", "mperf"} <= set(msr_offer["columns"])
    proc = phasewatch("run", "--json", tmp_path / "s.json", "--msr-path", fake_msr, "--",
                      sys.executable, "-c", BUSY)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["source"] == "perf+msr"
    assert summary["detector"] == "vpf-ip"      # the default where IPs are sampled
    assert "kmod" in summary["not_taken"]


def test_auto_prefers_the_kernel_module_and_records_why_it_fell_back(tmp_path):
    # /dev/null is a character device that answers no phasewatch ioctl: the
    # check takes it for the module, opening it fails, auto falls back.
    roots = Roots(kmod="/dev/null")
    assert probe(msr_path=str(tmp_path / "none{cpu}"), roots=roots)["auto"] == "kmod"
    host = registry.Host(msr_path=str(tmp_path / "none{cpu}"), kmod_device="/dev/null")
    source = registry.open_source("auto", pid=os.getpid(), host=host)
    try:
        assert source.metadata["source"] == "perf"
        assert "did not open" in source.metadata["not_taken"]["kmod"]
        assert load_hint("msr") in source.metadata["not_taken"]["msr"]
    finally:
        source.close()


def test_a_missing_kernel_module_is_a_one_line_error():
    proc = phasewatch("run", "--source", "kmod", "--", "true")
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "/dev/phasewatch" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["run", "probe"])
def test_a_bad_msr_path_template_is_a_one_line_error(command):
    extra = ["--", "true"] if command == "run" else []
    proc = phasewatch(command, "--msr-path", "/tmp/{cpux}/msr", *extra)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "{cpu}" in proc.stderr, proc.stderr


def test_unknown_choice_is_refused():
    with pytest.raises(UserError, match="choose one of auto, kmod, msr, perf"):
        registry.open_source("msrs")


def test_every_live_source_and_reader_keeps_its_contract(fake_msr):
    host = registry.Host(msr_path=fake_msr)
    merged = registry.open_source("msr", pid=os.getpid(), cpus=[0], host=host)
    perf = registry.open_source("perf", cpus=[0], host=host)
    system_wide = registry.open_source("msr", cpus=[0], host=host)
    try:
        assert isinstance(system_wide, MergedSource)
        assert system_wide.metadata["counter_scope"] == "cpu"
        assert {"ip", "perf_status"} <= set(system_wide.signals)
        assert isinstance(merged, MergedSource)
        for source in (merged, merged.primary, merged.secondary, perf):
            assert isinstance(source, Source), source
            assert set(STATS_KEYS) <= set(source.stats()), source
            assert set(source.metadata["signals"]) == set(source.signals), source
            assert source.metadata["counter_scope"] in ("cpu", "thread")
        assert isinstance(merged.primary, PerfSource) and isinstance(merged.secondary, Sampler)
        assert merged.metadata["signals"]["perf_status"] == "msr"
        assert merged.metadata["signals"]["ip"] == "perf"
        # Without per-thread instruction counts every counter is per CPU
        thread_counts = {"instructions", "cycles"} <= set(merged.signals)
        assert merged.metadata["counter_scope"] == ("thread" if thread_counts else "cpu")
        for reader in merged.secondary.readers:
            assert isinstance(reader, Reader)
    finally:
        merged.close()
        perf.close()
        system_wide.close()
    assert isinstance(MsrReader([0], ("tsc",), fake_msr), Reader)
    for sink in (ResultsSink(io.StringIO()), PhaseSummary()):
        assert isinstance(sink, Sink)


def test_asof_join_takes_the_latest_reading_of_the_same_cpu():
    rows = SampleBatch({"t_ns": np.array([5, 10, 12, 30, 100]), "cpu": np.array([0, 1, 0, 0, 1]),
                        "ip": np.arange(5, dtype=np.uint64)})
    regs = SampleBatch({"t_ns": np.array([4, 4, 11, 11]), "cpu": np.array([0, 1, 0, 1]),
                        "tsc": np.array([40, 41, 110, 111], np.uint64)})
    out = asof_join(rows, regs, ("tsc",), tolerance_ns=20)
    assert out["tsc"].tolist() == [40, 41, 110, 110, int(MISSING)]   # 100: too old
    assert out["ip"].tolist() == [0, 1, 2, 3, 4]


class Listed:
    """A source over batches given in advance, each after ``delay_s``."""

    def __init__(self, name, batches, delay_s=0.0):
        self.metadata = {"source": name, "counter_scope": "cpu",
                         "signals": {n: name for n in batches[0].signals}}
        self.signals = batches[0].signals
        self._batches, self._delay = batches, delay_s

    def batches(self):
        import time
        for batch in self._batches:
            time.sleep(self._delay)
            yield batch

    def stats(self):
        return {"samples": 0, "lost_samples": 0, "errors": 0}

    def close(self):
        pass


def test_merged_rows_wait_for_the_registers_that_follow_them():
    # IP rows every 1 ms on CPUs 0 and 1; register readings every 1 ms that
    # arrive later than the rows (a slow sampler): no row may be joined with
    # a reading older than the latest one at or before it.
    t = np.arange(0, 200) * 1_000_000
    rows = [SampleBatch({"t_ns": t[i:i + 50] + 300_000, "cpu": (t[i:i + 50] // 1_000_000) % 2,
                         "ip": np.full(50, 0x401000, np.uint64)}) for i in range(0, 200, 50)]
    regs = [SampleBatch({"t_ns": np.repeat(t[i:i + 20], 2), "cpu": np.tile([0, 1], 20),
                         "tsc": np.repeat(t[i:i + 20], 2).astype(np.uint64)})
            for i in range(0, 200, 20)]
    merged = MergedSource(Listed("perf", rows), Listed("msr", regs, delay_s=0.005), ("tsc",))
    out = [b for b in merged.batches()]
    merged.close()
    t_ns = np.concatenate([b["t_ns"] for b in out])
    tsc = np.concatenate([b["tsc"] for b in out])
    assert len(t_ns) == 200 and merged.stats()["samples"] == 200
    assert (tsc == t_ns - 300_000).all()          # the reading 0.3 ms before each row
    assert merged.metadata["signals"] == {"t_ns": "perf", "cpu": "perf", "ip": "perf", "tsc": "msr"}
