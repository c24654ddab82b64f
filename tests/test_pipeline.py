"""The pipeline against the numpy reference, and its batch-independence."""

import numpy as np
import pytest

from phasewatch.core import reference
from phasewatch.core.classify import MATCHED
from phasewatch.core.batch import SampleBatch, concat
from phasewatch.core.driver import Driver, Streams
from phasewatch.core.source import Sink
from phasewatch.core.params import DetectorParams, IntervalParams, Params, histogram_params_of
from phasewatch.core.pipeline import Intervals, Pipeline
from phasewatch.formats import synthetic

META = synthetic.metadata(100_000_000)


@pytest.fixture(scope="module")
def samples():
    return concat(list(synthetic.generate()))


def params(detector="vpf", adaptive=False, interval=None):
    return Params(interval=interval or IntervalParams(), histograms=histogram_params_of(META),
                  detector=DetectorParams(detector=detector, adaptive=adaptive))


def run(batch, p, chunk=None):
    pipe = Pipeline(p, synthetic.BASE_MHZ)
    if chunk is None:
        return pipe.feed(batch), pipe
    parts = [pipe.feed(batch.slice(a, a + chunk)) for a in range(0, len(batch), chunk)]
    return Intervals.join(parts), pipe


@pytest.mark.parametrize("detector", ["vpf", "vpf-ip", "vpf-ip-fold"])
@pytest.mark.parametrize("adaptive", [False, True])
def test_pipeline_matches_reference(samples, detector, adaptive):
    p = params(detector, adaptive)
    got, _ = run(samples, p)
    phase, dist, new, ends = reference.detect(samples, p, synthetic.BASE_MHZ)
    assert np.array_equal(got.phase, phase)
    assert np.array_equal(got.new_phase, new)
    assert np.allclose(got.distance, dist, equal_nan=True)
    assert np.array_equal(got.t_end_ns, samples["t_ns"][ends])


@pytest.mark.parametrize("chunk", [1, 7, 1000])
def test_result_does_not_depend_on_batching(samples, chunk):
    p = params("vpf-ip")
    whole, _ = run(samples, p)
    pieces, _ = run(samples, p, chunk)
    for field in ("t_start_ns", "t_end_ns", "instructions", "samples", "phase", "new_phase"):
        assert np.array_equal(getattr(whole, field), getattr(pieces, field)), field


def test_intervals_follow_the_schedule(samples):
    got, pipe = run(samples, params("vpf-ip"))
    assert len(got) == len(synthetic.labels())
    assert got.instructions.sum() == len(got) * 100_000_000
    per_sample = np.diff(samples["instructions"].astype(np.int64)).max()
    assert (np.abs(got.instructions - 100_000_000) <= per_sample).all()
    assert got.index.tolist() == list(range(len(got)))
    assert len(pipe.finish()) == 0                  # the schedule ends on an interval end


def test_vpf_cannot_tell_same_signature_apart_but_vpf_ip_can(samples):
    labels = np.array(synthetic.labels())
    vpf, _ = run(samples, params("vpf"))
    ip, _ = run(samples, params("vpf-ip"))
    a, b = labels == "compute-a", labels == "compute-b"
    assert set(vpf.phase[a]) == set(vpf.phase[b])
    # the interval where compute-b starts is tentative: labelled with the nearest phase
    confirmed = ip.statuses == MATCHED
    a, b = a & confirmed, b & confirmed
    assert not set(ip.phase[a]) & set(ip.phase[b])
    assert len(set(ip.phase[a])) == 1 and len(set(ip.phase[b])) == 1


def test_time_intervals(samples):
    p = params(interval=IntervalParams(kind="time", ns=50_000_000))
    got, pipe = run(samples, p)
    t = samples["t_ns"]
    assert len(got) == (t[-1] - t[0]) // 50_000_000
    assert (np.diff(got.t_end_ns) >= 49_000_000).all()
    # each ends at the first sample at or past the next 50 ms mark from the first sample
    marks = t[0] + 50_000_000 * np.arange(1, len(got) + 1)
    assert got.t_end_ns.tolist() == t[np.searchsorted(t, marks, side="left")].tolist()
    phase, _, _, ends = reference.detect(samples, p, synthetic.BASE_MHZ)
    assert np.array_equal(got.phase, phase)
    assert np.array_equal(got.t_end_ns, t[ends])


def test_trailing_partial_interval_is_reported_apart(samples):
    cut = samples.slice(0, len(samples) - 5)
    got, pipe = run(cut, params())
    tail = pipe.finish()
    assert len(got) == len(synthetic.labels()) - 1
    assert len(tail) == 1 and tail.partial and tail.phase[0] == -1
    assert 0 < tail.instructions[0] < 100_000_000


def test_adaptive_threshold_separates_phases_the_fixed_one_merges():
    from dataclasses import replace

    from phasewatch.formats.results import adjusted_rand_index
    phases = dict(synthetic.PHASES)
    phases["mixed-b"] = replace(phases["mixed"], name="mixed-b", voltage_mv=1030.0, productive=0.78)
    schedule = (("mixed", 30), ("mixed-b", 30), ("mixed", 20), ("memory", 20), ("mixed-b", 20))
    samples = concat(list(synthetic.generate(schedule, phases=phases)))
    truth = synthetic.labels(schedule)
    fixed, _ = run(samples, params("vpf"))
    adaptive, pipe = run(samples, params("vpf", adaptive=True))
    assert adjusted_rand_index(truth, fixed.phase) < 0.5
    # each change is confirmed one interval after it is seen
    assert adjusted_rand_index(truth, adaptive.phase) > 0.9
    assert pipe.threshold < 0.25


def test_streams_give_each_cpu_its_own_pipeline_and_phase_history():
    """A batch of two CPUs' rows, interleaved in time, through Streams: each
    CPU's intervals are those of a pipeline fed that CPU's rows alone, each
    with the phase before it (-1 before the first), and the changes where
    they differ; the trailing partial interval follows its stream's last phase."""
    cols = {}
    # cpu1 ends in one interval of a phase it has not had: held for a
    # decision until the source ends (the next interval is cut short).
    for cpu, schedule in ((0, synthetic.SCHEDULE), (1, (("compute-a", 20), ("memory", 2)))):
        rows = concat(list(synthetic.generate(schedule, seed=cpu + 1)))
        rows = rows.slice(0, len(rows) - 5)         # a trailing partial interval
        cols[cpu] = SampleBatch({**rows.columns, "cpu": np.full(len(rows), cpu, rows["cpu"].dtype)})
    few = cols[0].slice(0, 10)                      # less than an interval: a tail alone
    cols[2] = SampleBatch({**few.columns, "cpu": np.full(10, 2, few["cpu"].dtype)})
    both = concat([cols[0], cols[1], cols[2]])
    both = SampleBatch({n: c[np.argsort(both["t_ns"], kind="stable")] for n, c in both.columns.items()})
    rows_seen = {}
    streams = Streams(lambda name: Pipeline(params(), synthetic.BASE_MHZ), name=None,
                      on_rows=lambda name, n: rows_seen.update({name: rows_seen.get(name, 0) + n}))
    sink = Kept()
    driver = Driver(streams, [sink])
    driver.run(both.slice(start, start + 5000) for start in range(0, len(both), 5000))
    driver.flush()
    assert sink.ends == 1 and sink.rows == len(both)
    assert rows_seen == {f"cpu{cpu}": len(rows) for cpu, rows in cols.items()}
    driver.finish()
    got, tails = {}, {}
    for c in sink.classified_intervals:
        if c.intervals.partial:
            tails[c.stream] = c
        else:
            got.setdefault(c.stream, []).append(c)
    assert sorted(got) == ["cpu0", "cpu1"] and sorted(tails) == ["cpu0", "cpu1", "cpu2"]
    assert tails["cpu2"].previous.tolist() == [-1]
    for cpu in (0, 1):
        fed, pipe = run(cols[cpu], params())
        alone = Intervals.join([fed, pipe.flush()])
        parts = got[f"cpu{cpu}"]
        phases = np.concatenate([c.intervals.phase for c in parts])
        assert phases.tolist() == alone.phase.tolist()
        previous = np.concatenate([c.previous for c in parts])
        assert previous.tolist() == [-1] + phases[:-1].tolist()
        changes = np.concatenate([c.changes + sum(len(p.intervals) for p in parts[:k])
                                  for k, c in enumerate(parts)])
        assert changes.tolist() == [i for i in range(len(phases)) if i == 0 or phases[i] != phases[i - 1]]
        assert tails[f"cpu{cpu}"].previous.tolist() == [phases[-1]] * len(tails[f"cpu{cpu}"].intervals)
    assert driver.close() == [] and sink.closed == [True]
    one_row = cols[0].slice(0, 1)
    assert streams.feed(one_row) == [] and rows_seen["cpu0"] == len(cols[0]) + 1
    # a source's poll that found nothing: no stream is told of it or made for it
    assert streams.feed(SampleBatch.empty(both.signals)) == []
    assert rows_seen["cpu0"] == len(cols[0]) + 1 and sorted(streams.pipelines) == ["cpu0", "cpu1", "cpu2"]
    streams.forget(["cpu1"])
    assert sorted(streams.pipelines) == ["cpu0", "cpu2"] and "cpu1" not in streams.last_phase


class Named(Streams):
    """Streams that name each phase id they are asked about."""

    def names(self, name, phases):
        return {int(p): f"phase {p}" for p in phases}


def test_each_batch_names_its_intervals_phases_and_the_one_before_them(samples):
    """The names handed on with a batch's intervals (the daemon's change
    events say from which phase to which) cover every phase the intervals
    have and the one before the first of them, from an earlier batch."""
    sink = Kept()
    driver = Driver(Named(lambda name: Pipeline(params(), synthetic.BASE_MHZ)), [sink])
    driver.run(samples.slice(start, start + 3000) for start in range(0, len(samples), 3000))
    driver.flush()
    across = 0
    for c in sink.classified_intervals:
        mentioned = set(c.intervals.phase.tolist()) | {int(c.previous[0])}
        assert set(c.names) == mentioned
        across += c.previous[0] not in c.intervals.phase
    assert across > 0         # a batch's intervals that change phase from the batch before


class Kept(Sink):
    """A sink that keeps what it is handed."""

    def __init__(self):
        self.classified_intervals, self.ends, self.rows, self.closed = [], 0, 0, []

    def close(self, complete: bool = True) -> None:
        self.closed.append(complete)

    def batch(self, batch) -> None:
        self.rows += len(batch)

    def classified(self, c) -> None:
        self.classified_intervals.append(c)

    def ended(self) -> None:
        self.ends += 1
