"""The package's layers, read from the sources' imports (ast, nothing imported).

``agent/`` is layered; a module may import its own package and the packages
below it, never one above.  Commands (``agent/cli/``) are imported by the
entry points alone, and no import circle exists in ``agent/`` or
``collectors/``.  docs/layout.md gives the same order.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"phasewatch": ROOT / "agent", "phasewatch.collectors": ROOT / "collectors"}

#: Each package's rank: imports go to a lower rank, or within a package.
#: The shared modules at the top of agent/ sit below everything.
RANKS = {
    "phasewatch": 0, "phasewatch.errors": 0, "phasewatch.console": 0,
    "phasewatch.core": 1,
    "phasewatch.formats": 2, "phasewatch.collectors": 2,
    "phasewatch.live": 3, "phasewatch.simpoint": 3,
    "phasewatch.replay": 4,
    "phasewatch.report": 5, "phasewatch.daemon": 5, "phasewatch.dashboards": 5,
    "phasewatch.cli": 6,
}
#: Modules that start a program: the only ones that may import a command.
ENTRY_POINTS = {"phasewatch.cli.main", "phasewatch.cli.__main__", "phasewatch.cli.phasewatchd",
                "phasewatch.cli.aot_build", "phasewatch.cli.manpages"}
#: What the commands share, and so may import from one another.
CLI_SHARED = {"phasewatch.cli.arguments"}
#: Modules allowed at the top of agent/ besides __init__.py.
TOP_LEVEL = {"errors", "console"}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in FOLDERS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = modules()


def imports_of(name: str, path: Path) -> set[str]:
    """The phasewatch modules ``name`` imports, anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES}


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def package_of(module: str) -> str:
    """The ranked package that holds ``module``."""
    while module not in RANKS:
        module = module.rpartition(".")[0]
    return module


def test_every_module_has_a_rank():
    for module in MODULES:
        assert package_of(module) in RANKS, module


def test_agent_top_level_holds_only_the_shared_modules():
    top = {p.stem for p in FOLDERS["phasewatch"].glob("*.py")} - {"__init__"}
    assert top <= TOP_LEVEL, f"modules at the top of agent/: {sorted(top - TOP_LEVEL)}"


def test_every_package_says_what_it_holds_and_may_import():
    for package in RANKS:
        path = MODULES.get(package)
        if path is None or path.name != "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text()))
        assert doc and "import" in doc.lower(), f"{path}: its docstring must say what it may import"


def upward_imports(graph) -> list[str]:
    found = []
    for module, targets in graph.items():
        here = package_of(module)
        for target in targets:
            there = package_of(target)
            if there != here and RANKS[there] >= RANKS[here]:
                found.append(f"{module} imports {target}: {there} is not below {here}")
    return found


def command_imports(graph) -> list[str]:
    return [f"{module} imports the command module {target}"
            for module, targets in graph.items() for target in targets
            if target.startswith("phasewatch.cli.") and target not in CLI_SHARED
            and module not in ENTRY_POINTS]


def circles(graph) -> list[list[str]]:
    found = []
    state: dict[str, int] = {}          # 1: on the current path, 2: done

    def visit(module, path):
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                found.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return found


def test_imports_go_down_the_layers():
    assert not upward_imports(GRAPH), "\n".join(upward_imports(GRAPH))


def test_only_entry_points_import_commands():
    assert not command_imports(GRAPH), "\n".join(command_imports(GRAPH))


def test_no_import_circles():
    assert not circles(GRAPH), "; ".join(" -> ".join(c) for c in circles(GRAPH))


def test_the_checks_see_a_violation():
    """The checks read real imports, and fail on a made-up upward import, a
    command imported by another, and a circle."""
    assert GRAPH["phasewatch.cli.main"] and GRAPH["phasewatch.core.pipeline"]
    bad = {**GRAPH, "phasewatch.core.batch": GRAPH["phasewatch.core.batch"] | {"phasewatch.cli.run"},
           "phasewatch.cli.report": GRAPH["phasewatch.cli.report"] | {"phasewatch.cli.replay"},
           "phasewatch.core.params": GRAPH["phasewatch.core.params"] | {"phasewatch.core.pipeline"}}
    assert any("phasewatch.core.batch imports phasewatch.cli.run" in v for v in upward_imports(bad))
    assert "phasewatch.cli.report imports the command module phasewatch.cli.replay" \
        in command_imports(bad)
    assert any(c[0] == "phasewatch.core.params" for c in circles(bad))
