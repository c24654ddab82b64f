"""``phasewatch replay TRACE``: detect phases in a recorded trace."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from . import bbvfile, detectors, metadata as md
from .errors import UserError
from .metadata import (MAX_BASE_MHZ, MAX_INTERVAL_INSTRUCTIONS, MAX_INTERVAL_NS,
                       MIN_INTERVAL_NS)
from .options import number
from .outputs import check_outputs, open_output
from .params import DEFAULT_THRESHOLD, DetectorParams, IntervalParams, Params

if TYPE_CHECKING:  # imported where used: numba and pyarrow load only when replaying
    from .pipeline import Pipeline
    from .results import PhaseSummary


def add_detector_arguments(parser, output: bool = True) -> None:
    parser.add_argument("--detector", choices=detectors.NAMES, default="vpf",
                        help="vpf: voltage and productive frequency (the thesis); "
                             "vpf-ip: also the code signature over all executable mappings; "
                             "vpf-ip-fold: the thesis's 32-entry IP fold over .text instead; "
                             "bbv: basic-block vectors (SimPoint .bb files, chosen for them)")
    parser.add_argument("--threshold", type=number(float, 0.0, 1.0, low_open=True),
                        default=DEFAULT_THRESHOLD, metavar="X",
                        help="distance in (0, 1] under which an interval joins a phase "
                             "(default %(default)s)")
    parser.add_argument("--adaptive", action="store_true",
                        help="adapt the threshold online to the distances within phases")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--interval-instructions", metavar="N",
                      type=number(int, 1, MAX_INTERVAL_INSTRUCTIONS),
                      help="end an interval every N retired instructions (default 100M; "
                           "at most 1e15)")
    size.add_argument("--interval-ms", metavar="MS",
                      type=number(float, MIN_INTERVAL_NS / 1e6, MAX_INTERVAL_NS / 1e6),
                      help="end an interval every MS milliseconds instead (0.01 to 86400000)")
    size.add_argument("--interval-samples", metavar="N", type=number(int, 1, 10**9),
                      help="end an interval every N samples instead (N ms of the "
                           "program's CPU time at 1 kHz, however busy the host)")
    if output:
        parser.add_argument("--output", metavar="FILE", help="write one JSON object per interval")


def add_arguments(parser) -> None:
    parser.add_argument("trace", metavar="TRACE", nargs="+",
                        help="a phasewatch trace or a raw CSV; several, or a folder of them, "
                             "replay in parallel, and --output then names a folder")
    add_detector_arguments(parser)
    parser.add_argument("--per-cpu", action="store_true",
                        help="replay each CPU's samples as a stream of its own, in parallel; "
                             "--output then names a folder")
    parser.add_argument("--jobs", type=int, metavar="N",
                        help="streams replayed at once (default: one per usable CPU)")
    parser.add_argument("--labels", metavar="FILE",
                        help="ground-truth phase labels, one per interval, as a JSON list")
    parser.add_argument("--base-mhz", type=number(float, 0.0, MAX_BASE_MHZ, low_open=True),
                        metavar="MHZ",
                        help="base frequency for a CSV trace, up to 10000 (default: its TSC rate)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")


def detector_params(args) -> DetectorParams:
    if not 0.0 < args.threshold <= 1.0:
        raise UserError(f"--threshold {args.threshold}: give a distance in (0, 1]")
    return DetectorParams(detector=args.detector, threshold=args.threshold, adaptive=args.adaptive)


def interval_params(args, default: IntervalParams, signals, warn) -> IntervalParams:
    if args.interval_ms is not None:
        if args.interval_ms <= 0:
            raise UserError(f"--interval-ms {args.interval_ms}: give a positive duration")
        return IntervalParams(kind="time", ns=round(args.interval_ms * 1e6))
    if getattr(args, "interval_samples", None) is not None:
        return IntervalParams(kind="samples", samples=args.interval_samples)
    chosen = default
    if args.interval_instructions is not None:
        if args.interval_instructions <= 0:
            raise UserError(f"--interval-instructions {args.interval_instructions}: "
                            f"give a positive count")
        chosen = IntervalParams(kind="instructions", instructions=args.interval_instructions)
    if chosen.kind == "instructions" and "instructions" not in signals:
        warn("the samples have no instruction counts: ending intervals every "
             f"{chosen.samples} samples instead ({chosen.samples} ms of the program's CPU "
             "time at 1 kHz; set it with --interval-samples or --interval-ms)")
        chosen = replace(chosen, kind="samples")
    return chosen


def read_labels(path: str) -> list:
    try:
        with open(path, "rb") as f:
            labels = json.loads(f.read())
    except OSError as exc:
        raise UserError(f"cannot read labels {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not JSON text (not UTF-8)") from None
    except RecursionError:
        raise UserError(f"{path}: not a JSON list of labels (nested too deeply)") from None
    except ValueError as exc:
        raise UserError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(labels, list):
        raise UserError(f"{path}: labels must be a JSON list, one label per interval")
    return labels


def warn(msg: str) -> None:
    print(f"phasewatch: warning: {msg}", file=sys.stderr)


def run(args) -> int:
    traces = trace_paths(args.trace)
    if len(traces) > 1 or args.per_cpu:
        from .replay_many import replay_many
        return replay_many(args, traces)
    return replay(args, traces[0], args.output)


def trace_paths(given: list[str]) -> list[str]:
    """The traces named, a folder standing for the files in it, in name order."""
    paths = []
    for path in given:
        if os.path.isdir(path):
            inside = sorted(os.path.join(path, name) for name in os.listdir(path)
                            if not name.startswith(".") and os.path.isfile(os.path.join(path, name)))
            if not inside:
                raise UserError(f"{path}: a folder with no traces in it")
            paths += inside
        else:
            paths.append(path)
    return paths


def replay(args, trace: str, output: str | None, cpu: int | None = None) -> int:
    """Replay one trace (its samples of ``cpu`` only, if given), write its
    results to ``output`` and print its summary."""
    from .results import JsonLinesSink, PhaseSummary
    from .tracefiles import open_trace
    check_outputs([output], inputs=[trace, args.labels])
    labels = read_labels(args.labels) if args.labels else None
    if bbvfile.looks_like_bb(trace):
        return replay_bb(args, trace, output, labels)
    source = open_trace(trace, base_mhz=args.base_mhz, warn=warn)
    pipeline = pipeline_of(source, args)
    if hasattr(source, "read_only"):
        source.read_only(pipeline.columns)
    summary = PhaseSummary(keep_phases=labels is not None)
    sinks = [summary]
    out = open_output(output, inputs=[trace, args.labels], binary=True) if output else None
    if out:
        sinks.append(JsonLinesSink(out.stream))
    try:
        for batch in source.batches() if cpu is None else samples_of_cpu(source.batches(), cpu):
            intervals = pipeline.feed(batch)
            for sink in sinks:
                sink.write(intervals)
        summary.write(pipeline.finish())
        for sink in sinks:
            sink.close()
    except BaseException:
        if out:
            out.discard()
        raise
    finally:
        source.close()
    if out:
        out.close()
    report(args, trace if cpu is None else f"{trace} CPU {cpu}", summary, pipeline, labels)
    if out and out.failure:
        raise UserError(out.failure)
    return 0


def pipeline_of(source, args):
    """The pipeline for a trace's samples, with the detection options given."""
    from .pipeline import Pipeline
    meta = source.metadata
    signals = tuple(meta.get("signals") or source.signals)
    detectors.check_signals(args.detector, signals)
    params = Params(interval=interval_params(args, md.interval_params(meta), signals, warn),
                    histograms=md.histogram_params(meta), detector=detector_params(args))
    return Pipeline.for_trace(meta, params)


def samples_of_cpu(batches, cpu: int):
    """The rows of ``cpu``: one CPU's samples, an independent stream."""
    from .batch import SampleBatch
    for batch in batches:
        rows = batch["cpu"] == cpu
        if rows.any():
            yield SampleBatch({name: column[rows] for name, column in batch.columns.items()})


def replay_bb(args, trace: str, output: str | None, labels) -> int:
    """A SimPoint .bb file, classified by the bbv detector."""
    from . import bbvreplay
    from .results import JsonLinesSink, PhaseSummary
    bbvreplay.check_detector(args.detector)
    params = replace(detector_params(args), detector="bbv")
    summary = PhaseSummary(keep_phases=labels is not None)
    sinks = [summary]
    out = open_output(output, inputs=[trace, args.labels], binary=True) if output else None
    if out:
        sinks.append(JsonLinesSink(out.stream))
    try:
        parts, detector = bbvreplay.classify_bb(trace, params)
        for iv in parts:
            for sink in sinks:
                sink.write(iv)
    except BaseException:
        if out:
            out.discard()
        raise
    if out:
        out.close()
    report(args, trace, summary, bbvreplay.BbvReport(detector, params), labels)
    if out and out.failure:
        raise UserError(out.failure)
    return 0


def report(args, trace: str, summary: PhaseSummary, pipeline: Pipeline, labels) -> None:
    ari = None
    if labels is not None:
        from .results import adjusted_rand_index
        predicted = summary.phase_labels()
        if len(labels) != len(predicted):
            raise UserError(f"{args.labels}: {len(labels)} labels, but the replay found "
                            f"{len(predicted)} complete intervals")
        ari = adjusted_rand_index([str(x) for x in labels], predicted)
    if args.json:
        print(json.dumps(_finite(summary_dict(summary, pipeline, ari)), indent=2))
        return
    from .report import console, phase_table, summary_lines  # rich: only for the table
    out = console()
    p = pipeline.params
    thr = f"{pipeline.threshold:.3f}" + (" (adaptive)" if p.detector.adaptive else "")
    out.print(f"{trace}: {pipeline.samples:,} samples, {summary.n_intervals} intervals "
              f"{p.interval.describe()}, detector {p.detector.detector}, threshold {thr}")
    out.print(phase_table(summary))
    for line in summary_lines(summary, pipeline.dropped(), pipeline.implausible()):
        out.print(line)
    if ari is not None:
        out.print(f"adjusted Rand index against {args.labels}: {ari:.4f}")


def summary_dict(summary: PhaseSummary, pipeline: Pipeline, ari) -> dict:
    tail = summary.partial
    return {
        "samples": pipeline.samples,
        "intervals": summary.n_intervals,
        "phases": summary.table(),
        "quality_cpi_cov": summary.quality(),
        "run_cpi_cov": summary.run_cov(),
        "threshold": pipeline.threshold,
        "dropped_deltas": pipeline.dropped(),
        "implausible_values": pipeline.implausible(),
        "partial_interval": None if tail is None else {
            "samples": int(tail.samples[0]), "instructions": int(tail.instructions[0])},
        "ari": ari,
    }


def _finite(value):
    """NaN becomes null, as JSON has no NaN."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
