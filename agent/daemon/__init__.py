"""phasewatchd's machinery: the service and its workers, config, Prometheus
metrics, the ZeroMQ publisher, targets and sd_notify.  Imports ``live``,
``replay``, ``collectors``, ``formats`` and ``core``; its entry point is in ``cli``."""
