"""SimPoint's method and its basic-block vectors: the k-means clustering,
the bbv detector and the replay of .bb files.  Imports ``formats`` and ``core``."""
