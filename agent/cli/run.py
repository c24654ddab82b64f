"""``phasewatch run -- CMD``: start a command, watch it, and tell its phases.

CMD is started paused before exec (pinned to one CPU unless ``--no-pin``), the
source ``--source`` names is opened for it from the registry of sources
(:mod:`phasewatch.collectors.registry`: perf sampling events attached with
enable-on-exec and inherited by its threads and children, with the MSR
sampler's readings of its CPU joined on where the host has MSRs), and then it
runs.  Samples go through the same
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
import threading
from typing import TYPE_CHECKING

import numpy as np

from ..collectors import msr
from ..collectors.cpuinfo import base_frequency_hz, read_cpuinfo
from ..collectors.registry import CHOICES, open_source, register_rate_of
from ..console import warn
from ..core.batch import ID_RANGES, RAW_DTYPES, SampleBatch
from ..core.params import (HistogramParams, IntervalParams, Params, histogram_params_of,
                           interval_params_of)
from ..core.settings import choose_detector, detector_params, interval_params
from ..errors import UserError
from ..formats import metadata as md
from ..formats.outputs import check_outputs, open_output
from ..formats.results import finite, summary_dict
from ..live.child import Child, resolve_command
from ..live.loop import SourceThread
from .arguments import add_detector_arguments, number

# CMD execs as soon as its perf events are open; numba, the kernels, pyarrow,
# rich and the ELF reader load after, on a thread and in watch(), while the
# samples queue.
if TYPE_CHECKING:
    from ..core.pipeline import Pipeline
    from ..core.source import Source
    from ..formats.results import PhaseSummary
    from ..live.phase_functions import PhaseFunctions
    from ..live.symbols import Symbolizer

SAMPLE_RATE_HZ = 1000
#: The agent wakes every this many samples per CPU ring (or every POLL_MS),
#: about once a second at 1 kHz.  Each wake-up has a fixed cost that
#: dominates the agent's CPU time (benchmarks/README.md); the price is that
#: phases show up to a second after their interval ends.
WAKEUP_SAMPLES = 1000
POLL_MS = 1000
#: How long CMD runs before the kernels load (they take a third of a second of CPU).
WARM_UP_AFTER_S = 0.1
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
    parser.add_argument("--cpu", type=number(int, 0, ID_RANGES["cpu"][1]), metavar="N",
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
    parser.add_argument("--report", metavar="DIR",
                        help="also draw the phases into DIR (as 'phasewatch report' does)")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                        help="the command to run and watch")


def run(args) -> int:
    argv = command_of(args)
    check_arguments(args, argv)
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


def check_arguments(args, argv: list[str]) -> None:
    """Reject bad options, a missing command and outputs that would destroy
    a file before anything is started or written."""
    if args.cpu is not None and args.no_pin:
        raise UserError("--cpu and --no-pin contradict each other: give one of them")
    detector_params(args)
    msr.device_path(args.msr_path, 0)
    interval_params(args, IntervalParams(), ("instructions",), warn=lambda msg: None)
    args.program = resolve_command(argv[0])
    check_outputs([args.record, args.output], inputs=[args.program])
    if args.report:
        from ..report.folder import check_report_dir
        check_report_dir(args.report)


def watch(args, child: Child, source: Source) -> int:
    signals = tuple(source.signals)
    detector = choose_detector(args.detector, signals, warn)
    interval = interval_params(args, IntervalParams(), signals, warn)
    kernels = threading.Thread(target=warm_up, args=(child, args, detector, interval, signals),
                               name="phasewatch-kernels", daemon=True)
    out = open_output(args.output, inputs=[args.program], binary=True) if args.output else None
    sinks, trace, feed, maps, finished = [], None, None, None, False
    try:
        with child.forward_signals() as forwarder:
            kernels.start()
            child.release()
            feed = SourceThread(source.batches()).start()
            from ..formats.results import JsonLinesSink, PhaseSummary
            from ..live.loop import LiveRun
            from ..live.phase_functions import PhaseFunctions
            from ..live.process_maps import ProcessMappings
            from ..live.status import StatusLine
            from ..live.symbols import Symbolizer
            sinks.append(PhaseSummary())
            symbolizer = Symbolizer.from_pid(child.pid)
            meta = run_metadata(child, source, signals, interval, program_text_range(symbolizer))
            pipeline = pipeline_for(meta, args, detector)
            maps = ProcessMappings(child.pid, pipeline, record=args.record, just_execd=True)
            figure = observe_figure(pipeline) if args.report else None
            functions = PhaseFunctions(symbolizer)
            sinks += [JsonLinesSink(out.stream)] if out else []
            trace = open_trace(args, meta, signals) if args.record else None
            status = StatusLine(os.path.basename(child.argv[0]))
            live = LiveRun(feed, pipeline, sinks=sinks, trace=trace, functions=functions,
                           status=status, lost_samples=lambda: source.stats()["lost_samples"],
                           every_second=symbolizer.snapshot, taps=[maps.before_feed])
            with status:
                live.run()
            exit_status = child.wait()
            live.finish()
            for sink in sinks:
                sink.close()
            finished = True
    finally:
        if child.returncode is None:
            child.stop(signal.SIGKILL, grace=0)
        if feed is None or feed.join(timeout=5.0):
            source.close()  # never under a reader still inside it
        close_outputs([out, trace], commit=finished)
        if maps:
            maps.close()
    run_info = {
        "command": child.argv, "exit_status": exit_status,
        "interrupted": forwarder.interrupted,
        "seconds": (child.ended_ns - child.started_ns) / 1e9,
        "detector": detector, "interval": interval.describe(), "signals": list(signals),
        "source": source.metadata["source"], "not_taken": source.metadata.get("not_taken", {}),
        "register_rate": register_rate_of(source),
        "missing_signals": missing_signals(signals),
        "samples_lost": {"ring": source.stats()["lost_samples"], "queue": feed.dropped_samples},
        "trace": args.record if trace and not trace.failure else None,
    }
    report(args, run_info, sinks[0], pipeline, functions)
    if figure is not None:
        draw(args.report, figure, functions, run_info)
    failures = [o.failure for o in (out, trace) if o and o.failure]
    if failures:
        raise UserError("; ".join(failures))
    return exit_status


def open_trace(args, meta: dict, signals):
    """The trace writer (pyarrow, 25 MiB resident, is loaded only for it)."""
    from ..formats.trace import TraceWriter
    return TraceWriter(args.record, meta, signals, inputs=[args.program])


def observe_figure(pipeline: Pipeline):
    from ..report.figure import FigureRecorder
    recorder = FigureRecorder(pipeline.params, pipeline.layout.bounds, pipeline.used)
    pipeline.observe_profiles(recorder)
    return recorder


def draw(out_dir: str, recorder, functions: PhaseFunctions, run_info: dict) -> None:
    """The report of the run, as 'phasewatch report' draws it from a recording."""
    from ..report.folder import phase_rows, write_report
    if recorder.n_intervals == 0:
        warn(f"no report in {out_dir}: the run ended before its first interval did")
        return
    iv = recorder.intervals()
    figure = recorder.figure(iv.phase, iv.distance, iv.new_phase)
    notes = [f"{' '.join(run_info['command'])}: {run_info['seconds']:.1f} s, "
             f"{len(iv)} intervals {run_info['interval']}, detector {run_info['detector']}"]
    write_report(out_dir, figure, f"phases of {os.path.basename(run_info['command'][0])}",
                 notes, phase_rows(iv, functions))


def close_outputs(outputs, commit: bool) -> None:
    """Put complete outputs in place; after an error, leave the old files."""
    for output in outputs:
        if output is None:
            continue
        if commit:
            output.close()
        else:
            output.discard()


def warm_up(child: Child, args, detector: str, interval: IntervalParams, signals) -> None:
    """Load the kernels unless CMD ends within WARM_UP_AFTER_S: a command that
    short ends before its first samples would reach the pipeline."""
    if child.wait(timeout=WARM_UP_AFTER_S) is None:
        load_kernels(args, detector, interval, signals)


def load_kernels(args, detector: str, interval: IntervalParams, signals) -> None:
    """Run the pipeline over a few made-up rows, on a thread while CMD starts,
    so that the first real batch finds the kernels loaded.  A larger
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
        voltage_source=voltage_source(model, source.metadata["signals"]),
        mappings=[])


def voltage_source(model, signals: dict[str, str]) -> str:
    """Where core voltage comes from: the model table's answer, except that a
    PERF_STATUS an MSR device really answered is read even where the table
    expects none (a virtual machine given MSR access)."""
    if model.virtual and signals.get("perf_status") in ("msr", "msr-safe", "kmod"):
        return "perf_status"
    return model.voltage_source


def pipeline_for(meta: dict, args, detector: str) -> Pipeline:
    """The pipeline replay builds from the same metadata and options."""
    from ..core.pipeline import Pipeline
    params = Params(interval=interval_params_of(meta), histograms=histogram_params_of(meta),
                    detector=detector_params(argparse.Namespace(**{**vars(args),
                                                                  "detector": detector})))
    return Pipeline.for_trace(meta, params)


def top_functions_cell(top: list[tuple[str, float]]) -> str:
    """``region_a 97%, region_b 2%``: the functions that round to at least 1 %."""
    from rich.markup import escape
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
        print(json.dumps(finite(result), indent=2))
        return
    from rich.markup import escape

    from ..report.tables import console, phase_table, summary_lines
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
    rate = run_info["register_rate"]
    out.print(f"source: {run_info['source']}" + (f" ({escape(rate['said'])})" if rate else "") + "".join(
        f"; not {name}: {escape(why)}" for name, why in run_info["not_taken"].items()))
    if run_info["missing_signals"]:
        out.print("missing on this host: " + ", ".join(run_info["missing_signals"]))
    out.print(phase_table(summary, extra_columns={
        "top functions": [top_functions_cell(top) for top in tops]}))
    for line in summary_lines(summary, pipeline.dropped(), pipeline.implausible()):
        out.print(line)
    lost = run_info["samples_lost"]
    if lost["ring"] or lost["queue"]:
        out.print(f"samples lost: {lost['ring']} in the kernel ring buffers, "
                  f"{lost['queue']} in the agent's queue")
    if run_info["trace"]:
        out.print(f"trace: {run_info['trace']}")
