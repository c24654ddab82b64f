"""``phasewatch run -- CMD``: start a command, watch it, and tell its phases.

CMD is started paused before exec (pinned to one CPU unless ``--no-pin``, while
it runs one thread at a time: :mod:`phasewatch.live.pinning`), or a running
process is attached to with ``--pid`` (:mod:`phasewatch.live.attach`); the
source ``--source`` names is opened for it from the registry of sources
(:mod:`phasewatch.collectors.registry`: perf sampling events attached with
enable-on-exec and inherited by its threads and children, with the MSR
sampler's readings of its CPU joined on where the host has MSRs), and then it
runs.  Samples go through the same
pipeline, with the same parameters, as ``phasewatch replay`` would use on the
recorded trace, so a recording replays to the same phases.

Where the host counts no retired instructions (no hardware PMU), intervals end
on time instead; where it has no voltage or productive frequency (no MSRs),
the ``vpf`` detector gives way to ``vpf-ip``.  Both are said once at start,
and recorded in the trace, so that a replay takes them by default.

stdout stays CMD's: the summary goes to stderr, or to ``--json FILE``.  The
watch itself is :mod:`phasewatch.live.watch`; this module turns the options
into settings and sinks (:data:`OPTION_SINKS`), and prints what it found.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import TYPE_CHECKING

from ..collectors import msr
from ..collectors.perf_event import may_sample_kernel
from ..collectors.registry import CHOICES, open_source
from ..console import rich_console, warn
from ..core.batch import ID_RANGES
from ..core.detectors import SAMPLE_DETECTORS
from ..core.settings import DetectionSettings
from ..errors import UserError
from ..formats.outputs import Database, Recording, check_folder, check_outputs, open_output
from ..formats.sidetable import check_side_table_output
from ..live.attach import Attached
from ..live.child import Child
from ..live.command import resolve_command
from ..live.relay import TerminalRelay, wanted as relay_wanted
from ..live.watch import Watch, WatchOptions
from .arguments import add_detector_arguments, number, settings_of

if TYPE_CHECKING:
    from ..live.watch import WatchResult

SAMPLE_RATE_HZ = 1000
#: perf's own default ceiling (kernel.perf_event_max_sample_rate).
MAX_RATE_HZ = 100_000
#: With --on-change: the samples read every this many, or after this many ms at the latest.
ON_CHANGE_WAKEUP = 10
ON_CHANGE_POLL_MS = 100
#: Width of the table when stderr is a file or pipe and COLUMNS is not set (a
#: terminal's own width otherwise).
PIPE_WIDTH = 120


def add_arguments(parser) -> None:
    parser.add_argument("--cpu", type=number(int, 0, ID_RANGES["cpu"][1]), metavar="N",
                        help="pin CMD to CPU N (default: the least loaded CPU)")
    parser.add_argument("--no-pin", action="store_true", help="let CMD run on any CPU")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--kernel", action="store_true",
                      help="sample the kernel's code run for CMD too, or fail saying why "
                           "(needs root, CAP_PERFMON, or perf_event_paranoid 1 or less); by "
                           "default it is sampled where allowed, as perf record does")
    mode.add_argument("--user-only", action="store_true",
                      help="sample user mode only, even where kernel mode may be sampled")
    parser.add_argument("-p", "--pid", type=number(int, 1, ID_RANGES["tid"][1]), metavar="PID",
                        help="watch the running process PID (and its threads and new children) "
                             "instead of starting CMD, until it ends or Ctrl-C, as perf's -p")
    parser.add_argument("--source", choices=CHOICES, default="auto",
                        help="where samples come from: the kernel module, the MSRs (with perf "
                             "for IPs), or perf alone; auto takes the first of these that "
                             "'phasewatch probe' finds (default auto)")
    parser.add_argument("-F", "--freq", type=number(int, 1, MAX_RATE_HZ), default=SAMPLE_RATE_HZ,
                        metavar="HZ", help=f"samples per second of CMD's CPU time, as perf's -F "
                                           f"(default {SAMPLE_RATE_HZ}, at most {MAX_RATE_HZ})")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no status line, warnings or phase table: only errors (and "
                             "what --json, --output, --record and --report write)")
    parser.add_argument("--msr-path", default=msr.DEFAULT_PATH, metavar="TEMPLATE",
                        help="MSR device path, {cpu} replaced by the CPU number "
                             f"(default {msr.DEFAULT_PATH})")
    add_detector_arguments(parser, names=SAMPLE_DETECTORS, default="")
    parser.add_argument("--catalog", metavar="FILE",
                        help="the phase catalogue: known phases keep their ids and names from "
                             "run to run (default $XDG_STATE_HOME/phasewatch/catalog.sqlite)")
    parser.add_argument("--no-catalog", action="store_true",
                        help="neither read nor write the phase catalogue: ids in order of "
                             "appearance, as in a replay")
    parser.add_argument("--record", metavar="TRACE",
                        help="also write the raw samples to TRACE, for 'phasewatch replay'")
    parser.add_argument("--json", nargs="?", const="-", metavar="FILE",
                        help="the summary as JSON instead of the phase table, to FILE "
                             "or, without FILE, to stderr (stdout stays the command's)")
    parser.add_argument("--pprof", metavar="FILE",
                        help="also write the phases' samples to FILE as a pprof profile "
                             "(labels phase, interval, thread, cpu)")
    parser.add_argument("--report", metavar="DIR",
                        help="also draw the phases into DIR (as 'phasewatch report' does)")
    parser.add_argument("--on-change", metavar="CMD",
                        help="run CMD (with /bin/sh -c) when a change of phase is predicted "
                             "within --on-change-within intervals, once per run of a phase, "
                             "the prediction in its environment (PHASEWATCH_PREDICTED_NEXT, "
                             "PHASEWATCH_PREDICTED_AFTER_CHANGE, ...: docs/prediction.md)")
    parser.add_argument("--on-change-within", type=number(int, 1, 1000), default=1, metavar="N",
                        help="intervals ahead that a predicted change fires --on-change "
                             "(default 1: the next interval)")
    parser.add_argument("--powercap-root", metavar="DIR",
                        help="the RAPL energy counters' folder, for each phase's joules "
                             "(default /sys/class/powercap, used where it is readable)")
    parser.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                        help="the command to run and watch")


def run(args) -> int:
    if args.pid is not None:
        return attach(args)
    argv = command_of(args)
    settings = check_arguments(args, resolve_command(argv[0]))
    relay = TerminalRelay() if relay_wanted() and not args.quiet else None
    with Child.start(argv, cpu=args.cpu, pin=not args.no_pin,
                     stdio=relay.slaves if relay else None, adopt_orphans=True) as child:
        if relay:
            relay.started()
        source = open_source(args.source, pid=child.pid,
                             cpus=[child.cpu] if child.cpu is not None else None,
                             msr_path=args.msr_path, rate_hz=args.freq,
                             enable_on_exec=True, include_kernel=kernel_mode(args), task_records=True,
                             **latency_options(args))
        try:
            return watch(args, settings, child, source, relay)
        finally:
            if child.returncode is None:
                child.stop(signal.SIGKILL, grace=0)


def attach(args) -> int:
    """``run --pid PID``: watch a running process, started by someone else."""
    if command_of(args, required=False):
        raise UserError("give --pid or a command after '--', not both")
    if args.cpu is not None:
        raise UserError("--cpu pins a command run starts: an attached process is not moved")
    target = Attached(args.pid)
    settings = check_arguments(args, target.path)
    source = open_source(args.source, pid=target.pid, cpus=None, msr_path=args.msr_path,
                         rate_hz=args.freq, enable_on_exec=False, include_kernel=kernel_mode(args),
                         task_records=True, **latency_options(args))
    return watch(args, settings, target, source)


def kernel_mode(args) -> bool:
    """Whether kernel mode is sampled: as perf record decides, where this user
    may (root, CAP_PERFMON, perf_event_paranoid 1 or less), unless --user-only;
    --kernel asks for it, and the source says why not where it is refused."""
    if args.kernel or args.user_only:
        return args.kernel
    return may_sample_kernel()


def latency_options(args) -> dict:
    """With --on-change, samples are read every :data:`ON_CHANGE_WAKEUP`
    samples rather than about once a second: a prediction is of use only
    while the change is still ahead (the price: more wake-ups of the agent)."""
    return {"wakeup": ON_CHANGE_WAKEUP, "poll_ms": ON_CHANGE_POLL_MS} if args.on_change else {}


def command_of(args, required: bool = True) -> list[str]:
    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv and required:
        raise UserError("no command given: put it after '--', e.g. phasewatch run -- ./prog ARGS "
                        "(or attach to a running process with --pid PID)")
    return argv


def check_arguments(args, program: str | None) -> DetectionSettings:
    """Reject bad options and outputs that would destroy a file (``program``,
    the watched executable, among them) before anything is started or
    written; the detection settings the options give."""
    if args.cpu is not None and args.no_pin:
        raise UserError("--cpu and --no-pin contradict each other: give one of them")
    settings = settings_of(args)
    msr.device_path(args.msr_path, 0)
    args.program = program
    if args.on_change is not None and not args.on_change.strip():
        raise UserError("--on-change: give a command to run, e.g. --on-change 'echo "
                        "$PHASEWATCH_PREDICTED_AFTER_CHANGE'")
    if args.catalog and args.no_catalog:
        raise UserError("--catalog and --no-catalog contradict each other: give one of them")
    args.catalog = catalog_path(args)
    record = Recording(args.record) if args.record else None
    catalog = Database(args.catalog) if args.catalog else None
    outputs = [record, args.output, json_file(args), args.pprof, catalog]
    report = []
    if args.report:
        from ..report.folder import check_report_dir, report_files
        check_folder(args.report, outputs, inputs=[args.program])
        report = report_files(args.report)
    check_outputs(outputs + report, inputs=[args.program], folders=[args.report or ""])
    if args.report:
        check_report_dir(args.report)       # made once nothing else is refused
    if args.powercap_root:
        from ..live.phase_energy import EnergyMeter
        EnergyMeter.open(args.powercap_root)
    if args.record:
        check_side_table_output(args.record, inputs=[args.program, args.output])
    return settings


def catalog_path(args) -> str | None:
    """The catalogue file: the one given (refused if it cannot be one), else
    the default, its folder made, or none (said once) where that cannot be."""
    from ..formats.catalog import check_path, default_path
    if args.no_catalog:
        return None
    if args.catalog:
        check_path(args.catalog)
        return args.catalog
    path = default_path()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        check_path(str(path))
    except (OSError, UserError) as exc:
        if not args.quiet:
            warn(f"no phase catalogue: {getattr(exc, 'strerror', None) or exc} at {path} "
                 f"(give --catalog FILE, or --no-catalog)")
        return None
    return str(path)


def watch(args, settings: DetectionSettings, child, source,
          relay: TerminalRelay | None = None) -> int:
    said: list[str] = []

    def say(message: str) -> None:
        """A warning, kept for --json; on stderr unless the JSON goes there."""
        said.append(message)
        if not args.quiet and args.json != "-":
            warn(message)
    options = WatchOptions(settings, say, program=args.program, record=args.record,
                           catalog=args.catalog,
                           sinks=lambda w: [sink for option, make in OPTION_SINKS
                                            if getattr(args, option) for sink in make(args, w)])
    # The settings are fitted to the signals (or refused) before any output opens.
    watching = Watch(child, source, options, relay)
    options.opened = [results_sink(args)] if args.output else []
    options.energy = phase_energy(args)         # reading before CMD's first sample
    result = watching.run()
    result.info["warnings"] = said
    report(args, result)
    if options.energy is not None and result.info["trace"]:
        record_energy(args.record, options.energy)
    if result.failures:
        raise UserError("; ".join(result.failures))
    return result.info["exit_status"]


# -- the sinks the options add ------------------------------------------------

def results_sink(args):
    from ..formats.results import ResultsSink
    return ResultsSink.open(args.output, inputs=[args.program])


def profile_sinks(args, watch: Watch) -> list:
    """``--pprof FILE``: the phases' samples, written when the run ends."""
    from ..live.phase_profile import PhaseProfile, ProfileFile, period_ns_of
    energy = watch.options.energy

    def symbolizer():
        watch.symbolizer.snapshot()
        return watch.tree
    return [PhaseProfile(period_ns_of(watch.source.metadata), ProfileFile(
        args.pprof, symbolizer,
        energy_uj=lambda profile: energy.per_interval_uj() if energy else None,
        realtime_offset_ns=watch.meta["sampling"]["realtime_offset_ns"],
        comments=[" ".join(args.argv)], inputs=[args.program], names=watch.phase_names))]


def figure_sinks(args, watch: Watch) -> list:
    """``--report DIR``: the figure's recorder, what labels its code-signature
    rows, and the folder drawn when the run ends."""
    from ..report.code_entries import CodeEntries
    from ..report.figure import FigureRecorder
    from ..report.folder import ReportFolder
    recorder = FigureRecorder.of(watch.pipeline)
    entries = CodeEntries(watch.pipeline, watch.tree)
    recorder.name_entries = entries.names

    def notes() -> tuple[str, list[str]]:
        child, seconds = watch.child, (watch.child.ended_ns - watch.child.started_ns) / 1e9
        return (f"phases of {os.path.basename(child.argv[0])}",
                [f"{' '.join(child.argv)}: {seconds:.1f} s, {recorder.n_intervals} intervals "
                 f"{watch.settings.interval.describe()}, detector {watch.settings.detector}"])
    return [entries, recorder, ReportFolder(args.report, recorder, watch.functions, notes, warn)]


def change_hook_sinks(args, watch: Watch) -> list:
    """``--on-change CMD``: CMD run when a change is predicted."""
    from ..live.on_change import ChangeHook
    return [ChangeHook(args.on_change, args.on_change_within, watch.child.pid, warn)]


#: Option -> the sinks it adds, made once the pipeline exists.
OPTION_SINKS = (("pprof", profile_sinks), ("report", figure_sinks),
                ("on_change", change_hook_sinks))


def phase_energy(args):
    """Each phase's joules where RAPL is readable (always tried at the default root)."""
    from ..collectors.powercap import DEFAULT_ROOT
    from ..live.phase_energy import EnergyMeter, PhaseEnergy
    try:
        meter = EnergyMeter.open(args.powercap_root or DEFAULT_ROOT)
    except UserError:
        if args.powercap_root:
            raise
        return None
    return PhaseEnergy(meter.start())


def record_energy(trace: str, energy) -> None:
    """Each interval's energy beside the trace, for 'phasewatch diff'."""
    from ..formats.energytable import write_energy_table
    failure = write_energy_table(trace, energy.intervals)
    if failure:
        raise UserError(failure)


# -- the summary ----------------------------------------------------------------

def json_file(args) -> str | None:
    """The file ``--json FILE`` names; None for none or for stderr."""
    return args.json if args.json not in (None, "-") else None


def report(args, result: WatchResult) -> None:
    """The summary, on stderr or in ``--json FILE``: stdout is the command's."""
    if args.json:
        from ..report.run_summary import run_json
        write_json(args, json.dumps(run_json(result), indent=2) + "\n")
        return
    if args.quiet:
        return
    from ..report.run_summary import run_lines
    out = rich_console(sys.stderr)
    if not out.is_terminal and "COLUMNS" not in os.environ:
        out.width = max(out.width, PIPE_WIDTH)
    for line in run_lines(result, out.width):
        out.print(line)


def write_json(args, text: str) -> None:
    path = json_file(args)
    if path is None:
        sys.stderr.write(text)
        return
    out = open_output(path, inputs=[args.program])
    out.stream.write(text)
    out.close()
    if out.failure:
        raise UserError(out.failure)
