"""The daemon's malloc arenas (phasewatch.daemon.heap): glibc gives each
thread that meets contention an arena of its own, and after a subscriber
flood each kept what the burst made it allocate (hundreds of MB stayed
resident; tests/test_daemon_hostile.py floods the daemon itself)."""

from __future__ import annotations

import subprocess
import sys

from phasewatch.daemon.heap import ARENAS

#: Eight threads allocate at once (ctypes lets go of the GIL), then glibc's
#: own report (malloc_info) is read back: one <heap> element per arena.
PROBE = """
import ctypes, sys, threading
if sys.argv[1] == "daemon":
    import phasewatch.cli.phasewatchd  # noqa: F401  (as the phasewatchd command starts)
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.fclose.argtypes = [ctypes.c_void_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
together = threading.Barrier(8)

def churn():
    together.wait()
    for _ in range(20000):
        libc.free(libc.malloc(256))

threads = [threading.Thread(target=churn) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
report = libc.fopen(sys.argv[2].encode(), b"w")
libc.malloc_info(0, report)
libc.fclose(report)
print(open(sys.argv[2]).read().count("<heap nr="))
"""


def arenas(kind: str, tmp_path) -> int:
    done = subprocess.run([sys.executable, "-c", PROBE, kind, str(tmp_path / f"{kind}.xml")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


def test_the_daemons_threads_share_two_arenas(tmp_path):
    """Started as phasewatchd starts, eight threads allocating at once share
    ARENAS arenas; in a plain interpreter (the control, so that the probe
    can fail) they get more."""
    assert arenas("plain", tmp_path) > ARENAS
    assert arenas("daemon", tmp_path) == ARENAS
