"""Debian's Prometheus server scrapes phasewatchd while it replays a trace;
PromQL over the HTTP API finds the series with the right labels and values."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pyarrow.feather
import pytest

from daemonutil import Daemon, free_port, write_trace

from phasewatch.formats import synthetic

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
INTERVALS = 200     # the synthetic schedule's intervals, per CPU


@pytest.fixture(scope="module")
def prometheus_bin():
    if not shutil.which(PROMETHEUS):
        pytest.fail("Debian's prometheus is not installed (packaging/apt-packages.txt; make install)")
    return PROMETHEUS


def start_prometheus(binary, tmp_path, target_port, interval="1s"):
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n"
        "scrape_configs:\n  - job_name: phasewatchd\n"
        f"    static_configs:\n      - targets: ['127.0.0.1:{target_port}']\n")
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return proc, port


def query(port, promql):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_query(port, promql, predicate, timeout=90.0):
    deadline = time.monotonic() + timeout
    result = None
    while time.monotonic() < deadline:
        try:
            result = query(port, promql)
        except OSError:
            result = None
        if result is not None and predicate(result):
            return result
        time.sleep(0.5)
    raise AssertionError(f"{promql}: {result}")


def by_target(result):
    return {r["metric"]["target"]: float(r["value"][1]) for r in result}


@pytest.mark.slow
def test_prometheus_scrapes_the_daemon_replaying_a_trace(prometheus_bin, tmp_path):
    trace = write_trace(tmp_path / "two-cpus.arrow", cpus=2)
    daemon_port = free_port()
    prom, prom_port = start_prometheus(prometheus_bin, tmp_path, daemon_port)
    try:
        with Daemon("--replay", trace, "--replay-speed", "2", metrics_port=daemon_port) as d:
            d.wait_ready()
            done = wait_query(prom_port, "phasewatch_intervals_total",
                              lambda r: len(r) == 2 and all(v == INTERVALS
                                                            for v in by_target(r).values()))
            assert set(by_target(done)) == {"cpu0", "cpu1"}
            assert {r["metric"]["job"] for r in done} == {"phasewatchd"}
            assert {r["metric"]["instance"] for r in done} == {f"127.0.0.1:{daemon_port}"}

            # The schedule's four phases, as 'phasewatch replay' finds them with
            # the default detector where IPs are sampled (vpf-ip).
            assert by_target(query(prom_port, "phasewatch_phases")) == {"cpu0": 4, "cpu1": 4}
            shares = by_target(query(prom_port,
                                     "sum by (target) (phasewatch_phase_intervals_total)"))
            assert shares == {"cpu0": INTERVALS, "cpu1": INTERVALS}
            changes = by_target(query(prom_port, "phasewatch_phase_changes_total"))
            assert all(4 <= v <= 12 for v in changes.values()), changes
            # The schedule ends in its fourth phase to appear (compute-b), and
            # phases are numbered in the order they first appear.
            last = synthetic.SCHEDULE[-1][0]
            first_seen = list(dict.fromkeys(name for name, _ in synthetic.SCHEDULE))
            assert by_target(query(prom_port, "phasewatch_phase")) == \
                {"cpu0": first_seen.index(last), "cpu1": first_seen.index(last)}

            # Per-CPU signals over the run: the model runs at 3 GHz base,
            # voltages within the thesis's 962-1080 mV.
            freq = query(prom_port, "max_over_time(phasewatch_cpu_frequency_hertz[5m])")
            assert {r["metric"]["cpu"] for r in freq} == {"0", "1"}
            assert all(2.9e9 <= float(r["value"][1]) <= 3.1e9 for r in freq), freq
            pfreq = query(prom_port, "min_over_time(phasewatch_cpu_productive_frequency_hertz[5m])")
            assert all(0.2e9 <= float(r["value"][1]) < 2.9e9 for r in pfreq), pfreq
            volts = query(prom_port, "phasewatch_core_voltage_volts")
            assert all(0.962 <= float(r["value"][1]) <= 1.080 for r in volts), volts
            c1 = query(prom_port, 'phasewatch_cpu_cstate_residency_ratio{state="c1"}')
            assert len(c1) == 2 and all(0.0 <= float(r["value"][1]) <= 1.0 for r in c1)
            energy = query(prom_port, "phasewatch_package_energy_joules_total")
            assert len(energy) == 1 and float(energy[0]["value"][1]) > 0
            median = query(prom_port, "histogram_quantile(0.5, phasewatch_core_voltage_sample_volts_bucket)")
            assert 0.98 <= float(median[0]["value"][1]) <= 1.06, median

            samples = query(prom_port, "phasewatch_samples_total")
            assert float(samples[0]["value"][1]) == pyarrow.feather.read_table(trace).num_rows
            assert float(query(prom_port, "phasewatch_samples_dropped_total")[0]["value"][1]) == 0
            info = query(prom_port, "phasewatch_build_info")
            assert info[0]["metric"]["version"] and float(info[0]["value"][1]) == 1
            cpu = query(prom_port, "phasewatch_agent_cpu_seconds_total")
            assert {r["metric"]["mode"] for r in cpu} == {"user", "system"}
            assert query(prom_port, "phasewatch_sampler_lag_seconds")
            up = query(prom_port, 'up{job="phasewatchd"}')
            assert float(up[0]["value"][1]) == 1
    finally:
        prom.terminate()
        prom.wait(timeout=10)
