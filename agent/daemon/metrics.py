"""The Prometheus endpoint: a custom collector that reads the daemon's latest state.

Nothing is set per sample: each scrape reads the targets' counters, the host
signals and the daemon's own counts as they are at that moment.  The names
and labels are the contract with the dashboards (base units, node_exporter's
conventions).
"""

from __future__ import annotations

import math
import os
import socket
import ssl
import threading
from typing import Callable
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
                                    InfoMetricFamily)
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.process_collector import ProcessCollector

from .. import __version__
from ..errors import UserError
from ..live.host_signals import CSTATES, HostSignals
from .targets import Targets


class DaemonCounts:
    """Counts the daemon keeps beside the targets: samples, drops, lag."""

    def __init__(self):
        self.samples: Callable[[], int] = lambda: 0
        self.dropped: Callable[[], int] = lambda: 0
        self.zmq_dropped: Callable[[], int] = lambda: 0
        self.lag_s: Callable[[], float] = lambda: 0.0
        #: each register sampler's rate and why (collectors.budget.RegisterRate.as_dict)
        self.register_rates: Callable[[], list[dict]] = lambda: []
        #: errors a target caused, by (configured target, kind) (.target_errors)
        self.target_errors: Callable[[], dict[tuple[str, str], int]] = lambda: {}
        #: catalogue writes that failed (a full disk); None: no catalogue
        self.catalog_write_errors: Callable[[], int] | None = None


class PhasewatchCollector:
    """Every phasewatch_* metric, read from the latest state at scrape time."""

    def __init__(self, targets: Callable[[], list[Targets]], host: Callable[[], list[HostSignals]],
                 counts: DaemonCounts, energy=None):
        self.targets = targets
        self.host = host
        self.counts = counts
        self.energy = energy    # a PhaseEnergy, where RAPL is readable

    def collect(self):
        yield from self._host_metrics()
        states = live_states(self.targets())
        yield from self._target_metrics(states)
        if self.energy is not None:
            yield self._phase_energy(states)
        yield from self._daemon_metrics()

    def _host_metrics(self):
        volts = GaugeMetricFamily("phasewatch_core_voltage_volts",
                                  "Latest core voltage read on the CPU", labels=["cpu"])
        freq = GaugeMetricFamily("phasewatch_cpu_frequency_hertz",
                                 "Base frequency times dAPERF/dMPERF over the last second",
                                 labels=["cpu"])
        pfreq = GaugeMetricFamily("phasewatch_cpu_productive_frequency_hertz",
                                  "Base frequency times dPPERF/dMPERF over the last second",
                                  labels=["cpu"])
        cstate = GaugeMetricFamily("phasewatch_cpu_cstate_residency_ratio",
                                   "Share of the last second spent in the C-state",
                                   labels=["cpu", "state"])
        energy = CounterMetricFamily("phasewatch_package_energy_joules",
                                     "RAPL package energy", labels=["package"])
        vhist = HistogramMetricFamily("phasewatch_core_voltage_sample_volts",
                                      "Every sample's core voltage")
        fhist = HistogramMetricFamily("phasewatch_productive_frequency_sample_hertz",
                                      "Every sample's productive frequency")
        v_buckets, f_buckets, v_sum, f_sum = None, None, 0.0, 0.0
        for h in self.host():
            with h.lock:
                for cpu, v in sorted(h.volts.items()):
                    volts.add_metric([str(cpu)], v)
                for cpu, v in sorted(h.freq_hz.items()):
                    freq.add_metric([str(cpu)], v)
                for cpu, v in sorted(h.pfreq_hz.items()):
                    pfreq.add_metric([str(cpu)], v)
                for cpu, r in sorted(h.residency.items()):
                    for state in CSTATES:
                        cstate.add_metric([str(cpu), state], r[state])
                v_buckets, v_sum = _merge(v_buckets, h.voltage_hist.buckets()), v_sum + h.voltage_hist.sum
                f_buckets, f_sum = _merge(f_buckets, h.pfreq_hist.buckets()), f_sum + h.pfreq_hist.sum
            for package, joules in sorted(h.energy_joules().items()):
                energy.add_metric([str(package)], joules)
        # a signal the host lacks (a VM's voltage) is no histogram of empty buckets
        if v_buckets is not None and v_buckets[-1][1]:
            vhist.add_metric([], v_buckets, v_sum)
        if f_buckets is not None and f_buckets[-1][1]:
            fhist.add_metric([], f_buckets, f_sum)
        return volts, freq, pfreq, cstate, energy, vhist, fhist

    def _target_metrics(self, states):
        phase = GaugeMetricFamily("phasewatch_phase", "Current phase (stable id) of the target",
                                  labels=["target"])
        phases = GaugeMetricFamily("phasewatch_phases", "Phases currently kept for the target",
                                   labels=["target"])
        changes = CounterMetricFamily("phasewatch_phase_changes",
                                      "Intervals whose phase differs from the previous interval's",
                                      labels=["target"])
        intervals = CounterMetricFamily("phasewatch_intervals", "Classified intervals",
                                        labels=["target"])
        per_phase = CounterMetricFamily("phasewatch_phase_intervals",
                                        "Intervals classified into each phase (stable id, name)",
                                        labels=["target", "phase", "phase_name"])
        retired = CounterMetricFamily("phasewatch_phases_retired",
                                      "Phases dropped by the per-target cap", labels=["target"])
        remaining = GaugeMetricFamily("phasewatch_phase_expected_remaining_seconds",
                                      "Seconds the current phase is predicted to last yet",
                                      labels=["target"])
        predictions = CounterMetricFamily("phasewatch_predictions",
                                          "Next-interval phase predictions, by outcome",
                                          labels=["target", "outcome"])
        rows = GaugeMetricFamily("phasewatch_process_mappings",
                                 "Executable mappings a process target keeps for its processes "
                                 "(its code map's rows)", labels=["target"])
        processes = GaugeMetricFamily("phasewatch_processes",
                                      "Processes of a process target whose mappings are kept",
                                      labels=["target"])
        exited = CounterMetricFamily("phasewatch_processes_exited",
                                     "Processes of a process target seen to end", labels=["target"])
        for t in states:
            if t.mapping_rows >= 0:
                rows.add_metric([t.name], t.mapping_rows)
                processes.add_metric([t.name], t.processes)
                exited.add_metric([t.name], t.processes_exited)
            if t.phase >= 0:
                phase.add_metric([t.name], t.phase)
            phases.add_metric([t.name], t.phases)
            changes.add_metric([t.name], t.phase_changes)
            intervals.add_metric([t.name], t.intervals)
            retired.add_metric([t.name], t.phases_retired)
            if not math.isnan(t.expected_remaining_s):
                remaining.add_metric([t.name], t.expected_remaining_s)
            predictions.add_metric([t.name, "right"], t.predictions_right)
            predictions.add_metric([t.name, "wrong"], t.predictions_wrong)
            for p, n in sorted(t.phase_intervals.items()):
                per_phase.add_metric([t.name, str(p), t.names.get(p, "")], n)
        return (phase, phases, changes, intervals, per_phase, retired, remaining, predictions,
                rows, processes, exited)

    def _phase_energy(self, states):
        energy = CounterMetricFamily("phasewatch_phase_energy_joules",
                                     "RAPL package energy used while the target was in the phase",
                                     labels=["target", "phase", "phase_name"])
        names = {t.name: t.names for t in states}
        for (target, phase), joules in sorted(self.energy.joules().items()):
            name = names.get(target, {}).get(phase)
            if name is not None:        # a phase the metrics show
                energy.add_metric([target, str(phase), name], joules)
        return energy

    def _daemon_metrics(self):
        c = self.counts
        samples = CounterMetricFamily("phasewatch_samples", "Samples taken")
        samples.add_metric([], c.samples())
        dropped = CounterMetricFamily("phasewatch_samples_dropped",
                                      "Samples lost (source or queue)")
        dropped.add_metric([], c.dropped())
        zmq_dropped = CounterMetricFamily("phasewatch_zmq_dropped_messages",
                                          "Events a slow subscriber missed (high-water mark)")
        zmq_dropped.add_metric([], c.zmq_dropped())
        t = os.times()
        cpu = CounterMetricFamily("phasewatch_agent_cpu_seconds",
                                  "The daemon's own CPU time, all threads", labels=["mode"])
        cpu.add_metric(["user"], t.user)
        cpu.add_metric(["system"], t.system)
        lag = GaugeMetricFamily("phasewatch_sampler_lag_seconds",
                                "How far the newest sample processed lags behind now")
        lag.add_metric([], c.lag_s())
        build = InfoMetricFamily("phasewatch_build", "The daemon's version")
        build.add_metric([], {"version": __version__})
        errors = CounterMetricFamily("phasewatch_target_errors",
                                     "Errors a target caused, caught: looking for it, opening "
                                     "its source, watching it", labels=["target", "kind"])
        for (target, kind), n in sorted(c.target_errors().items()):
            errors.add_metric([target, kind], n)
        catalog = ()
        if c.catalog_write_errors is not None:
            written = CounterMetricFamily("phasewatch_catalog_write_errors",
                                          "Phase catalogue updates that could not be written "
                                          "(a full disk)")
            written.add_metric([], c.catalog_write_errors())
            catalog = (written,)
        return ((samples, dropped, zmq_dropped, cpu, lag, build, errors) + catalog
                + self._register_rate_metrics())

    def _register_rate_metrics(self):
        """The register sampler's rate: lowered where the requested one does
        not fit the CPU budget (the lowest over the daemon's sources)."""
        rates = self.counts.register_rates()
        if not rates:
            return ()
        slowest = min(rates, key=lambda r: r["rate_hz"])
        rate = GaugeMetricFamily("phasewatch_register_rate_hertz",
                                 "Rate the MSR sampler reads registers at (IP sampling keeps its own)")
        rate.add_metric([], slowest["rate_hz"])
        requested = GaugeMetricFamily("phasewatch_register_rate_requested_hertz",
                                      "Rate the configuration asked the MSR sampler for")
        requested.add_metric([], slowest["requested_hz"])
        share = GaugeMetricFamily("phasewatch_register_sampler_cpu_ratio",
                                  "Share of a core per watched CPU the MSR sampler takes")
        share.add_metric([], slowest["share_per_cpu"])
        return rate, requested, share


def live_states(routers) -> list:
    """One state per target name, in name order: where a process behind a
    target ended and another took its place (a restarted ``comm:`` target),
    the one seen last.  The ended process's state is never exported beside
    the live one (Prometheus would keep whichever copy came first)."""
    by_name: dict = {}
    for router in routers:
        for t in router.snapshot():
            if t.name not in by_name or t.last_seen > by_name[t.name].last_seen:
                by_name[t.name] = t
    return [by_name[name] for name in sorted(by_name)]


def _merge(total, buckets):
    if total is None:
        return buckets
    return [(le, a + b) for (le, a), (_, b) in zip(total, buckets)]


def registry_for(collector: PhasewatchCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    ProcessCollector(registry=registry)
    return registry


class _Server(ThreadingWSGIServer):
    """prometheus_client's threading server, for the address family of the host."""

    #: Connections the kernel queues before they are accepted (socketserver's
    #: default, 5, turns many concurrent scrapes away).
    request_queue_size = 1024

    def handle_error(self, request, client_address) -> None:
        """A client that sent garbage or hung up ends its own connection, quietly."""


class _Handler(WSGIRequestHandler):
    #: A client that connects and then says nothing loses its connection after
    #: this many seconds; it only ever holds its own thread.
    timeout = 10

    def log_message(self, *args) -> None:
        pass


def tls_context(tls: dict) -> ssl.SSLContext:
    """The server's TLS context; a UserError naming the file it cannot use."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    for name, load in (("certfile", lambda: context.load_cert_chain(tls["certfile"],
                                                                   tls.get("keyfile"))),
                       ("client_cafile", lambda: tls.get("client_cafile") and
                        context.load_verify_locations(cafile=tls["client_cafile"]))):
        try:
            load()
        except (OSError, ValueError) as exc:
            what = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
            files = (tls["certfile"] + (f" / {tls['keyfile']}" if tls.get("keyfile") else "")
                     if name == "certfile" else tls["client_cafile"])
            raise UserError(f"[metrics] {name} {files}: cannot use it ({what}): "
                            f"give a PEM certificate and its key") from None
    if tls.get("client_cafile"):
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def serve(registry: CollectorRegistry, host: str, port: int, tls: dict | None = None):
    """Serve /metrics on host:port, with TLS and client certificates if ``tls``
    names them; returns the server, to shut it down.

    prometheus_client's ``start_http_server`` less one flaw: there the TLS
    handshake runs in the accepting thread, so one client that connects and
    sends nothing stops every scrape.  Here it runs in the connection's own
    thread (``do_handshake_on_connect=False``: OpenSSL shakes hands on the
    first read)."""
    tls = tls or {}
    context = tls_context(tls) if tls.get("certfile") else None
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("MetricsServer", (_Server,), {"address_family": family})
    server = make_server(host, port, make_wsgi_app(registry), server_class, handler_class=_Handler)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True,
                                            do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, name="phasewatchd-metrics", daemon=True).start()
    return server
