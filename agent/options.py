"""argparse types for numeric options: each value is finite and in a stated
range, or the parser refuses it in one line."""

from __future__ import annotations

import argparse
import math


def number(kind: type, low: float, high: float, *, low_open: bool = False):
    """An argparse ``type`` for a ``kind`` (int or float) in [low, high],
    or (low, high] with ``low_open``."""
    opening = "(" if low_open else "["

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {_article(kind)}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if value < low or value > high or (low_open and value == low):
            raise argparse.ArgumentTypeError(f"{text!r} is outside {opening}{low:g}, {high:g}]")
        return value

    parse.__name__ = kind.__name__      # argparse names the type in its messages
    return parse


def _article(kind: type) -> str:
    return "an integer" if kind is int else "a number"
