"""The distinct values of an array, sorted: ``np.unique`` without its first
call's import of ``numpy.ma`` (about 15 ms of a command's start-up, for
asking whether the array is masked)."""

from __future__ import annotations

import numpy as np


def distinct(values) -> np.ndarray:
    """``np.unique(values)`` of a flat array."""
    s = np.sort(np.asarray(values).ravel())
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s
