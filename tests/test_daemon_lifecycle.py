"""phasewatchd's config, signals and systemd notifications, run as a user runs it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pyarrow.feather
import pyarrow.ipc
import pytest
from daemonutil import DAEMON, PHASEWATCH, Daemon, free_port, refused, write_trace

from phasewatch.daemon import config as daemon_config
from phasewatch.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    return write_trace(tmp_path_factory.mktemp("life") / "one-cpu.arrow", samples=60_000)


@pytest.mark.parametrize("body, words", [
    ("[detector]\nthreshold = 2.0\n", ["[detector] threshold", "(0, 1]"]),
    ("[detector]\nname = \"scarphase\"\n", ["[detector] name", "vpf, vpf-ip"]),
    ("[targets]\npids = [\"one\"]\n", ["[targets] pids", "give pids from 1 to"]),
    ("[metrics]\nlisten = \"localhost\"\n", ["[metrics] listen", "ADDRESS:PORT"]),
    ("[zmq]\nhwm = 0\n", ["[zmq] hwm", "from 1 to"]),
    ("[zmq]\nhwm = 3000000000\n", ["[zmq] hwm", "from 1 to 10,000,000"]),
    ("[detector]\ninterval_ms = inf\n", ["[detector] interval_ms", "0.01 to 86,400,000 ms"]),
    ("[detector]\ninterval_ms = 1e-300\n", ["[detector] interval_ms", "0.01 to"]),
    ("[detector]\ninterval_ms = 1e300\n", ["[detector] interval_ms", "0.01 to"]),
    ("[detector]\ninterval_instructions = " + "9" * 400 + "\n",
     ["[detector] interval_instructions = 999", "...: give a number"]),
    ("[detector]\nmax_phases = 100000000000000000000000\n", ["[detector] max_phases", "2 to"]),
    ("[detector]\nthreshold = nan\n", ["[detector] threshold", "(0, 1]"]),
    ("[source]\nreplay_speed = inf\n", ["[source] replay_speed", "0.001 to"]),
    ("[source]\nreplay_speed = 1e-300\n", ["[source] replay_speed", "0.001 to"]),
    ("[source]\nrate_hz = 10000000000\n", ["[source] rate_hz", "1 to 100,000 Hz"]),
    ("[targets]\ncpus = [100000]\n", ["[targets] cpus", "0 to 8191"]),
    ("[targets]\nrescan_seconds = inf\n", ["[targets] rescan_seconds", "0.1 to"]),
    ("x = " + "[" * 100_000 + "]" * 100_000 + "\n", ["nested too deeply"]),
    ("[zmq]\nendpont = \"tcp://127.0.0.1:1\"\n", ["unknown key 'endpont'"]),
    ("[sinks]\n", ["unknown table [sinks]"]),
    ("[source]\nkind = \"replay\"\n", ["needs trace"]),
    ("[detector\n", ["not valid TOML"]),
])
def test_an_invalid_config_is_refused_with_the_key_and_reason(tmp_path, body, words):
    config = tmp_path / "bad.toml"
    config.write_text(body)
    with pytest.raises(UserError) as refusal:
        daemon_config.load(str(config))
    line = str(refusal.value)
    assert line.startswith(f"{config}: ") and "\n" not in line
    for word in words:
        assert word in line


def test_phasewatchd_refuses_an_invalid_config_in_one_line(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text("[detector]\nthreshold = 2.0\n")
    line = refused("--config", config)
    assert line == f"phasewatchd: {config}: [detector] threshold = 2.0: give a distance in (0, 1]"


def test_bad_flags_and_exposure_are_refused(tmp_path, trace):
    assert "ADDRESS:PORT" in refused("--replay", trace, "--metrics", "nowhere")
    assert "no such file" in refused("--replay", tmp_path / "missing.arrow")
    assert "CurveZMQ" in refused("--replay", trace, "--zmq", "tcp://0.0.0.0:5556")
    assert "TLS" in refused("--replay", trace, "--metrics", "0.0.0.0:9464")
    assert "no such directory" in refused("--replay", trace, "--record", tmp_path / "nope")


def test_the_shipped_config_is_valid_and_says_the_defaults():
    shipped = daemon_config.load(str(ROOT / "systemd" / "phasewatch.toml"))
    assert shipped == daemon_config.Config()


def test_config_keys_reach_their_fields():
    c = daemon_config.from_dict({
        "source": {"kind": "perf", "rate_hz": 500},
        "targets": {"cpus": [0, 1], "pids": [1], "commands": ["postgres"],
                    "cgroups": ["/system.slice/x.service"]},
        "detector": {"name": "vpf-ip", "threshold": 0.3, "adaptive": True, "max_phases": 16},
        "zmq": {"samples": True, "hwm": 50}, "metrics": {"grace_seconds": 60}})
    assert (c.source, c.rate_hz, c.cpus, c.pids, c.commands) == ("perf", 500, (0, 1), (1,), ("postgres",))
    assert (c.detector, c.threshold, c.adaptive, c.max_phases) == ("vpf-ip", 0.3, True, 16)
    assert (c.zmq_samples, c.zmq_hwm, c.grace_seconds) == (True, 50, 60)
    with pytest.raises(UserError, match="adaptive = 1: wrong type"):
        daemon_config.from_dict({"detector": {"adaptive": 1}})


def stderr_after_term(daemon: Daemon) -> tuple[int, str, float]:
    start = time.monotonic()
    daemon.proc.send_signal(signal.SIGTERM)
    code, err = daemon.stop(timeout=30)
    return code, err, time.monotonic() - start


def test_sigterm_stops_within_two_seconds_with_the_trace_flushed_and_sockets_closed(trace, tmp_path):
    record = tmp_path / "rec"
    record.mkdir()
    d = Daemon("--replay", trace, "--replay-speed", "1", "--record", record)
    d.wait_ready()
    seen = d.wait_metric("phasewatch_samples_total", lambda v: v > 2000)
    code, err, took = stderr_after_term(d)
    assert code == 0, err
    assert took < 2.0, f"{took:.2f} s to stop"
    recorded = list(record.glob("*.arrow"))
    assert len(recorded) == 1
    rows = pyarrow.feather.read_table(recorded[0]).num_rows     # closed: footer written
    assert seen <= rows < 60_000
    replay = subprocess.run([str(PHASEWATCH), "replay", str(recorded[0])],
                            capture_output=True, text=True)
    assert replay.returncode == 0 and "warning" not in replay.stderr, replay.stderr
    for port in (d.metrics_port, d.zmq_port):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_sighup_keeps_the_old_config_when_the_new_is_invalid(trace, tmp_path):
    config = tmp_path / "d.toml"
    config.write_text("[detector]\nthreshold = 0.25\n")
    d = Daemon("--config", config, "--replay", trace, "--replay-speed", "1")
    d.wait_ready()
    config.write_text("[detector]\nthreshold = 7\n")
    d.proc.send_signal(signal.SIGHUP)
    d.wait_metric("phasewatch_samples_total", lambda v: v > 3000)
    config.write_text("[detector]\nthreshold = 0.2\nname = \"vpf-ip\"\n")
    d.proc.send_signal(signal.SIGHUP)
    d.wait_metric("phasewatch_phases_retired_total", lambda v: v > 0, target="cpu0")
    assert d.proc.poll() is None
    code, err, _ = stderr_after_term(d)
    assert code == 0, err
    assert "reload refused, keeping the running config" in err and "threshold = 7" in err
    assert "config reloaded" in err


def test_readiness_and_watchdog_pings_reach_notify_socket(trace, tmp_path):
    path = str(tmp_path / "notify")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(path)
    listener.settimeout(60)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
    proc = subprocess.Popen([str(DAEMON), "--replay", str(trace), "--metrics",
                             f"127.0.0.1:{free_port()}", "--zmq", f"tcp://127.0.0.1:{free_port()}"],
                            env=env, stderr=subprocess.PIPE, text=True)
    try:
        got = [listener.recv(4096).decode() for _ in range(3)]
        assert got[0].startswith("READY=1")
        assert got[1:] == ["WATCHDOG=1", "WATCHDOG=1"]
        proc.send_signal(signal.SIGTERM)
        while (msg := listener.recv(4096).decode()) == "WATCHDOG=1":
            pass
        assert msg == "STOPPING=1"
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
        listener.close()


def test_phasewatchd_refuses_a_folder_as_its_config_in_one_line(tmp_path):
    line = refused("--config", tmp_path)
    assert line == f"phasewatchd: cannot read config {tmp_path}: not a regular file: give a TOML file"


def detector_choices(parser) -> tuple[str, ...]:
    return next(a.choices for a in parser._actions if "--detector" in a.option_strings)


def test_phasewatchd_takes_every_detector_run_takes():
    """run's --detector, phasewatchd's and the config's [detector] name all
    read the one registry of sample detectors."""
    from phasewatch.cli import main as cli_main, phasewatchd
    from phasewatch.core.detectors import SAMPLE_DETECTORS
    run = cli_main.build_parser(["run"])
    run_parser = next(a for a in run._actions if a.dest == "command").choices["run"]
    assert tuple(detector_choices(run_parser)) == SAMPLE_DETECTORS
    assert tuple(detector_choices(phasewatchd.build_parser())) == SAMPLE_DETECTORS
    for name in SAMPLE_DETECTORS:
        assert daemon_config.from_dict({"detector": {"name": name}}).detector == name


@pytest.mark.parametrize("how", ["flag", "config"])
def test_phasewatchd_detects_with_the_fold_detector_run_offers(trace, tmp_path, how):
    """vpf-ip-fold, by flag or config, is the detector a recording says it used."""
    record = tmp_path / "rec"
    record.mkdir()
    config = tmp_path / "d.toml"
    config.write_text('[detector]\nname = "vpf-ip-fold"\n' if how == "config" else "")
    flags = ["--detector", "vpf-ip-fold"] if how == "flag" else []
    with Daemon("--config", config, "--replay", trace, "--replay-speed", "0", "--record", record,
                *flags) as d:
        d.wait_ready()
        d.wait_metric("phasewatch_intervals_total", lambda v: v >= 50, target="cpu0")
    [recorded] = record.glob("*.arrow")
    meta = json.loads(pyarrow.ipc.open_file(recorded).schema.metadata[b"phasewatch"])
    assert meta["detection"]["detector"] == "vpf-ip-fold"
