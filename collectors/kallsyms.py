"""The running kernel's function symbols, from ``/proc/kallsyms``, to name
kernel-mode samples as ``perf report`` does.

Addresses read as zero where ``kernel.kptr_restrict`` hides them from this
user: then there are no symbols, and kernel samples stay ``[kernel]``.
"""

from __future__ import annotations

import functools

import numpy as np

DEFAULT_PATH = "/proc/kallsyms"
#: Symbol types of code: text, and weak symbols.
CODE_TYPES = (b"t", b"T", b"w", b"W")


class KernelSymbols:
    """Sorted start addresses of kernel functions and their names."""

    def __init__(self, starts: np.ndarray, names: np.ndarray):
        self.starts, self.names = starts, names

    def lookup(self, ips: np.ndarray) -> np.ndarray:
        """The name of the function each address falls in (the nearest below)."""
        index = np.searchsorted(self.starts, ips, side="right") - 1
        out = np.where(index >= 0, self.names[np.maximum(index, 0)], None)
        return out


def read(path: str = DEFAULT_PATH) -> KernelSymbols | None:
    """The kernel's code symbols; None where they cannot be read or are hidden."""
    starts, names = [], []
    try:
        with open(path, "rb") as f:
            for line in f:
                fields = line.split()
                if len(fields) < 3 or fields[1] not in CODE_TYPES:
                    continue
                address = int(fields[0], 16)
                if address:
                    starts.append(address)
                    names.append(fields[2].decode("utf-8", "backslashreplace"))
    except (OSError, ValueError):
        return None
    if not starts:
        return None
    order = np.argsort(np.array(starts, np.uint64), kind="stable")
    return KernelSymbols(np.array(starts, np.uint64)[order], np.array(names, object)[order])


@functools.lru_cache(maxsize=1)
def running_kernel() -> KernelSymbols | None:
    """The running kernel's symbols, read once per process."""
    return read()
