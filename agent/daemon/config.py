"""phasewatchd's configuration: a TOML file, checked whole before it is used.

The file's schema is a set of msgspec structs, one per table: every key is
known, typed and range-checked (the detection settings' ranges are
:data:`phasewatch.core.settings.LIMITS`, the detectors the registry's), and
a mistake is refused with the file, the key and the reason.  Command-line
flags override the file.  See ``systemd/phasewatch.toml`` for every key
with its default.
"""

from __future__ import annotations

import math
import os
import re
import stat
import tomllib
import typing
from dataclasses import dataclass, replace
from typing import Annotated, Literal

import msgspec
from msgspec import Meta, Struct

from ..collectors.registry import CHOICES
from ..core.batch import ID_RANGES
from ..core.detectors import SAMPLE_DETECTORS
from ..core.params import DEFAULT_CPI_TOLERANCE, DEFAULT_THRESHOLD
from ..core.settings import INTERVAL_SETTINGS, LIMITS, DetectionSettings, Limit
from ..errors import UserError
from ..formats.schema import bounded
from .publish import DEFAULT_HWM
from .phase_ids import RETIRED_KEEP_S
from .targets import DEFAULT_GRACE_S, DEFAULT_MAX_PHASES

#: The largest config file read (the full example is under 4 KiB).
MAX_CONFIG_BYTES = 1 << 20
MAX_REPLAY_SPEED = 1e6
MIN_REPLAY_SPEED = 1e-3

#: The live sources of the registry, and a recorded trace.
SOURCES = CHOICES + ("replay",)
#: The settings of detection the file and the flags may give.
DETECTION = ("detector", "threshold", "adaptive", "cpi_tolerance") + INTERVAL_SETTINGS

_CPU, _TID = ID_RANGES["cpu"][1], ID_RANGES["tid"][1]


#: Text the file may give: no path, endpoint or name holds a NUL character
#: (TOML's \u0000), which the system calls that take them refuse.
Text = Annotated[str, Meta(pattern=r"\A[^\x00]*\Z",
                           description="give text without a NUL character (\\u0000)")]
Name = Annotated[str, Meta(min_length=1, pattern=r"\A[^\x00]*\Z",
                           description="give a non-empty text without a NUL character")]


def _range(low, high, unit: str = "") -> Meta:
    return bounded(Limit(float, low, high), unit)


class _Table(Struct, forbid_unknown_fields=True, kw_only=True):
    """A table of the file: unknown keys are refused."""


class SourceTable(_Table):
    kind: Literal[SOURCES] = "auto"
    trace: Text | None = None
    replay_speed: float = 1.0
    msr_path: Text = "/dev/cpu/{cpu}/msr"
    rate_hz: Annotated[int, _range(1, 100_000, " Hz")] = 1000
    powercap_root: Text | None = None


class TargetsTable(_Table):
    cpus: Annotated[Literal["all"] | list[Annotated[int, Meta(ge=0, le=_CPU)]],
                    Meta(description=f'give "all" or a list of CPU numbers (0 to {_CPU})')] = "all"
    pids: Annotated[list[Annotated[int, Meta(ge=1, le=_TID)]],
                    Meta(description=f"give pids from 1 to {_TID}")] = []
    commands: Annotated[list[Name],
                        Meta(description="give non-empty strings without NUL characters")] = []
    cgroups: Annotated[list[Name],
                       Meta(description="give non-empty strings without NUL characters")] = []
    rescan_seconds: Annotated[float, _range(0.1, 86_400, " s")] = 10.0


class DetectorTable(_Table):
    name: Literal[SAMPLE_DETECTORS] | None = None
    threshold: Annotated[float, bounded(LIMITS["threshold"])] | None = None
    adaptive: bool | None = None
    cpi_tolerance: Annotated[float, bounded(LIMITS["cpi_tolerance"])] | None = None
    interval_instructions: Annotated[int, bounded(LIMITS["interval_instructions"])] | None = None
    interval_ms: Annotated[float, bounded(LIMITS["interval_ms"], " ms")] | None = None
    interval_samples: Annotated[int, bounded(LIMITS["interval_samples"])] | None = None
    max_phases: Annotated[int, bounded(LIMITS["max_phases"])] = DEFAULT_MAX_PHASES


class MetricsTable(_Table):
    listen: Text | None = "127.0.0.1:9464"
    certfile: Text | None = None
    keyfile: Text | None = None
    client_cafile: Text | None = None
    grace_seconds: Annotated[float, _range(0, 10**7, " s")] = DEFAULT_GRACE_S
    retired_seconds: Annotated[float, _range(0, 10**7, " s")] = RETIRED_KEEP_S


class CatalogTable(_Table):
    enabled: bool = True
    path: Name | None = None


class ZmqTable(_Table):
    endpoint: Text | None = "tcp://127.0.0.1:5556"
    hwm: Annotated[int, _range(1, 10**7)] = DEFAULT_HWM
    samples: bool = False
    curve_secret_key: Text | None = None
    curve_authorized_keys: Text | None = None


class RecordTable(_Table):
    dir: Text | None = None


class ConfigFile(_Table):
    source: SourceTable = msgspec.field(default_factory=SourceTable)
    targets: TargetsTable = msgspec.field(default_factory=TargetsTable)
    detector: DetectorTable = msgspec.field(default_factory=DetectorTable)
    metrics: MetricsTable = msgspec.field(default_factory=MetricsTable)
    zmq: ZmqTable = msgspec.field(default_factory=ZmqTable)
    record: RecordTable = msgspec.field(default_factory=RecordTable)
    catalog: CatalogTable = msgspec.field(default_factory=CatalogTable)


#: Config field -> (table, key) of the file.
KEYS = {
    "source": ("source", "kind"), "trace": ("source", "trace"),
    "replay_speed": ("source", "replay_speed"), "msr_path": ("source", "msr_path"),
    "rate_hz": ("source", "rate_hz"), "powercap_root": ("source", "powercap_root"),
    "cpus": ("targets", "cpus"), "pids": ("targets", "pids"),
    "commands": ("targets", "commands"), "cgroups": ("targets", "cgroups"),
    "rescan_seconds": ("targets", "rescan_seconds"),
    "detector": ("detector", "name"), "threshold": ("detector", "threshold"),
    "adaptive": ("detector", "adaptive"), "cpi_tolerance": ("detector", "cpi_tolerance"),
    "interval_instructions": ("detector", "interval_instructions"),
    "interval_ms": ("detector", "interval_ms"), "interval_samples": ("detector", "interval_samples"),
    "max_phases": ("detector", "max_phases"),
    "metrics": ("metrics", "listen"), "metrics_certfile": ("metrics", "certfile"),
    "metrics_keyfile": ("metrics", "keyfile"), "metrics_client_cafile": ("metrics", "client_cafile"),
    "grace_seconds": ("metrics", "grace_seconds"),
    "retired_seconds": ("metrics", "retired_seconds"),
    "zmq": ("zmq", "endpoint"), "zmq_hwm": ("zmq", "hwm"), "zmq_samples": ("zmq", "samples"),
    "curve_secret_key": ("zmq", "curve_secret_key"),
    "curve_authorized_keys": ("zmq", "curve_authorized_keys"),
    "record": ("record", "dir"),
    "catalog": ("catalog", "enabled"), "catalog_path": ("catalog", "path"),
}
TABLES = {name: typing.get_type_hints(ConfigFile)[name] for name in ConfigFile.__struct_fields__}


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
    retired_seconds: float = RETIRED_KEEP_S
    zmq: str | None = "tcp://127.0.0.1:5556"
    zmq_hwm: int = DEFAULT_HWM
    zmq_samples: bool = False
    curve_secret_key: str | None = None
    curve_authorized_keys: str | None = None
    record: str | None = None
    catalog: bool = True
    catalog_path: str | None = None     # None: in the state directory
    #: The detection settings the file or the command line set (over a replay's
    #: recorded ones).
    given: frozenset[str] = frozenset()

    def settings(self, recorded: dict | None = None) -> DetectionSettings:
        """The detection settings: those given, over ``recorded`` (a replayed
        trace's ``detection`` metadata), over the defaults."""
        return DetectionSettings.given({name: getattr(self, name) for name in self.given},
                                       recorded, DetectionSettings(max_phases=self.max_phases))

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
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UserError(f"cannot read config {path}: not a regular file: give a TOML file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise UserError(f"cannot read config {path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise UserError(f"{path}: larger than a config may be ({MAX_CONFIG_BYTES:,} bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}): TOML files are UTF-8; "
                        f"save it as UTF-8") from None


def from_dict(doc: dict, path: str = "config") -> Config:
    try:
        tables = msgspec.convert(doc, ConfigFile, strict=True)
    except msgspec.ValidationError as exc:
        raise UserError(f"{path}: {_mistake(doc, str(exc))}") from None
    values = {name: getattr(getattr(tables, table), key) for name, (table, key) in KEYS.items()}
    values = {name: tuple(value) if isinstance(value, list) else value
              for name, value in values.items()}
    given = frozenset(name for name in DETECTION if values[name] is not None)
    values["detector"] = values["detector"] or "vpf"
    for name in ("threshold", "adaptive", "cpi_tolerance"):
        if values[name] is None:
            values[name] = getattr(Config, name)
    for name, problem in _rules(values):
        table, key = KEYS[name]
        raise UserError(f"{path}: [{table}] {key} = {_shown(values[name])}: {problem}")
    return check(Config(**values, given=given), path)


def _rules(values: dict):
    """(field, problem) of the values whose type cannot say what is wrong."""
    problem = replay_speed_problem(values["replay_speed"])
    if problem:
        yield "replay_speed", problem
    if values["metrics"] is not None and _address(values["metrics"]):
        yield "metrics", _address(values["metrics"])
    if values["zmq"] is not None and "://" not in values["zmq"]:
        yield "zmq", "give a ZeroMQ endpoint such as tcp://127.0.0.1:5556"


def _mistake(doc: dict, error: str) -> str:
    """msgspec's ``message - at `$.table.key[i]``` as ``[table] key = value: problem``."""
    message, _, where = error.rpartition(" - at `")
    parts = re.findall(r"\.(\w+)", where) if message else []
    message = message or error
    unknown = re.match(r"Object contains unknown field `(.*)`", message)
    if not parts:
        return (f"unknown table [{unknown.group(1)}] (known: {', '.join(TABLES)})" if unknown
                else message)
    table = parts[0]
    if len(parts) == 1:
        if unknown:
            known = ", ".join(TABLES[table].__struct_fields__)
            return f"[{table}] unknown key {unknown.group(1)!r} (known: {known})"
        return f"{table} must be a table ([{table}])"
    key = parts[1]
    value = doc[table][key]
    in_list = "[" in where
    return f"[{table}] {key} = {_shown(value)}: {_problem(TABLES[table], key, message, in_list)}"


def _problem(table: type, key: str, message: str, in_list: bool) -> str:
    """What to say of a value msgspec refused: "wrong type" where the value
    itself has the wrong type, else what the key's schema advises."""
    if re.match(r"Expected `[^`]*`, got `", message) and not in_list:
        return "wrong type"
    hint = typing.get_type_hints(table, include_extras=True)[key]
    for meta in _metas(hint):
        if meta.description:
            return meta.description
    choices = _choices(_strip(hint))
    return f"must be one of {', '.join(choices)}" if choices else message


def _choices(hint) -> list[str]:
    """The strings a Literal (perhaps within a union) allows."""
    if typing.get_origin(hint) is Literal:
        return [a for a in typing.get_args(hint) if isinstance(a, str)]
    return [c for arg in typing.get_args(hint) for c in _choices(arg)]


def _metas(hint) -> list[Meta]:
    """The msgspec constraints on a field's type, outermost first (an
    optional field's are inside its union)."""
    found = [m for m in getattr(hint, "__metadata__", ()) if isinstance(m, Meta)]
    for arg in typing.get_args(_strip(hint)):
        found += [m for m in getattr(arg, "__metadata__", ()) if isinstance(m, Meta)]
    return found


def _strip(hint):
    return typing.get_args(hint)[0] if getattr(hint, "__metadata__", None) else hint


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _finite(x) -> bool:
    try:
        return math.isfinite(x)
    except OverflowError:       # an integer beyond any float
        return False


def replay_speed_problem(x) -> str | None:
    if x == 0 or (_finite(x) and MIN_REPLAY_SPEED <= x <= MAX_REPLAY_SPEED):
        return None
    return (f"give 0 (as fast as possible) or a speed from {MIN_REPLAY_SPEED:g} "
            f"to {MAX_REPLAY_SPEED:,.0f} times real time")


def _address(x) -> str | None:
    try:
        split_address(x)
    except ValueError as exc:
        return str(exc)
    return None


def check(config: Config, where: str = "config") -> Config:
    """Checks across keys, after the flags have been applied too."""
    if config.source == "replay" and not config.trace:
        raise UserError(f"{where}: [source] kind = \"replay\" needs trace = \"FILE\" "
                        f"(or --replay TRACE)")
    if sum(bool(getattr(config, name)) for name in INTERVAL_SETTINGS) > 1:
        raise UserError(f"{where}: [detector] interval_instructions, interval_ms and "
                        f"interval_samples exclude each other: give one")
    if bool(config.metrics_certfile) != bool(config.metrics_keyfile):
        raise UserError(f"{where}: [metrics] certfile and keyfile go together")
    if config.curve_secret_key and not config.curve_authorized_keys:
        raise UserError(f"{where}: [zmq] curve_secret_key needs curve_authorized_keys "
                        f"(a directory of the clients' public keys)")
    return config


def detection_flags(args) -> dict:
    """The detection options given: each over the file's value, an interval
    length over the file's interval of any kind."""
    given = {name: getattr(args, name) for name in DETECTION if getattr(args, name, None) is not None}
    changes = dict(given, given=frozenset(given))
    if given.keys() & set(INTERVAL_SETTINGS):
        changes.update({name: given.get(name) for name in INTERVAL_SETTINGS})
    return changes


def zmq_setting(args) -> str:
    """Where the events endpoint was given, for a message about it."""
    return "--zmq" if getattr(args, "zmq", None) else "[zmq] endpoint ="


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
    if getattr(args, "catalog", None):
        changes.update(catalog=True, catalog_path=args.catalog)
    if getattr(args, "no_catalog", False):
        changes["catalog"] = False
    flags = detection_flags(args)
    changes.update(flags, given=config.given | flags["given"])
    config = replace(config, **changes)
    if config.metrics and _address(config.metrics):
        raise UserError(f"--metrics {config.metrics}: {_address(config.metrics)}")
    problem = replay_speed_problem(config.replay_speed)
    if problem:
        raise UserError(f"--replay-speed {config.replay_speed}: {problem}")
    return check(config, "options")

