"""A code signature written out by hand for the tests: two resolutions
(regions, then lines), each a histogram of ``width`` entries carrying half the
weight."""

from __future__ import annotations

import numpy as np


def signature(regions: dict[int, float], lines: dict[int, float], width: int = 1024) -> np.ndarray:
    x = np.zeros(2 * width)
    for e, share in regions.items():
        x[e] = share / 2
    for e, share in lines.items():
        x[width + e] = share / 2
    return x
