"""The decoder: units from raw counters, and counters that misbehave."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

from phasewatch.core import reference
from phasewatch.core.batch import SampleBatch
from phasewatch.core.decode import (COUNTERS, PROFILE_COUNTERS, DecoderState, F, _drop_implausible,
                                    decode)

#: A value that could not be read, as docs/formats.md gives it.
M = 0xFFFF_FFFF_FFFF_FFFF


def batch(**cols):
    n = len(next(iter(cols.values())))
    cols.setdefault("t_ns", np.arange(n) * 1_000_000)
    cols.setdefault("cpu", np.zeros(n))
    return SampleBatch({k: np.asarray(v, dtype=np.uint64) if k not in ("t_ns", "cpu", "tid") else v
                        for k, v in cols.items()})


def test_known_values():
    b = batch(perf_status=[8192 << 32 | 0x1E00] * 2,   # 1.0 V, ratio 30
              aperf=[0, 2_000_000], mperf=[0, 1_000_000], pperf=[0, 500_000],
              tsc=[0, 4_000_000], instructions=[0, 3_000_000], cycles=[0, 1_500_000],
              c3=[0, 1_000_000], c6=[0, 1_000_000], c7=[0, 0])
    out = decode(b, DecoderState(), base_mhz=3000.0)
    assert out[F["voltage_mv"], 0] == 1000.0
    assert np.isnan(out[F["freq_mhz"], 0])                  # no previous sample
    assert out[F["freq_mhz"], 1] == 6000.0                  # base × ΔAPERF/ΔMPERF
    assert out[F["pfreq_mhz"], 1] == 1500.0                 # base × ΔPPERF/ΔMPERF
    assert out[F["cpi"], 1] == 0.5
    assert out[F["c0"], 1] == 0.25 and out[F["c3"], 1] == 0.25 and out[F["c6"], 1] == 0.25
    assert out[F["c1"], 1] == 0.25                          # TSC − MPERF − C3 − C6 − C7
    assert out[F["d_instructions"], 1] == 3_000_000


def test_residency_needs_the_tsc_alone_and_a_clock_that_moved():
    """C-state shares are taken where the TSC is decoded (whatever else is
    not), and read NaN without it; C1 is NaN where the TSC did not move or
    MPERF is missing, and the counts beside them are still decoded."""
    cols = dict(mperf=[0, 1_000, 2_000, M, 4_000], tsc=[0, 4_000, 4_000, 8_000, 12_000],
                instructions=[0, 10, 20, 30, 40], cycles=[0, 20, 40, 60, 80])
    no_pperf = DecoderState(counters=tuple(c for c in COUNTERS if c != "pperf"))
    out = decode(batch(**cols), no_pperf, 1000.0)
    assert out[F["c0"], 1] == 0.25 and out[F["c1"], 1] == 0.75
    assert np.isnan(out[F["c1"], 2])                # the TSC did not move
    assert np.isnan(out[F["c1"], 3])                # MPERF missing
    no_tsc = DecoderState(counters=tuple(c for c in COUNTERS if c != "tsc"))
    out = decode(batch(**cols), no_tsc, 1000.0)
    assert np.isnan(out[F["c0"]:]).all()
    assert out[F["d_cycles"]].tolist() == [0, 20, 20, 20, 20]
    no_instructions = DecoderState(counters=tuple(c for c in COUNTERS if c != "instructions"))
    assert decode(batch(**cols), no_instructions, 1000.0)[F["c0"], 1] == 0.25


def test_values_at_the_plausible_bounds_are_kept():
    """500 mV (4096/8192 V) and 10 GHz exactly are plausible; beyond is not."""
    out = decode(batch(perf_status=[4096 << 32, 4095 << 32, 0, 0],
                       aperf=[0, 10_000, 20_001, 30_001], mperf=[0, 3_000, 6_000, 9_000]),
                 DecoderState(), 3000.0)
    assert out[F["voltage_mv"], 0] == 500.0 and np.isnan(out[F["voltage_mv"], 1])
    assert out[F["freq_mhz"], 1] == 10_000.0 and np.isnan(out[F["freq_mhz"], 2])


def test_a_step_back_is_counted_where_a_batch_has_several_cpus():
    b = batch(cpu=np.array([0, 1, 0, 1, 0]), instructions=[100, 5, 50, 10, 150],
              cycles=[0, 0, 10, 10, 20])
    state = DecoderState()
    out = decode(b, state, 1000.0)
    assert list(out[F["d_instructions"]]) == [0, 0, 0, 5, 100]
    assert state.dropped() == {"instructions": 1}


def test_c1_never_negative():
    b = batch(mperf=[0, 10], tsc=[0, 10], c3=[0, 5], c6=[0, 5], c7=[0, 5])
    out = decode(b, DecoderState(), 1000.0)
    assert out[F["c1"], 1] == 0.0


def test_counter_going_backwards_is_dropped_and_counted():
    b = batch(instructions=[0, 100, 50, 150], cycles=[0, 100, 200, 300])
    state = DecoderState()
    out = decode(b, state, 1000.0)
    assert list(out[F["d_instructions"]]) == [0, 100, 0, 100]
    assert np.isnan(out[F["cpi"], 2])
    assert state.dropped() == {"instructions": 1}


def test_missing_value_drops_both_deltas_around_it():
    b = batch(instructions=[0, 100, M, 300, 400], cycles=[0, 100, 200, 300, 400])
    state = DecoderState()
    out = decode(b, state, 1000.0)
    assert list(out[F["d_instructions"]]) == [0, 100, 0, 0, 100]
    assert state.unread[COUNTERS.index("instructions")] == 1
    assert state.dropped() == {}


def test_deltas_are_per_cpu_and_carry_across_batches():
    state = DecoderState()
    first = batch(cpu=np.array([0, 1]), instructions=[100, 1000])
    second = batch(cpu=np.array([1, 0]), instructions=[1500, 160])
    decode(first, state, 1000.0)
    out = decode(second, state, 1000.0)
    assert list(out[F["d_instructions"]]) == [500, 60]


def test_one_cpus_counter_carries_its_last_value_into_the_next_batch():
    """A batch of one CPU's rows (the vectorised path): the next batch's first
    delta is taken from this batch's last value, and a step back there is
    dropped and counted."""
    state = DecoderState()
    decode(batch(instructions=[100, 200, 300], cycles=[0, 10, 20]), state, 1000.0)
    out = decode(batch(instructions=[250, 400, 460], cycles=[30, 40, 50]), state, 1000.0)
    assert list(out[F["d_instructions"]]) == [0, 150, 60]
    assert state.dropped() == {"instructions": 1}
    out = decode(batch(instructions=[470], cycles=[60]), state, 1000.0)
    assert list(out[F["d_instructions"]]) == [10]


@pytest.mark.parametrize("cpus,named", [([0, 8192], 8192), ([-1, 3], -1), ([-5, 9000], -5)])
def test_a_cpu_id_beyond_the_range_is_refused_naming_it(cpus, named):
    b = batch(cpu=np.array(cpus), instructions=[0, 1])
    with pytest.raises(ValueError, match=rf"CPU id {named} outside \(0, 8191\)"):
        decode(b, DecoderState(), 1000.0)


def test_no_delta_is_left_over_from_the_previous_batch():
    """The work arrays are reused: a row with no delta to take must read NaN,
    not the delta the previous batch had in that row."""
    state = DecoderState()
    decode(batch(cpu=np.array([0, 1, 1]), cycles=[100, 10, 30], instructions=[100, 10, 20]),
           state, 1000.0)
    out = decode(batch(cpu=np.array([0, 0, 2]), cycles=[150, 170, 5],
                       instructions=[150, 160, 5]), state, 1000.0)
    assert list(out[F["d_cycles"]]) == [50, 20, 0]
    assert np.isnan(out[F["cpi"], 2])


def test_counters_not_decoded_read_nan_whatever_the_batch_size():
    state = DecoderState(counters=PROFILE_COUNTERS)     # APERF is not decoded
    for n in (4, 3, 5):
        out = decode(batch(aperf=np.arange(n) * 7, mperf=np.arange(n) * 5,
                           instructions=np.arange(n) * 3), state, 1000.0)
        assert np.isnan(out[F["freq_mhz"]]).all()
        assert list(out[F["d_instructions"], 1:]) == [3] * (n - 1)


def test_thread_counters_take_deltas_per_thread():
    state = DecoderState(scope="thread")
    b = batch(cpu=np.array([0, 0, 1, 1]), tid=np.array([70000, 12, 70000, 12], np.int32),
              instructions=[1000, 50, 1600, 80])
    out = decode(b, state, 1000.0)
    assert list(out[F["d_instructions"]]) == [0, 0, 600, 30]
    again = batch(cpu=np.array([0]), tid=np.array([12], np.int32), instructions=[100])
    assert list(decode(again, state, 1000.0)[F["d_instructions"]]) == [20]


def test_voltage_zero_or_missing_is_unknown():
    state = DecoderState()
    out = decode(batch(perf_status=[0, M]), state, 1000.0)
    assert np.isnan(out[F["voltage_mv"]]).all()
    assert state.implausible_values() == {}         # unknown, not out of bounds


def test_voltages_between_steps_of_1_8192_volt_keep_their_fraction():
    """IA32_PERF_STATUS bits 47:32 count 1/8192 V: 7883 is 962.28… mV, not
    962; bits outside the field are ignored."""
    raws = [4097, 7883, 8001, 8193, 8847, 13105]
    status = [raw << 32 | 0x1E00 | (1 << 50) * (k % 2) for k, raw in enumerate(raws)]
    out = decode(batch(perf_status=status), DecoderState(), 3000.0)
    want = [float(Fraction(raw * 1000, 8192)) for raw in raws]
    assert out[F["voltage_mv"]].tolist() == want
    assert want[1] == 962.280273437500 and want[1] != int(want[1])


counter = st.lists(st.integers(0, 2**40), min_size=1, max_size=60)


@given(st.data())
def test_kernel_matches_reference(data):
    n = data.draw(st.integers(1, 60))
    cols = {name: data.draw(st.lists(st.integers(0, 2**40) | st.just(M), min_size=n, max_size=n))
            for name in COUNTERS}
    cols["perf_status"] = data.draw(st.lists(st.integers(0, 2**48), min_size=n, max_size=n))
    cpu = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)), np.int32)
    tid = np.array(data.draw(st.lists(st.integers(1, 4_000_000), min_size=n, max_size=n)), np.int32)
    scope = data.draw(st.sampled_from(["cpu", "thread"]))
    b = batch(cpu=cpu, tid=tid, **cols)
    got = decode(b, DecoderState(scope=scope), 2500.0)
    want = reference.decode(b, 2500.0, scope=scope)
    assert np.allclose(got, want, equal_nan=True, rtol=1e-12)


def test_implausible_voltage_and_clock_are_left_out_and_counted():
    volt_raw = lambda mv: int(mv * 8192 / 1000) << 32
    b = batch(cpu=np.zeros(3, np.int32), tid=np.ones(3, np.int32),
              perf_status=[volt_raw(1000), volt_raw(5270), volt_raw(300)],
              aperf=[0, 10**9, 2 * 10**9], mperf=[0, 10**6, 2 * 10**6], pperf=[0, 10**5, 2 * 10**5])
    state = DecoderState()
    out = decode(b, state, 2500.0)
    assert abs(out[F["voltage_mv"], 0] - 1000) < 0.2
    assert np.isnan(out[F["voltage_mv"], 1:]).all()
    assert np.isnan(out[F["freq_mhz"], 1:]).all()            # 2.5 THz
    assert out[F["pfreq_mhz"], 1] == 250.0
    assert state.implausible_values() == {"voltage_mv": 2, "freq_mhz": 2}


def test_state_is_sized_by_the_ids_seen_not_the_largest():
    b = batch(cpu=np.array([0, 8191, 0, 8191], np.int32), tid=np.array([1, 4_194_304, 1, 4_194_304], np.int32),
              aperf=[0, 0, 10, 20], mperf=[0, 0, 10, 10])
    for scope in ("cpu", "thread"):
        state = DecoderState(scope=scope)
        out = decode(b, state, 1000.0)
        assert len(state.prev) == 2
        assert np.isnan(out[F["freq_mhz"], :2]).all() and list(out[F["freq_mhz"], 2:]) == [1000.0, 2000.0]


def test_a_counter_that_stands_still_moves_by_zero_on_either_path():
    """APERF still while MPERF moves: the clock is 0 MHz, not unknown, and
    nothing went backwards; within a batch of one CPU, into its next batch,
    and in a batch of several CPUs."""
    state = DecoderState()
    out = decode(batch(aperf=[10, 10, 10], mperf=[0, 100, 200]), state, 1000.0)
    assert np.isnan(out[F["freq_mhz"], 0]) and out[F["freq_mhz"], 1:].tolist() == [0.0, 0.0]
    out = decode(batch(aperf=[10], mperf=[300]), state, 1000.0)
    assert out[F["freq_mhz"]].tolist() == [0.0]
    assert state.dropped() == {}
    several = DecoderState()
    out = decode(batch(cpu=np.array([0, 1, 0, 1]), aperf=[10, 20, 10, 20], mperf=[0, 0, 100, 100]),
                 several, 1000.0)
    assert out[F["freq_mhz"], 2:].tolist() == [0.0, 0.0] and several.dropped() == {}


def test_the_last_cpu_of_a_batch_keeps_its_value_whichever_slot_it_has():
    """CPU 0 (the first slot) ends the batch: the next batch's deltas are
    taken from its last value."""
    state = DecoderState()
    decode(batch(cpu=np.array([1, 0]), aperf=[500, 100], mperf=[50, 1000]), state, 1000.0)
    out = decode(batch(cpu=np.array([0, 1]), aperf=[150, 520], mperf=[1100, 60]), state, 1000.0)
    assert out[F["freq_mhz"]].tolist() == [500.0, 2000.0]


def test_batches_of_one_cpu_each_keep_to_their_own_cpus_values():
    state = DecoderState()
    for cpu, aperf, mperf in ((0, 100, 1000), (1, 5000, 50)):
        out = decode(batch(cpu=np.array([cpu]), aperf=[aperf], mperf=[mperf]), state, 1000.0)
        assert np.isnan(out[F["freq_mhz"], 0])
    out = decode(batch(cpu=np.array([0]), aperf=[150], mperf=[1100]), state, 1000.0)
    assert out[F["freq_mhz"]].tolist() == [500.0]
    out = decode(batch(cpu=np.array([1, 1]), aperf=[5300, 5400], mperf=[250, 300]), state, 1000.0)
    assert out[F["freq_mhz"]].tolist() == [1500.0, 2000.0]
    assert state.dropped() == {}


def test_a_ratio_over_a_denominator_that_did_not_move_is_unknown_not_implausible():
    """MPERF still while APERF moves, instructions still while cycles move:
    no clock and no CPI, and nothing counted as implausible."""
    state = DecoderState()
    out = decode(batch(aperf=[0, 500], mperf=[70, 70], pperf=[0, 5],
                       instructions=[9, 9], cycles=[0, 40]), state, 1000.0)
    assert np.isnan(out[F["freq_mhz"], 1]) and np.isnan(out[F["pfreq_mhz"], 1])
    assert np.isnan(out[F["cpi"], 1])
    assert state.implausible_values() == {}


def test_a_large_cpi_is_not_taken_for_a_clock():
    """Only voltage and the two frequencies have plausible bounds: a CPI of
    20 000 (a thread that waits on memory) is kept."""
    out = decode(batch(instructions=[0, 1], cycles=[0, 20_000]), DecoderState(), 1000.0)
    assert out[F["cpi"], 1] == 20_000.0


def test_c1_takes_out_the_c_states_that_are_sampled():
    """C1 = (ΔTSC − ΔMPERF − ΔC3) / ΔTSC where C6 and C7 are not sampled:
    (100 − 10 − 20) / 100."""
    out = decode(batch(mperf=[0, 10], tsc=[0, 100], c3=[0, 20]), DecoderState(), 1000.0)
    assert out[F["c1"], 1] == pytest.approx(0.7) and out[F["c3"], 1] == pytest.approx(0.2)
    assert np.isnan(out[F["c6"], 1])


def test_hwmon_voltage_is_taken_in_millivolts_where_perf_status_is_not_used():
    """vcore_mv as read (1 mV steps); 0 or MISSING is unknown; perf_status is ignored."""
    b = batch(vcore_mv=[1100, 0, M, 950], perf_status=[8192 << 32] * 4)
    state = DecoderState()
    out = decode(b, state, 1000.0, voltage_from_perf_status=False)
    assert out[F["voltage_mv"], [0, 3]].tolist() == [1100.0, 950.0]
    assert np.isnan(out[F["voltage_mv"], [1, 2]]).all()
    assert state.implausible_values() == {}         # unknown, not out of bounds
    assert decode(b, DecoderState(), 1000.0)[F["voltage_mv"]].tolist() == [1000.0] * 4


def test_an_empty_batch_decodes_to_nothing_and_leaves_the_state_as_it_was():
    state = DecoderState()
    decode(batch(cpu=np.array([0, 1]), aperf=[100, 7], mperf=[1000, 70]), state, 1000.0)
    empty = SampleBatch.empty(("aperf", "mperf"))
    assert decode(empty, state, 1000.0).shape == (len(F), 0)
    out = decode(batch(cpu=np.array([1, 0]), aperf=[27, 150], mperf=[80, 1100]), state, 1000.0)
    assert out[F["freq_mhz"]].tolist() == [2000.0, 500.0]


def test_c1_is_taken_over_a_tsc_that_moved_by_one_tick():
    out = decode(batch(mperf=[0, 0], tsc=[0, 1]), DecoderState(), 1000.0)
    assert out[F["c0"], 1] == 0.0 and out[F["c1"], 1] == 1.0


@pytest.mark.parametrize("n", [1, 4])
def test_counters_not_decoded_read_nan_even_where_fresh_memory_holds_numbers(n):
    """The work arrays start as np.empty: memory numpy hands back from arrays
    just freed.  Arrays of their size, full of ones, are freed first, so a
    row left unwritten would read 1 where an undecoded count must read 0."""
    state = DecoderState(counters=("aperf", "mperf"))
    ones = [np.full(len(COUNTERS) * n, 1.0) for _ in range(8)]
    del ones
    out = decode(batch(aperf=np.arange(n) * 7, mperf=np.arange(n) * 5,
                       instructions=np.arange(n) * 3, cycles=np.arange(n) * 3), state, 1000.0)
    assert out[F["d_instructions"]].tolist() == [0.0] * n
    assert out[F["d_cycles"]].tolist() == [0.0] * n
    fresh = DecoderState(counters=("aperf", "mperf"))
    ones = [np.full(len(COUNTERS) * n, 1.0) for _ in range(8)]
    del ones
    deltas, _ = fresh.scratch(n)
    assert np.isnan(deltas[2:]).all()


def test_c1_takes_out_each_of_c3_c6_and_c7():
    """(100 − 10 − 5 − 7 − 11) / 100, every term different."""
    out = decode(batch(mperf=[0, 10], tsc=[0, 100], c3=[0, 5], c6=[0, 7], c7=[0, 11]),
                 DecoderState(), 1000.0)
    assert out[F["c1"], 1] == pytest.approx(0.67)


def test_a_voltage_of_1600_mv_exactly_is_plausible():
    """hwmon gives whole millivolts: 1600 is the top of the plausible range, 1601 beyond it."""
    state = DecoderState()
    out = decode(batch(vcore_mv=[1600, 1601]), state, 1000.0, voltage_from_perf_status=False)
    assert out[F["voltage_mv"], 0] == 1600.0 and np.isnan(out[F["voltage_mv"], 1])
    assert state.implausible_values() == {"voltage_mv": 1}


def test_a_counter_unread_in_every_row_of_one_cpu_gives_no_delta():
    """One CPU's batch whose APERF was never read: no clock (not 0 MHz, which
    ΔAPERF = MISSING − MISSING = 0 would give), three reads counted as lost,
    and MPERF's deltas of 100 still taken."""
    state = DecoderState()
    out = decode(batch(aperf=[M, M, M], mperf=[0, 100, 200], tsc=[0, 400, 800]), state, 1000.0)
    assert np.isnan(out[F["freq_mhz"]]).all()
    assert state.unread[COUNTERS.index("aperf")] == 3
    assert out[F["c0"], 1:].tolist() == [0.25, 0.25]


@pytest.mark.parametrize("n", [1, 4])
def test_counters_not_decoded_read_nan_in_batches_of_the_same_size(n):
    """Work arrays kept for a second batch of as many rows keep their NaN
    rows; fresh ones would need them written again.  Arrays of their size,
    full of ones, are freed before each batch (as above), so a row left
    unwritten in fresh memory would read 1 where an undecoded count must
    read 0."""
    state = DecoderState(counters=("aperf", "mperf"))
    for _ in range(3):
        ones = [np.full(k * n, 1.0) for k in (len(COUNTERS), len(F)) for _ in range(8)]
        del ones
        out = decode(batch(aperf=np.arange(n) * 7, mperf=np.arange(n) * 5,
                           instructions=np.arange(n) * 3, cycles=np.arange(n) * 3), state, 1000.0)
        assert out[F["d_instructions"]].tolist() == [0.0] * n
        assert out[F["d_cycles"]].tolist() == [0.0] * n


def test_the_voltage_bounds_and_the_clock_bound_are_apart():
    """A voltage is held to the voltage bounds alone, never to the clock's:
    with bounds of 0..50,000 mV and 10,000 MHz, 20,000 mV stays and
    20,000 MHz goes, counted as a clock."""
    out = np.full((len(F), 1), np.nan)
    out[F["voltage_mv"]] = out[F["freq_mhz"]] = 20_000.0
    counts = np.zeros(3, np.int64)
    _drop_implausible(out, 0.0, 50_000.0, 10_000.0, counts)
    assert out[F["voltage_mv"], 0] == 20_000.0 and np.isnan(out[F["freq_mhz"], 0])
    assert counts.tolist() == [0, 1, 0]
