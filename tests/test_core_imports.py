"""Modules a command loads before it builds a pipeline leave the pipeline
(and numba with it) unloaded: sources start, and settings are checked,
before any sample is decoded."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["phasewatch.core.settings", "phasewatch.core.source"])
def test_importing_leaves_the_pipeline_unloaded(module):
    probe = (f"import sys, {module}\n"
             "print('phasewatch.core.pipeline' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["False"]
