"""Recorded traces through the one driver: one trace (or a SimPoint .bb
file) into its sinks, many streams in parallel, or one paced as it was
recorded (phasewatchd --replay).  Imports ``live``, ``simpoint``,
``formats`` and ``core``."""
