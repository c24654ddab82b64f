"""Growth of a computation's time with its input, measured side by side.

A test that must time something times the same code on a small input and on
one ``factor`` times larger, interleaved, the least of several runs each:
load from other work slows both alike and inflates neither minimum much, so
the ratio holds where an absolute bound in seconds does not.  Linear work
grows about ``factor`` times; work done once per pair grows ``factor``²."""

from __future__ import annotations

import time


def growth(work, small, large, repeat: int = 5) -> float:
    """How many times longer ``work(large)`` takes than ``work(small)``."""
    best = {id(small): float("inf"), id(large): float("inf")}
    for _ in range(repeat):
        for arg in (small, large):
            started = time.perf_counter()
            work(arg)
            best[id(arg)] = min(best[id(arg)], time.perf_counter() - started)
    return best[id(large)] / max(best[id(small)], 1e-6)
