"""The live daemon over fake MSR files says the rate its register sampler
reads at, lowered where 1 kHz does not fit the CPU budget."""

from __future__ import annotations

import pytest
from test_collectors_msr import write_msrs

from daemonutil import Daemon
from phasewatch.collectors import budget
from phasewatch.collectors.cpuinfo import online_cpus


@pytest.mark.slow
def test_the_daemon_exports_the_register_rate(tmp_path):
    for cpu in online_cpus():
        write_msrs(tmp_path / f"cpu{cpu}" / "msr", {"tsc": 1, "aperf": 1, "mperf": 1})
    config = tmp_path / "msr.toml"
    config.write_text(f'[source]\nkind = "msr"\nmsr_path = "{tmp_path}/cpu{{cpu}}/msr"\n')
    with Daemon("--config", config) as d:
        d.wait_ready()
        rate = d.wait_metric("phasewatch_register_rate_hertz", lambda v: v > 0)
        assert d.metric("phasewatch_register_rate_requested_hertz") == 1000
        assert rate in budget.RATES_HZ and rate <= 1000
        share = d.metric("phasewatch_register_sampler_cpu_ratio")
        assert 0 < share < 0.05
