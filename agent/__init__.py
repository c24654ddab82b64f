"""phasewatch: online program-phase detection from core voltage, frequency and IPs.

The packages are layers, and a module imports only its own package and those
below it: ``cli`` -> ``report``, ``daemon`` -> ``live``, ``replay``,
``simpoint`` -> ``formats``, ``collectors`` -> ``core`` -> ``errors`` and
``console`` (tests/test_layers.py reads the imports and holds the order).
"""

__version__ = "0.1.0"
