"""Sources that face the hardware: each yields :class:`phasewatch.batch.SampleBatch`."""
