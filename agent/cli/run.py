"""``phasewatch run -- CMD``: start a command, watch it, and tell its phases.

CMD is started paused before exec (pinned to one CPU unless ``--no-pin``, while
it runs one thread at a time: :mod:`phasewatch.live.pinning`), or a running
process is attached to with ``--pid`` (:mod:`phasewatch.live.attach`); the
source ``--source`` names is opened for it from the registry of sources
(:mod:`phasewatch.collectors.registry`: perf sampling events attached with
enable-on-exec and inherited by its threads and children, with the MSR
sampler's readings of its CPU joined on where the host has MSRs), and then it
runs.  Samples go through the same
pipeline, with the same parameters, as ``phasewatch replay`` would use on the
recorded trace, so a recording replays to the same phases.

Where the host counts no retired instructions (no hardware PMU), intervals end
on time instead; where it has no voltage or productive frequency (no MSRs),
the ``vpf`` detector gives way to ``vpf-ip``.  Both are said once at start,
and recorded in the trace, so that a replay takes them by default.

stdout stays CMD's: the summary goes to stderr, or to ``--json FILE``.

With a process target the instruction and cycle counts in the samples are
per thread, so the trace says ``counter_scope: thread`` and the decoder takes
their deltas per thread.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
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
from ..core.settings import (choose_detector, detection_dict, detector_params, interval_params,
                             with_detection)
from ..errors import UserError
from ..formats import metadata as md
from ..formats.outputs import check_outputs, open_output
from ..formats.results import finite, summary_dict
from ..formats.sidetable import check_side_table_output
from ..live.attach import Attached
from ..live.child import Child
from ..live.command import resolve_command
from ..live.cpu_choice import allowed_cpus
from ..live.loop import SourceThread
from ..live.pinning import PinWhileSingleThreaded
from ..live.relay import TerminalRelay, wanted as relay_wanted
from .arguments import SAMPLE_DETECTORS, add_detector_arguments, number

# CMD execs as soon as its perf events are open; numba, the kernels, pyarrow,
# rich and the ELF reader load after, on a thread and in watch(), while the
# samples queue.
if TYPE_CHECKING:
    from ..core.pipeline import Pipeline
    from ..core.source import Source
    from ..formats.results import PhaseSummary
    from ..live.phase_functions import PhaseFunctions
    from ..live.symbolizer import Symbolizer

SAMPLE_RATE_HZ = 1000
#: perf's own default ceiling (kernel.perf_event_max_sample_rate).
MAX_RATE_HZ = 100_000
#: How long CMD runs before the kernels load (they take a third of a second of CPU).
WARM_UP_AFTER_S = 0.1
TOP_FUNCTIONS = 3
#: Width of the table when stderr is a file or pipe (a terminal's own width otherwise).
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
    parser.add_argument("-p", "--pid", type=number(int, 1, ID_RANGES["tid"][1]), metavar="PID",
                        help="watch the running process PID (and its threads and new children) "
                             "instead of starting CMD, until it ends or Ctrl-C, as perf's -p")
    parser.add_argument("--source", choices=CHOICES, default="auto",
                        help="where samples come from: the kernel module, the MSRs (with perf "
                             "for IPs), or perf alone; auto takes the first of these that "
                             "'phasewatch probe' finds (default auto)")
    parser.add_argument("-F", "--freq", type=number(int, 1, MAX_RATE_HZ), default=SAMPLE_RATE_HZ,
                        metavar="HZ", help=f"samples per second of CMD's CPU time, as perf's -F "
                                           f"(default {SAMPLE_RATE_HZ}, at most {MAX_RATE_HZ})")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no status line, warnings or phase table: only errors (and "
                             "what --json, --output, --record and --report write)")
    parser.add_argument("--msr-path", default=msr.DEFAULT_PATH, metavar="TEMPLATE",
                        help="MSR device path, {cpu} replaced by the CPU number "
                             f"(default {msr.DEFAULT_PATH})")
    add_detector_arguments(parser, names=SAMPLE_DETECTORS, default="")
    parser.add_argument("--record", metavar="TRACE",
                        help="also write the raw samples to TRACE, for 'phasewatch replay'")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE",
                        help="the summary as JSON instead of the phase table, to FILE "
                             "or, without FILE, to stderr (stdout stays the command's)")
    parser.add_argument("--pprof", metavar="FILE",
                        help="also write the phases' samples to FILE as a pprof profile "
                             "(labels phase, interval, thread, cpu)")
    parser.add_argument("--report", metavar="DIR",
                        help="also draw the phases into DIR (as 'phasewatch report' does)")
    parser.add_argument("--powercap-root", metavar="DIR",
                        help="the RAPL energy counters' folder, for each phase's joules "
                             "(default /sys/class/powercap, used where it is readable)")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                        help="the command to run and watch")


def run(args) -> int:
    args = with_detection(args)
    if args.pid is not None:
        return attach(args)
    argv = command_of(args)
    check_arguments(args, resolve_command(argv[0]))
    relay = TerminalRelay() if relay_wanted() and not args.quiet else None
    with Child.start(argv, cpu=args.cpu, pin=not args.no_pin,
                     stdio=relay.slaves if relay else None) as child:
        if relay:
            relay.started()
        source = open_source(args.source, pid=child.pid,
                             cpus=[child.cpu] if child.cpu is not None else None,
                             msr_path=args.msr_path, rate_hz=args.freq,
                             enable_on_exec=True)
        try:
            return watch(args, child, source, relay)
        finally:
            if child.returncode is None:
                child.stop(signal.SIGKILL, grace=0)


def attach(args) -> int:
    """``run --pid PID``: watch a running process, started by someone else."""
    if command_of(args, required=False):
        raise UserError("give --pid or a command after '--', not both")
    if args.cpu is not None:
        raise UserError("--cpu pins a command run starts: an attached process is not moved")
    target = Attached(args.pid)
    check_arguments(args, target.path)
    source = open_source(args.source, pid=target.pid, cpus=None, msr_path=args.msr_path,
                         rate_hz=args.freq, enable_on_exec=False)
    return watch(args, target, source)


def command_of(args, required: bool = True) -> list[str]:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv and required:
        raise UserError("no command given: put it after '--', e.g. phasewatch run -- ./prog ARGS "
                        "(or attach to a running process with --pid PID)")
    return argv


def check_arguments(args, program: str | None) -> None:
    """Reject bad options and outputs that would destroy a file (``program``,
    the watched executable, among them) before anything is started or written."""
    if args.cpu is not None and args.no_pin:
        raise UserError("--cpu and --no-pin contradict each other: give one of them")
    detector_params(args)
    msr.device_path(args.msr_path, 0)
    interval_params(args, IntervalParams(), ("instructions",), warn=lambda msg: None)
    args.program = program
    check_outputs([args.record, args.output, json_file(args), args.pprof], inputs=[args.program])
    if args.powercap_root:
        from ..live.phase_energy import EnergyMeter
        EnergyMeter.open(args.powercap_root)
    if args.record:
        check_side_table_output(args.record, inputs=[args.program, args.output])
    if args.report:
        from ..report.folder import check_report_dir
        check_report_dir(args.report)


def watch(args, child: Child, source: Source, relay: TerminalRelay | None = None) -> int:
    signals = tuple(source.signals)
    say = (lambda msg: None) if args.quiet else warn
    detector = choose_detector(args.detector, signals, say)
    interval = interval_params(args, IntervalParams(), signals, say)
    kernels = threading.Thread(target=warm_up, args=(child, args, detector, interval, signals),
                               name="phasewatch-kernels", daemon=True)
    out = open_output(args.output, inputs=[args.program], binary=True) if args.output else None
    sinks, trace, feed, finished = [], None, None, False
    energy = phase_energy(args)   # reading before CMD's first sample
    try:
        with child.forward_signals() as forwarder:
            kernels.start()
            child.release()
            if relay:
                relay.start()
            feed = SourceThread(source.batches()).start()
            pinning = PinWhileSingleThreaded(child.pid, child.cpu, allowed_cpus(), say)
            from ..formats.results import PhaseSummary, results_sink
            from ..live.loop import LiveRun
            from ..live.phase_functions import PhaseFunctions
            from ..live.process_maps import ProcessMappings
            from ..live.status import StatusLine
            from ..live.symbolizer import Symbolizer
            from ..live.tree_symbolizer import TreeSymbolizer
            from ..live.tree_watch import TreeWatch
            sinks.append(PhaseSummary())
            profile = phase_profile(args, source)
            symbolizer = Symbolizer.from_pid(child.pid)
            meta = run_metadata(child, source, signals, interval, program_text_range(symbolizer))
            pipeline = pipeline_for(meta, args, detector)
            meta["detection"] = detection_dict(pipeline.params.detector)
            tree = TreeSymbolizer(symbolizer)
            tree_watch = TreeWatch(tree, also=[pinning.look]).start()
            functions = PhaseFunctions(tree)
            figure, entries = observe_figure(pipeline, tree) if args.report else (None, None)
            sinks += [results_sink(args.output, out.stream)] if out else []
            sinks += [profile] if profile else []
            sinks += [energy] if energy else []
            trace = open_trace(args, meta, signals) if args.record else None
            maps = ProcessMappings(child.pid, pipeline, record=trace, just_execd=True)
            status = StatusLine(os.path.basename(child.argv[0]), enabled=relay is not None)
            live = LiveRun(feed, pipeline, sinks=sinks, trace=trace, functions=functions,
                           status=status, lost_samples=lambda: source.stats()["lost_samples"],
                           taps=[maps.before_feed, functions.take_threads, pinning,
                                 *([entries.add] if entries else []),
                                 *([profile.tap] if profile else [])])
            if isinstance(child, Attached):
                child.on_interrupt += [live.stop, getattr(source, "stop", lambda: None)]
            with status:
                if relay:
                    relay.write = status.write_above
                live.run()
                exit_status = child.wait()
                if relay:
                    relay.stop()
            tree_watch.stop()
            live.finish()
            for sink in sinks:
                sink.close()
            finished = True
    finally:
        if child.returncode is None:
            child.stop(signal.SIGKILL, grace=0)
        if relay:
            relay.stop(timeout=0)
        if feed is None or feed.join(timeout=5.0):
            source.close()  # never under a reader still inside it
        close_outputs([out, trace], commit=finished)
        if energy:
            energy.finish()
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
        # CLOCK_REALTIME minus the samples' CLOCK_MONOTONIC: t_ns + this is wall clock
        "realtime_offset_ns": meta["sampling"]["realtime_offset_ns"],
    }
    report(args, run_info, sinks[0], pipeline, functions, energy.per_phase() if energy else None)
    if profile is not None:
        write_pprof(args, profile, symbolizer, meta, energy)
    if energy is not None and run_info["trace"]:
        record_energy(args.record, energy)
    if figure is not None:
        draw(args.report, figure, functions, run_info)
    failures = [o.failure for o in (out, trace) if o and o.failure]
    if failures:
        raise UserError("; ".join(failures))
    return exit_status


def phase_profile(args, source: Source):
    if not args.pprof:
        return None
    from ..live.phase_profile import PhaseProfile, period_ns_of
    return PhaseProfile(period_ns_of(source.metadata))


def phase_energy(args):
    """Each phase's joules where RAPL is readable (always tried at the default root)."""
    from ..collectors.powercap import DEFAULT_ROOT
    from ..live.phase_energy import EnergyMeter, PhaseEnergy
    try:
        meter = EnergyMeter.open(args.powercap_root or DEFAULT_ROOT)
    except UserError:
        if args.powercap_root:
            raise
        return None
    return PhaseEnergy(meter.start())


def record_energy(trace: str, energy) -> None:
    """Each interval's energy beside the trace, for 'phasewatch diff'."""
    from ..formats.energytable import write_energy_table
    failure = write_energy_table(trace, energy.intervals)
    if failure:
        raise UserError(failure)


def write_pprof(args, profile, symbolizer: Symbolizer, meta: dict, energy) -> None:
    from ..formats.pprof import write_profile
    symbolizer.snapshot()
    builder = profile.build(symbolizer, realtime_offset_ns=meta["sampling"]["realtime_offset_ns"],
                            energy_uj=energy.per_interval_uj() if energy else None,
                            comments=[" ".join(args.argv)])
    failure = write_profile(args.pprof, builder, inputs=[args.program])
    if failure:
        raise UserError(failure)


def open_trace(args, meta: dict, signals):
    """The trace writer and its side table (pyarrow, 25 MiB resident, is loaded only for it)."""
    from ..formats.trace import TraceWriter
    return TraceWriter(args.record, meta, signals, inputs=[args.program], side_table=True)


def observe_figure(pipeline: Pipeline, symbolizer):
    """The figure's recorder, and what labels its code-signature rows."""
    from ..report.code_entries import CodeEntries
    from ..report.figure import FigureRecorder
    recorder = FigureRecorder(pipeline.params, pipeline.layout.bounds, pipeline.used)
    pipeline.observe_profiles(recorder)
    entries = CodeEntries(pipeline, symbolizer)
    recorder.name_entries = entries.names
    return recorder, entries


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
    from ..live.phase_profile import realtime_offset_ns
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
        command=child.argv, pinned_cpu=child.cpu,
        sampling={**source.metadata, "realtime_offset_ns": realtime_offset_ns()},
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


def energy_cells(summary: PhaseSummary, energy: dict) -> dict[str, list[str]]:
    rows = [energy.get(row["phase"], {}) for row in summary.table()]
    per_100m = [r.get("energy_j_per_100m") for r in rows]
    cells = {"energy J": [f"{r['energy_j']:.2f}" if "energy_j" in r else "-" for r in rows]}
    if any(v is not None for v in per_100m):
        cells["J/100M"] = [f"{v:.3f}" if v is not None else "-" for v in per_100m]
    return cells


def source_line(source: str, not_taken: dict[str, str], register_rate: dict | None) -> str:
    """``source: msr (registers at 250 Hz ...); not taken: kmod; not counted:
    cycles`` (the reasons are in --json and in 'phasewatch probe')."""
    sources = [name for name in not_taken if name in CHOICES]
    counters = [name for name in not_taken if name not in CHOICES]
    parts = [f"source: {source}" + (f" ({register_rate['said']})" if register_rate else "")]
    parts += [f"not taken: {', '.join(sources)}"] if sources else []
    parts += [f"not counted: {', '.join(counters)}"] if counters else []
    why = " (why: phasewatch probe)" if not_taken else ""
    return "; ".join(parts) + why


def json_file(args) -> str | None:
    """The file ``--json FILE`` names; None for none or for stderr."""
    return args.json if args.json not in (None, "-") else None


def report(args, run_info: dict, summary: PhaseSummary, pipeline: Pipeline,
           functions: PhaseFunctions, energy: dict | None = None) -> None:
    """The summary, on stderr or in ``--json FILE``: stdout is the command's."""
    tops = [functions.top(row["phase"], TOP_FUNCTIONS) for row in summary.table()]
    energy_columns = energy_cells(summary, energy) if energy is not None else {}
    if args.json:
        result = {**run_info, **summary_dict(summary, pipeline, None)}
        result.pop("ari")
        for row, top in zip(result["phases"], tops):
            row["top_functions"] = [{"name": name, "share": share} for name, share in top]
            row.update(energy.get(row["phase"], {}) if energy is not None else {})
        write_json(args, json.dumps(finite(result), indent=2) + "\n")
        return
    if args.quiet:
        return
    from rich.markup import escape

    from ..report.tables import console, phase_table, summary_lines
    out = console(sys.stderr)
    if not out.is_terminal:
        out.width = max(out.width, PIPE_WIDTH)
    end = f"exit status {run_info['exit_status']}"
    if run_info["interrupted"]:
        end = "interrupted, " + end
    out.print(f"{' '.join(run_info['command'])}: {end}, {run_info['seconds']:.1f} s, "
              f"{pipeline.samples:,} samples, {summary.n_intervals} intervals "
              f"{pipeline.params.interval.describe()}, detector {run_info['detector']}, "
              f"threshold {pipeline.threshold:.3f}")
    out.print(escape(source_line(run_info["source"], run_info["not_taken"],
                                 run_info["register_rate"])))
    if run_info["missing_signals"]:
        out.print("missing on this host: " + ", ".join(run_info["missing_signals"]))
    out.print(phase_table(summary, extra_columns={
        **energy_columns, "top functions": [top_functions_cell(top) for top in tops]}))
    for line in summary_lines(summary, pipeline.dropped(), pipeline.implausible()):
        out.print(line)
    lost = run_info["samples_lost"]
    if lost["ring"] or lost["queue"]:
        out.print(f"samples lost: {lost['ring']} in the kernel ring buffers, "
                  f"{lost['queue']} in the agent's queue")
    if run_info["trace"]:
        out.print(f"trace: {run_info['trace']}")


def write_json(args, text: str) -> None:
    path = json_file(args)
    if path is None:
        sys.stderr.write(text)
        return
    out = open_output(path, inputs=[args.program])
    out.stream.write(text)
    out.close()
    if out.failure:
        raise UserError(out.failure)
