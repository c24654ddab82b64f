"""``phasewatch replay TRACE``: detect phases in a recorded trace."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import TYPE_CHECKING

from ..console import warn
from ..core.settings import detector_params, pipeline_of, with_detection
from ..errors import UserError
from ..formats import bbvfile
from ..formats.labellings import read_labels
from ..formats.metadata import MAX_BASE_MHZ
from ..formats.outputs import check_outputs, open_output
from ..formats.results import finite, summary_dict
from .arguments import add_detector_arguments, number

if TYPE_CHECKING:  # imported where used: numba and pyarrow load only when replaying
    from ..core.pipeline import Pipeline
    from ..formats.results import PhaseSummary


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
    parser.add_argument("--pprof", metavar="FILE",
                        help="also write the phases' samples to FILE as a pprof profile "
                             "(labels phase, interval, thread, cpu)")


def run(args) -> int:
    traces = trace_paths(args.trace)
    if args.pprof and (len(traces) > 1 or args.per_cpu):
        raise UserError("--pprof takes one trace, replayed whole: drop --per-cpu or give one trace")
    if len(traces) > 1 or args.per_cpu:
        from ..replay.parallel import replay_many
        return replay_many(args, traces, replay)
    return replay(args, traces[0], args.output)


def trace_paths(given: list[str]) -> list[str]:
    """The traces named, a folder standing for the recordings in it (each
    trace's side table goes with it), in name order."""
    from ..formats.tracefiles import is_recording
    paths = []
    for path in given:
        if os.path.isdir(path):
            inside = sorted(os.path.join(path, name) for name in os.listdir(path)
                            if not name.startswith(".") and os.path.isfile(os.path.join(path, name))
                            and is_recording(os.path.join(path, name)))
            if not inside:
                raise UserError(f"{path}: a folder with no traces in it")
            paths += inside
        else:
            paths.append(path)
    return paths


def replay(args, trace: str, output: str | None, cpu: int | None = None) -> int:
    """Replay one trace (its samples of ``cpu`` only, if given), write its
    results to ``output`` and print its summary."""
    from ..formats.tracefiles import open_trace
    pprof = getattr(args, "pprof", None) if cpu is None else None
    check_outputs([output, pprof], inputs=[trace, args.labels])
    labels = read_labels(args.labels) if args.labels else None
    if bbvfile.looks_like_bb(trace):
        return replay_bb(args, trace, output, labels)
    source = open_trace(trace, base_mhz=args.base_mhz, warn=warn)
    try:
        pipeline = pipeline_of(source, args, warn)
        profile = phase_profile(source) if pprof else None
        if hasattr(source, "read_only"):
            source.read_only(pipeline.columns | set(profile.columns if profile else ()))
        batches = source.batches()
        if cpu is not None:
            from ..replay.parallel import samples_of_cpu
            batches = samples_of_cpu(batches, cpu)
        parts = (profile.fed(batches, pipeline) if profile is not None
                 else (pipeline.feed(batch) for batch in batches))
        summary, out = write_results(parts, output, [trace, args.labels], labels is not None,
                                     pipeline.finish)
    finally:
        source.close()
    report(args, trace if cpu is None else f"{trace} CPU {cpu}", summary, pipeline, labels)
    if profile is not None:
        write_pprof(pprof, profile, source.metadata, trace, [trace, args.labels])
    if out and out.failure:
        raise UserError(out.failure)
    return 0


def phase_profile(source):
    from ..live.phase_profile import COLUMNS, PhaseProfile, period_ns_of
    missing = [name for name in COLUMNS if name not in source.signals]
    if missing:
        raise UserError(f"--pprof needs the trace's {', '.join(missing)} column: "
                        f"record it with 'phasewatch run --record'")
    return PhaseProfile(period_ns_of(source.metadata.get("sampling")))


def write_pprof(path: str, profile, meta: dict, trace: str, inputs: list) -> None:
    from ..formats.energytable import read_energy_table
    from ..formats.pprof import write_profile
    from ..live.symbolizer import Symbolizer
    offset = (meta.get("sampling") or {}).get("realtime_offset_ns")
    builder = profile.build(Symbolizer.from_metadata(meta), realtime_offset_ns=offset,
                            energy_uj=profile.recorded_energy(read_energy_table(trace)),
                            comments=[" ".join(meta.get("command") or [])])
    failure = write_profile(path, builder, inputs=inputs)
    if failure:
        raise UserError(failure)


def replay_bb(args, trace: str, output: str | None, labels) -> int:
    """A SimPoint .bb file, classified by the bbv detector."""
    from ..simpoint import bbvreplay
    args = with_detection(args)
    bbvreplay.check_detector(args.detector)
    params = replace(detector_params(args), detector="bbv")
    parts, detector = bbvreplay.classify_bb(trace, params)
    summary, out = write_results(parts, output, [trace, args.labels], labels is not None)
    report(args, trace, summary, bbvreplay.BbvReport(detector, params), labels)
    if out and out.failure:
        raise UserError(out.failure)
    return 0


def write_results(parts, output: str | None, inputs: list, keep_phases: bool, finish=None):
    """Each block of intervals of ``parts`` into the phase summary and, with
    ``output``, the JSON Lines results (complete, or discarded on an error);
    ``finish()`` gives the trailing partial interval, for the summary alone.
    Returns the summary and the output (None without one)."""
    from ..formats.results import PhaseSummary, results_sink
    summary = PhaseSummary(keep_phases=keep_phases)
    out = open_output(output, inputs=inputs, binary=True) if output else None
    sinks = [summary] + ([results_sink(output, out.stream)] if out else [])
    try:
        for intervals in parts:
            for sink in sinks:
                sink.write(intervals)
        if finish is not None:
            summary.write(finish())
        for sink in sinks:
            sink.close()
    except BaseException:
        if out:
            out.discard()
        raise
    if out:
        out.close()
    return summary, out


def report(args, trace: str, summary: PhaseSummary, pipeline: Pipeline, labels) -> None:
    ari = None
    if labels is not None:
        from ..formats.results import adjusted_rand_index
        predicted = summary.phase_labels()
        if len(labels) != len(predicted):
            raise UserError(f"{args.labels}: {len(labels)} labels, but the replay found "
                            f"{len(predicted)} complete intervals")
        ari = adjusted_rand_index([str(x) for x in labels], predicted)
    if args.json:
        print(json.dumps(finite(summary_dict(summary, pipeline, ari)), indent=2))
        return
    from ..report.tables import console, phase_table, summary_lines  # rich: only for the table
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
