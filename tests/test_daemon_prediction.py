"""phasewatchd's phase predictions: in the ZeroMQ interval events, equal to
what ``phasewatch replay`` writes for the same trace; and in Prometheus,
Debian's server scraping the expected remaining seconds and the predictions
right and wrong, one series per target (and outcome)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import zmq
from daemonutil import PHASEWATCH, Daemon, free_port, write_trace
from test_daemon_prometheus import by_target, prometheus_bin, query, start_prometheus, wait_query
from test_daemon_zmq import receive, subscriber

KEYS = ("predicted_next", "predicted_after_change", "expected_remaining_intervals",
        "expected_remaining_s", "confidence")
__all__ = ["prometheus_bin"]        # the fixture, shared


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return write_trace(tmp_path_factory.mktemp("predict") / "one-cpu.arrow")


@pytest.fixture(scope="module")
def replayed(trace, tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("replayed") / "r.jsonl"
    subprocess.run([str(PHASEWATCH), "replay", str(trace), "--output", str(out)],
                   check=True, capture_output=True)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_interval_events_carry_the_predictions_replay_writes(trace, replayed):
    ctx = zmq.Context()
    daemon = Daemon("--replay", trace, "--replay-speed", "4")
    sub = subscriber(ctx, daemon.zmq, "interval.cpu0")
    try:
        got = receive(sub, lambda g: len(g) == len(replayed))
        events = [e for _, e in got]
        assert len(events) == len(replayed)
        for event, row in zip(events, replayed):
            for key in KEYS[:3]:
                assert event[key] == row[key], (key, event, row)
            assert event["confidence"] == row["confidence"]
            assert event["expected_remaining_s"] == pytest.approx(row["expected_remaining_s"])
        assert any(e["predicted_after_change"] is not None for e in events)
    finally:
        sub.close()
        daemon.stop()
        ctx.term()


@pytest.mark.slow
def test_prometheus_scrapes_the_predictions(prometheus_bin, trace, replayed, tmp_path):
    right = sum(a["predicted_next"] == b["phase"] for a, b in zip(replayed, replayed[1:]))
    wrong = len(replayed) - 1 - right
    daemon_port = free_port()
    prom, prom_port = start_prometheus(prometheus_bin, tmp_path, daemon_port)
    try:
        with Daemon("--replay", trace, "--replay-speed", "4", metrics_port=daemon_port) as d:
            d.wait_ready()
            wait_query(prom_port, "phasewatch_intervals_total",
                       lambda r: by_target(r) == {"cpu0": len(replayed)})
            outcomes = query(prom_port, "phasewatch_predictions_total")
            assert {r["metric"]["outcome"]: float(r["value"][1]) for r in outcomes} == \
                {"right": right, "wrong": wrong}
            assert {frozenset(r["metric"]) - {"__name__", "job", "instance"}
                    for r in outcomes} == {frozenset({"target", "outcome"})}
            remaining = by_target(query(prom_port, "phasewatch_phase_expected_remaining_seconds"))
            last = replayed[-1]["expected_remaining_s"]
            assert remaining == {"cpu0": pytest.approx(last, abs=1e-6)}
    finally:
        prom.terminate()
        prom.wait(timeout=10)
