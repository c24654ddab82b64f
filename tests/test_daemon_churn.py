"""Stable ids under churn: 500 behaviours through one target that keeps 16
phases.  No ``phase`` label value ever names two behaviours, each id keeps
one name, and the series shown stay bounded by the live phases and those
retired in the last ``retired_seconds`` (shortened here, on a clock the test
turns)."""

from __future__ import annotations

import numpy as np
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from phasewatch.core.batch import concat
from phasewatch.core.driver import Driver
from phasewatch.core.params import DetectorParams, Params, histogram_params_of, interval_params_of
from phasewatch.daemon.metrics import DaemonCounts, PhasewatchCollector, registry_for
from phasewatch.daemon.phase_ids import ProgramPhases, TargetPhases, known_kept
from phasewatch.daemon.targets import Targets
from phasewatch.formats import synthetic

INTERVAL = 100_000_000
BEHAVIOURS = 500
MAX_PHASES = 16
KEEP_S = 30.0                   # "retired_seconds", on the test's clock
REGION = 64 << 10               # each behaviour's own 64 KiB of code


def behaviours() -> dict[str, synthetic.Phase]:
    """500 behaviours alike in voltage and frequency, each running two 8 KiB
    regions of its own 64 KiB of a 32 MiB text."""
    base = synthetic.PHASES["compute-a"]
    return {f"b{k}": synthetic.Phase(f"b{k}", base.voltage_mv, base.voltage_sd, base.productive,
                                     base.productive_sd, 1.0, 0.05, (0.0, 1.0), 40.0, (),
                                     ((k * REGION, 8 << 10, 0.6),
                                      (k * REGION + (32 << 10), 8 << 10, 0.4)))
            for k in range(BEHAVIOURS)}


def schedule() -> tuple:
    """Each behaviour for 4 intervals, and every tenth one back once after
    the next two (a retired phase's behaviour coming back)."""
    out = []
    for k in range(BEHAVIOURS):
        out.append((f"b{k}", 4))
        if k % 10 == 2:
            out.append((f"b{k - 2}", 3))
    return tuple(out)


def metadata() -> dict:
    meta = synthetic.metadata(INTERVAL)
    end = synthetic.TEXT_START + BEHAVIOURS * REGION
    meta["text_range"] = meta["histograms"]["text_range"] = [synthetic.TEXT_START, end]
    meta["mappings"] = [{"start": synthetic.TEXT_START, "end": end, "offset": 0,
                         "path": "/opt/synthetic/churn"}]
    return meta


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def shown_series(registry) -> dict[str, str]:
    """phase -> phase_name of the target's per-phase series in one scrape."""
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name == "phasewatch_phase_intervals":
            for sample in family.samples:
                out[sample.labels["phase"]] = sample.labels["phase_name"]
    return out


def test_500_behaviours_through_16_phases_never_share_an_id_and_stay_bounded():
    meta, sched = metadata(), schedule()
    batch = concat(list(synthetic.generate(sched, INTERVAL, seed=3, phases=behaviours())))
    truth = np.array([name for name, n in sched for _ in range(n)])
    detector = DetectorParams(detector="vpf-ip", max_phases=MAX_PHASES)
    params = Params(interval_params_of(meta), histogram_params_of(meta), detector)
    clock = Clock()

    def book(name, pipeline):
        return TargetPhases(ProgramPhases(name, name, pipeline.profile, keep=known_kept(pipeline)),
                            keep_s=KEEP_S, clock=clock)
    targets = Targets(meta, params, books=book)
    registry = registry_for(PhasewatchCollector(lambda: [targets], lambda: [], DaemonCounts()))
    driver = Driver(targets, [targets])
    dropped = []        # what per-phase state elsewhere (energy) is told to drop
    targets.on_dropped = lambda target, phases: dropped.extend(phases)

    phases, statuses, first_seen, name_of, most = [], [], {}, {}, 0
    for a in range(0, len(batch), 1000):         # one batch a second of the test's clock
        clock.now += 1.0
        for c in driver.take(batch.slice(a, a + 1000)):
            phases += c.intervals.phase.tolist()
            statuses += c.intervals.statuses.tolist()
            for p in c.intervals.phase.tolist():
                first_seen.setdefault(p, clock.now)
        targets.forget_ended()
        shown = shown_series(registry)
        for phase, name in shown.items():
            assert name_of.setdefault(phase, name) == name, (phase, name, name_of[phase])
        opened_lately = sum(clock.now - t <= KEEP_S for t in first_seen.values())
        assert len(shown) <= MAX_PHASES + opened_lately, (clock.now, len(shown), opened_lately)
        most = max(most, len(shown))
    for c in driver.flush():
        phases += c.intervals.phase.tolist()
        statuses += c.intervals.statuses.tolist()

    assert len(phases) == len(truth)
    behaviour_of = {}
    for phase, label, status in zip(phases, truth.tolist(), statuses):
        if status == 0:         # matched: not a tentative interval at a change
            behaviour_of.setdefault(phase, set()).add(label)
    assert all(len(b) == 1 for b in behaviour_of.values()), \
        {p: b for p, b in behaviour_of.items() if len(b) > 1}
    # The churn happened: most behaviours had a phase (ids) of their own.
    assert len({b for bs in behaviour_of.values() for b in bs}) >= 0.9 * BEHAVIOURS
    assert len(set(name_of.values())) == len(name_of)       # no name on two ids
    # Behaviours that came back took their ids again.
    back = [k for k in range(BEHAVIOURS) if k % 10 == 2]
    ids_of = {}
    for phase, label, status in zip(phases, truth.tolist(), statuses):
        if status == 0:
            ids_of.setdefault(label, set()).add(phase)
    assert sum(len(ids_of[f"b{k - 2}"]) == 1 for k in back) >= 0.9 * len(back)
    # Retired series did go: far fewer at once than the ids given.
    assert most < len(behaviour_of) / 2, most
    # Once the clock passes retired_seconds, only the live phases remain.
    clock.now += KEEP_S + 1
    targets.forget_ended()
    state = targets.snapshot()[0]
    assert len(shown_series(registry)) == len(state.phase_intervals) <= MAX_PHASES
    assert len(dropped) == len(set(dropped)) >= len(behaviour_of) - MAX_PHASES - 10
    assert not set(dropped) & set(state.phase_intervals)
