"""phasewatch: online program-phase detection from core voltage, frequency and IPs."""

__version__ = "0.1.0"
