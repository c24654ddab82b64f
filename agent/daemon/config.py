"""phasewatchd's configuration: a TOML file, checked whole before it is used.

Every key is known, typed and range-checked; a mistake is refused with the
file, the key and the reason.  Command-line flags override the file.  See
``systemd/phasewatch.toml`` for every key with its default.
"""

from __future__ import annotations

import math
import os
import stat
import tomllib
from dataclasses import dataclass, replace

from ..core.batch import ID_RANGES
from ..core.params import DEFAULT_CPI_TOLERANCE, DEFAULT_THRESHOLD
from ..errors import UserError
from ..formats.metadata import MAX_INTERVAL_INSTRUCTIONS, MAX_INTERVAL_NS, MIN_INTERVAL_NS
from .publish import DEFAULT_HWM
from .targets import DEFAULT_GRACE_S, DEFAULT_MAX_PHASES

#: The largest config file read (the full example is under 4 KiB).
MAX_CONFIG_BYTES = 1 << 20
MAX_REPLAY_SPEED = 1e6
MIN_REPLAY_SPEED = 1e-3

SOURCES = ("auto", "kmod", "msr", "perf", "replay")
DETECTORS = ("vpf", "vpf-ip")


@dataclass(frozen=True)
class Config:
    source: str = "auto"
    trace: str | None = None
    replay_speed: float = 1.0
    msr_path: str = "/dev/cpu/{cpu}/msr"
    rate_hz: int = 1000
    powercap_root: str | None = None
    cpus: str | tuple[int, ...] = "all"
    pids: tuple[int, ...] = ()
    commands: tuple[str, ...] = ()
    cgroups: tuple[str, ...] = ()
    rescan_seconds: float = 10.0
    detector: str = "vpf"
    threshold: float = DEFAULT_THRESHOLD
    adaptive: bool = False
    cpi_tolerance: float = DEFAULT_CPI_TOLERANCE
    interval_instructions: int | None = None
    interval_ms: float | None = None
    interval_samples: int | None = None
    max_phases: int = DEFAULT_MAX_PHASES
    metrics: str | None = "127.0.0.1:9464"
    metrics_certfile: str | None = None
    metrics_keyfile: str | None = None
    metrics_client_cafile: str | None = None
    grace_seconds: float = DEFAULT_GRACE_S
    zmq: str | None = "tcp://127.0.0.1:5556"
    zmq_hwm: int = DEFAULT_HWM
    zmq_samples: bool = False
    curve_secret_key: str | None = None
    curve_authorized_keys: str | None = None
    record: str | None = None
    #: The detection settings the file or the command line set (over a replay's
    #: recorded ones).
    given: frozenset[str] = frozenset()

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        return split_address(self.metrics) if self.metrics else None

    @property
    def tls(self) -> dict:
        return {"certfile": self.metrics_certfile, "keyfile": self.metrics_keyfile,
                "client_cafile": self.metrics_client_cafile}

    @property
    def curve(self) -> dict | None:
        if not self.curve_secret_key:
            return None
        return {"secret_key": self.curve_secret_key, "authorized_keys": self.curve_authorized_keys}


def _positive(x) -> str | None:
    return None if x > 0 else "must be positive"


def _between(low, high, unit: str = ""):
    """A check that a number is finite and within [low, high]."""
    def check(x) -> str | None:
        if _finite(x) and low <= x <= high:
            return None
        return f"give a number from {_plain(low)} to {_plain(high)}{unit}"
    return check


def _plain(x) -> str:
    return f"{int(x):,}" if x == int(x) else f"{x:g}"


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _finite(x) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:       # an integer beyond any float
        return False


def _threshold(x) -> str | None:
    return None if 0 < x <= 1 else "give a distance in (0, 1]"


def replay_speed_problem(x) -> str | None:
    if x == 0 or (_finite(x) and MIN_REPLAY_SPEED <= x <= MAX_REPLAY_SPEED):
        return None
    return (f"give 0 (as fast as possible) or a speed from {_plain(MIN_REPLAY_SPEED)} "
            f"to {_plain(MAX_REPLAY_SPEED)} times real time")


def _one_of(choices):
    return lambda x: None if x in choices else f"must be one of {', '.join(choices)}"


def _cpus(x) -> str | None:
    top = ID_RANGES["cpu"][1]
    if x == "all" or (isinstance(x, list) and all(type(c) is int and 0 <= c <= top for c in x)):
        return None
    return f'give "all" or a list of CPU numbers (0 to {top})'


def _pids(x) -> str | None:
    top = ID_RANGES["tid"][1]
    return None if all(type(p) is int and 0 < p <= top for p in x) else \
        f"give pids from 1 to {top}"


def _strings(x) -> str | None:
    return None if all(isinstance(s, str) and s for s in x) else "give non-empty strings"


def _address(x) -> str | None:
    try:
        split_address(x)
    except ValueError as exc:
        return str(exc)
    return None


#: [table] key -> (Config field, types, check)
SCHEMA = {
    "source": {
        "kind": ("source", str, _one_of(SOURCES)),
        "trace": ("trace", str, None),
        "replay_speed": ("replay_speed", (int, float), replay_speed_problem),
        "msr_path": ("msr_path", str, None),
        "rate_hz": ("rate_hz", int, _between(1, 100_000, " Hz")),
        "powercap_root": ("powercap_root", str, None),
    },
    "targets": {
        "cpus": ("cpus", (str, list), _cpus),
        "pids": ("pids", list, _pids),
        "commands": ("commands", list, _strings),
        "cgroups": ("cgroups", list, _strings),
        "rescan_seconds": ("rescan_seconds", (int, float), _between(0.1, 86_400, " s")),
    },
    "detector": {
        "name": ("detector", str, _one_of(DETECTORS)),
        "threshold": ("threshold", (int, float), _threshold),
        "adaptive": ("adaptive", bool, None),
        "cpi_tolerance": ("cpi_tolerance", (int, float), _between(0, 10)),
        "interval_instructions": ("interval_instructions", int,
                                  _between(1, MAX_INTERVAL_INSTRUCTIONS)),
        "interval_ms": ("interval_ms", (int, float),
                        _between(MIN_INTERVAL_NS / 1e6, MAX_INTERVAL_NS / 1e6, " ms")),
        "interval_samples": ("interval_samples", int, _between(1, 10_000_000)),
        "max_phases": ("max_phases", int, _between(2, 100_000)),
    },
    "metrics": {
        "listen": ("metrics", str, _address),
        "certfile": ("metrics_certfile", str, None),
        "keyfile": ("metrics_keyfile", str, None),
        "client_cafile": ("metrics_client_cafile", str, None),
        "grace_seconds": ("grace_seconds", (int, float), _between(0, 10**7, " s")),
    },
    "zmq": {
        "endpoint": ("zmq", str, lambda x: None if "://" in x else
                     "give a ZeroMQ endpoint such as tcp://127.0.0.1:5556"),
        "hwm": ("zmq_hwm", int, _between(1, 10**7)),
        "samples": ("zmq_samples", bool, None),
        "curve_secret_key": ("curve_secret_key", str, None),
        "curve_authorized_keys": ("curve_authorized_keys", str, None),
    },
    "record": {
        "dir": ("record", str, None),
    },
}


def split_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("give ADDRESS:PORT, e.g. 127.0.0.1:9464")
    return host.strip("[]") or "127.0.0.1", int(port)


def load(path: str) -> Config:
    """The config in ``path``, checked; a UserError naming the key otherwise."""
    text = read_text(path)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise UserError(f"{path}: not a phasewatchd config (nested too deeply)") from None
    return from_dict(doc, path)


def read_text(path: str) -> str:
    """A regular file of at most MAX_CONFIG_BYTES, as UTF-8 text.  Opened
    without blocking, so a FIFO in its place is refused, not waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise UserError(f"cannot read config {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"cannot read config {path}: not a regular file: give a TOML file")
        try:
            data = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise UserError(f"cannot read config {path}: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise UserError(f"{path}: larger than a config may be ({MAX_CONFIG_BYTES:,} bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}): TOML files are UTF-8; "
                        f"save it as UTF-8") from None


def from_dict(doc: dict, path: str = "config") -> Config:
    values = {}
    for table, body in doc.items():
        if table not in SCHEMA:
            raise UserError(f"{path}: unknown table [{table}] "
                            f"(known: {', '.join(SCHEMA)})")
        if not isinstance(body, dict):
            raise UserError(f"{path}: {table} must be a table ([{table}])")
        for key, value in body.items():
            if key not in SCHEMA[table]:
                raise UserError(f"{path}: [{table}] unknown key {key!r} "
                                f"(known: {', '.join(SCHEMA[table])})")
            name, types, rule = SCHEMA[table][key]
            if not isinstance(value, types) or (isinstance(value, bool) and types in (int, (int, float))):
                raise UserError(f"{path}: [{table}] {key} = {_shown(value)}: wrong type")
            problem = rule(value) if rule else None
            if problem:
                raise UserError(f"{path}: [{table}] {key} = {_shown(value)}: {problem}")
            values[name] = tuple(value) if isinstance(value, list) else value
    given = frozenset(values) & set(DETECTION_FLAGS + INTERVAL_FLAGS)
    return check(replace(Config(), **values, given=given), path)


def check(config: Config, where: str = "config") -> Config:
    """Checks across keys, after the flags have been applied too."""
    if config.source == "replay" and not config.trace:
        raise UserError(f"{where}: [source] kind = \"replay\" needs trace = \"FILE\" "
                        f"(or --replay TRACE)")
    if sum(bool(getattr(config, name)) for name in INTERVAL_FLAGS) > 1:
        raise UserError(f"{where}: [detector] interval_instructions, interval_ms and "
                        f"interval_samples exclude each other: give one")
    if bool(config.metrics_certfile) != bool(config.metrics_keyfile):
        raise UserError(f"{where}: [metrics] certfile and keyfile go together")
    if config.curve_secret_key and not config.curve_authorized_keys:
        raise UserError(f"{where}: [zmq] curve_secret_key needs curve_authorized_keys "
                        f"(a directory of the clients' public keys)")
    return config


DETECTION_FLAGS = ("detector", "threshold", "adaptive", "cpi_tolerance")
INTERVAL_FLAGS = ("interval_instructions", "interval_ms", "interval_samples")


def detection_flags(args) -> dict:
    """The detection options given: each over the file's value, an interval
    length over the file's interval of any kind."""
    given = {name: getattr(args, name) for name in DETECTION_FLAGS + INTERVAL_FLAGS
             if getattr(args, name, None) is not None}
    changes = dict(given, given=frozenset(given))
    if given.keys() & set(INTERVAL_FLAGS):
        changes.update({name: given.get(name) for name in INTERVAL_FLAGS})
    return changes


def for_recording(config: Config, meta: dict) -> Config:
    """The settings to replay a trace with: those its recording used (its
    ``detection`` and ``interval`` metadata) where neither the file nor the
    command line sets them."""
    recorded = meta.get("detection") or {}
    changes = {name: recorded[name] for name in DETECTION_FLAGS
               if name in recorded and name not in config.given}
    return replace(config, **changes)


def with_flags(config: Config, args) -> Config:
    """The command-line flags over the file's values."""
    changes = {}
    if args.replay:
        changes.update(source="replay", trace=args.replay)
    if args.replay_speed is not None:
        changes["replay_speed"] = args.replay_speed
    if args.metrics:
        changes["metrics"] = args.metrics
    if args.zmq:
        changes["zmq"] = args.zmq
    if args.record:
        changes["record"] = args.record
    if args.zmq_samples:
        changes["zmq_samples"] = True
    if getattr(args, "powercap_root", None):
        changes["powercap_root"] = args.powercap_root
    flags = detection_flags(args)
    changes.update(flags, given=config.given | flags["given"])
    config = replace(config, **changes)
    for flag, value in (("--metrics", config.metrics),):
        if value and _address(value):
            raise UserError(f"{flag} {value}: {_address(value)}")
    problem = replay_speed_problem(config.replay_speed)
    if problem:
        raise UserError(f"--replay-speed {config.replay_speed}: {problem}")
    return check(config, "options")

