"""``phasewatchd``'s service: the host daemon (its entry point is
:mod:`phasewatch.cli.phasewatchd`).

It watches its targets continuously (every CPU system-wide, or processes by
pid, command name or cgroup; or the CPUs of a replayed trace), detects phases
with one pipeline per target, serves Prometheus metrics and publishes
interval and phase events over ZeroMQ.  Each source runs on the live loop of
``phasewatch run`` (:class:`~phasewatch.live.loop.LiveRun`) in a worker thread;
the main thread handles signals, the watchdog and once-a-second upkeep.

No target's behaviour ends it: an error met while looking for a process
target, opening its source or watching it is logged once, counted in
``phasewatch_target_errors_total`` (:mod:`.target_errors`), and the daemon
goes on with its other targets.  Only its own sources failing (system-wide,
or a replay) end it.

SIGTERM (or SIGINT) stops it within two seconds: sampling ends, the trace is
flushed and closed, the sockets are closed.  SIGHUP reloads the config file:
a config with a mistake is refused and the old one kept.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import replace

from ..collectors.registry import register_rate_of
from ..errors import UserError
from ..formats.tracefiles import open_trace
from ..replay.paced import PacedReplay
from . import config as daemon_config
from .metrics import DaemonCounts, PhasewatchCollector, registry_for, serve
from .publish import Publisher, is_loopback_endpoint
from .sdnotify import Notifier
from .target_errors import TargetErrors
from .worker import Worker, fitted_settings

DEFAULT_CONFIG = "/etc/phasewatch/phasewatch.toml"
STOP_WITHIN_S = 2.0


def log(msg: str) -> None:
    print(f"phasewatchd: {msg}", file=sys.stderr, flush=True)


class LogOnce:
    """The daemon's log, where each message is said once: every worker (a
    process of a target, a CPU) comes with the same warnings about the
    host's signals.  Remembers at most ``limit`` messages."""

    def __init__(self, log, limit: int = 1000):
        self.log = log
        self.limit = limit
        self.said: set[str] = set()

    def __call__(self, msg: str) -> None:
        if msg in self.said:
            return
        if len(self.said) < self.limit:
            self.said.add(msg)
        self.log(msg)


def load_config(args) -> daemon_config.Config:
    path = args.config
    if path is None and os.path.exists(DEFAULT_CONFIG):
        path = DEFAULT_CONFIG
    config = daemon_config.load(path) if path else daemon_config.Config()
    config = daemon_config.with_flags(config, args)
    check_exposure(config, args)
    return config


def check_exposure(config: daemon_config.Config, args=None) -> None:
    """Beyond loopback only with TLS (metrics) and CurveZMQ (events)."""
    if config.metrics:
        host, _ = config.metrics_address
        if host not in ("127.0.0.1", "::1", "localhost") and not config.metrics_certfile:
            raise UserError(f"metrics on {config.metrics}: beyond loopback they need TLS: "
                            f"set [metrics] certfile and keyfile (and client_cafile)")
    if config.zmq and not is_loopback_endpoint(config.zmq) and not config.curve_secret_key:
        raise UserError(f"{daemon_config.zmq_setting(args)} {config.zmq}: beyond loopback events "
                        f"need CurveZMQ: set [zmq] curve_secret_key and curve_authorized_keys")


def open_replay(config) -> tuple[PacedReplay, dict, tuple]:
    reader = open_trace(config.trace, warn=log)
    meta = reader.metadata
    return PacedReplay(reader, config.replay_speed), meta, tuple(reader.signals)


def open_live_sources(config) -> list[tuple[str, object, dict, tuple, str | None, int | None]]:
    """The live sources the config asks for, as (name, source, metadata,
    signals, target, pid): one system-wide over the CPUs, and one per watched process.
    All live sources are opened here and nowhere else in the daemon."""
    from ..live.sources import open_live
    return open_live(config, warn=log)


class Daemon:
    def __init__(self, config: daemon_config.Config, config_path: str | None, args=None,
                 reload: threading.Event | None = None):
        self.config = config
        self.config_path = config_path
        self.args = args
        self.notifier = Notifier()
        self.counts = DaemonCounts()
        self.publisher = None
        self.energy = None
        self.catalog = None
        self.server = None
        self.workers: list[Worker] = []
        self.lost_recordings: list[str] = []
        self.target_errors = TargetErrors(log)
        self.worker_log = LogOnce(log)
        self._refused: set[int] = set()     # processes that could not be opened or watched
        self._stop = threading.Event()
        self._reload = reload or threading.Event()     # set by SIGHUP
        self._last_tick = 0.0
        self._last_scan = time.monotonic()

    # --- start -------------------------------------------------------------

    def start(self) -> None:
        c = self.config
        if c.record:
            check_record_dir(c.record)
        if c.zmq:
            self.publisher = Publisher(c.zmq, hwm=c.zmq_hwm, samples=c.zmq_samples, curve=c.curve,
                                       setting=daemon_config.zmq_setting(self.args))
        try:
            self.energy = open_phase_energy(c)
            self.catalog = open_catalog(c)
            self._open_workers()
            if c.metrics:
                self._serve_metrics()
        except BaseException:
            self.close()
            raise
        for w in self.workers:
            w.start()
        log(f"watching {', '.join(w.name for w in self.workers)}"
            + (f"; metrics on http://{c.metrics}/metrics" if c.metrics else "")
            + (f"; events on {c.zmq}" if c.zmq else ""))

    def _open_workers(self) -> None:
        c = self.config
        if c.source == "replay":
            source, meta, signals = open_replay(c)
            self.workers.append(Worker("replay", source, meta, signals, c, self.worker_log,
                                       publisher=self.publisher, clock_ns=source.clock_ns,
                                       energy=self.energy))
            return
        for name, source, meta, signals, target, pid in open_live_sources(c):
            self.workers.append(Worker(name, source, meta, signals, c, self.worker_log,
                                       target=target,
                                       host_signals=target is None, publisher=self.publisher,
                                       pid=pid, energy=self.energy, catalog=self.catalog))

    def _serve_metrics(self) -> None:
        self.counts.samples = lambda: sum(w.samples for w in self.workers)
        self.counts.dropped = lambda: sum(w.dropped for w in self.workers)
        self.counts.zmq_dropped = lambda: self.publisher.dropped if self.publisher else 0
        self.counts.lag_s = lambda: max((w.lag_s for w in self.workers), default=0.0)
        self.counts.register_rates = lambda: [r for r in (register_rate_of(w.source)
                                                          for w in self.workers) if r]
        self.counts.target_errors = self.target_errors.counts
        self.counts.catalog_write_errors = (
            (lambda: self.catalog.write_errors) if self.catalog is not None else None)
        collector = PhasewatchCollector(
            targets=lambda: [w.targets for w in self.workers],
            host=lambda: [w.host for w in self.workers if w.host is not None],
            counts=self.counts, energy=self.energy)
        host, port = self.config.metrics_address
        try:
            self.server = serve(registry_for(collector), host, port, self.config.tls)
        except OSError as exc:
            raise UserError(f"--metrics {self.config.metrics}: cannot listen: "
                            f"{exc.strerror or exc}: give a free port") from None

    # --- run ---------------------------------------------------------------

    def run(self) -> int:
        self._handle_signals()
        self.start()
        self.notifier.ready(f"watching {len(self.workers)} source(s)")
        ping = self.notifier.watchdog_s / 2 if self.notifier.watchdog_s else None
        next_ping = time.monotonic()
        reported_end = set()
        try:
            while not self._stop.is_set():
                # As often as processes are looked for (a restarted command
                # is watched within rescan_seconds), at least once a second.
                self._stop.wait(min(ping or 1.0, 1.0, self.config.rescan_seconds))
                self._upkeep(reported_end)
                if ping and time.monotonic() >= next_ping:
                    self.notifier.watchdog()
                    next_ping = time.monotonic() + ping
                if self._reload.is_set():
                    self._reload.clear()
                    self.reload()
        finally:
            self.notifier.stopping()
            self.close()
        failed = [w for w in self.workers if w.error is not None and w.pid is None]
        if failed:
            raise failed[0].error
        return 2 if self.lost_recordings else 0

    def _upkeep(self, reported_end: set) -> None:
        now = time.monotonic()
        if now - self._last_tick >= 1.0:
            self._last_tick = now
            gone = [name for w in self.workers for name in w.tick()]
            self._forget_energy(gone)
            if self.energy is not None:     # windows that no interval will close
                self.energy.settle()
            self._drop_finished(reported_end)
        if now - self._last_scan >= self.config.rescan_seconds:
            self._last_scan = now
            self._rescan()
        if self.publisher:
            self.publisher.poll()
        for w in self.workers:
            self._check_recording(w)
            if w.ended.is_set() and w.name not in reported_end:
                reported_end.add(w.name)
                if w.error is not None and w.pid is not None:
                    self._refused.add(w.pid)        # not watched again while it lives
                    self.target_errors.caught(w.name, "watch", w.error)
                elif w.error is not None:
                    self._stop.set()        # the daemon's own source: run() raises it
                else:
                    log(f"{w.name}: the source ended after {w.samples:,} samples; "
                        f"still serving the last state")

    def _forget_energy(self, gone: list[str]) -> None:
        """Energy of targets that left the metrics, unless another worker
        holds the target now (a restarted ``comm:`` target's new process)."""
        if self.energy is None or not gone:
            return
        held = {name for w in self.workers for name in w.targets.by_name}
        self.energy.forget(set(gone) - held)

    def _check_recording(self, w: Worker) -> None:
        """Say, once, that a worker's recording stopped (a full disk)."""
        error = w.trace.write_error if w.trace is not None else None
        if error is not None and not w.recording_said:
            w.recording_said = True
            log(f"recording {w.trace.path}: {error}: it stops here; the "
                f"{w.trace.rows_written:,} samples written before are kept")

    def _rescan(self) -> None:
        """Watch processes of the configured commands and cgroups that started since."""
        c = self.config
        if c.source == "replay" or not (c.commands or c.cgroups):
            return
        from ..live.process_tree import started_under
        watched = {w.pid: w.opened_at for w in self.workers
                   if w.pid is not None and not w.ended.is_set()}
        found = self._find_processes()
        self._refused &= {pid for _, pid in found}      # numbers that ended may come again
        for target, pid in found:
            if pid in watched or pid in self._refused or started_under(pid, watched):
                continue
            try:
                self.workers.append(self._process_worker(target, pid).start())
            except Exception as exc:        # the target's doing, or gone meanwhile
                self._refused.add(pid)
                self.target_errors.caught(target, "open", exc)
                continue
            log(f"watching {target}")

    def _find_processes(self) -> list[tuple[str, int]]:
        """(target, pid) of the configured commands and cgroups, each looked
        for on its own, so that one that cannot be looked for leaves the rest."""
        from ..live.sources import process_targets
        c, found = self.config, []
        specs = ([(f"comm:{name}", replace(c, pids=(), commands=(name,), cgroups=()))
                  for name in c.commands] +
                 [(f"cgroup:{path}", replace(c, pids=(), commands=(), cgroups=(path,)))
                  for path in c.cgroups])
        for target, spec in specs:
            try:
                found += process_targets(spec)
            except Exception as exc:
                self.target_errors.caught(target, "find", exc)
        return found

    def _process_worker(self, target: str, pid: int) -> Worker:
        from ..live.sources import open_process
        c = self.config
        name, source, meta, signals, target, pid = open_process(c, target, pid)
        try:
            return Worker(name, source, meta, signals, c, self.worker_log, target=target,
                          host_signals=False,
                          publisher=self.publisher, pid=pid, energy=self.energy,
                          catalog=self.catalog)
        except BaseException:
            source.close()
            raise

    def _drop_finished(self, reported_end: set) -> None:
        """Workers of processes that ended (and were said to), once their targets have
        left the metrics."""
        done = [w for w in self.workers if w.ended.is_set() and w.pid is not None
                and w.name in reported_end and not w.targets.by_name]
        for w in done:
            self._stop_worker(w, timeout=0.1)
            self.workers.remove(w)

    def _stop_worker(self, w: Worker, timeout: float) -> None:
        """Stop a worker, and say if its recording could not be kept whole."""
        w.stop(timeout)
        if w.recording_failure:
            self.lost_recordings.append(w.recording_failure)
            log(w.recording_failure)

    def _handle_signals(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self._stop.set())
        signal.signal(signal.SIGINT, lambda *_: self._stop.set())
        signal.signal(signal.SIGHUP, lambda *_: self._reload.set())

    def reload(self) -> None:
        """Read the config again; keep the old one if the new one is wrong."""
        if not self.config_path:
            log("SIGHUP: no config file to reload (start with --config FILE)")
            return
        self.notifier.reloading()
        try:
            new = daemon_config.with_flags(daemon_config.load(self.config_path), self.args)
            check_exposure(new, self.args)
            for w in self.workers:
                fitted_settings(new, w.source, w.meta, w.signals, lambda msg: None)
        except UserError as exc:
            log(f"reload refused, keeping the running config: {exc}")
            self.notifier.ready()
            return
        except Exception as exc:        # anything unforeseen keeps the daemon up too
            log(f"reload refused, keeping the running config: {self.config_path}: "
                f"{type(exc).__name__}: {exc}")
            self.notifier.ready()
            return
        self.apply(new)
        self.notifier.ready()

    def apply(self, new: daemon_config.Config) -> None:
        """Detector settings, caps and the sample stream change at once; the
        source, targets and listening addresses at the next start."""
        old, self.config = self.config, new
        restart = [k for k in ("source", "trace", "cpus", "pids",
                               "metrics", "zmq", "record", "msr_path", "rate_hz",
                               "interval_instructions", "interval_ms", "catalog",
                               "catalog_path", "retired_seconds")
                   if getattr(old, k) != getattr(new, k)]
        for w in self.workers:
            w.reconfigure(new)
        if self.publisher:
            self.publisher.samples = new.zmq_samples
        log("config reloaded" + (f"; {', '.join(restart)} take effect at the next start"
                                 if restart else ""))

    def close(self) -> None:
        deadline = time.monotonic() + STOP_WITHIN_S * 0.75
        for w in self.workers:
            w.request_stop()        # all at once: each loop ends within its poll
        for w in self.workers:
            self._stop_worker(w, timeout=max(deadline - time.monotonic(), 0.05))
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None
        if self.energy is not None:
            self.energy.meter.stop()
        if self.catalog is not None:
            self.catalog.close()
            self.catalog = None


def open_catalog(config: daemon_config.Config):
    """The phase catalogue, where it is on; where it cannot be used the
    daemon says so in one line and runs without it."""
    if not config.catalog or config.source == "replay":
        return None
    from .phase_store import DaemonCatalog, catalog_path
    return DaemonCatalog(catalog_path(config.catalog_path), log)


def open_phase_energy(config: daemon_config.Config):
    """Energy per target and phase where RAPL is readable (always tried at the
    default root; a root given that cannot be read is an error)."""
    from ..collectors.powercap import DEFAULT_ROOT
    from ..live.phase_energy import EnergyMeter, PhaseEnergy
    try:
        meter = EnergyMeter.open(config.powercap_root or DEFAULT_ROOT)
    except UserError:
        if config.powercap_root:
            raise
        return None
    return PhaseEnergy(meter.start(), one_run=False)


def check_record_dir(path: str) -> None:
    if not os.path.isdir(path):
        raise UserError(f"--record {path}: no such directory (create it first)")
    if not os.access(path, os.W_OK):
        raise UserError(f"--record {path}: not writable")
