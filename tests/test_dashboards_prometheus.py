"""Every query of every dashboard, run by Debian's Prometheus server against
phasewatchd replaying a trace on loopback: each parses and returns data, and
every metric name a dashboard uses is one the daemon exports."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pyarrow.feather
import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemonutil import Daemon, free_port, write_trace

from phasewatch.dashboards import rendered
from phasewatch.dashboards.queries import metric_names, queries, substitute

SCRAPE_S = 1
# Grafana's $__rate_interval is at least four scrape intervals.
RATE_INTERVAL = f"{4 * SCRAPE_S}s"
REPLAY_SPEED = 0.5    # the two-CPU synthetic trace (7.5 s) then lasts 15 s
DASHBOARDS = {name: json.loads(text) for name, text in rendered().items()}


class Prometheus:
    """Debian's prometheus server scraping one target every second, on loopback,
    with its TSDB in a temporary folder."""

    def __init__(self, tmp_path, target: str):
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("Debian's prometheus is not installed (packaging/apt-packages.txt)")
        self.port = free_port()
        config = tmp_path / "prometheus.yml"
        config.write_text(json.dumps({
            "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": f"{SCRAPE_S}s"},
            "scrape_configs": [{"job_name": "phasewatchd",
                                "static_configs": [{"targets": [target]}]}]}))
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def api(self, path: str, **params) -> dict:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(params, True)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:   # 400 on a query that does not parse
            body = json.load(error)
        assert body["status"] == "success", f"{params}: {body.get('error')}"
        return body["data"]

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited: {self.proc.stderr.read()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError("prometheus did not get ready in time")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def scraped(tmp_path_factory):
    """Prometheus scraping phasewatchd from before the daemon starts until its
    replay of a two-CPU trace has ended: (daemon, prometheus, when scraping began)."""
    tmp_path = tmp_path_factory.mktemp("dashboards-prometheus")
    trace = write_trace(tmp_path / "two-cpus.arrow", cpus=2)
    metrics_port = free_port()
    prometheus = Prometheus(tmp_path, f"127.0.0.1:{metrics_port}")
    daemon = None
    try:
        prometheus.wait_ready()
        began = time.time()
        daemon = Daemon("--replay", trace, "--replay-speed", REPLAY_SPEED,
                        metrics_port=metrics_port)
        daemon.wait_ready()
        samples = pyarrow.feather.read_table(trace).num_rows
        daemon.wait_metric("phasewatch_samples_total", lambda v: v == samples, timeout=180)
        # A few more scrapes, so that the replay's last state is stored too.
        time.sleep(3 * SCRAPE_S)
        yield daemon, prometheus, began
    finally:
        if daemon is not None:
            daemon.stop()
        prometheus.stop()


def variable_values(prometheus: Prometheus, dashboard: dict) -> dict[str, str]:
    """Each variable's first value, found as Grafana finds it: label values of the
    variable's selector, the host's chosen before the selectors that use it."""
    chosen: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        [selector_query] = [q for q in queries(dashboard)
                            if q.where.endswith(f"variable {variable['name']}")]
        selector = substitute(selector_query.expr, chosen)
        label = variable["query"].rstrip(")").rsplit(",", 1)[1].strip()
        values = prometheus.api(f"label/{label}/values", **{"match[]": selector})
        assert values, f"{selector_query.where}: no values for {label}"
        chosen[variable["name"]] = sorted(values)[0]
    return chosen


def instant(dashboard: dict, where: str) -> bool:
    return any(f"{dashboard['title']} / {panel['title']} / {target['refId']}" == where
               and target.get("instant")
               for panel in dashboard["panels"] for target in panel.get("targets") or [])


def filled_in(daemon, prometheus, dashboard, began, end) -> dict[str, str]:
    """Grafana's variables as the dashboard would fill them in for [began, end]."""
    values = variable_values(prometheus, dashboard)
    assert values["instance"] == f"127.0.0.1:{daemon.metrics_port}"
    return values | {"__rate_interval": RATE_INTERVAL, "__interval": f"{SCRAPE_S}s",
                     "__range": f"{int(end - began) + 1}s"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_query_returns_data_from_a_real_prometheus(scraped, name):
    daemon, prometheus, began = scraped
    dashboard = DASHBOARDS[name]
    end = time.time()
    values = filled_in(daemon, prometheus, dashboard, began, end)
    empty = []
    for query in queries(dashboard):
        expr = substitute(query.expr, values)
        if instant(dashboard, query.where):
            data = prometheus.api("query", query=expr, time=end)
        else:
            data = prometheus.api("query_range", query=expr, start=began, end=end,
                                  step=SCRAPE_S)
        if not data["result"]:
            empty.append(f"{query.where}: {expr}")
    assert empty == [], "queries without data:\n" + "\n".join(empty)


@pytest.mark.slow
def test_every_metric_a_dashboard_uses_is_exported_by_the_daemon(scraped):
    daemon, _, _ = scraped
    exported = {sample.name for family in text_string_to_metric_families(daemon.metrics_text())
                for sample in family.samples}
    used = {name for dashboard in DASHBOARDS.values() for query in queries(dashboard)
            for name in metric_names(query.expr)}
    assert len(used) >= 15
    assert used - exported == set(), "the daemon does not export these"



@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_every_query_runs_under_promtool(scraped, name):
    daemon, prometheus, began = scraped
    dashboard = DASHBOARDS[name]
    values = filled_in(daemon, prometheus, dashboard, began, time.time())
    server = f"http://127.0.0.1:{prometheus.port}"
    for query in queries(dashboard):
        expr = substitute(query.expr, values)
        result = subprocess.run([shutil.which("promtool"), "query", "instant", server, expr],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"{query.where}: {expr}: {result.stderr}"
