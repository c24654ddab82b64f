"""The pipeline and its algorithms: sample batches, decoding, intervals,
histograms, the classifier and its compiled kernels, with a numpy reference.
No I/O beyond reading the kernels' module; imports nothing of phasewatch but
``errors`` and this package."""
