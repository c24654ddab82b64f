"""Every sink keeps the contract's methods callable: an attribute of the same
name set on an instance (``self.ended = {...}``) hides the method, and the
driver's call to it fails only when the source ends (a daemon's process
target then counted an error at every end).  Read from the sources (ast),
for every subclass of ``core.source.Sink`` in the package."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import textwrap

import phasewatch
from phasewatch.core.source import Sink

#: The methods the driver calls on every sink.
CONTRACT = [name for name, value in vars(Sink).items()
            if callable(value) and not name.startswith("_")]


def all_sinks() -> list[type]:
    for module in pkgutil.walk_packages(phasewatch.__path__, "phasewatch."):
        if ".dashboards" in module.name or module.name.endswith("__main__"):
            continue
        importlib.import_module(module.name)
    found, todo = [], [Sink]
    while todo:
        for sub in todo.pop().__subclasses__():
            found.append(sub)
            todo.append(sub)
    return found


def assigned_on_self(cls: type) -> set[str]:
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    names = set()
    for node in ast.walk(tree):
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for target in targets:
            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    and target.value.id == "self"):
                names.add(target.attr)
    return names


def test_the_contract_is_what_the_driver_calls():
    assert set(CONTRACT) == {"batch", "classified", "ended", "close"}


def test_no_sink_hides_a_method_of_the_contract_under_an_attribute():
    sinks = all_sinks()
    assert len(sinks) >= 10, sinks          # the package's sinks were found
    hidden = {f"{cls.__module__}.{cls.__qualname__}.{name}"
              for cls in sinks for name in assigned_on_self(cls) & set(CONTRACT)}
    assert not hidden, hidden
