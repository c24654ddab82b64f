"""``phasewatch replay TRACE``: detect phases in a recorded trace."""

from __future__ import annotations

import json
import os

from ..console import rich_console, warn
from ..core.detectors import NAMES
from ..core.settings import detector_label
from ..errors import UserError
from ..formats.metadata import MAX_BASE_MHZ
from .arguments import add_detector_arguments, given_settings, number


def add_arguments(parser) -> None:
    parser.add_argument("trace", metavar="TRACE", nargs="+",
                        help="a phasewatch trace or a raw CSV; several, or a folder of them, "
                             "replay in parallel, and --output then names a folder")
    add_detector_arguments(parser, names=NAMES)
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
    from ..replay.trace import ReplayOptions, replay
    traces = trace_paths(args.trace)
    many = len(traces) > 1 or args.per_cpu or any(os.path.isdir(p) for p in args.trace)
    if args.pprof and many:
        raise UserError("--pprof takes one trace, replayed whole: give one trace file (not a "
                        "folder), without --per-cpu")
    options = ReplayOptions(given_settings(args), output=args.output, pprof=args.pprof,
                            labels=args.labels, base_mhz=args.base_mhz)
    if many:      # a folder stands for its traces, however many: --output names a folder
        return replay_many(args, traces, options)
    replayed = replay(traces[0], options, warn)
    show(replayed, args.json)
    if replayed.failures:
        raise UserError(replayed.failures[0])
    return 0


def replay_many(args, traces: list[str], options) -> int:
    from ..replay import parallel
    results = parallel.replay_many(traces, options, warn, per_cpu=args.per_cpu, jobs=args.jobs)
    done, failed = [], []
    for trace, cpu, found, error in results:
        error = error or (found.failures[0] if found.failures else None)
        if error:
            failed.append(error)
        else:
            done.append((trace, cpu, found))
    if args.json:
        print(json.dumps([{"trace": trace, **({} if cpu is None else {"cpu": cpu}),
                           **summary_json(found)} for trace, cpu, found in done], indent=2))
    else:
        for i, (_, _, found) in enumerate(done):
            if i:
                print()
            show(found, json_out=False)
    if failed:
        raise UserError(f"{len(failed)} of {len(results)} streams failed; the first: {failed[0]}")
    return 0


def trace_paths(given: list[str]) -> list[str]:
    """The traces named, a folder standing for the recordings in it (each
    trace's side table goes with it), in name order.  A file in the folder
    that cannot be read is refused, not passed over: it may be a trace."""
    from ..formats.tracefiles import is_recording
    paths = []
    for path in given:
        if os.path.isdir(path):
            files = sorted(os.path.join(path, name) for name in os.listdir(path)
                           if not name.startswith(".") and os.path.isfile(os.path.join(path, name)))
            for file in files:
                if not os.access(file, os.R_OK):
                    raise UserError(f"{file}: permission denied, in the folder {path}: make it "
                                    f"readable, or move it out of the folder")
            inside = [file for file in files if is_recording(file)]
            if not inside:
                raise UserError(f"{path}: a folder with no traces in it")
            paths += inside
        else:
            paths.append(path)
    return paths


def summary_json(replayed) -> dict:
    from ..formats.results import finite, summary_dict
    out = summary_dict(replayed.summary, replayed.stats, replayed.ari)
    if replayed.top_functions is not None:
        for row in out["phases"]:
            row["top_functions"] = [{"name": name, "share": share} for name, share
                                    in replayed.top_functions.get(row["phase"], [])]
    for row in out["phases"]:
        row["kernel_share"] = (replayed.kernel_shares.get(row["phase"])
                               if replayed.kernel_shares is not None else None)
    return finite(out | {"prediction": replayed.prediction})


def show(replayed, json_out: bool) -> None:
    """The summary of one replay: a table, or JSON."""
    if json_out:
        print(json.dumps(summary_json(replayed), indent=2))
        return
    from ..report.tables import kernel_column, phase_table, prediction_line, summary_lines
    out = rich_console()
    s = replayed.stats
    thr = f"{s.threshold:.3f}" + (" (adaptive)" if s.adaptive else "")
    out.print(f"{replayed.name}: {s.samples:,} samples, {replayed.summary.n_intervals} intervals "
              f"{s.interval}, detector {detector_label(s.detector, replayed.chosen)}, "
              f"threshold {thr}")
    tops, kernel = replayed.top_functions, replayed.kernel_shares
    rows = replayed.summary.table()
    out.print(phase_table(replayed.summary, width=out.width,
                          extra_columns=kernel_column([kernel.get(r["phase"]) for r in rows])
                          if kernel is not None else None,
                          functions=None if tops is None else
                          [tops.get(row["phase"], []) for row in rows]))
    for line in summary_lines(replayed.summary, s.dropped, s.implausible):
        out.print(line)
    if replayed.prediction:
        out.print(prediction_line(replayed.prediction))
    if replayed.ari is not None:
        out.print(f"adjusted Rand index against {replayed.labels}: {replayed.ari:.4f}")
