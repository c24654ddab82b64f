"""The processes and threads of a process tree, from /proc."""

from __future__ import annotations

import os


def process_of_thread(tid: int) -> int | None:
    """The process (thread group) of thread ``tid``, None if it has gone."""
    try:
        with open(f"/proc/{tid}/status") as status:
            for line in status:
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def descendants(pid: int) -> list[int]:
    """``pid`` and its live descendants (from ``/proc/PID/task/TID/children``)."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{current}/task/{tid}/children") as children:
                    queue += [int(child) for child in children.read().split()]
            except (OSError, ValueError):
                continue
    return found


def thread_ids(pid: int) -> list[int]:
    """The thread ids of process ``pid``, ascending; empty once it has gone."""
    try:
        return sorted(int(tid) for tid in os.listdir(f"/proc/{pid}/task"))
    except (FileNotFoundError, ProcessLookupError):
        return []
