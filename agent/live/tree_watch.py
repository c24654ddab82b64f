"""Watching a process tree, twice a second: for new processes and exec'd
programs, so that their mappings are known before they end (samples reach the
agent about once a second, after a short-lived child, a compiler pass or one
command of a shell script, may have gone), and for what else looks at the
tree (pinning).  One thread for both: each look costs a wake-up and a walk of
/proc, which the budget of 0.5 % of a core counts."""

from __future__ import annotations

import threading

from typing import Callable

from .symbols import TreeSymbolizer

#: Seconds between looks at the tree (a child that lives less is named only
#: if its samples come while it runs).
POLL_S = 0.5


class TreeWatch:
    def __init__(self, tree: TreeSymbolizer, also: list[Callable[[], None]] = (),
                 poll_s: float = POLL_S):
        self.tree, self.also, self.poll_s = tree, list(also), poll_s
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._run, name="phasewatch-tree", daemon=True)

    def start(self) -> "TreeWatch":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._ended.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.tree.learn_tree()
            for look in self.also:
                look()
            if self._ended.wait(self.poll_s):
                return
