"""``phasewatch run -- CMD``: start a command, watch it, and tell its phases.

CMD is started paused before exec (pinned to one CPU unless ``--no-pin``), the
perf sampling events are attached to it with enable-on-exec and inherited by
its threads and children, and then it runs.  Samples go through the same
pipeline, with the same parameters, as ``phasewatch replay`` would use on the
recorded trace, so a recording replays to the same phases.

Where the host counts no retired instructions (no hardware PMU), intervals end
on time instead; where it has no voltage or productive frequency (no MSRs),
the ``vpf`` detector gives way to ``vpf-ip``.  Both are said once at start.

With a process target the instruction and cycle counts in the samples are
per thread, so the trace says ``counter_scope: thread`` and the decoder takes
their deltas per thread.
"""

from __future__ import annotations

import argparse
import json
import os
import signal

import numpy as np
from rich.markup import escape

from . import detectors, metadata as md
from .batch import RAW_DTYPES, SampleBatch
from .child import Child
from .cmd_replay import (_finite, add_detector_arguments, detector_params, interval_params,
                         open_output, summary_dict, warn)
from .collectors import msr
from .collectors.cpuinfo import base_frequency_hz, read_cpuinfo
from .collectors.registry import CHOICES, open_source
from .errors import UserError
from .live import LiveRun, SourceThread
from .params import HistogramParams, IntervalParams, Params
from .phase_functions import PhaseFunctions
from .pipeline import Pipeline
from .report import console, phase_table, summary_lines
from .results import JsonLinesSink, PhaseSummary
from .source import Source
from .status import StatusLine
from .symbols import Symbolizer
from .trace import TraceWriter

SAMPLE_RATE_HZ = 1000
#: The agent wakes every this many samples per CPU ring (or every POLL_MS),
#: about twice a second at 1 kHz.  Each wake-up has a fixed cost that
#: dominates the agent's CPU time (1.2 % of a core at 64 samples, 0.45 % at 256,
#: 0.3 % at 512: benchmarks/README.md); the price is that phases show up to half a
#: second after their interval ends.
WAKEUP_SAMPLES = 512
POLL_MS = 1000
TOP_FUNCTIONS = 3
#: Width of the table when stdout is a file or pipe (a terminal's own width otherwise).
PIPE_WIDTH = 120

#: Signals of the design that a run may lack, and the raw columns each needs.
OPTIONAL_SIGNALS = {
    "core voltage": ("perf_status",),
    "productive frequency": ("aperf", "mperf", "pperf"),
    "instructions and cycles (CPI)": ("instructions", "cycles"),
}


def add_arguments(parser) -> None:
    parser.add_argument("--cpu", type=int, metavar="N",
                        help="pin CMD to CPU N (default: the least loaded CPU)")
    parser.add_argument("--no-pin", action="store_true", help="let CMD run on any CPU")
    parser.add_argument("--source", choices=CHOICES, default="auto",
                        help="where samples come from: the kernel module, the MSRs (with perf "
                             "for IPs), or perf alone; auto takes the first of these that "
                             "'phasewatch probe' finds (default auto)")
    parser.add_argument("--msr-path", default=msr.DEFAULT_PATH, metavar="TEMPLATE",
                        help="MSR device path, {cpu} replaced by the CPU number "
                             f"(default {msr.DEFAULT_PATH})")
    add_detector_arguments(parser)
    parser.add_argument("--record", metavar="TRACE",
                        help="also write the raw samples to TRACE, for 'phasewatch replay'")
    parser.add_argument("--json", action="store_true",
                        help="print the summary as JSON instead of the phase table")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                        help="the command to run and watch")


def run(args) -> int:
    argv = command_of(args)
    check_arguments(args)
    with Child.start(argv, cpu=args.cpu, pin=not args.no_pin) as child:
        source = open_source(args.source, pid=child.pid,
                             cpus=[child.cpu] if child.cpu is not None else None,
                             msr_path=args.msr_path, rate_hz=SAMPLE_RATE_HZ,
                             enable_on_exec=True, wakeup=WAKEUP_SAMPLES, poll_ms=POLL_MS)
        try:
            return watch(args, child, source)
        finally:
            if child.returncode is None:
                child.stop(signal.SIGKILL, grace=0)


def command_of(args) -> list[str]:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise UserError("no command given: put it after '--', e.g. phasewatch run -- ./prog ARGS")
    return argv


def check_arguments(args) -> None:
    """Reject bad options before anything is started."""
    if args.cpu is not None and args.no_pin:
        raise UserError("--cpu and --no-pin contradict each other: give one of them")
    detector_params(args)
    interval_params(args, IntervalParams(), ("instructions",), warn=lambda msg: None)
    for path in (args.record, args.output):
        check_writable(path)


def watch(args, child: Child, source: Source) -> int:
    signals = tuple(source.signals)
    detector = choose_detector(args.detector, signals)
    interval = interval_params(args, IntervalParams(), signals, warn)
    load_kernels(args, detector, interval, signals)
    out = open_output(args.output)
    sinks, trace, feed = [PhaseSummary()], None, None
    try:
        with child.forward_signals() as forwarder:
            child.release()
            symbolizer = Symbolizer.from_pid(child.pid)
            meta = run_metadata(child, source, signals, interval, program_text_range(symbolizer))
            pipeline = pipeline_for(meta, args, detector)
            functions = PhaseFunctions(symbolizer)
            sinks += [JsonLinesSink(out)] if out else []
            trace = TraceWriter(args.record, meta, signals) if args.record else None
            feed = SourceThread(source.batches()).start()
            status = StatusLine(os.path.basename(child.argv[0]))
            live = LiveRun(feed, pipeline, sinks=sinks, trace=trace, functions=functions,
                           status=status, lost_samples=lambda: source.stats()["lost_samples"],
                           every_second=symbolizer.snapshot)
            with status:
                live.run()
            exit_status = child.wait()
            live.finish()
    finally:
        if child.returncode is None:
            child.stop(signal.SIGKILL, grace=0)
        if feed is None or feed.join(timeout=5.0):
            source.close()  # never under a reader still inside it
        for sink in sinks:
            sink.close()
        if out:
            out.close()
        if trace:
            trace.close()
    run_info = {
        "command": child.argv, "exit_status": exit_status,
        "interrupted": forwarder.interrupted,
        "seconds": (child.ended_ns - child.started_ns) / 1e9,
        "detector": detector, "interval": interval.describe(), "signals": list(signals),
        "source": source.metadata["source"], "not_taken": source.metadata.get("not_taken", {}),
        "missing_signals": missing_signals(signals),
        "samples_lost": {"ring": source.stats()["lost_samples"], "queue": feed.dropped_samples},
        "trace": args.record,
    }
    report(args, run_info, sinks[0], pipeline, functions)
    return exit_status


def load_kernels(args, detector: str, interval: IntervalParams, signals) -> None:
    """Run the pipeline over a few made-up rows, so that loading its compiled
    kernels is start-up, before CMD runs, and not part of watching.  A larger
    batch, then a smaller one (whose work arrays are views), then the partial
    interval: the call signatures a live run meets."""
    meta = md.new(signals={name: "" for name in signals}, interval=interval,
                  text_range=[0x1000, 0x2000])
    pipeline = pipeline_for(meta, args, detector)
    step = max(interval.size // 3, 1)
    for start, rows in ((0, 8), (8, 4)):
        ramp = np.arange(start, start + rows) * step
        batch = {name: ramp.astype(RAW_DTYPES[name]) for name in signals}
        batch["cpu"] = batch["tid"] = np.zeros(rows, np.int32)
        pipeline.feed(SampleBatch(batch))
    pipeline.finish()


def check_writable(path: str | None) -> None:
    """Fail on an output that cannot be written before CMD starts, not after."""
    if path:
        open_output(path).close()


def choose_detector(requested: str, signals) -> str:
    """``vpf`` gives way to ``vpf-ip`` where the host has neither voltage nor
    productive frequency but IP samples (a virtual machine)."""
    if (requested == "vpf" and not detectors.usable_segments("vpf", signals)
            and detectors.usable_segments("vpf-ip", signals)):
        warn("no core voltage or productive frequency on this host (no MSR access): "
             "detecting phases from instruction pointers (--detector vpf-ip)")
        requested = "vpf-ip"
    detectors.check_signals(requested, signals)
    return requested


def missing_signals(signals) -> list[str]:
    have = set(signals)
    return [name for name, columns in OPTIONAL_SIGNALS.items() if not set(columns) <= have]


def program_text_range(symbolizer: Symbolizer) -> tuple[int, int] | None:
    """The run-time .text of CMD's executable, so that replay folds IPs over the
    same range; None if CMD ended before its maps could be read."""
    try:
        return symbolizer.text_range()
    except LookupError:
        return None


def run_metadata(child: Child, source: Source, signals, interval: IntervalParams,
                 text: tuple[int, int] | None) -> dict:
    info = read_cpuinfo()
    model = info.cpu_model()
    base_hz, _ = base_frequency_hz()
    return md.new(
        cpu={"vendor": info.vendor, "family": info.family, "model": info.model,
             "model_name": info.model_name, "model_key": model.key},
        base_freq_mhz=base_hz / 1e6 if base_hz else None,
        signals={name: source.metadata["signals"][name] for name in signals},
        interval=interval,
        histograms=HistogramParams.for_model(model, text_range=text),
        text_range=list(text) if text else None,
        command=child.argv, pinned_cpu=child.cpu, sampling=source.metadata,
        counter_scope=source.metadata["counter_scope"],
        voltage_source=voltage_source(model, source.metadata["signals"]))


def voltage_source(model, signals: dict[str, str]) -> str:
    """Where core voltage comes from: the model table's answer, except that a
    PERF_STATUS an MSR device really answered is read even where the table
    expects none (a virtual machine given MSR access)."""
    if model.virtual and signals.get("perf_status") in ("msr", "msr-safe", "kmod"):
        return "perf_status"
    return model.voltage_source


def pipeline_for(meta: dict, args, detector: str) -> Pipeline:
    """The pipeline replay builds from the same metadata and options."""
    params = Params(interval=md.interval_params(meta), histograms=md.histogram_params(meta),
                    detector=detector_params(argparse.Namespace(**{**vars(args),
                                                                  "detector": detector})))
    return Pipeline.for_trace(meta, params)


def top_functions_cell(top: list[tuple[str, float]]) -> str:
    """``region_a 97%, region_b 2%``: the functions that round to at least 1 %."""
    shown = [f"{escape(name)} {100 * share:.0f}%" for name, share in top if share >= 0.005]
    return ", ".join(shown) or "-"


def report(args, run_info: dict, summary: PhaseSummary, pipeline: Pipeline,
           functions: PhaseFunctions) -> None:
    tops = [functions.top(row["phase"], TOP_FUNCTIONS) for row in summary.table()]
    if args.json:
        result = {**run_info, **summary_dict(summary, pipeline, None)}
        result.pop("ari")
        for row, top in zip(result["phases"], tops):
            row["top_functions"] = [{"name": name, "share": share} for name, share in top]
        print(json.dumps(_finite(result), indent=2))
        return
    out = console()
    if not out.is_terminal:
        out.width = max(out.width, PIPE_WIDTH)
    end = f"exit status {run_info['exit_status']}"
    if run_info["interrupted"]:
        end = "interrupted, " + end
    out.print(f"{' '.join(run_info['command'])}: {end}, {run_info['seconds']:.1f} s, "
              f"{pipeline.samples:,} samples, {summary.n_intervals} intervals "
              f"{pipeline.params.interval.describe()}, detector {run_info['detector']}, "
              f"threshold {pipeline.threshold:.3f}")
    out.print(f"source: {run_info['source']}" + "".join(
        f"; not {name}: {escape(why)}" for name, why in run_info["not_taken"].items()))
    if run_info["missing_signals"]:
        out.print("missing on this host: " + ", ".join(run_info["missing_signals"]))
    out.print(phase_table(summary, extra_columns={
        "top functions": [top_functions_cell(top) for top in tops]}))
    for line in summary_lines(summary, pipeline.dropped()):
        out.print(line)
    lost = run_info["samples_lost"]
    if lost["ring"] or lost["queue"]:
        out.print(f"samples lost: {lost['ring']} in the kernel ring buffers, "
                  f"{lost['queue']} in the agent's queue")
    if run_info["trace"]:
        out.print(f"trace: {run_info['trace']}")
