"""phasewatchd on this host's own sources (perf_event): every CPU system-wide
and a watched process by pid, while a real program runs."""

from __future__ import annotations

import os
import subprocess
import time
from types import SimpleNamespace

import pytest
from daemonutil import Daemon

from phasewatch.errors import UserError
from phasewatch.live.sources import CGROUP_ROOT, process_targets


@pytest.mark.slow
def test_live_cpus_and_a_process_target(abab, tmp_path):
    workload = subprocess.Popen([str(abab), "30"])
    config = tmp_path / "live.toml"
    config.write_text(f'[source]\nkind = "perf"\n[targets]\npids = [{workload.pid}]\n'
                      f'[detector]\nname = "vpf-ip"\ninterval_ms = 200\n')
    try:
        with Daemon("--config", config) as d:
            d.wait_ready()
            d.wait_metric("phasewatch_intervals_total", lambda v: v >= 5,
                          target=f"pid:{workload.pid}")
            for cpu in ("cpu0", "cpu1"):
                d.wait_metric("phasewatch_intervals_total", lambda v: v >= 5, target=cpu)
            assert d.metric("phasewatch_samples_total") > 1000
            assert 0 <= d.metric("phasewatch_sampler_lag_seconds") < 30
            assert d.metric("phasewatch_phases", target=f"pid:{workload.pid}") >= 1
    finally:
        workload.kill()
        workload.wait()


@pytest.mark.slow
def test_a_process_target_that_ends_leaves_the_metrics_after_the_grace_period(abab, tmp_path):
    workload = subprocess.Popen([str(abab), "1"])          # A, B, A: about 3 s of CPU
    config = tmp_path / "short.toml"
    config.write_text(f'[source]\nkind = "perf"\n[targets]\ncpus = []\npids = [{workload.pid}]\n'
                      f'[detector]\nname = "vpf-ip"\ninterval_ms = 100\n'
                      f'[metrics]\ngrace_seconds = 1.0\n')
    target = f"pid:{workload.pid}"
    try:
        with Daemon("--config", config) as d:
            d.wait_ready()
            d.wait_metric("phasewatch_intervals_total", lambda v: v >= 3, target=target)
            workload.wait(timeout=60)
            deadline = time.monotonic() + 30
            while d.metric("phasewatch_intervals_total", target=target) is not None:
                assert time.monotonic() < deadline, f"{target} still in the metrics"
                time.sleep(0.5)
            assert d.proc.poll() is None
    finally:
        workload.kill()
        workload.wait()


def test_a_command_target_resolves_to_its_running_process(abab):
    workload = subprocess.Popen([str(abab), "30"])
    try:
        config = SimpleNamespace(pids=(), commands=("abab",), cgroups=())
        deadline = time.monotonic() + 10
        while (found := dict(process_targets(config))) == {} and time.monotonic() < deadline:
            time.sleep(0.1)
        # Other programs called abab may run on this host too: one target each.
        mine = [name for name, pid in found.items() if pid == workload.pid]
        assert mine in (["comm:abab"], [f"comm:abab:{workload.pid}"]), found
        assert len(found) == 1 or all(n == f"comm:abab:{p}" for n, p in found.items())
    finally:
        workload.kill()
        workload.wait()


def test_a_cgroup_target_resolves_to_its_processes():
    with pytest.raises(UserError, match="no cgroup /no/such/group"):
        process_targets(SimpleNamespace(pids=(), commands=(), cgroups=("/no/such/group",)))
    own = open("/proc/self/cgroup").read().splitlines()[-1]
    if not own.startswith("0::") or not os.path.exists(f"{CGROUP_ROOT}/cgroup.procs"):
        pytest.skip("no cgroup v2 hierarchy at /sys/fs/cgroup on this host (cgroup v1)")
    group = own[3:]
    found = process_targets(SimpleNamespace(pids=(), commands=(), cgroups=(group,)))
    assert os.getpid() in [pid for _, pid in found]
    assert found[0][0] == f"cgroup:{group}"


@pytest.mark.slow
def test_a_command_started_after_the_daemon_is_watched(abab, tmp_path):
    config = tmp_path / "comm.toml"
    config.write_text('[source]\nkind = "perf"\n[targets]\ncpus = []\ncommands = ["abab"]\n'
                      'rescan_seconds = 1.0\n[detector]\nname = "vpf-ip"\ninterval_ms = 100\n')
    with Daemon("--config", config) as d:
        d.wait_ready()
        workload = subprocess.Popen([str(abab), "20"])
        try:
            deadline = time.monotonic() + 60
            names = ("comm:abab", f"comm:abab:{workload.pid}")
            while not any((d.metric("phasewatch_intervals_total", target=n) or 0) >= 3
                          for n in names):
                assert time.monotonic() < deadline, d.metrics_text()[-2000:]
                time.sleep(0.5)
            assert d.proc.poll() is None
        finally:
            workload.kill()
            workload.wait()
    code, err = d.stop()
    assert "watching comm:abab" in err
