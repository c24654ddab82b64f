"""phasewatchd's ZeroMQ events over real sockets: they match 'phasewatch replay',
a stalled subscriber stalls nothing and its drops are counted, and bad input
on the wire takes nothing down."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import zmq
from daemonutil import PHASEWATCH, Daemon, write_trace

from phasewatch.daemon.publish import decode_message


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return write_trace(tmp_path_factory.mktemp("zmq") / "one-cpu.arrow")


def replay_phases(trace: Path, tmp_path: Path) -> list[int]:
    out = tmp_path / "replay.jsonl"
    subprocess.run([str(PHASEWATCH), "replay", str(trace), "--output", str(out)],
                   check=True, capture_output=True)
    return [json.loads(line)["phase"] for line in out.read_text().splitlines()]


def subscriber(ctx, endpoint: str, *topics: str, rcvhwm: int = 0) -> zmq.Socket:
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RECONNECT_IVL, 10)
    sub.setsockopt(zmq.LINGER, 0)
    if rcvhwm:
        sub.setsockopt(zmq.RCVHWM, rcvhwm)
    for topic in topics:
        sub.setsockopt_string(zmq.SUBSCRIBE, topic)
    sub.connect(endpoint)
    return sub


def receive(sub, until, timeout: float = 60.0) -> list[tuple[str, dict]]:
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(got):
        if sub.poll(200):
            got.append(decode_message(sub.recv_multipart()))
    return got


def test_subscriber_receives_the_phase_changes_replay_finds(trace, tmp_path):
    phases = replay_phases(trace, tmp_path)
    expected = [(i, p) for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p]
    ctx = zmq.Context()
    daemon = Daemon("--replay", trace, "--replay-speed", "4")
    sub = subscriber(ctx, daemon.zmq, "phase.", "interval.cpu0")
    try:
        got = receive(sub, lambda g: sum(t.startswith("interval.") for t, _ in g) == len(phases))
        events = [e for t, e in got if t == "phase.cpu0"]
        assert [(e["index"], e["phase"]) for e in events] == expected
        assert all(e["v"] == 1 and e["type"] == "phase" and e["target"] == "cpu0" for e in events)
        assert [e["seq"] for e in events] == list(range(len(events)))
        assert events[0]["previous"] is None
        assert [e["previous"] for e in events[1:]] == [p for _, p in expected[:-1]]
        intervals = [e for t, e in got if t == "interval.cpu0"]
        assert [e["phase"] for e in intervals] == phases
        assert [e["index"] for e in intervals] == list(range(len(phases)))
    finally:
        sub.close()
        daemon.stop()
        ctx.term()


def test_sample_batches_are_published_as_columns_when_asked(trace):
    ctx = zmq.Context()
    # Paced, so that the subscriber has joined before the first batch goes out.
    daemon = Daemon("--replay", trace, "--replay-speed", "4", "--zmq-samples")
    sub = subscriber(ctx, daemon.zmq, "sample.")
    try:
        rows = pytest.importorskip("pyarrow.feather").read_table(trace).num_rows
        got = receive(sub, lambda g: sum(len(b) for _, b in g) >= rows)
        batches = [b for _, b in got]
        assert sum(len(b) for b in batches) == rows
        assert {t for t, _ in got} == {"sample.0"}
        t_ns = np.concatenate([b["t_ns"] for b in batches])
        assert (np.diff(t_ns) >= 0).all()
        assert "perf_status" in batches[0] and batches[0]["perf_status"].dtype == np.uint64
    finally:
        sub.close()
        daemon.stop()
        ctx.term()


@pytest.mark.slow
def test_a_stalled_subscriber_stalls_nothing_and_its_drops_are_counted(tmp_path):
    long = write_trace(tmp_path / "long.arrow", samples=400_000)
    rows = pytest.importorskip("pyarrow.feather").read_table(long).num_rows
    config = tmp_path / "hwm.toml"
    config.write_text("[zmq]\nhwm = 10\n[detector]\ninterval_ms = 2\n")
    ctx = zmq.Context()
    daemon = Daemon("--config", config, "--replay", long, "--replay-speed", "0")
    stalled = subscriber(ctx, daemon.zmq, "", rcvhwm=10)   # subscribes, never reads
    try:
        daemon.wait_ready()
        daemon.wait_metric("phasewatch_samples_total", lambda v: v == rows, timeout=120)
        intervals = daemon.metric("phasewatch_intervals_total", target="cpu0")
        assert intervals > 100_000        # every 2 ms of a 400 s trace
        dropped = daemon.metric("phasewatch_zmq_dropped_messages_total")
        assert 0 < dropped < intervals * 1.1
        assert daemon.proc.poll() is None
    finally:
        stalled.close()
        daemon.stop()
        ctx.term()


def test_garbage_on_the_wire_takes_nothing_down(tmp_path):
    minute = write_trace(tmp_path / "minute.arrow", samples=60_000)   # events all along
    ctx = zmq.Context()
    daemon = Daemon("--replay", minute, "--replay-speed", "1")
    try:
        daemon.wait_ready()
        for port in (daemon.metrics_port, daemon.zmq_port):
            for junk in (b"\x00\xff" * 5000, b"GET /" + b"A" * 70000 + b"\r\n\r\n",
                         b"\xff" * 64 + b"\x7f" + b"\x00" * 8, b"POST /metrics HTTP/1.1\r\n\r\n"):
                with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                    try:
                        s.sendall(junk)
                        s.settimeout(0.5)
                        s.recv(100)
                    except OSError:
                        pass
        # Malformed subscriptions: frames that are neither subscribe nor unsubscribe.
        xsub = ctx.socket(zmq.XSUB)
        xsub.setsockopt(zmq.LINGER, 0)
        xsub.connect(daemon.zmq)
        for frame in (b"", b"\x07junk", b"\x02" + bytes(range(256)), b"\x01phase."):
            xsub.send(frame)
        got = receive(xsub, lambda g: any(t.startswith("phase.") for t, _ in g), timeout=30)
        assert any(t == "phase.cpu0" for t, _ in got)
        xsub.close()
        assert daemon.metric("phasewatch_intervals_total", target="cpu0") > 0
        assert daemon.proc.poll() is None
    finally:
        code, err = daemon.stop()
    assert code == 0, err
    assert "Traceback" not in err


def test_events_carry_wall_clock_beside_the_monotonic_clock(trace):
    ctx = zmq.Context()
    daemon = Daemon("--replay", trace, "--replay-speed", "4")
    sub = subscriber(ctx, daemon.zmq, "phase.", "interval.cpu0")
    try:
        got = receive(sub, lambda g: sum(t.startswith("interval.") for t, _ in g) >= 3)
        received_unix_ns = time.time_ns()
        intervals = [e for t, e in got if t.startswith("interval.")]
        phases = [e for t, e in got if t.startswith("phase.")]
        assert intervals and phases
        for e in intervals:
            # a paced replay at speed 4: a quarter of the trace's time, in wall clock
            span = (e["t_end_ns"] - e["t_start_ns"]) / 4
            assert e["t_end_unix_ns"] - e["t_start_unix_ns"] == pytest.approx(span, abs=1e3)
            assert received_unix_ns - 60e9 < e["t_end_unix_ns"] <= received_unix_ns
        ends = {e["index"]: e["t_end_unix_ns"] for e in intervals}
        for e in phases:
            if e["index"] in ends:
                assert abs(e["t_unix_ns"] - ends[e["index"]]) < 1e3
    finally:
        sub.close()
        daemon.stop()
        ctx.term()
