"""A fleet's Prometheus can keep the daemon: an hour of trace time with
thousands of phase changes and hundreds of phases retired, replayed at full
speed under Debian's Prometheus scraping it, leaves a bounded number of
distinct series, and no ``phase`` label value ever names two behaviours."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections import defaultdict

import pyarrow.feather
import pytest
from test_daemon_prometheus import prometheus_bin, start_prometheus, wait_query  # noqa: F401

from daemonutil import Daemon, free_port, write_trace

from phasewatch.live.host_signals import PFREQ_BUCKETS, VOLTAGE_BUCKETS

HOUR_OF_SAMPLES = 3_650_000      # one CPU at 1 kHz: a little over an hour
MAX_PHASES = 2                   # the schedule's three phases (to vpf) never fit: they churn
RETIRED_S = 1.0                  # a retired phase's series leave the exposition after 1 s
SCRAPE = "100ms"


def series(port: int, start: float) -> list[dict]:
    """Every phasewatch_* series Prometheus holds since ``start``."""
    query = urllib.parse.urlencode({"match[]": '{__name__=~"phasewatch_.+"}',
                                    "start": f"{start:.3f}", "end": f"{time.time() + 60:.3f}"})
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/series?{query}", timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]


@pytest.mark.slow
def test_an_hour_of_phase_churn_keeps_the_series_bounded(prometheus_bin, tmp_path):  # noqa: F811
    trace = write_trace(tmp_path / "hour.arrow", cpus=1, samples=HOUR_OF_SAMPLES)
    config = tmp_path / "churn.toml"
    config.write_text(f'[source]\nkind = "replay"\ntrace = "{trace}"\nreplay_speed = 0\n'
                      f'[detector]\nname = "vpf"\nmax_phases = {MAX_PHASES}\n'
                      f'[metrics]\nretired_seconds = {RETIRED_S}\n')
    daemon_port = free_port()
    prom, prom_port = start_prometheus(prometheus_bin, tmp_path, daemon_port, interval=SCRAPE)
    started = time.time()
    try:
        with Daemon("--config", config, metrics_port=daemon_port) as d:
            d.wait_ready()
            assert prom.poll() is None, prom.stderr.read()
            table = pyarrow.feather.read_table(trace, columns=["t_ns"])
            rows, t_ns = table.num_rows, table.column("t_ns").to_numpy()
            done = wait_query(prom_port, "phasewatch_samples_total",
                              lambda r: r and float(r[0]["value"][1]) == rows, timeout=300)
            assert done
            time.sleep(1.0)         # a few scrapes of the final state
            retired = wait_query(prom_port, "phasewatch_phases_retired_total", lambda r: r)
            kept = series(prom_port, started)
            scrapes = wait_query(prom_port, "count_over_time(up[1h])", lambda r: r)
    finally:
        prom.terminate()
        prom.wait(timeout=10)

    # The churn happened, and Prometheus saw it over many scrapes.
    assert float(retired[0]["value"][1]) >= 500
    assert t_ns[-1] - t_ns[0] >= 3600e9
    assert float(scrapes[0]["value"][1]) >= 3
    values = defaultdict(set)
    per_metric = defaultdict(int)
    names_of = defaultdict(set)
    for labels in kept:
        per_metric[labels["__name__"]] += 1
        for name, value in labels.items():
            values[name].add(value)
        if "phase" in labels:
            names_of[labels["phase"]].add(labels["phase_name"])
    # Hundreds of phases were retired, yet their behaviours came back under
    # their own ids: a few ids in all, each with one name, never another's.
    assert all(len(n) == 1 for n in names_of.values()), names_of
    assert len({next(iter(n)) for n in names_of.values()}) == len(names_of)
    assert MAX_PHASES <= len(values["phase"]) <= 8, values["phase"]
    assert values["target"] == {"cpu0"}
    assert per_metric["phasewatch_phase_intervals_total"] == len(values["phase"])
    # Every other metric is one series per target, CPU, package, C-state or mode.
    buckets = len(VOLTAGE_BUCKETS) + len(PFREQ_BUCKETS) + 1     # and +Inf
    bounded = {"cpu": 1, "package": 1, "state": 8, "mode": 2, "le": buckets, "version": 1}
    for name, limit in bounded.items():
        assert len(values[name]) <= limit, (name, values[name])
    assert len(kept) <= 60 + buckets, per_metric
