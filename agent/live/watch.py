"""Watching one command (or attached process) from its release to its end.

:class:`Watch` fits the detection settings to the source's signals, loads the
kernels on a thread while the command starts, lets it run, and then hands
the queued batches to the one driver with the sinks of the run: the trace
(``--record``), the process mappings, per-phase functions, pinning, the
summary, energy per phase, and the sinks the command adds from its table of
options (results, pprof, the report's figure).  The outputs are put in place
only if the watch ends well.  What it found comes back as a
:class:`WatchResult`, for the command to print.

The watch ends when the command (or attached process) ends, even where
processes it started live on and hold its inherited perf events (a daemon):
those are named, and left running.

With a process target the instruction and cycle counts in the samples are
per thread, so the trace says ``counter_scope: thread`` and the decoder takes
their deltas per thread.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..collectors.cpuinfo import base_frequency_hz, read_cpuinfo
from ..collectors.registry import register_rate_of
from ..core.batch import RAW_DTYPES, SampleBatch
from ..core.params import HistogramParams
from ..core.settings import DetectionSettings
from ..errors import UserError
from ..formats import metadata as md
from .cpu_choice import allowed_cpus
from .loop import SourceThread
from .pinning import PinWhileSingleThreaded

if TYPE_CHECKING:   # numba, pyarrow and the ELF reader load after CMD starts
    from ..core.pipeline import Pipeline, PipelineStats
    from ..core.source import Source
    from ..formats.results import PhaseSummary
    from .phase_energy import PhaseEnergy
    from .phase_functions import PhaseFunctions
    from .relay import TerminalRelay
    from .symbolizer import Symbolizer

#: How long CMD runs before the kernels load (they take a third of a second of CPU).
WARM_UP_AFTER_S = 0.1

#: Signals of the design that a run may lack, and the raw columns each needs.
#: What a host may lack, each with the sets of columns that give it.
OPTIONAL_SIGNALS = {
    "core voltage": (("perf_status",), ("vcore_mv",)),
    "productive frequency": (("aperf", "mperf", "pperf"),),
    "instructions and cycles (CPI)": (("instructions", "cycles"),),
}


@dataclass
class WatchOptions:
    """How a watch runs and what it writes, from the command's options."""

    settings: DetectionSettings     # as the user chose them, before the signals are known
    say: Callable[[str], None]      # warnings (nothing with --quiet)
    program: str | None = None      # the watched executable: no output may overwrite it
    record: str | None = None       # the trace to write
    energy: PhaseEnergy | None = None
    #: The command's own sinks, made once the pipeline exists (--pprof, --report).
    sinks: Callable[["Watch"], list] = lambda watch: []
    #: Sinks opened before CMD starts (--output), so that a failure stops it from running.
    opened: list = field(default_factory=list)
    catalog: str | None = None      # the phase catalogue (None: --no-catalog)


@dataclass
class WatchResult:
    """What a watch found, for the summary, --json and the outputs."""

    info: dict                      # what the summary's header and --json tell of the run
    summary: PhaseSummary
    stats: PipelineStats
    functions: PhaseFunctions
    energy: dict | None             # per phase, where RAPL was read
    failures: list[str]             # outputs that could not be written
    names: dict[int, str] = field(default_factory=dict)    # each phase's name
    prediction: dict | None = None  # the scores of the phase predictions


class Watch:
    """One watch of ``child`` (a :class:`~.child.Child` or an
    :class:`~.attach.Attached`) through ``source``."""

    def __init__(self, child, source: Source, options: WatchOptions,
                 relay: TerminalRelay | None = None):
        self.child, self.source, self.options, self.relay = child, source, options, relay
        self.signals = tuple(source.signals)
        self.settings = options.settings.for_stream(
            self.signals, options.say, fall_back=True,
            rate_hz=source.metadata.get("sample_rate_hz") or 1000.0)
        self.pipeline: Pipeline | None = None
        self.meta: dict = {}
        self.symbolizer: Symbolizer | None = None
        self.tree = None
        self.functions: PhaseFunctions | None = None
        self.summary: PhaseSummary | None = None
        self.prediction = None          # the tap that predicts the phases
        self.trace = None
        self.exit_status: int | None = None
        self.catalog = None
        self._plain_names: dict[int, str] = {}      # names without a catalogue
        self.left_running: list[dict] = []
        self._source_open = True
        self._source_lock = threading.Lock()     # no stop() of a closed source

    def run(self) -> WatchResult:
        """Release the command, watch it to its end, close every output."""
        kernels = threading.Thread(target=self._warm_up, name="phasewatch-kernels", daemon=True)
        feed, driver, complete = None, None, False
        try:
            with self.child.forward_signals() as forwarder:
                kernels.start()
                self.child.release()
                if self.relay:
                    self.relay.start()
                feed = SourceThread(self.source.batches()).start()
                driver, live, tree_watch = self._start(feed)
                self._run(live)
                tree_watch.stop()
                live.finish()
                complete = True
        finally:
            if self.child.returncode is None:
                self.child.stop(signal.SIGKILL, grace=0)
            if self.relay:
                self.relay.stop(timeout=0)
            if feed is None or feed.join(timeout=5.0):
                with self._source_lock:
                    self._source_open = False
                    self.source.close()  # never under a reader still inside it
            failures = self._close(driver, complete)
        return self._result(driver, forwarder, feed, failures)

    def _start(self, feed: SourceThread):
        from ..core.driver import Driver
        from ..core.prediction import PredictionTap
        from ..formats.results import PhaseSummary
        from .loop import LiveRun
        from .phase_functions import PhaseFunctions
        from .process_maps import ProcessMappings, task_records_of
        from .status import StatusLine
        from .symbolizer import Symbolizer
        from .tree_symbolizer import TreeSymbolizer
        from .tree_watch import TreeWatch
        child = self.child
        pinning = PinWhileSingleThreaded(child.pid, child.cpu, allowed_cpus(), self.options.say)
        self.symbolizer = Symbolizer.from_pid(child.pid)
        self.meta = self._metadata()
        self.pipeline = self._pipeline()
        self.catalog = self._catalog()
        if self.pipeline.classifier.live:       # a recording replays from the same phases
            self.meta["known_phases"] = self.pipeline.known_phases()
        self.prediction = PredictionTap.for_pipeline(self.pipeline)
        if self.catalog is not None:
            known = [int(i) for i in self.pipeline.classifier.ids if i >= 0]
            self.catalog.seed_predictor(self.prediction, known)
            # a recording replays to the same predictions
            self.meta["prediction_memory"] = self.prediction.memory("", known)
        self.meta["detection"] = self.settings.recorded()
        self.tree = TreeSymbolizer(self.symbolizer)
        tree_watch = TreeWatch(self.tree, also=[pinning.look]).start()
        self.functions = PhaseFunctions(self.tree)
        self.summary = PhaseSummary()
        trace = self._trace() if self.options.record else None
        maps = ProcessMappings(child.pid, self.pipeline, record=trace, just_execd=True,
                               records=task_records_of(self.source), tree=self.tree)
        self.trace = trace
        # The trace first, the prediction before what writes it, energy
        # before the command's own sinks (a profile takes each interval's
        # energy when it is written, at the close).
        sinks = [*([trace] if trace else []), maps, self.functions, pinning, self.prediction,
                 self.summary,
                 *self.options.opened, *([self.options.energy] if self.options.energy else []),
                 *self.options.sinks(self)]
        driver = Driver(self.pipeline, sinks)
        status = StatusLine(os.path.basename(child.argv[0]), enabled=self.relay is not None)
        live = LiveRun(feed, driver, status=status,
                       lost_samples=lambda: self.source.stats()["lost_samples"])
        if hasattr(child, "on_interrupt"):      # an attached process: Ctrl-C ends the watch
            child.on_interrupt += [live.stop, getattr(self.source, "stop", lambda: None)]
        threading.Thread(target=self._end_with_command, name="phasewatch-end",
                         daemon=True).start()
        return driver, live, tree_watch

    def _end_with_command(self) -> None:
        """End the source when the command ends: processes it left (a daemon)
        hold its inherited events, which would keep the source open.  The
        samples taken until then are all in the rings, and are still read."""
        self.child.wait()
        stop = getattr(self.source, "stop", None)
        with self._source_lock:
            if stop is not None and self._source_open:
                stop()

    def _run(self, live) -> None:
        with live.status as status:
            if self.relay:
                self.relay.write = status.write_above
            live.run()
            self.exit_status = self.child.wait()
            self._tell_left_running()
            if self.relay:
                self.relay.stop()

    def _tell_left_running(self) -> None:
        """Name the processes the command left running, which are not watched on."""
        from .attach import command_line
        pids = self.child.left_running() if hasattr(self.child, "left_running") else []
        for pid in pids:
            try:
                command = command_line(pid)
            except UserError:       # it ended meanwhile
                continue
            self.left_running.append({"pid": pid, "command": command})
        if self.left_running:
            named = ", ".join(f"{p['pid']} ({' '.join(p['command'])})" for p in self.left_running)
            self.options.say(f"{os.path.basename(self.child.argv[0])} ended and left "
                             f"{len(self.left_running)} process(es) running, no longer "
                             f"watched: {named}")

    def _close(self, driver, complete: bool) -> list[str]:
        """Close the sinks (every output put in place, or none after an error)."""
        if driver is not None:
            return driver.close(complete)
        for sink in self.options.opened:
            sink.close(complete=False)
        if self.options.energy:
            self.options.energy.finish()
        return []

    def _result(self, driver, forwarder, feed, failures) -> WatchResult:
        child, source = self.child, self.source
        trace = self.trace
        info = {
            "command": child.argv, "exit_status": self.exit_status,
            "interrupted": forwarder.interrupted,
            "seconds": (child.ended_ns - child.started_ns) / 1e9,
            "detector": self.settings.detector, "detector_chosen": self.options.settings.detector,
            "interval": self.settings.interval.describe(),
            "signals": list(self.signals),
            "source": source.metadata["source"], "not_taken": source.metadata.get("not_taken", {}),
            "kernel_sampled": md.kernel_sampled(source.metadata),
            "register_rate": register_rate_of(source),
            "missing_signals": missing_signals(self.signals),
            "samples_lost": {"ring": source.stats()["lost_samples"], "queue": feed.dropped_samples},
            "trace": self.options.record if trace and not trace.failure else None,
            "left_running": self.left_running,
            # CLOCK_REALTIME minus the samples' CLOCK_MONOTONIC: t_ns + this is wall clock
            "realtime_offset_ns": self.meta["sampling"]["realtime_offset_ns"],
        }
        energy = self.options.energy
        return WatchResult(info, self.summary, self.pipeline.stats(), self.functions,
                           energy.per_phase() if energy else None, failures, self._names(),
                           self.prediction.summary() if self.prediction else None)

    # -- the pieces ----------------------------------------------------------

    def _pipeline(self) -> Pipeline:
        """The pipeline replay builds from the same metadata and settings."""
        from ..core.pipeline import Pipeline
        return Pipeline.for_trace(self.meta, self.settings.params(self.meta))

    def _catalog(self):
        """The program's known phases, given to the pipeline before its first interval."""
        if not self.options.catalog or not self.options.program:
            return None
        from .phase_catalog import CATALOG_ERRORS, RunCatalog
        try:
            catalog = RunCatalog(self.options.catalog, self.options.program, self.options.say)
            catalog.seed(self.pipeline)
        except CATALOG_ERRORS as exc:
            self.options.say(f"phase catalogue {self.options.catalog} not used: {exc}")
            return None
        return catalog

    def phase_names(self) -> dict[int, str]:
        """Each phase's name: the catalogue's, else from its top functions."""
        from .phase_catalog import name_phases
        ids = [r["phase"] for r in self.summary.table()]
        known = self.catalog.names if self.catalog is not None else self._plain_names
        return name_phases(ids, self.functions, known)

    def _names(self) -> dict[int, str]:
        """Each phase's name, and the run's phases kept in the catalogue."""
        names = self.phase_names()
        if self.catalog is None:
            return names
        from .phase_catalog import CATALOG_ERRORS
        rows = self.summary.table()
        try:
            self.catalog.save(self.pipeline, {r["phase"]: r["intervals"] for r in rows},
                              self.prediction)
        except CATALOG_ERRORS as exc:
            self.options.say(f"phase catalogue {self.options.catalog} not updated: {exc}")
        finally:
            self.catalog.close()
        return names

    def _trace(self):
        """The trace writer and its side table (pyarrow, 25 MiB resident, is loaded only for it)."""
        from ..formats.trace import TraceWriter
        return TraceWriter(self.options.record, self.meta, self.signals,
                           inputs=[self.options.program], side_table=True)

    def _metadata(self) -> dict:
        from .phase_profile import realtime_offset_ns
        info = read_cpuinfo()
        model = info.cpu_model()
        base_hz, _ = base_frequency_hz()
        text = program_text_range(self.symbolizer)
        sampled = self.source.metadata
        return md.new(
            cpu={"vendor": info.vendor, "family": info.family, "model": info.model,
                 "model_name": info.model_name, "model_key": model.key},
            base_freq_mhz=base_hz / 1e6 if base_hz else None,
            signals={name: sampled["signals"][name] for name in self.signals},
            interval=self.settings.interval,
            histograms=HistogramParams.for_model(model, text_range=text),
            text_range=list(text) if text else None,
            command=self.child.argv, pinned_cpu=self.child.cpu,
            sampling={**sampled, "realtime_offset_ns": realtime_offset_ns()},
            counter_scope=sampled["counter_scope"],
            voltage_source=voltage_source(model, sampled["signals"]),
            mappings=[])

    def _warm_up(self) -> None:
        """Load the kernels unless CMD ends within WARM_UP_AFTER_S: a command that
        short ends before its first samples would reach the pipeline."""
        if self.child.wait(timeout=WARM_UP_AFTER_S) is None:
            load_kernels(self.settings, self.signals)


def load_kernels(settings: DetectionSettings, signals) -> None:
    """Load the kernels on a thread while CMD starts, so that the first real
    batch finds them loaded: the ahead-of-time module if it is there (its
    entries need nothing more), else the JIT's, by running the pipeline over
    a few made-up rows.  A larger batch, then a smaller one (whose work arrays
    are views), then the partial interval: the call signatures a live run meets."""
    from ..core.kernels import aot_entries
    if aot_entries():
        return
    from ..core.driver import Driver
    from ..core.pipeline import Pipeline
    meta = md.new(signals={name: "" for name in signals}, interval=settings.interval,
                  text_range=[0x1000, 0x2000])
    driver = Driver(Pipeline.for_trace(meta, settings.params(meta)))
    step = max(settings.interval.size // 3, 1)
    for start, rows in ((0, 8), (8, 4)):
        ramp = np.arange(start, start + rows) * step
        batch = {name: ramp.astype(RAW_DTYPES[name]) for name in signals}
        batch["cpu"] = batch["tid"] = np.zeros(rows, np.int32)
        driver.take(SampleBatch(batch))
    driver.finish()


def missing_signals(signals) -> list[str]:
    have = set(signals)
    return [name for name, ways in OPTIONAL_SIGNALS.items()
            if not any(set(columns) <= have for columns in ways)]


def program_text_range(symbolizer: Symbolizer) -> tuple[int, int] | None:
    """The run-time .text of CMD's executable, so that replay folds IPs over the
    same range; None if CMD ended before its maps could be read."""
    try:
        return symbolizer.text_range()
    except LookupError:
        return None


def voltage_source(model, signals: dict[str, str]) -> str:
    """Where core voltage comes from: the model table's answer, except that a
    PERF_STATUS an MSR device really answered is read even where the table
    expects none (a virtual machine given MSR access)."""
    if model.virtual and signals.get("perf_status") in ("msr", "msr-safe", "kmod"):
        return "perf_status"
    return model.voltage_source

