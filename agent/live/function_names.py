"""Function names short enough to read, as ``perf report`` shows C++ code:
without the argument list, and here also without template arguments
(``std::vector<...>::push_back(...)`` becomes ``std::vector<>::push_back``),
then, where a width is given, without leading namespaces and cut with ``…``.

Names that are not C++ (``[k] read_zero``, ``[python3.11]``,
``JS:*phaseMath``, ``libz.so.1+0x2f10``) keep their form and are only cut.
"""

from __future__ import annotations

import re

ELLIPSIS = "…"
_CLONE = re.compile(r"(?: \[clone [^\]]*\])+$")
#: What may follow a member function's argument list.
_QUALIFIERS = re.compile(r"(?:\s*(?:const|volatile|&&|&|noexcept))+$")
#: Operators whose symbols hold angle brackets, longest first.
_OPERATORS = ("<=>", "<<=", ">>=", "->*", "<<", ">>", "<=", ">=", "->", "<", ">")


def short_name(name: str) -> str:
    """The name without GCC's clone suffixes, its argument list and its
    template arguments; a name that is not C++ as it is."""
    if not _looks_cxx(name):
        return name
    name = _CLONE.sub("", name)
    return _without_templates(_without_arguments(name))


def fit_name(name: str, width: int) -> str:
    """:func:`short_name`, then, if wider than ``width``, its leading scopes
    left out (``…::fold``), and what is still too wide cut with ``…``."""
    name = short_name(name)
    if len(name) <= width:
        return name
    scopes = _split_scopes(name)
    while len(scopes) > 1 and len(ELLIPSIS + "::") + len("::".join(scopes)) > width:
        scopes = scopes[1:]
    if len(scopes) < len(_split_scopes(name)):
        name = ELLIPSIS + "::" + "::".join(scopes)
    if len(name) <= width:
        return name
    return name[:max(width - len(ELLIPSIS), 1)] + ELLIPSIS


def _looks_cxx(name: str) -> bool:
    if name.startswith("[") or name.startswith("JS:") or "+0x" in name:
        return False
    return "::" in name or name.endswith(")") or "<" in name or "[clone " in name


def _without_arguments(name: str) -> str:
    """``A::f(int, char const*) const`` → ``A::f``; a name whose final
    parenthesis is not an argument list, as it is."""
    body = _QUALIFIERS.sub("", name)
    if not body.endswith(")"):
        return name
    depth = 0
    for i in range(len(body) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(body[i], 0)
        if depth == 0:
            head = body[:i].rstrip()
            return head if head and not head.endswith("::") else name
    return name


def _without_templates(name: str) -> str:
    """Every outermost ``<...>`` emptied: ``std::map<K, V>::find`` → ``std::map<>::find``."""
    out, depth, i = [], 0, 0
    while i < len(name):
        operator = _operator_at(name, i)
        if operator:
            if depth == 0:
                out.append(operator)
            i += len(operator)
            continue
        c = name[i]
        if c == "<":
            if depth == 0:
                out.append("<")
            depth += 1
        elif c == ">" and depth:
            depth -= 1
            if depth == 0:
                out.append(">")
        elif depth == 0:
            out.append(c)
        i += 1
    return "".join(out)


def _operator_at(name: str, i: int) -> str:
    """``operator<<`` and the like starting at ``i``, whose brackets are no template's."""
    if not name.startswith("operator", i) or (i and (name[i - 1].isalnum() or name[i - 1] == "_")):
        return ""
    rest = name[i + len("operator"):]
    for symbol in _OPERATORS:
        if rest.startswith(symbol):
            return "operator" + symbol
    return ""


def _split_scopes(name: str) -> list[str]:
    """``a::b<c::d>::f`` → ``["a", "b<c::d>", "f"]``: ``::`` outside brackets."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(name):
        operator = _operator_at(name, i)
        if operator:
            i += len(operator)
            continue
        c = name[i]
        if c in "<({[":
            depth += 1
        elif c in ">)}]" and depth:
            depth -= 1
        elif depth == 0 and name.startswith("::", i):
            parts.append(name[start:i])
            start = i + 2
            i += 1
        i += 1
    parts.append(name[start:])
    return parts
