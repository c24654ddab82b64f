"""One source of the daemon on the live loop, in a thread of its own.

A worker takes one source (every CPU system-wide, one watched process, or a
paced replay of a trace) through the one driver to its sinks: the trace it
records, the process's mappings, the host signals, the ZeroMQ publisher, its
targets' counters and energy per phase.  A process target's code is keyed by
file and offset (its mappings, as ``run`` learns them:
:class:`~phasewatch.live.process_maps.ProcessMappings`), and its phases are
named from the code that dominates them.  The main thread ticks it once a
second and stops it.
"""

from __future__ import annotations

import os
import platform
import threading
import time
from dataclasses import asdict, replace

from ..core.driver import Driver
from ..core.params import cpu_model_of, interval_params_of
from ..core.settings import DetectionSettings, choose_detector
from ..core.prediction import PredictionTap
from ..core.source import Sink
from ..formats.trace import TraceWriter
from ..live.host_signals import HostSignals
from ..live.loop import LiveRun, SourceThread
from ..replay.paced import PacedReplay
from .phase_ids import ProgramPhases, TargetPhases, known_kept
from .phase_store import cpu_program, process_program
from .publish import Publisher
from .targets import Targets

#: Ended processes of a target's tree whose mappings stay known to name
#: samples by (those of the intervals not yet classified).
KEEP_ENDED = 512


def source_is_live(source) -> bool:
    return not isinstance(source, PacedReplay)


def fitted_settings(config, source, meta: dict, signals, log) -> DetectionSettings:
    """The config's detection settings for one source: a replay's recorded
    ones where the config gives none, ``vpf`` giving way to ``vpf-ip`` on a
    live host without voltage, the interval the stream's own where none is
    given; an error if the detector can use none of the signals."""
    live = source_is_live(source)
    settings = config.settings(None if live else meta.get("detection"))
    if live:
        settings = replace(settings, detector=choose_detector(settings.detector, signals, log))
    return settings.for_stream(signals, log, default_interval=interval_params_of(meta))


class _Seen(Sink):
    """How many samples a worker took, and how far the newest lags behind now."""

    def __init__(self, clock_ns):
        self.clock_ns = clock_ns
        self.samples = 0
        self.lag_s = 0.0

    def batch(self, batch) -> None:
        self.samples += len(batch)
        newest = int(batch["t_ns"][-1])
        self.lag_s = max((time.monotonic_ns() - self.clock_ns(newest)) / 1e9, 0.0)


class Worker:
    """One source on the live loop, in its own thread, feeding its targets."""

    def __init__(self, name: str, source, meta: dict, signals, config, log, *, target=None,
                 host_signals: bool = True, publisher: Publisher | None = None,
                 clock_ns=lambda t_ns: t_ns, pid: int | None = None, energy=None,
                 catalog=None):
        self.name = name
        self.pid = pid
        self.opened_at = time.time()    # its source's events were opened just before
        self.source = source
        self.meta = meta
        self.signals = tuple(signals)
        self.log = log
        self.settings = fitted_settings(config, source, meta, self.signals, log)
        self.params = self.settings.params(meta)
        self.catalog = catalog      # the daemon's DaemonCatalog, or None
        self.retired_s = config.retired_seconds
        self.program = process_program(pid) if pid is not None and catalog is not None else None
        self.namer = self._namer(pid)
        self.targets = Targets(meta, self.params, target=target, grace_s=config.grace_seconds,
                               books=self._book)
        self.targets.named = self.namer is not None or self._replay_named()
        if energy is not None:
            self.targets.on_dropped = energy.drop
        # A process target's pipeline now: its known phases and mappings go
        # into its recording, and its mappings follow the process.
        pipeline = self.targets.open(target) if pid is not None and target else None
        self.trace = self._trace(config.record, pipeline) if config.record else None
        self.maps = self._maps(pid, pipeline)
        self.host = (HostSignals(meta.get("base_freq_mhz") or 0.0,
                                 cpu_model_of(meta).voltage_source == "perf_status")
                     if host_signals else None)
        self.seen = _Seen(clock_ns)
        self.feed = SourceThread(source.batches())
        self.prediction = PredictionTap(self.params.detector.max_phases)
        sinks = [*([self.trace] if self.trace else []), *([self.maps] if self.maps else []),
                 self.seen,
                 *([self.host] if self.host else []), self.prediction, self.targets,
                 # Raw batches are published by CPU, so only from the CPU-wide source.
                 *([publisher.sink(clock_ns, samples=host_signals)] if publisher else []),
                 *([energy.bound(clock_ns)] if energy else [])]
        lost = (lambda: int(source.stats().get("lost_samples", 0)))
        self.live = LiveRun(self.feed, Driver(self.targets, sinks), lost_samples=lost)
        self.ended = threading.Event()
        self.started = self.stopped = False
        self.error: BaseException | None = None
        self.recording_said = False
        self.thread = threading.Thread(target=self._run, name=f"phasewatchd-{name}", daemon=True)

    def _namer(self, pid: int | None):
        """What names a process target's phases: the functions of its samples,
        each in its own process's mappings where perf's records give them."""
        self.tree = None
        if pid is None or "ip" not in self.signals:
            return None
        from ..live.phase_functions import PhaseFunctions
        from ..live.process_maps import task_records_of
        from ..live.symbolizer import Symbolizer
        from ..live.tree_symbolizer import TreeSymbolizer
        root = Symbolizer.from_pid(pid)
        if task_records_of(self.source) is not None:
            self.tree = TreeSymbolizer(root, keep_ended=KEEP_ENDED)
        return PhaseFunctions(self.tree or root)

    def _replay_named(self) -> bool:
        """A replayed trace of one program (its mappings recorded) names its phases."""
        return (not source_is_live(self.source) and "ip" in self.signals
                and bool(self.meta.get("mappings")))

    def _namer_for(self, name: str):
        """The namer of target ``name``: the process's, or, replaying a
        program's trace, one per CPU over the trace's mappings."""
        if self.namer is not None or not self._replay_named():
            return self.namer
        from ..live.phase_functions import PhaseFunctions
        return PhaseFunctions.of_recording(self.meta)

    def _maps(self, pid: int | None, pipeline):
        """A process target's mappings, kept in step with its pipeline's code
        map, so that its code is keyed by file and offset (as in ``run``),
        and recorded beside its trace: learnt from perf's records of the
        process and the children it starts (``/proc`` read once, for what it
        had mapped before), those of ended processes let go."""
        if pipeline is None or "ip" not in self.signals:
            return None
        from ..live.process_maps import ProcessMappings, task_records_of
        records = task_records_of(self.source)
        maps = ProcessMappings(pid, pipeline, record=self.trace, just_execd=True,
                               records=records, tree=self.tree)
        if records is not None:
            self.targets.kept_mappings = lambda: (maps.row_count, maps.processes, maps.exited)

        def follow(name, pipeline):
            maps.pipeline = pipeline
        self.targets.on_new_pipeline = follow
        return maps

    def _book(self, name: str, pipeline) -> TargetPhases:
        """A new target's phases: its program's in the catalogue (a process's
        executable, a live CPU), else ids in order of appearance."""
        keep = known_kept(pipeline)
        program = self.program
        if program is None and self.catalog is not None and source_is_live(self.source) \
                and name.startswith("cpu"):
            program = cpu_program(name)
        if program is None:
            return TargetPhases(ProgramPhases(name, name, pipeline.profile, keep=keep),
                                self._namer_for(name), keep_s=self.retired_s)
        phases = self.catalog.program(*program, pipeline.profile, keep)
        return TargetPhases(phases, self._namer_for(name), self.catalog, keep_s=self.retired_s)

    def _trace(self, directory: str, pipeline=None) -> TraceWriter:
        # The process id too: two daemons started in the same second, with one
        # directory, record to two files.
        stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        path = os.path.join(directory, f"phasewatchd-{platform.node()}-{self.name}-{stamp}.arrow")
        # The intervals the daemon used, so that a replay splits alike.
        meta = dict(self.meta, recorded_by="phasewatchd", interval=asdict(self.params.interval),
                    detection=self.settings.recorded())
        if pipeline is not None and pipeline.classifier.live:   # replayed from the same phases
            meta["known_phases"] = pipeline.known_phases()
        return TraceWriter(path, meta, self.signals, keep_complete=True,
                           side_table=pipeline is not None)

    @property
    def samples(self) -> int:
        return self.seen.samples

    @property
    def lag_s(self) -> float:
        return self.seen.lag_s

    def start(self) -> "Worker":
        self.feed.start()
        self.thread.start()
        self.started = True
        return self

    def _run(self) -> None:
        try:
            self.live.run()
            if not self.live.stopped:   # the source ended: what waited for a decision is final
                self.live.driver.flush()
                self.targets.save()
        except BaseException as exc:   # reported by the main thread
            self.error = exc
        finally:
            self.ended.set()

    def tick(self) -> list[str]:
        """Once a second: host signals, and targets ended long enough
        forgotten (their names returned)."""
        if self.host is not None:
            self.host.tick()
        if self.ended.is_set() and not source_is_live(self.source):
            return []   # an ended replay's final state stays: nothing will change it
        gone = self.targets.forget_ended()
        for name in gone:
            self.prediction.forget_stream(name)
        if gone and self.host is not None:
            self.host.forget([int(n[3:]) for n in gone if n.startswith("cpu")])
        return gone

    def reconfigure(self, config) -> None:
        """New detector settings take effect now (the interval at the next start)."""
        self.targets.grace_s = config.grace_seconds
        settings = replace(fitted_settings(config, self.source, self.meta, self.signals,
                                           lambda msg: None), interval=self.settings.interval)
        if settings.detector_params() != self.params.detector:
            self.settings = settings
            self.params = replace(self.params, detector=settings.detector_params())
            self.targets.set_params(self.params)
            self.prediction.forget_all()        # every phase retired

    def request_stop(self) -> None:
        self.live.stop()
        if hasattr(self.source, "stop"):
            self.source.stop()

    def stop(self, timeout: float) -> None:
        """Stop, wait for the loop (within ``timeout``), close the source and trace."""
        if self.stopped:
            return
        self.stopped = True
        self.request_stop()
        if self.thread.ident is not None:       # started
            self.thread.join(timeout)
        if not self.thread.is_alive():
            self.targets.save()
        if not self.started or self.feed.join(timeout=0.05):
            self.source.close()     # never under a reader still inside it
        if self.trace is not None:
            self.trace.close()

    @property
    def recording_failure(self) -> str | None:
        """Why the recording is incomplete or gone (a full disk, its folder
        removed), or None."""
        return self.trace.failure if self.trace is not None else None

    @property
    def dropped(self) -> int:
        return self.live.dropped_samples
