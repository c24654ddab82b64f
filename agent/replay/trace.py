"""Replay of one recording: a trace (either format) or a SimPoint ``.bb``
file, through the one driver, to its sinks; the summary is returned, for the
command to print."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Mapping

from ..core.driver import Driver
from ..core.pipeline import PipelineStats
from ..core.prediction import PredictionTap
from ..core.settings import DetectionSettings, pipeline_for
from ..errors import UserError
from ..formats import bbvfile
from ..formats import metadata as md, schema
from ..formats.labellings import read_labels
from ..formats.outputs import Recording, check_outputs
from ..formats.results import PhaseSummary, ResultsSink, adjusted_rand_index


@dataclass
class Replayed:
    """What a replay found, for a table or JSON."""

    name: str                   # the trace, or "TRACE CPU N"
    summary: PhaseSummary
    stats: PipelineStats
    failures: list[str]         # outputs that could not be written (a full disk)
    ari: float | None = None    # against the labels, where given
    labels: str | None = None
    chosen: str | None = "bbv"  # the detector the options or the recording chose; None: none
    prediction: dict | None = None  # the scores of the phase predictions
    #: Each phase's top functions (name, share), where the trace carries its
    #: mappings; None where it does not.
    top_functions: dict[int, list[tuple[str, float]]] | None = None
    #: Each phase's share of samples in kernel mode, where the recording
    #: sampled kernel mode and carries IPs; None where not.
    kernel_shares: dict[int, float | None] | None = None


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay: the detection settings given (setting -> value, None
    for not given: the recording's own then), and the outputs."""

    given: Mapping[str, Any]
    output: str | None = None
    pprof: str | None = None
    labels: str | None = None
    base_mhz: float | None = None


def replay(path: str, options: ReplayOptions, warn: Callable[[str], None],
           cpu: int | None = None) -> Replayed:
    """Replay the recording at ``path`` (its samples of ``cpu`` only, if
    given) into its results file and summary."""
    inputs = [Recording(path), options.labels]
    check_outputs([options.output, options.pprof], inputs)
    labels = read_labels(options.labels) if options.labels else None
    if bbvfile.looks_like_bb(path):
        replayed = replay_bb(path, options, inputs)
    else:
        replayed = replay_samples(path, options, warn, cpu, inputs)
    if labels is not None:
        replayed.ari = score(replayed.summary, labels, options.labels)
        replayed.labels = options.labels
    return replayed


def replay_samples(path: str, options: ReplayOptions, warn, cpu: int | None,
                   inputs: list) -> Replayed:
    from ..formats.tracefiles import open_trace
    source = open_trace(path, base_mhz=options.base_mhz, warn=warn)
    try:
        meta = source.metadata
        settings = DetectionSettings.given(options.given, meta.get("detection"))
        pipeline = pipeline_for(meta, settings, tuple(meta.get("signals") or source.signals), warn)
        summary = PhaseSummary(keep_phases=options.labels is not None)
        tap = PredictionTap.for_pipeline(pipeline, meta.get("prediction_memory"))
        sinks = [tap, summary, *result_sinks(options.output, inputs)]
        functions = phase_functions(meta, source.signals)
        if functions is not None:
            sinks.append(functions)
        if options.pprof and cpu is None:
            sinks.append(profile_sink(options.pprof, source, path, inputs))
        if hasattr(source, "read_only"):
            source.read_only(pipeline.columns | {n for s in sinks for n in getattr(s, "columns", ())})
        batches = source.batches() if cpu is None else samples_of_cpu(source.batches(), cpu)
        driver = Driver(pipeline, sinks)
        failures = drive(driver, lambda: driver.run(batches))
    finally:
        source.close()
    tops = None if functions is None else \
        {row["phase"]: functions.top(row["phase"], TOP_FUNCTIONS) for row in summary.table()}
    kernel = None if functions is None or not md.kernel_sampled(meta.get("sampling") or {}) \
        else {row["phase"]: functions.kernel_share(row["phase"]) for row in summary.table()}
    return Replayed(path if cpu is None else f"{path} CPU {cpu}", summary, pipeline.stats(),
                    failures, chosen=settings.detector, prediction=tap.summary(),
                    top_functions=tops, kernel_shares=kernel)


#: Functions named per phase.
TOP_FUNCTIONS = 3


def phase_functions(meta: dict, signals):
    """The sink naming each phase's functions, where the trace has IPs and
    the mappings they fall in (as ``run`` names them live); else None."""
    if not meta.get("mappings") or "ip" not in signals:
        return None
    from ..live.phase_functions import PhaseFunctions
    return PhaseFunctions.of_recording(meta)


def replay_bb(path: str, options: ReplayOptions, inputs: list) -> Replayed:
    """A SimPoint .bb file, classified by the bbv detector."""
    from ..simpoint import bbvreplay
    settings = DetectionSettings.given(options.given)
    bbvreplay.check_detector(settings.detector)
    summary = PhaseSummary(keep_phases=options.labels is not None)
    params = replace(settings.detector_params(), detector="bbv")
    tap = PredictionTap(params.max_phases)
    driver = Driver(bbvreplay.NO_SAMPLES, [tap, summary, *result_sinks(options.output, inputs)])
    classifier = bbvreplay.BbClassifier(params)
    failures = drive(driver, lambda: classifier.run(path, driver))
    return Replayed(path, summary, classifier.stats(), failures, prediction=tap.summary())


def drive(driver: Driver, work: Callable[[], None]) -> list[str]:
    """``work`` with the driver, then its trailing intervals; its outputs put
    in place if all went well, left as they were otherwise.  The failures of
    outputs that could not be written."""
    try:
        work()
        driver.finish()
    except BaseException:
        driver.close(complete=False)
        raise
    return driver.close()


def result_sinks(output: str | None, inputs: list) -> list:
    return [ResultsSink.open(output, inputs=inputs)] if output else []


def profile_sink(path: str, source, trace: str, inputs: list):
    from ..formats.energytable import read_energy_table
    from ..live.phase_profile import PhaseProfile, ProfileFile, period_ns_of
    from ..live.tree_symbolizer import RecordedTree
    meta = source.metadata
    PhaseProfile.check_columns(source.signals, "the trace")
    table = read_energy_table(trace)
    return PhaseProfile(period_ns_of(meta.get("sampling")), ProfileFile(
        path, symbolizer=lambda: RecordedTree(meta),
        energy_uj=lambda profile: profile.recorded_energy(table),
        realtime_offset_ns=schema.Sampling.of(meta.get("sampling")).realtime_offset_ns,
        comments=[" ".join(meta.get("command") or [])], inputs=inputs))


def score(summary: PhaseSummary, labels: list, path: str) -> float:
    """The adjusted Rand index of the phases against ground-truth ``labels``."""
    predicted = summary.phase_labels()
    if len(labels) != len(predicted):
        raise UserError(f"{path}: {len(labels)} labels, but the replay found "
                        f"{len(predicted)} complete intervals")
    return adjusted_rand_index([str(x) for x in labels], predicted)


def samples_of_cpu(batches, cpu: int) -> Iterator:
    """The rows of ``cpu``: one CPU's samples, an independent stream."""
    from ..core.batch import SampleBatch
    for batch in batches:
        rows = batch["cpu"] == cpu
        if rows.any():
            yield SampleBatch({name: column[rows] for name, column in batch.columns.items()})
