"""Hostile names, class "rich never reads user text as markup": a ``[``...``]``
in a trace's path, an output's path or the command's arguments.

Paths, command lines and function names are the user's, and rich read them as
markup: ``[/]`` (a folder ``k[`` holding ``]t.arrow``) is a closing tag with
nothing to close, a MarkupError, and ``[bold]`` vanished from the name shown.
Every rich console phasewatch makes comes from ``phasewatch.console.rich_console``,
which reads no markup.  Each case runs the real ``phasewatch`` on real files
and programs: exit 0, the name shown as given, every output written.  The
report's PNG is the same class: its title is not read as Matplotlib mathtext."""

from __future__ import annotations

import ast
import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent / "phasewatch"
EXAMPLE = ROOT / "examples" / "synthetic-skylake.csv"
BZIP2 = shutil.which("bzip2")
#: Arguments rich would read as tags: a close with nothing open, a style, an emoji code.
MARKUP_ARGS = ("[/]", "[bold]x[/bold]", ":smile:")


def phasewatch(*argv, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout)


def clean(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "MarkupError" not in proc.stderr, proc.stderr
    return proc.stdout + proc.stderr


@pytest.fixture
def folder(tmp_path) -> Path:
    """``k[``: a file ``]NAME`` in it has the path ``.../k[/]NAME``."""
    path = tmp_path / "k["
    path.mkdir()
    return path


@pytest.fixture
def trace(folder) -> Path:
    path = folder / "]t[bold].arrow"
    assert phasewatch("convert", EXAMPLE, path).returncode == 0
    return path


def test_run_with_markup_in_its_outputs_and_arguments_writes_them_all(folder, tmp_path):
    source = tmp_path / "F"
    source.write_bytes(bytes(range(256)) * 4000)
    outputs = {"--record": folder / "]r.arrow", "--pprof": folder / "]p.pb",
               "--output": folder / "]o.jsonl"}
    said = clean(phasewatch("run", "--no-pin", *[a for kv in outputs.items() for a in kv], "--",
                            "sh", "-c", f"{BZIP2} -c {source} >/dev/null", *MARKUP_ARGS))
    assert " ".join(MARKUP_ARGS) in said and "k[/]r.arrow" in said, said
    for path in outputs.values():
        assert path.is_file() and path.stat().st_size > 0, path


def test_replay_of_a_trace_with_markup_in_its_path_writes_its_profile(trace, folder):
    profile = folder / "]q.pb"
    said = clean(phasewatch("replay", trace, "--pprof", profile, "--output", folder / "]o.jsonl"))
    assert "k[/]t[bold].arrow" in said, said
    assert profile.is_file() and profile.stat().st_size > 0


def test_diff_of_traces_with_markup_in_their_paths(trace, tmp_path):
    other = tmp_path / "plain.arrow"
    assert phasewatch("convert", EXAMPLE, other).returncode == 0
    said = clean(phasewatch("diff", trace, other))
    assert "k[/]t[bold].arrow" in said, said


def test_report_of_a_trace_whose_name_is_markup_or_mathtext(folder, tmp_path):
    """The PNG's title is drawn by Matplotlib, which reads "$...$" as mathtext:
    "$\\frac$" failed to parse and report ended in a traceback."""
    trace = folder / "]m$\\frac$[bold].arrow"
    assert phasewatch("convert", EXAMPLE, trace).returncode == 0
    out = tmp_path / "report"
    clean(phasewatch("report", trace, "--out", out))
    assert (out / "phases.png").stat().st_size > 0
    assert "m$\\frac$[bold].arrow" in (out / "index.html").read_text()


# --- the root cause: one console, and it reads no markup -----------------------------------

def test_the_one_console_prints_markup_as_text():
    from phasewatch.console import rich_console
    out = io.StringIO()
    rich_console(out).print("k[/]t.arrow [bold]x[/bold] :smile:")
    assert out.getvalue() == "k[/]t.arrow [bold]x[/bold] :smile:\n"


def test_no_module_makes_a_rich_console_of_its_own():
    """A ``Console(...)`` made anywhere but phasewatch/console.py would read
    markup again: the next MarkupError on a user's file name."""
    found = []
    for path in [*(ROOT / "agent").rglob("*.py"), *(ROOT / "collectors").glob("*.py")]:
        if path == ROOT / "agent" / "console.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))
                    and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Console"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "rich.markup":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: rich.markup")
    assert not found, found
