"""The phase predictor's state (core.predict): what forgetting, seeding and
growing leave of its memory, the current run as the predictor shows it, and
the outlook of a run (its prediction at a length and how the remaining
length moves from there), each worked out from docs/prediction.md's rules or
from the plain reading of them in tests/test_predict_reference.py."""

from __future__ import annotations

import numpy as np
from phasewatch.core import predict
from phasewatch.core.predict import NONE, UNKNOWN, PhasePredictor, Prediction, Predictions
from test_predict import runs
from test_predict_reference import ReferencePredictor, random_phases

A, B, C, D = 0, 1, 2, 3


def fed(p: PhasePredictor, seq, new_phase=None) -> Predictions:
    n = len(seq)
    fresh = np.zeros(n, np.bool_) if new_phase is None else np.asarray(new_phase, np.bool_)
    zero = np.zeros(n, np.int64)
    return p.observe_block(np.asarray(seq, np.int64), fresh, zero, zero)


def test_a_change_expected_next_has_no_seconds_left():
    rows = [Prediction(A, B, 0, 1.0, 1.0, 1.0), Prediction(A, B, 2, 1.0, 1.0, 1.0), UNKNOWN]
    pr = Predictions.of(rows, np.array([0.5, 0.5, 0.5]))
    assert pr.remaining_s[:2].tolist() == [0.0, 1.0]
    assert np.isnan(pr.remaining_s[2])


def test_the_runs_before_are_the_last_two_latest_last():
    p = PhasePredictor()
    seen = []
    for x in runs((A, 2), (B, 1), (C, 3), (D, 1)):
        p.observe(x)
        seen.append((p.phase, p.length, p.before))
    assert seen[1] == (A, 2, ())
    assert seen[2] == (B, 1, (A,))
    assert seen[5] == (C, 3, (A, B))
    assert seen[6] == (D, 1, (B, C))


def test_forgetting_the_current_phase_leaves_no_run():
    p = PhasePredictor()
    for x in runs((A, 2), (B, 3)):
        p.observe(x)
    p.forget(B)
    assert (p.phase, p.length, p.before) == (NONE, 0, (A,))
    assert p.outlook is None


def test_forgetting_reaches_every_context_of_a_phase():
    # A after each of six others, with room for 6 phases (8 slots): A's last
    # eight contexts (A, x), (x,) for x in 13, 14, 15, (12,) and (); the
    # contexts of its sixth and seventh ever were made past the eighth slot
    p = PhasePredictor(max_phases=6)
    for x in runs(*[run for other in range(10, 16) for run in ((other, 1), (A, 1))], (B, 1)):
        p.observe(x)
    assert list(p.memory[A]) == [(12,), (A, 13), (13,), (A, 14), (14,), (A, 15), (15,), ()]
    p.forget(14)
    kept = p.memory[A]
    assert list(kept) == [(12,), (A, 13), (13,), (A, 15), (15,), ()]
    # A's run after 13 went to 14: a phase unknown now
    assert list(kept[()].pairs) == [(1, 11), (1, 12), (1, 13), (1, NONE), (1, 15), (1, B)]
    assert list(kept[(13,)].pairs) == [(1, NONE)]


def test_forgetting_reaches_the_phases_after_a_free_slot():
    p = PhasePredictor()
    for x in runs((B, 1), (A, 1), (C, 1), (A, 1), (D, 1)):
        p.observe(x)
    p.forget(B)         # B's slot, the first, is free now
    p.forget(C)
    # A's runs: after B (to C) and after (A, C) (to D); what names B or C as
    # context goes, and the run to C went to a phase unknown
    assert p.memory_dict() == {"version": 1, "phases": [
        [A, [[[], [[1, NONE], [1, D]]]]], [D, []]]}


def test_an_id_opened_afresh_inside_a_run_of_it_starts_a_new_run():
    p = PhasePredictor()
    pr = fed(p, [A] * 5 + [A] * 2, new_phase=[False] * 5 + [True, False])
    # the old A forgotten before its run ended: no run known, none before,
    # nothing in the stream's recent runs; as long again as it has lasted
    assert pr.remaining.tolist() == [1, 2, 3, 4, 5, 1, 2]
    assert pr.after_change.tolist() == [NONE] * 7
    assert (p.phase, p.length, p.before, p.memory_dict()["phases"]) == (A, 2, (), [[A, []]])


def test_arrays_start_at_eight_slots_or_the_bound_and_double_up_to_it():
    # docs/prediction.md: 8 slots to start with, doubled as phases come up to
    # max_phases + 2
    assert [len(PhasePredictor(m).table) for m in (1, 5, 6, 7, 256)] == [3, 7, 8, 8, 8]
    p = PhasePredictor(max_phases=7)
    for x in range(8):
        p.observe(x)
    assert len(p.table) == 9
    p = PhasePredictor()
    for x in range(7):
        p.observe(x)
    assert len(p.table) == 8
    p.observe(7)
    assert len(p.table) == 16
    for x in range(8, 16):
        p.observe(x)
    assert len(p.table) == 32


def test_seeding_ten_phases_keeps_them_all():
    memory = {"version": 1, "phases": [[x, [[[], [[2, (x + 1) % 10]]]]] for x in range(10)]}
    p = PhasePredictor()
    assert p.seed(memory, known=range(10))
    assert p.memory_dict() == memory
    assert p.observe(4) == Prediction(4, 5, 1, 1.0, 1.0, 1.0)


def test_a_memory_that_fails_midway_leaves_the_predictor_empty():
    p = PhasePredictor()
    for x in runs((A, 2), (B, 1), (C, 3), (A, 2), (D, 1)):
        p.observe(x)
    assert not p.seed({"version": 1, "phases": [[A, "not contexts"]]}, known=[A, B, C, D])
    assert p.memory_dict()["phases"] == []
    assert p.runs_kept == 0


def test_a_run_past_eleven_contexts_keeps_the_eight_used_last():
    # eight contexts seeded, none of them (): a run ending under three new
    # ones makes eleven before the least recent three go
    memory = {"version": 1, "phases": [[A, [[[x], [[5, B]]] for x in range(10, 18)]]]}
    p = PhasePredictor()
    assert p.seed(memory, known=[A, B, *range(10, 18)])
    for x in runs((20, 1), (21, 1), (A, 1), (22, 1)):
        p.observe(x)
    assert list(p.memory[A]) == [(x,) for x in range(13, 18)] + [(20, 21), (21,), ()]


def test_a_context_not_kept_is_skipped_not_read_from_another():
    # after the eleven contexts above, A's () context is its last array row;
    # A's runs: four of 5 intervals, then two of 2 after 31; after (30, 31),
    # never seen, the closest context kept is (31,): 2 runs of 2, to 40
    memory = {"version": 1, "phases": [[A, [[[x], [[5, B]]] for x in range(10, 18)]]]}
    p = PhasePredictor()
    assert p.seed(memory, known=[A, B, *range(10, 18)])
    seq = runs((20, 1), (21, 1), (A, 1), (22, 1))
    for other in (50, 51, 52, 53):
        seq += runs((other, 1), (A, 5), (40, 1))
    for other in (32, 33):
        seq += runs((other, 1), (31, 1), (A, 2), (40, 1))
    seq += runs((30, 1), (31, 1))
    for x in seq:
        p.observe(x)
    assert (31,) in p.memory[A] and (30, 31) not in p.memory[A]
    assert p.observe(A) == Prediction(A, 40, 1, 1.0, 1.0, 1.0)


def expected_outlook(reference: ReferencePredictor, phase: int) -> tuple[Prediction, int]:
    """The prediction at the current length and how the remaining length
    moves to the next one: by as much as it does where nothing else differs,
    else 0."""
    n = reference.length
    here, there = reference.predict(phase, n), reference.predict(phase, n + 1)
    others = [0, 1, 3, 4, 5]
    move = there[2] - here[2] if [here[i] for i in others] == [there[i] for i in others] else 0
    return Prediction(*here), move


def test_the_outlook_says_what_the_plain_rules_say_at_a_length_and_the_next():
    rng = np.random.default_rng(8)
    phases = random_phases(rng, 1500)
    p, reference = PhasePredictor(12), ReferencePredictor(12)
    moves = set()
    for i, x in enumerate(phases.tolist()):
        p.observe(x)
        reference.observe(x)
        if x < 0:
            continue
        said, move = expected_outlook(reference, x)
        assert p.outlook.at(p.length) == said, i
        got = p.outlook._at(p.length)
        assert got == (said, move), i
        moves.add(move)
    assert {-1, 0, 1} <= moves
