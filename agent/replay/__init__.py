"""Recorded traces through the pipeline: one trace into its sinks, many
streams in parallel, or one paced as it was recorded (phasewatchd --replay).
Imports ``formats`` and ``core``."""
