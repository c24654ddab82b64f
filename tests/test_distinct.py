"""``core.distinct``: the sorted distinct values of an array, against worked
examples and against a set built in plain Python."""

from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from phasewatch.core.distinct import distinct


def test_worked_examples():
    assert distinct(np.array([3, 1, 3, 2, 1], np.int64)).tolist() == [1, 2, 3]
    assert distinct(np.array([7, 7, 7], np.uint64)).tolist() == [7]
    assert distinct(np.array([[2, 0], [2, 5]])).tolist() == [0, 2, 5]
    assert distinct([4]).tolist() == [4]


def test_an_empty_array_gives_an_empty_array_of_its_type():
    out = distinct(np.array([], np.uint32))
    assert out.dtype == np.uint32 and out.shape == (0,)


@given(st.lists(st.integers(-5, 5), max_size=40))
def test_the_sorted_set_of_the_values(values):
    got = distinct(np.array(values, np.int64))
    assert got.tolist() == sorted(set(values))
    assert got.dtype == np.int64
