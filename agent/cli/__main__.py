"""``python -m phasewatch.cli``: the ``phasewatch`` command."""

from .main import entry

entry()
