"""``phasewatch report INPUT --out DIR``: the phase picture of a run.

INPUT is a trace (either format ``replay`` reads), or the JSON Lines results
of a run together with its trace (``--trace``).  The trace is replayed through
the same pipeline as ``replay`` to get each interval's histograms; with a
results file, its phases and distances are drawn over them (the two must
describe the same intervals).  Writes ``DIR/index.html`` (interactive, self-
contained) and ``DIR/phases.png`` (the same figure, static).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np

from ..console import warn
from ..core.classify import MATCHED, NO_DATA, TENTATIVE
from ..core.detectors import SAMPLE_DETECTORS
from ..core.driver import Driver
from ..core.pipeline import Intervals, Pipeline
from ..core.settings import pipeline_for
from ..errors import UserError
from ..formats.inputs import read_text
from ..formats.outputs import Recording, check_folder, check_outputs
from ..formats.labellings import number_problem, phase_problem, read_labels
from ..formats.results import adjusted_rand_index
from ..formats.tracefiles import open_trace
from ..live.phase_functions import PhaseFunctions
from ..report.code_entries import CodeEntries
from ..report.figure import FigureRecorder, PhaseFigure, with_truth
from ..report.folder import phase_rows, report_files, write_report
from .arguments import add_detector_arguments, given_settings, settings_of


def add_arguments(parser) -> None:
    parser.add_argument("input", metavar="INPUT",
                        help="a trace, or a JSON Lines results file (then give --trace)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="folder for index.html and phases.png (made if missing)")
    parser.add_argument("--trace", metavar="TRACE", help="the trace a results file came from")
    parser.add_argument("--labels", metavar="FILE",
                        help="ground truth, one label per interval: a JSON list, or "
                             "SimPoint labels (a line per interval, the label first)")
    parser.add_argument("--base-mhz", type=float, metavar="MHZ",
                        help="base frequency for a CSV trace (default: its TSC rate)")
    parser.add_argument("--diff", metavar="BASELINE",
                        help="add a section telling what changed since BASELINE, an earlier "
                             "trace of the same program (as 'phasewatch diff BASELINE TRACE')")
    add_detector_arguments(parser, output=False, names=SAMPLE_DETECTORS)


def run(args) -> int:
    results, trace = inputs_of(args)
    inputs = [Recording(trace), args.input, args.labels, Recording(args.diff) if args.diff else None]
    # Refused before the trace is read (and warned about): checked again when written.
    check_folder(args.out, inputs=inputs)
    if os.path.isdir(args.out):
        check_outputs(report_files(args.out), inputs)
    labels = read_truth(args.labels) if args.labels else None
    source = open_trace(trace, base_mhz=args.base_mhz, warn=warn)
    try:
        meta = source.metadata
        pipeline = pipeline_for(meta, settings_of(args, meta.get("detection")),
                                tuple(meta.get("signals") or source.signals), warn)
        recorder = FigureRecorder.of(pipeline)
        functions = PhaseFunctions.of_recording(meta) if meta.get("mappings") else None
        sinks = [recorder]
        if functions is not None:
            entries = CodeEntries(pipeline, functions.symbolizer)
            recorder.name_entries = entries.names
            sinks = [entries, recorder, functions]
        Driver(pipeline, sinks).run(source.batches())
    finally:
        source.close()
    if recorder.n_intervals == 0:
        raise UserError(f"{trace}: no complete interval to draw (the run is shorter than "
                        f"one interval; try a shorter --interval-ms or --interval-instructions)")
    intervals = recorder.intervals()
    if results is not None:
        intervals = drawn_from_results(args.input, results, intervals)
    figure = recorder.figure(intervals.phase, intervals.distance, intervals.new_phase,
                            intervals.statuses)
    if labels is not None:
        labels = check_labels(args.labels, labels, len(intervals))
        figure = with_truth(figure, labels, intervals.phase,
                            adjusted_rand_index([str(x) for x in labels], intervals.phase))
    rows = phase_rows(intervals, functions if results is None else None)
    notes = describe(trace, pipeline, figure, results is not None and args.input)
    sections = [diff_section(args.diff, trace, args)] if args.diff else []
    written = write_report(args.out, figure, f"phases of {os.path.basename(trace)}", notes, rows,
                           inputs=inputs, sections=sections)
    print(f"phasewatch report: wrote {', '.join(written)} ({len(intervals)} intervals, "
          f"{len(rows)} phases)")
    return 0


def inputs_of(args) -> tuple[list[dict] | None, str]:
    """The results (None for a bare trace) and the trace to replay."""
    if not looks_like_results(args.input):
        return None, args.input
    if not args.trace:
        raise UserError(f"{args.input}: a results file, but no trace: give the trace the "
                        f"run recorded with --trace TRACE")
    return read_results(args.input), args.trace


def looks_like_results(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(64).lstrip()[:1] == b"{"
    except OSError:
        return False


def read_results(path: str) -> list[dict]:
    rows = []
    for number, line in enumerate(read_text(path, "results").splitlines(), start=1):
        if line.strip():
            rows.append(_result_row(path, number, line))
    if not rows:
        raise UserError(f"{path}: no intervals in the results (an empty run)")
    return rows


def _result_row(path: str, number: int, line: str) -> dict:
    try:
        row = json.loads(line)
    except ValueError as exc:
        raise UserError(f"{path}, line {number}: not JSON ({exc})") from None
    except RecursionError:
        raise UserError(f"{path}, line {number}: not JSON (nested too deeply)") from None
    if not isinstance(row, dict) or not {"phase", "distance", "new_phase", "t_end_ns"} <= set(row):
        raise UserError(f"{path}, line {number}: not a phasewatch result (needs phase, "
                        f"distance, new_phase and t_end_ns)")
    problem = (phase_problem(row["phase"]) or number_problem("distance", row["distance"])
               or (None if type(row["t_end_ns"]) is int and abs(row["t_end_ns"]) < 2**63
                   else f"t_end_ns {str(row['t_end_ns'])[:30]} is not an integer"))
    if problem:
        raise UserError(f"{path}, line {number}: {problem}: not a phasewatch result")
    return row


def drawn_from_results(path: str, results: list[dict], replayed: Intervals) -> Intervals:
    """The replayed intervals with the results' phases and distances; the two
    must be the same intervals."""
    if len(results) != len(replayed):
        raise UserError(f"{path}: {len(results)} intervals, but its trace replays to "
                        f"{len(replayed)}: not the results of this trace, or made with other "
                        f"interval options")
    ends = np.array([r["t_end_ns"] for r in results], np.int64)
    if not np.array_equal(ends, replayed.t_end_ns):
        first = int(np.flatnonzero(ends != replayed.t_end_ns)[0])
        raise UserError(f"{path}: interval {first} ends at {ends[first]} ns, but in the trace "
                        f"at {replayed.t_end_ns[first]} ns: not the results of this trace")
    phase = np.array([r["phase"] for r in results], np.int64)
    distance = np.array([np.nan if r["distance"] is None else r["distance"] for r in results])
    new = np.array([bool(r["new_phase"]) for r in results])
    status = np.array([NO_DATA if r.get("no_data") else TENTATIVE if r.get("tentative")
                       else MATCHED for r in results], np.int8)
    return replace(replayed, phase=phase, distance=distance, new_phase=new, status=status)


def read_truth(path: str) -> list:
    """A JSON list, or SimPoint's labels file (``LABEL [DISTANCE]`` per line)."""
    text = read_text(path, "labels")
    if text.lstrip()[:1] == "[":
        return read_labels(path)
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def check_labels(path: str, labels: list, n: int) -> list:
    if len(labels) != n:
        raise UserError(f"{path}: {len(labels)} labels, but the run has {n} complete intervals")
    return labels


def diff_section(baseline: str, trace: str, args) -> tuple[str, str, list[dict]]:
    from ..report.diff import diff_rows, diff_runs, run_phases
    given = given_settings(args)
    result = diff_runs(run_phases(baseline, given, warn), run_phases(trace, given, warn),
                       threshold=args.threshold)
    return ("diff-table", f"Changes since {baseline} (A: {baseline}, B: {trace}; * changed)",
            diff_rows(result))


def describe(trace: str, pipeline: Pipeline, figure: PhaseFigure, results_path) -> list[str]:
    p = pipeline.params
    notes = [f"{trace}: {pipeline.samples:,} samples, {figure.n_intervals:,} intervals "
             f"{p.interval.describe()}, detector {p.detector.detector}, threshold "
             f"{p.detector.threshold:g}" + (" (adaptive)" if p.detector.adaptive else "")]
    if results_path:
        notes.append(f"phases and distances from {results_path}; histograms from the trace")
    if figure.ari is not None:
        notes.append(f"adjusted Rand index against the ground truth: {figure.ari:.4f}")
    return notes
