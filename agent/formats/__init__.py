"""What phasewatch reads and writes: traces (Arrow, CSV) and their metadata
and side tables, results, labellings, SimPoint's .bb files, the synthetic
traces, and the one helper every output file goes through.  Imports ``core``."""
