"""The results writer: byte for byte what one ``json.dumps`` per interval writes."""

import csv
import io
import json
import math

import numpy as np
from hypothesis import given, strategies as st

from phasewatch.core.pipeline import Intervals
from phasewatch.core.predict import Predictions
from phasewatch.formats.results import CSV_KEYS, INTERVAL_KEYS, JSON_KEYS, ResultsSink


def prediction_dicts(iv: Intervals) -> list[dict]:
    """Each interval's prediction keys, as the results documentation gives them."""
    pr = iv.prediction
    none = {"predicted_next": None, "predicted_after_change": None,
            "expected_remaining_intervals": None, "expected_remaining_s": None,
            "confidence": {"next": None, "after_change": None, "remaining": None}}
    if pr is None:
        return [none] * len(iv)
    out = []
    for i in range(len(iv)):
        if pr.next_phase[i] < 0:
            out.append(none)
            continue
        seconds = float(pr.remaining_s[i])
        out.append({"predicted_next": int(pr.next_phase[i]),
                    "predicted_after_change": (int(pr.after_change[i])
                                               if pr.after_change[i] >= 0 else None),
                    "expected_remaining_intervals": int(pr.remaining[i]),
                    "expected_remaining_s": None if math.isnan(seconds) else round(seconds, 6),
                    "confidence": {"next": round(float(pr.confidence_next[i]), 4),
                                   "after_change": round(float(pr.confidence_after_change[i]), 4),
                                   "remaining": round(float(pr.confidence_remaining[i]), 4)}})
    return out


def dumps_per_interval(iv: Intervals) -> str:
    """The writer as it was: one dict and one json.dumps per interval."""
    dist = [None if math.isnan(d) else round(d, 6) for d in iv.distance.tolist()]
    status = iv.statuses
    rows = zip(iv.index.tolist(), iv.t_start_ns.tolist(), iv.t_end_ns.tolist(),
               counts(iv.instructions, iv.samples), counts(iv.cycles, iv.samples),
               iv.samples.tolist(),
               dist, iv.phase.tolist(), iv.new_phase.tolist(), (status == 2).tolist(),
               (status == 1).tolist())
    return "".join(json.dumps(dict(zip(INTERVAL_KEYS, r)) | p) + "\n"
                   for r, p in zip(rows, prediction_dicts(iv)))


def with_predictions(iv: Intervals, rng) -> Intervals:
    n = len(iv)
    nxt = rng.integers(-1, 300, n)
    known = nxt >= 0
    remaining = np.where(known, rng.integers(0, 10**6, n), -1)
    seconds = np.where(known, remaining * rng.random(n) * 3, np.nan)
    iv.prediction = Predictions(nxt, np.where(known, rng.integers(-1, 300, n), -1), remaining,
                                seconds, rng.random(n), rng.random(n), rng.random(n))
    return iv


def counts(values, samples) -> list:
    """A count of 0 over samples was not taken: None."""
    return [None if n == 0 and k else n for n, k in zip(values.tolist(), samples.tolist())]


def intervals(distance, rng) -> Intervals:
    n = len(distance)
    big = rng.integers(0, 2**62, n)
    return Intervals(np.arange(n, dtype=np.int64), big, big + rng.integers(0, 10**12, n),
                     rng.integers(0, 2**40, n), rng.integers(0, 2**40, n),
                     rng.integers(0, 100, n), np.asarray(distance, np.float64),
                     rng.integers(-1, 300, n), rng.random(n) < 0.2, np.zeros(n), np.zeros(n),
                     status=rng.integers(0, 3, n).astype(np.int8))


def written(iv: Intervals, binary: bool) -> str:
    if binary:
        raw = io.BytesIO()
        stream = io.TextIOWrapper(raw, encoding="utf-8")
        ResultsSink(stream).write(iv)
        stream.flush()
        return raw.getvalue().decode()
    stream = io.StringIO()
    ResultsSink(stream).write(iv)
    return stream.getvalue()


EDGES = [math.nan, 0.0, 1.0, 0.5, 0.25, 1 / 3, 2 / 3, 0.1, 0.3, 1e-4, 9.9999e-5, 5e-6, 1.2e-5,
         4.9e-7, 5e-7, 5.1e-7, 0.0000015, 0.1234565, 0.9999995, 0.9999994, 1.0000005,
         0.2500005, 999.9999995, 1234.5, 1e17, -0.0, -0.25, math.inf, 5e-324, 0.123456789]


def test_edge_distances_and_every_small_value_match_json_dumps():
    rng = np.random.default_rng(1)
    small = [k / 1e6 for k in range(0, 200)] + [k / 1e6 + 4e-7 for k in range(0, 200)]
    iv = intervals(EDGES + small, rng)
    assert written(iv, binary=True) == dumps_per_interval(iv)
    assert written(iv, binary=False) == dumps_per_interval(iv)


def test_predictions_are_written_as_json_dumps_writes_them():
    rng = np.random.default_rng(4)
    iv = with_predictions(intervals(rng.random(5000), rng), rng)
    assert written(iv, binary=True) == dumps_per_interval(iv)
    rows = [json.loads(line) for line in written(iv, binary=False).splitlines()]
    assert [r["predicted_next"] for r in rows] == [x if x >= 0 else None
                                                   for x in iv.prediction.next_phase.tolist()]
    assert all(list(r) == list(JSON_KEYS) for r in rows)


def test_a_large_batch_of_random_distances_matches_json_dumps():
    rng = np.random.default_rng(2)
    d = rng.random(50_000) ** 3
    d[::7] = np.nan
    d[1::5] = rng.integers(0, 10**6, len(d[1::5])) / 1e6 + 5e-7   # near rounding ties
    iv = intervals(d, rng)
    assert written(iv, binary=True) == dumps_per_interval(iv)


def remaining_seconds_of(iv: Intervals, seconds) -> Intervals:
    known = iv.prediction.next_phase >= 0
    iv.prediction.remaining_s = np.where(known, np.asarray(seconds, np.float64), np.nan)
    return iv


def test_remaining_seconds_near_rounding_ties_match_json_dumps():
    rng = np.random.default_rng(5)
    ties = (rng.integers(0, 10**12, 20_000) + 0.5) / 1e6
    seconds = np.concatenate([ties, np.nextafter(ties, 0), np.nextafter(ties, np.inf),
                              EDGES, [2.0 ** 42 / 1e6 * k for k in (0.5, 1, 1.5, 2)]])
    iv = with_predictions(intervals(rng.random(len(seconds)), rng), rng)
    remaining_seconds_of(iv, seconds)
    assert written(iv, binary=False) == dumps_per_interval(iv)


@given(st.lists(st.floats(min_value=-1e20, max_value=1e20) | st.just(math.nan), min_size=1,
                max_size=40))
def test_any_remaining_seconds_match_json_dumps(seconds):
    rng = np.random.default_rng(len(seconds))
    iv = remaining_seconds_of(with_predictions(intervals(rng.random(len(seconds)), rng), rng),
                              seconds)
    assert written(iv, binary=False) == dumps_per_interval(iv)


@given(st.lists(st.floats(min_value=-1e20, max_value=1e20) | st.just(math.nan),
                min_size=1, max_size=40))
def test_any_distance_matches_json_dumps(distances):
    iv = intervals(distances, np.random.default_rng(len(distances)))
    assert written(iv, binary=False) == dumps_per_interval(iv)


def test_partial_and_empty_intervals_write_nothing():
    rng = np.random.default_rng(3)
    iv = intervals([0.5], rng)
    iv.partial = True
    assert written(iv, binary=True) == ""
    assert written(intervals([], rng), binary=True) == ""


def csv_as_it_was(iv: Intervals) -> str:
    """The CSV writer as it was: each JSON line parsed back, a cell per value."""
    def cell(value) -> str:
        return "" if value is None else ("true" if value else "false") \
            if isinstance(value, bool) else str(value)
    def flat(row: dict) -> dict:
        return row | {f"confidence.{k}": v for k, v in row.pop("confidence").items()}
    rows = (flat(json.loads(line)) for line in dumps_per_interval(iv).splitlines())
    return "".join(",".join(cell(row[k]) for k in CSV_KEYS) + "\n" for row in rows)


@given(st.lists(st.floats(min_value=-1e20, max_value=1e20) | st.just(math.nan)
                | st.just(math.inf), min_size=1, max_size=40))
def test_csv_rows_hold_the_values_of_the_json_lines(distances):
    rng = np.random.default_rng(len(distances))
    for iv in (intervals(distances, rng), with_predictions(intervals(distances, rng), rng)):
        stream = io.StringIO()
        ResultsSink(stream, csv=True).write(iv)
        assert stream.getvalue() == ",".join(CSV_KEYS) + "\n" + csv_as_it_was(iv)


# --- read back, against the intervals themselves ----------------------------------

def expected_rows(iv: Intervals) -> list[dict]:
    """What each line must hold, from the interval columns directly: exact
    integers, the distance to 6 decimals (None where there is none), the flags."""
    rows = []
    for k in range(len(iv)):
        d = float(iv.distance[k])
        rows.append({"index": int(iv.index[k]), "t_start_ns": int(iv.t_start_ns[k]),
                     "t_end_ns": int(iv.t_end_ns[k]),
                     "instructions": counts(iv.instructions[k:k + 1], iv.samples[k:k + 1])[0],
                     "cycles": counts(iv.cycles[k:k + 1], iv.samples[k:k + 1])[0],
                     "samples": int(iv.samples[k]),
                     "distance": None if d != d else round(d, 6), "phase": int(iv.phase[k]),
                     "new_phase": bool(iv.new_phase[k]), "tentative": int(iv.statuses[k]) == 2,
                     "no_data": int(iv.statuses[k]) == 1} | prediction_dicts(iv)[k])
    return rows


def test_counts_beyond_int64_are_read_back_exactly():
    rng = np.random.default_rng(4)
    iv = intervals([0.5, math.nan], rng)
    iv.instructions = np.array([2**64 - 1, 2**63], np.uint64)
    iv.cycles = np.array([2**63 + 12345, 0], np.uint64)
    lines = [json.loads(line) for line in written(iv, binary=True).splitlines()]
    assert [(r["instructions"], r["cycles"]) for r in lines] == [
        (2**64 - 1, 2**63 + 12345), (2**63, 0 if iv.samples[1] == 0 else None)]
    assert lines == expected_rows(iv)


def test_counts_not_taken_are_null_in_json_and_empty_in_csv():
    iv = intervals([0.5, 0.25, 0.1], np.random.default_rng(6))
    iv.samples = np.array([30, 30, 0], np.int64)
    iv.instructions = np.array([0, 5, 0], np.int64)     # not counted; counted; no sample
    iv.cycles = np.array([0, 7, 0], np.int64)
    lines = [json.loads(line) for line in written(iv, binary=False).splitlines()]
    assert [(r["instructions"], r["cycles"]) for r in lines] == [(None, None), (5, 7), (0, 0)]
    stream = io.StringIO()
    ResultsSink(stream, csv=True).write(iv)
    rows = [line.split(",") for line in stream.getvalue().splitlines()[1:]]
    assert [(r[3], r[4]) for r in rows] == [("", ""), ("5", "7"), ("0", "0")]


def test_json_lines_hold_every_interval_value():
    rng = np.random.default_rng(5)
    iv = intervals(EDGES[:-4] + [0.1234565, 0.75, math.nan], rng)
    assert [json.loads(line) for line in written(iv, binary=False).splitlines()] == expected_rows(iv)


def test_csv_cells_hold_times_counts_distances_and_flags():
    rng = np.random.default_rng(6)
    iv = intervals([0.0, 0.5, 1 / 3, math.nan, 0.9999995, 1234.5], rng)
    iv.instructions = np.array([2**64 - 1, 0, 1, 2**40, 7, 2**63], np.uint64)
    stream = io.StringIO()
    ResultsSink(stream, csv=True).write(iv)
    header, *rows = list(csv.reader(io.StringIO(stream.getvalue())))
    assert tuple(header) == CSV_KEYS
    flag = {"true": True, "false": False}
    for cells, want in zip(rows, expected_rows(iv), strict=True):
        got = dict(zip(header, cells))
        for key in ("index", "t_start_ns", "t_end_ns", "instructions", "cycles", "samples", "phase"):
            assert (None if got[key] == "" else int(got[key])) == want[key], key
        assert (None if got["distance"] == "" else float(got["distance"])) == want["distance"]
        for key in ("new_phase", "tentative", "no_data"):
            assert flag[got[key]] == want[key], key
