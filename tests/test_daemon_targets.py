"""The daemon's per-target pipelines: the same phases as replay, bounded
phases per target, targets forgotten after their grace period, and memory
flat over a day of samples."""

from __future__ import annotations

import numpy as np
import psutil
import pytest

from phasewatch.core.batch import SampleBatch, concat
from phasewatch.core.driver import Driver
from phasewatch.core.source import Sink
from phasewatch.core.params import DetectorParams, Params, histogram_params_of, interval_params_of
from phasewatch.core.pipeline import Intervals, Pipeline
from phasewatch.daemon.metrics import DaemonCounts, PhasewatchCollector, registry_for
from phasewatch.daemon.targets import Targets
from phasewatch.formats import synthetic
from phasewatch.live.host_signals import HostSignals

INTERVAL = 100_000_000


def example(seed=1, cpu=0) -> SampleBatch:
    batch = concat(list(synthetic.generate(synthetic.SCHEDULE, INTERVAL, seed=seed)))
    return SampleBatch({**batch.columns, "cpu": np.full(len(batch), cpu, np.int32)})


def params(meta, detector="vpf-ip", max_phases=64) -> Params:
    d = DetectorParams(detector=detector, max_phases=max_phases)
    return Params(interval_params_of(meta), histogram_params_of(meta), d)


def test_each_cpu_gets_the_phases_its_own_replay_finds():
    meta = synthetic.metadata(INTERVAL, cpus=2)
    a, b = example(1, cpu=0), example(2, cpu=1)
    both = concat([a, b])
    order = np.argsort(both["t_ns"], kind="stable")
    mixed = SampleBatch({n: c[order] for n, c in both.columns.items()})
    seen = {}

    class Seen(Sink):
        def classified(self, c):
            seen.setdefault(c.stream, []).extend(c.intervals.phase.tolist())
    targets = Targets(meta, params(meta))
    driver = Driver(targets, [targets, Seen()])
    for start in range(0, len(mixed), 997):
        driver.take(mixed.slice(start, start + 997))
    for name, alone in (("cpu0", a), ("cpu1", b)):
        expected = Pipeline.for_trace(meta, params(meta)).feed(alone).phase.tolist()
        assert seen[name] == expected
    states = {t.name: t for t in targets.snapshot()}
    assert states["cpu0"].phases == 4 and states["cpu0"].intervals == 200
    assert sum(states["cpu1"].phase_intervals.values()) == 200


def test_phases_beyond_the_cap_are_retired_and_counted():
    meta = synthetic.metadata(INTERVAL)
    targets = Targets(meta, params(meta, max_phases=2))
    driver, batch = Driver(targets, [targets]), example()
    done = [driver.take(batch.slice(a, a + 500)) for a in range(0, len(batch), 500)]
    intervals = Intervals.join([c.intervals for cs in done for c in cs])
    state = targets.snapshot()[0]
    assert state.phases <= 2
    assert state.phases_retired >= 2                  # four phases, two kept at a time
    # Ids are stable: never a retired phase's for another behaviour.  A
    # behaviour that comes back after its phase was retired takes its id again.
    truth = synthetic.labels()
    behaviours = {}
    for phase, label, status in zip(intervals.phase.tolist(), truth, intervals.statuses.tolist()):
        if status == 0:         # matched (not a tentative interval at a change)
            behaviours.setdefault(phase, set()).add(label)
    assert all(len(b) == 1 for b in behaviours.values()), behaviours
    assert len(behaviours) == len(set(truth)), behaviours
    # Each id counts its phase's intervals, from the first on.
    for p in state.phase_intervals:
        assert state.phase_intervals[p] == (intervals.phase == p).sum()


def test_targets_that_end_leave_after_the_grace_period():
    meta = synthetic.metadata(INTERVAL, cpus=2)
    targets = Targets(meta, params(meta), grace_s=60)
    driver = Driver(targets, [targets])
    driver.take(example(1, cpu=0).slice(0, 500))
    driver.take(example(2, cpu=1).slice(0, 500))
    now = targets.by_name["cpu1"].last_seen
    assert targets.forget_ended(now + 30) == []
    targets.by_name["cpu0"].last_seen = now + 50
    assert targets.forget_ended(now + 61) == ["cpu1"]
    assert [t.name for t in targets.snapshot()] == ["cpu0"]


class LoopedDay:
    """A day of one CPU's samples at 1 kHz: the example over and over, with
    time and counters carried on, as a source."""

    def __init__(self, samples: int):
        self.base = example()
        self.samples = samples
        self.metadata = synthetic.metadata(INTERVAL)

    def batches(self):
        b = self.base
        span = {n: int(b[n][-1]) for n in b.signals if n not in ("cpu", "tid", "ip", "perf_status")}
        done, k = 0, 0
        while done < self.samples:
            cols = dict(b.columns)
            for n, last in span.items():
                cols[n] = b[n] + b[n].dtype.type(k * last)
            yield SampleBatch(cols)
            done += len(b)
            k += 1

    def stats(self):
        return {}

    def close(self):
        pass


@pytest.mark.slow
def test_a_day_of_samples_keeps_the_resident_set_flat():
    day = LoopedDay(86_400_000)
    meta = day.metadata
    targets = Targets(meta, params(meta, detector="vpf"))
    host = HostSignals(meta["base_freq_mhz"])
    collector = PhasewatchCollector(lambda: [targets], lambda: [host], DaemonCounts())
    registry = registry_for(collector)
    rss = []
    proc = psutil.Process()

    class Measure(Sink):
        count = 0

        def batch(self, batch):
            self.count += 1
            if self.count % 1000 == 0:
                host.tick()
                list(registry.collect())
                rss.append(proc.memory_info().rss)

    # the live loop's driver, without a queue to drop from
    Driver(targets, [host, Measure(), targets]).run(day.batches())
    state = targets.snapshot()[0]
    assert targets.samples >= 86_400_000
    assert state.intervals > 2_000_000
    # After warm-up (first tenth), the resident set grows by less than 8 MiB.
    settled = rss[len(rss) // 10:]
    print(f"resident set over a day of samples: {settled[0] >> 20} MiB after a tenth, "
          f"{max(settled) >> 20} MiB at most, {rss[-1] >> 20} MiB at the end")
    assert max(settled) - settled[0] < 8 << 20, [r >> 20 for r in rss]


def test_a_restarted_target_exports_only_the_live_process_state():
    """A comm: target whose process ended and started again: the ended
    process's worker still holds its state, but a scrape has one series per
    target, the live one's (before, both were exported and Prometheus kept
    the ended one's)."""
    from prometheus_client import generate_latest
    from phasewatch.daemon.targets import TargetState
    meta = synthetic.metadata(INTERVAL)
    p = params(meta)
    ended, live = Targets(meta, p), Targets(meta, p)
    for router, intervals, seen in ((ended, 500, 10.0), (live, 3, 20.0)):
        router.by_name["comm:app"] = TargetState("comm:app", Pipeline.for_trace(meta, p),
                                                 intervals=intervals, last_seen=seen)
    for order in ([ended, live], [live, ended]):
        collector = PhasewatchCollector(lambda: order, lambda: [], DaemonCounts())
        text = generate_latest(registry_for(collector)).decode()
        series = [line for line in text.splitlines()
                  if line.startswith('phasewatch_intervals_total{target="comm:app"}')]
        assert series == ['phasewatch_intervals_total{target="comm:app"} 3.0']
