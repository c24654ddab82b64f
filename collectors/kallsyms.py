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
    """Sorted start addresses of kernel functions, and their names, decoded
    from the listing only for the functions looked up."""

    def __init__(self, starts: np.ndarray, listing: bytes, name_spans: np.ndarray):
        self.starts = starts
        self._listing = listing
        self._name_spans = name_spans      # (begin, end) in ``listing`` of each start's name

    @property
    def names(self) -> np.ndarray:
        return self._names(np.arange(len(self.starts)))

    def _names(self, indices: np.ndarray) -> np.ndarray:
        spans = self._name_spans[indices].tolist()
        return np.array([self._listing[a:b].decode("utf-8", "backslashreplace")
                         for a, b in spans], dtype=object)

    def lookup(self, ips: np.ndarray) -> np.ndarray:
        """The name of the function each address falls in (the nearest below)."""
        index = np.searchsorted(self.starts, ips, side="right") - 1
        out = np.full(np.shape(ips), None, dtype=object)
        found = index >= 0
        unique, inverse = np.unique(index[found], return_inverse=True)
        out[found] = self._names(unique)[inverse]
        return out


def read(path: str = DEFAULT_PATH) -> KernelSymbols | None:
    """The kernel's code symbols; None where they cannot be read or are hidden."""
    try:
        with open(path, "rb") as f:
            listing = f.read()
    except OSError:
        return None
    try:
        return parse(listing)
    except ValueError:
        return None


#: Each byte's value as a hexadecimal digit; 255 for any other byte.
_HEX = np.full(256, 255, np.uint8)
_HEX[np.frombuffer(b"0123456789", np.uint8)] = np.arange(10)
_HEX[np.frombuffer(b"abcdef", np.uint8)] = np.arange(10, 16)
_HEX[np.frombuffer(b"ABCDEF", np.uint8)] = np.arange(10, 16)
_CODE = np.zeros(256, bool)
_CODE[np.frombuffer(b"".join(CODE_TYPES), np.uint8)] = True


def parse(listing: bytes) -> KernelSymbols | None:
    """The code symbols of a kallsyms listing (``ADDRESS TYPE NAME[\t[MODULE]]``
    a line, addresses of one width), read as arrays: 120,000 lines parsed one
    by one took 70 ms of CPU, more than the kernel takes to print them.
    ``ValueError`` for a line that is not of that form."""
    text = np.frombuffer(listing, np.uint8)
    line_ends = np.flatnonzero(text == ord("\n"))
    if len(text) and (not len(line_ends) or line_ends[-1] != len(text) - 1):
        line_ends = np.append(line_ends, len(text))
    line_starts = np.concatenate(([0], line_ends[:-1] + 1)).astype(np.int64)
    keep = line_ends > line_starts
    line_starts, line_ends = line_starts[keep], line_ends[keep]
    if not len(line_starts):
        return None
    width = listing.find(b" ")
    if width <= 0 or np.any(line_ends - line_starts < width + 4):
        raise ValueError("kallsyms: a line too short for ADDRESS TYPE NAME")
    if np.any(text[line_starts + width] != ord(" ")) or \
            np.any(text[line_starts + width + 2] != ord(" ")):
        raise ValueError("kallsyms: addresses of more than one width")
    digits = _HEX[text[line_starts[:, None] + np.arange(width)]]
    if np.any(digits == 255):
        raise ValueError("kallsyms: an address that is not hexadecimal")
    addresses = np.zeros(len(line_starts), np.uint64)
    for column in digits.T:
        addresses = (addresses << np.uint64(4)) | column
    code = _CODE[text[line_starts + width + 1]] & (addresses != 0)
    name_begins = line_starts[code] + width + 3
    line_ends, addresses = line_ends[code], addresses[code]
    if not len(addresses):
        return None
    tabs = np.flatnonzero(text == ord("\t"))
    next_tab = np.searchsorted(tabs, name_begins)
    tab_at = np.append(tabs, len(text))[next_tab]
    name_ends = np.minimum(tab_at, line_ends)
    order = np.argsort(addresses, kind="stable")
    return KernelSymbols(addresses[order], listing,
                         np.stack([name_begins, name_ends], axis=1)[order])


@functools.lru_cache(maxsize=1)
def running_kernel() -> KernelSymbols | None:
    """The running kernel's symbols, read once per process."""
    return read()
