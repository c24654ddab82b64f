"""What a target did to the daemon: every error met while looking for a
target, opening its source or watching it, caught so that no target's
behaviour ends the daemon, logged once and counted.

The counts are ``phasewatch_target_errors_total{target, kind}``.  Both
labels are bounded: ``target`` is the configured target (``comm:NAME``, not
``comm:NAME:PID``), ``kind`` one of :data:`KINDS`, and past
:data:`MAX_SERIES` pairs the rest are counted under ``target="other"``.
"""

from __future__ import annotations

import re
import threading
from typing import Callable

from ..errors import UserError

#: Where the error was met, and what the daemon did about it.
KINDS = {
    "find": "looking for it again at the next rescan",
    "open": "not watched; the daemon goes on",
    "watch": "no longer watched; the daemon goes on",
}
MAX_SERIES = 256
#: Lines said at most, one per target and kind: a target failing at every rescan says it once.
MAX_SAID = 1024


def configured_target(name: str) -> str:
    """The configured target a watched one comes from: ``comm:NAME:PID`` and
    ``cgroup:PATH:PID`` (one of several processes) are ``comm:NAME`` and
    ``cgroup:PATH``."""
    match = re.fullmatch(r"((?:comm|cgroup):.*):\d+", name)
    return match.group(1) if match else name


def describe(exc: BaseException) -> str:
    if isinstance(exc, UserError):
        return str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror + (f": {exc.filename}" if exc.filename else "")
    return f"{type(exc).__name__}: {exc}"


class TargetErrors:
    """Errors by (configured target, kind); each new (target, kind) logged once."""

    def __init__(self, log: Callable[[str], None]):
        self.log = log
        self._counts: dict[tuple[str, str], int] = {}
        self._said: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def caught(self, target: str, kind: str, exc: BaseException) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown kind of target error {kind!r}")
        key = (configured_target(target), kind)
        with self._lock:
            if key not in self._counts and len(self._counts) >= MAX_SERIES:
                key = ("other", kind)
            self._counts[key] = self._counts.get(key, 0) + 1
            # Once per configured target: a storm of short-lived processes of
            # one comm target (each gone before its source opened) is one line.
            first = key not in self._said and len(self._said) < MAX_SAID
            if first:
                self._said.add(key)
        if first:
            self.log(f"{target}: {describe(exc)}: {KINDS[kind]} "
                     f"(counted in phasewatch_target_errors_total)")

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)
