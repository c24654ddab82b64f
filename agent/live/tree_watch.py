"""Watching a process tree: for new processes and exec'd programs, so that
their mappings are known before they end (samples reach the agent about once
a second, after a short-lived child, a compiler pass or one command of a
shell script, may have gone), for mappings that change (a library loaded,
JIT code), and for what else looks at the tree (pinning).  One thread and one
walk of /proc for all: each look costs a wake-up and the walk, which the
budget of 0.5 % of a core counts, so a tree that stays the same is looked at
once a second and one that changes twice."""

from __future__ import annotations

import threading

from typing import Callable

from .process_tree import descendants
from .tree_symbolizer import TreeSymbolizer

#: Seconds between looks at the tree after a look that found a new process or
#: program, and after one that did not (a child that lives less is named only
#: if its samples come while it runs).
POLL_S = 0.5
STEADY_POLL_S = 1.0


class TreeWatch:
    def __init__(self, tree: TreeSymbolizer, also: list[Callable[[list[int]], None]] = (),
                 poll_s: float = POLL_S, steady_poll_s: float = STEADY_POLL_S):
        self.tree, self.also = tree, list(also)
        self.poll_s, self.steady_poll_s = poll_s, steady_poll_s
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
            pids = descendants(self.tree.pid) if self.tree.pid is not None else []
            changed = self.tree.learn_tree(pids)
            self.tree.snapshot(pids)
            for look in self.also:
                look(pids)
            if self._ended.wait(self.poll_s if changed else self.steady_poll_s):
                return
