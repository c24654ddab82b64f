"""phasewatchd on this host's own sources (perf_event): every CPU system-wide
and a watched process by pid, while a real program runs."""

from __future__ import annotations

import subprocess

import pytest

from daemonutil import Daemon


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
