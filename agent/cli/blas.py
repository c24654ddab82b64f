"""numpy loaded with one OpenBLAS thread, by the entry points before anything
else imports it.

At import, OpenBLAS starts a thread per core for linear algebra that
phasewatch does not do: about 40 ms of CPU at every start on two cores, more
on larger hosts, and memory for each thread.  The variable that asks for one
thread is set only while numpy loads, so that a watched command (which
inherits the environment) sees the user's environment unchanged.
"""

from __future__ import annotations

import os

VARIABLE = "OPENBLAS_NUM_THREADS"


def load_numpy() -> None:
    """Import numpy with one BLAS thread, unless the user chose a number."""
    if VARIABLE in os.environ:
        import numpy  # noqa: F401
        return
    os.environ[VARIABLE] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ[VARIABLE]
