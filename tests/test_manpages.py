"""Man pages and bash completion come from the parsers themselves: one page
per command listing just that command's options, a completion that knows
them, both installed by ``make install`` beside the venv's commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from phasewatch.cli.main import COMMANDS

SHARE = Path(sys.prefix) / "share"


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("share")
    subprocess.run([sys.executable, "-m", "phasewatch.cli.manpages", str(out)], check=True,
                   capture_output=True, timeout=120)
    return out


def rendered(page: Path) -> str:
    proc = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True,
                          env={**os.environ, "MANWIDTH": "100"},
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return re.sub(r".\x08", "", proc.stdout)       # no overstruck bold


def test_a_page_per_command(generated):
    pages = {p.stem for p in (generated / "man" / "man1").iterdir()}
    assert pages == {"phasewatch", "phasewatchd"} | {f"phasewatch-{c}" for c in COMMANDS}


def test_each_page_lists_only_its_commands_options(generated):
    man1 = generated / "man" / "man1"
    run, replay = rendered(man1 / "phasewatch-run.1"), rendered(man1 / "phasewatch-replay.1")
    assert "PHASEWATCH-RUN(1)" in run
    assert "--freq" in run and "--record" in run and "--per-cpu" not in run
    assert "bbv" not in run
    assert "--per-cpu" in replay and "--freq" not in replay
    assert "--replay-speed" in rendered(man1 / "phasewatchd.1")


def complete(script: Path, words: list[str]) -> list[str]:
    """What bash completes the last of ``words`` to, with the generated script."""
    line = " ".join(words)
    program = (f"source {script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}\n"
               f"COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}\n"
               f"_shtab_{words[0]} {words[0]} {words[-1]} {words[-2]}\n"
               "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    proc = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60)
    return proc.stdout.split()


def test_bash_completes_commands_and_their_options(generated):
    script = generated / "bash-completion" / "completions" / "phasewatch"
    assert "replay" in complete(script, ["phasewatch", "re"])
    assert complete(script, ["phasewatch", "run", "--fr"]) == ["--freq"]
    assert "--per-cpu" not in complete(script, ["phasewatch", "run", "--"])


def test_make_install_put_them_beside_the_commands():
    assert (SHARE / "man" / "man1" / "phasewatch-run.1").is_file()
    assert (SHARE / "bash-completion" / "completions" / "phasewatch").is_file()
