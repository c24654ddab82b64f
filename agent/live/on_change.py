"""``run --on-change CMD``: a command of the user's, run when a change of
phase is predicted within N intervals, the prediction in its environment.

It fires at most once per run of a phase: on the first interval whose
prediction (:mod:`phasewatch.core.predict`) expects the current phase to end
within ``within`` intervals (``expected_remaining_intervals`` below
``within``) and names the phase that follows, from the phase's past runs
(not from the run so far alone, which would say nothing).  CMD is run by
``/bin/sh -c``, not waited for, with its standard input from /dev/null; at
most :data:`RUNNING` run at once (a firing beyond them is counted and left
out).  Its environment adds:

- ``PHASEWATCH_PHASE``: the phase now;
- ``PHASEWATCH_PREDICTED_NEXT``: the phase predicted for the next interval;
- ``PHASEWATCH_PREDICTED_AFTER_CHANGE``: the phase predicted after the change;
- ``PHASEWATCH_EXPECTED_REMAINING_INTERVALS``, ``PHASEWATCH_EXPECTED_REMAINING_S``;
- ``PHASEWATCH_CONFIDENCE``: the confidence in the phase after the change,
  ``PHASEWATCH_CONFIDENCE_NEXT`` and ``PHASEWATCH_CONFIDENCE_REMAINING``;
- ``PHASEWATCH_INTERVAL``: the interval the prediction was made on;
- ``PHASEWATCH_PID``: the watched process.
"""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING, Callable

from ..core.source import Sink

if TYPE_CHECKING:
    from ..core.source import Classified

#: Commands running at once, at most.
RUNNING = 4


class ChangeHook(Sink):
    def __init__(self, command: str, within: int, pid: int, say: Callable[[str], None]):
        self.command = command
        self.within = within
        self.pid = pid
        self.say = say
        self.phase = -1
        self.armed = False
        self.running: list[subprocess.Popen] = []
        self.fired = 0
        self.left_out = 0

    def classified(self, c: Classified) -> None:
        iv, pr = c.intervals, c.intervals.prediction
        if iv.partial or pr is None:
            return
        for k, phase in enumerate(iv.phase.tolist()):
            if phase != self.phase:
                self.phase, self.armed = phase, phase >= 0
            if self.armed and self._expects_change(pr, k):
                self.armed = False
                self._fire(self._environment(iv, pr, k))

    def _expects_change(self, pr, k: int) -> bool:
        return (0 <= int(pr.remaining[k]) < self.within and int(pr.after_change[k]) >= 0
                and float(pr.confidence_remaining[k]) > 0)

    def _environment(self, iv, pr, k: int) -> dict[str, str]:
        return {"PHASEWATCH_PHASE": str(int(iv.phase[k])),
                "PHASEWATCH_PREDICTED_NEXT": str(int(pr.next_phase[k])),
                "PHASEWATCH_PREDICTED_AFTER_CHANGE": str(int(pr.after_change[k])),
                "PHASEWATCH_EXPECTED_REMAINING_INTERVALS": str(int(pr.remaining[k])),
                "PHASEWATCH_EXPECTED_REMAINING_S": f"{float(pr.remaining_s[k]):.6f}",
                "PHASEWATCH_CONFIDENCE": f"{float(pr.confidence_after_change[k]):.4f}",
                "PHASEWATCH_CONFIDENCE_NEXT": f"{float(pr.confidence_next[k]):.4f}",
                "PHASEWATCH_CONFIDENCE_REMAINING": f"{float(pr.confidence_remaining[k]):.4f}",
                "PHASEWATCH_INTERVAL": str(int(iv.index[k])),
                "PHASEWATCH_PID": str(self.pid)}

    def _fire(self, extra: dict[str, str]) -> None:
        self.running = [p for p in self.running if p.poll() is None]
        if len(self.running) >= RUNNING:
            self.left_out += 1
            return
        try:
            self.running.append(subprocess.Popen(["/bin/sh", "-c", self.command],
                                                 env={**os.environ, **extra},
                                                 stdin=subprocess.DEVNULL))
            self.fired += 1
        except OSError as exc:
            self.say(f"--on-change: cannot run /bin/sh: {exc.strerror}")
            self.left_out += 1

    def close(self, complete: bool = True) -> None:
        self.running = [p for p in self.running if p.poll() is None]
        if self.left_out:
            self.say(f"--on-change: {self.left_out} predicted change(s) left out, "
                     f"{RUNNING} commands still running each time")
