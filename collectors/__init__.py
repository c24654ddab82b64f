"""Sources that face the hardware: each yields :class:`phasewatch.core.batch.SampleBatch`.
Imports ``core`` (the batch, the CPU model table, the registers) and ``errors``, nothing above."""
