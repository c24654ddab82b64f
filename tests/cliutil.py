"""Running ``phasewatch`` in the test's own process."""

from __future__ import annotations

import contextlib
import io

from phasewatch.cli import main as cli


def call(*argv) -> tuple[int, str, str]:
    """``phasewatch ARGV`` in this process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli.main([str(a) for a in argv])
        except SystemExit as exc:       # argparse
            status = exc.code
    return status, out.getvalue(), err.getvalue()
