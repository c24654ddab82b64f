"""The prediction's compiled parts: the predictor's memory in arrays of a
bounded size (core.predict), and the results text of its values written as
Python writes them (formats.prediction_text)."""

from __future__ import annotations

import numpy as np

from phasewatch.core import predict
from phasewatch.core.predict import PhasePredictor, Predictions
from phasewatch.formats import prediction_text
from phasewatch.formats.results import _JSON_SEPARATORS, _json_number


def test_the_predictors_arrays_stay_within_the_documented_bound_over_1e5_random_intervals():
    rng = np.random.default_rng(11)
    seq = np.repeat(rng.integers(0, 2000, 40_000), rng.integers(1, 6, 40_000))[:100_000]
    p = PhasePredictor()            # the default bound, 256 phases
    for lo in range(0, len(seq), 1000):
        block = seq[lo:lo + 1000].copy()
        p.observe_block(block, np.zeros(len(block), np.bool_), np.zeros(len(block), np.int64),
                        np.zeros(len(block), np.int64))
        assert len(p.table) <= p.max_phases + 2
    assert len(p.memory) == p.max_phases
    slots = predict.MAX_PHASES + 2
    contexts = predict.CONTEXTS + predict.ORDER + 1
    assert p.runs.shape == (slots, contexts, predict.KEPT, 2)
    assert p.table.nbytes + p.contexts.nbytes + p.runs.nbytes < 900_000     # docs/prediction.md


def test_a_stream_of_few_phases_keeps_small_arrays():
    p = PhasePredictor()
    for x in [0, 0, 1, 1, 2, 0, 3, 3, 1, 4, 5, 0] * 50:
        p.observe(x)
    assert len(p.table) == predict.FIRST_SLOTS
    assert p.table.nbytes + p.contexts.nbytes + p.runs.nbytes < 28_000


def expected_piece(pr: Predictions, i: int) -> str:
    """Interval ``i``'s values as ``json.dumps`` writes them, between the separators."""
    def id_text(x):
        return str(int(x)) if x >= 0 else "null"
    values = [id_text(pr.next_phase[i]), id_text(pr.after_change[i]), id_text(pr.remaining[i]),
              repr(round(float(pr.remaining_s[i]), 6))]
    values += [repr(round(float(c[i]), 4)) for c in (
        pr.confidence_next, pr.confidence_after_change, pr.confidence_remaining)]
    return "".join(s + v for s, v in zip(_JSON_SEPARATORS, values)) + _JSON_SEPARATORS[-1]


def test_every_small_value_is_written_as_repr_writes_it():
    # every whole number of millionths below 2 * 10^5 seconds' millionths
    # (both sides of 10^-4, where repr turns to scientific notation), every
    # confidence of 4 places, and random ones
    rng = np.random.default_rng(3)
    seconds = np.concatenate([np.arange(200_000) / 1e6, rng.random(50_000) * 1e6,
                              rng.integers(0, 2**42, 50_000) / 1e6])
    n = len(seconds)
    confidences = np.concatenate([np.arange(10_001) / 10_000, rng.random(n - 10_001)])
    pr = Predictions(rng.integers(0, 10**6, n), rng.integers(-1, 300, n),
                     rng.integers(0, 10**12, n), seconds, confidences,
                     rng.permutation(confidences), confidences[::-1].copy())
    written = prediction_text.texts(pr, _JSON_SEPARATORS, "null", _json_number)
    differ = [i for i in range(n) if written[i] != expected_piece(pr, i)]
    assert not differ, (len(differ), written[differ[0]], expected_piece(pr, differ[0]))
