"""Loading the pipeline's compiled kernels quickly.

Kernels are compiled once and cached (``cache=True``); what a process still
pays is numba's own set-up when the first kernel loads.  Part of that is a
probe for a BLAS, which imports ``scipy.linalg``: a third to a half of a
second, for linear algebra that no kernel here uses.
"""

from __future__ import annotations

import sys


def skip_blas_probe() -> None:
    """Let numba find no BLAS, once per process, unless scipy.linalg is in
    already (then the probe costs nothing).  scipy.linalg stays importable."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    sys.modules["scipy.linalg"] = None  # the probe's import fails at once
    try:
        import numba.np.arraymath  # noqa: F401  (where the probe runs)
    finally:
        del sys.modules["scipy.linalg"]
