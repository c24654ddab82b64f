"""The prediction's values (core.predict) as the results file's text, a block
at a time: for each interval one piece of text holding its seven values
between the format's separators (JSON's keys, CSV's commas), each value
written as Python (and ``json.dumps``) writes it.

The numbers are written by a compiled kernel: an id or a count in decimal;
the remaining seconds rounded to 6 places and the confidences to 4, as
``repr`` writes the float nearest to a whole number of millionths (or ten
thousandths), which is that decimal with its trailing zeros cut (the float
nearest to a decimal of at most 13 digits has no shorter decimal that reads
back as it), in scientific notation below 10^-4 as ``repr`` does.  A value
the kernel cannot write so (a second count near a rounding tie or beyond
2^42 millionths, a negative one, a confidence outside [0, 1]) sends its
interval through the plain Python code, :func:`piece`.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..core.kernels import kernel

#: Confidences are written to this many places.
CONFIDENCE_PLACES = 4
#: The remaining seconds are written to this many places.
SECONDS_PLACES = 6
#: Below this many millionths, a value times 10^6 as a float is within 10^-3
#: of the exact product, so it rounds as the exact value does unless that
#: is within 10^-3 of a half.
EXACT_MILLIONTHS = 2.0 ** 42
#: Bytes any one value takes at most as text (an int64 has 19 digits).
VALUE_BYTES = 24
_NEWLINE = 10


def pieces(separators: list[str], nothing: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The kernel's form of the format: the separators' bytes, where each
    ends, and the text of no value."""
    joined = "".join(separators).encode()
    ends = np.cumsum([len(s.encode()) for s in separators]).astype(np.int64)
    return (np.frombuffer(joined, np.uint8).copy(), ends,
            np.frombuffer(nothing.encode(), np.uint8).copy())


def texts(pr, separators: list[str], nothing: str, number) -> list[str]:
    """Each interval's piece of text: its values between ``separators``
    (one more than the values), ``nothing`` for none; ``number`` writes a
    float the kernel leaves to Python."""
    n = len(pr)
    columns = [_plain(c, np.int64) for c in (pr.next_phase, pr.after_change, pr.remaining)] + \
        [_plain(c, np.float64) for c in (pr.remaining_s, pr.confidence_next,
                                          pr.confidence_after_change, pr.confidence_remaining)]
    sep, ends, none = _pieces(tuple(separators), nothing)
    out = np.empty(n * (len(sep) + len(none) * 7 + 7 * VALUE_BYTES + 1), np.uint8)
    odd, left = np.empty(n, np.int64), np.zeros(1, np.int64)
    size = _prediction_text(*columns, sep, ends, none, out, odd, left)
    rows = out[:size].tobytes().decode("ascii").split("\n")
    rows.pop()
    for i in odd[:left[0]].tolist():
        rows[i] = piece(pr, i, separators, nothing, number)
    return rows


@functools.cache
def _pieces(separators: tuple[str, ...], nothing: str):
    return pieces(list(separators), nothing)


def _plain(a, dtype) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype)
    return a if a.flags.writeable else a.copy()


def piece(pr, i: int, separators: list[str], nothing: str, number) -> str:
    """Interval ``i``'s piece of text, in plain Python."""
    def id_text(x) -> str:
        return str(int(x)) if x >= 0 else nothing
    seconds = float(pr.remaining_s[i])
    values = [id_text(pr.next_phase[i]), id_text(pr.after_change[i]), id_text(pr.remaining[i]),
              _seconds_text(seconds, number)]
    known = pr.next_phase[i] >= 0
    scale = 10 ** CONFIDENCE_PLACES
    confidence = _confidence_texts(nothing)
    for column in (pr.confidence_next, pr.confidence_after_change, pr.confidence_remaining):
        values.append(confidence[int(np.rint(column[i] * scale))] if known else nothing)
    return "".join(s + v for s, v in zip(separators, values)) + separators[-1]


def _seconds_text(x: float, number) -> str:
    """``number``'s text of ``x``, the value rounded to 6 places where that is exact."""
    millionths = x * 1e6
    if math.isfinite(millionths):
        whole = float(np.rint(millionths))
        if abs(millionths - whole) < 0.499 and abs(millionths) < EXACT_MILLIONTHS:
            return repr(whole / 1e6)
    return number(x)


@functools.cache
def _confidence_texts(nothing: str) -> list[str]:
    """Each confidence of :data:`CONFIDENCE_PLACES` places as JSON spells
    it, then ``nothing`` (at -1: no confidence)."""
    scale = 10 ** CONFIDENCE_PLACES
    return [repr(round(k / scale, CONFIDENCE_PLACES)) for k in range(scale + 1)] + [nothing]


@kernel(cache=True, nogil=True)
def prediction_text(next_phase, after_change, remaining, remaining_s, confidence_next,
                    confidence_after_change, confidence_remaining, separators, ends, nothing,
                    out, odd, left):
    """Each interval's piece of text into ``out``, a newline after each;
    the intervals left to Python (a newline alone) into ``odd``, how many
    into ``left[0]``.  Returns the bytes written."""
    at, n_odd = 0, 0
    for i in range(len(next_phase)):
        start = at
        at = _put(out, at, separators, 0, ends[0])
        at = _id(out, at, next_phase[i], nothing)
        at = _put(out, at, separators, ends[0], ends[1])
        at = _id(out, at, after_change[i], nothing)
        at = _put(out, at, separators, ends[1], ends[2])
        at = _id(out, at, remaining[i], nothing)
        at = _put(out, at, separators, ends[2], ends[3])
        x = remaining_s[i]
        ok = True
        if x != x:
            at = _put(out, at, nothing, 0, len(nothing))
        else:
            millionths = x * 1e6
            whole = np.rint(millionths)
            if (np.signbit(x) or not abs(millionths - whole) < 0.499
                    or not abs(millionths) < EXACT_MILLIONTHS):
                ok = False
            else:
                at = _decimal(out, at, int(whole), SECONDS_PLACES)
        known = next_phase[i] >= 0
        for k in range(3):
            at = _put(out, at, separators, ends[3 + k], ends[4 + k])
            value = confidence_next[i] if k == 0 else (
                confidence_after_change[i] if k == 1 else confidence_remaining[i])
            at = _confidence(out, at, value, known, nothing)
            if at < 0:
                ok = False
                at = -1 - at
        at = _put(out, at, separators, ends[6], ends[7])
        if not ok:
            at = start
            odd[n_odd] = i
            n_odd += 1
        out[at] = _NEWLINE
        at += 1
    left[0] = n_odd
    return at


@kernel(cache=True, nogil=True, inline="always")
def _confidence(out, at, value, known, nothing):
    """A confidence's text, ``nothing`` where not ``known``; where it is out of
    [0, 1], nothing written and ``-1 - at`` returned."""
    if not known:
        return _put(out, at, nothing, 0, len(nothing))
    scale = 10.0 ** CONFIDENCE_PLACES
    scaled = np.rint(value * scale)
    if not 0.0 <= scaled <= scale:
        return -1 - at
    return _decimal(out, at, int(scaled), CONFIDENCE_PLACES)


@kernel(cache=True, nogil=True, inline="always")
def _put(out, at, text, lo, hi):
    out[at:at + hi - lo] = text[lo:hi]
    return at + hi - lo


@kernel(cache=True, nogil=True, inline="always")
def _digits(out, at, value):
    """``value`` (at least 0) in decimal."""
    width, rest = 1, value // 10
    while rest:
        width += 1
        rest //= 10
    for k in range(width - 1, -1, -1):
        out[at + k] = 48 + value % 10
        value //= 10
    return at + width


@kernel(cache=True, nogil=True, inline="always")
def _id(out, at, value, nothing):
    if value < 0:
        return _put(out, at, nothing, 0, len(nothing))
    return _digits(out, at, value)


@kernel(cache=True, nogil=True, inline="always")
def _decimal(out, at, value, places):
    """``value / 10**places`` (``value`` at least 0) as ``repr`` writes the
    float nearest to it."""
    scale = 10 ** places
    if value == 0:                      # 0.0
        out[at] = 48
        out[at + 1] = 46
        out[at + 2] = 48
        return at + 3
    if value * 10000 < scale:           # below 10^-4: d.ddde-XX
        zeros = 0
        while value % 10 == 0:
            value //= 10
            zeros += 1
        start = at
        at = _digits(out, at, value)
        width = at - start
        if width > 1:               # the point after the first digit
            for k in range(at, start + 1, -1):
                out[k] = out[k - 1]
            out[start + 1] = 46
            at += 1
        exponent = places - (width - 1) - zeros
        out[at] = 101                   # e-
        out[at + 1] = 45
        at += 2
        if exponent < 10:
            out[at] = 48
            at += 1
        return _digits(out, at, exponent)
    at = _digits(out, at, value // scale)
    out[at] = 46
    at += 1
    fraction = value % scale
    if fraction == 0:
        out[at] = 48
        return at + 1
    width = places
    while fraction % 10 == 0:
        fraction //= 10
        width -= 1
    for k in range(width - 1, -1, -1):
        out[at + k] = 48 + fraction % 10
        fraction //= 10
    return at + width


#: The call from Python, its argument types always the same.
_prediction_text = prediction_text.fixed()
