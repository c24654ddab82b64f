"""The documents stay what they claim to be: README.md short and opening with
the set-up commands, docs/commands.md what the parsers render (as --help and
the man pages are), and every relative link in README.md and docs/*.md
pointing at a file, and a heading, that exist."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from phasewatch.cli import manpages

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
COMMANDS = ROOT / "docs" / "commands.md"
MAX_README_LINES = 300
SETUP = ("    apt-get update && apt-get install -y make && make demo",
         "    apt-get update && apt-get install -y make && make test")

#: The Markdown files whose links are checked.
LINKED = [README, *sorted((ROOT / "docs").glob("*.md"))]


def stale_reference(actual: str, expected: str) -> str | None:
    """None where the committed reference is what the parsers render, else
    what differs and how to regenerate it."""
    if actual == expected:
        return None
    diff = difflib.unified_diff(actual.splitlines(), expected.splitlines(),
                                "docs/commands.md (committed)", "the parsers now", lineterm="", n=1)
    return ("docs/commands.md differs from what the commands' parsers render: regenerate it "
            "with `make docs` (python -m phasewatch.cli.manpages --markdown docs/commands.md) "
            "and commit it\n" + "\n".join(list(diff)[:40]))


def test_commands_reference_is_what_the_parsers_render():
    problem = stale_reference(COMMANDS.read_text(encoding="utf-8"), manpages.markdown())
    assert problem is None, problem


def readme_problems(text: str) -> list[str]:
    lines = text.splitlines()
    problems = []
    if len(lines) > MAX_README_LINES:
        problems.append(f"README.md has {len(lines)} lines, more than {MAX_README_LINES}: "
                        "move reference material to docs/")
    head = [line for line in lines[1:] if line.strip()][:2]
    if not lines or not lines[0].startswith("# ") or tuple(head) != SETUP:
        problems.append("README.md must open with its title, then the two set-up commands:\n" +
                        "\n".join(SETUP))
    return problems


def test_readme_is_short_and_opens_with_the_setup_commands():
    problems = readme_problems(README.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """Markdown without fenced code blocks and code spans, where links are
    not links."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: the text without markup, lower case,
    punctuation but hyphens and underscores dropped, spaces made hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Each relative link in ``path`` whose file, or heading, is missing."""
    broken = []
    for target in LINK.findall(prose(path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
            continue                                # http:, mailto: …
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{path.relative_to(root)}: {target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{path.relative_to(root)}: {target}: no such heading")
    return broken


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_that_exist(path):
    broken = broken_links(path)
    assert not broken, "\n".join(broken)


def test_the_checks_catch_what_they_are_for(tmp_path):
    """Each check fails on input broken the way it guards against."""
    assert stale_reference("# stale\n", manpages.markdown()) is not None
    good = README.read_text(encoding="utf-8")
    assert readme_problems(good) == []
    assert readme_problems(good + "line\n" * MAX_README_LINES)
    assert readme_problems(good.replace("make demo", "make all", 1))
    page = tmp_path / "page.md"
    page.write_text("# Page\n\n## A heading\n\n[here](#a-heading), [gone](missing.md), "
                    "[nowhere](#no-heading), `[code](missing.md)`\n\n```\n[fenced](missing.md)\n```\n")
    assert broken_links(page, tmp_path) == ["page.md: missing.md: no such file",
                                            "page.md: #no-heading: no such heading"]
