"""Watching programs as they run: the child started paused, the live loop
from a source to the pipeline, live sources and host signals, symbols and
process maps, the status line.  Imports ``collectors``, ``formats`` and ``core``."""
