"""Watching a process tree for new processes and exec'd programs, ten times a
second, so that their mappings are known before they end: samples reach the
agent about once a second, after a short-lived child (a compiler pass, one
command of a shell script) may have gone."""

from __future__ import annotations

import threading

from .symbols import TreeSymbolizer

#: Seconds between looks at the tree (a child that lives less is named only
#: if its samples come while it runs).
POLL_S = 0.1


class TreeWatch:
    def __init__(self, tree: TreeSymbolizer, poll_s: float = POLL_S):
        self.tree, self.poll_s = tree, poll_s
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
            if self._ended.wait(self.poll_s):
                return
