"""`phasewatch probe`: which signals this host offers, from where, and why not."""

from __future__ import annotations

import argparse
import json
import sys

from ..collectors import msr
from ..collectors.probe import probe
from ..console import rich_console
from ..core import kernels
from ..core.batch import ID_RANGES
from .arguments import number


def add_arguments(parser):
    parser.add_argument("--json", action="store_true",
                        help="print the facts as one JSON object")
    parser.add_argument("--msr-path", default=msr.DEFAULT_PATH, metavar="TEMPLATE",
                        type=msr_template,
                        help="MSR device path, {cpu} replaced by the CPU number "
                             f"(default {msr.DEFAULT_PATH})")
    parser.add_argument("--cpu", type=number(int, 0, ID_RANGES["cpu"][1]), default=0,
                        help="CPU to probe (default 0)")


def msr_template(text: str) -> str:
    """A path with at most the field ``{cpu}``."""
    try:
        text.format(cpu=0)
    except (KeyError, IndexError, ValueError, AttributeError) as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a path template ({exc}): write the CPU number as {{cpu}}, "
            f"and any other brace as {{{{ or }}}}") from None
    return text


def run(args) -> int:
    result = probe(cpu=args.cpu, msr_path=args.msr_path)
    result["kernels"] = kernels.status()
    if args.json:
        json.dump(result, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    elif sys.stdout.isatty():
        print_rich(result)
    else:
        print_plain(result)
    return 0


def describe_host(host: dict) -> str:
    base = host["base_frequency_hz"]
    base_text = f"{base / 1e6:.0f} MHz ({host['base_frequency_from']})" if base else "unknown"
    if host.get("base_frequency_implausible"):
        base_text += " (implausible: above 10 GHz)"
    return (f"{host['model_name'] or host['vendor']} — model table: {host['cpu_model']}"
            f"{' (virtual machine)' if host['virtual'] else ''}; base frequency {base_text}; "
            f"perf_event_paranoid={host['perf_event_paranoid']}")


def format_value(row: dict) -> str:
    value = row["value"]
    if row.get("implausible"):
        return f"implausible: {row['implausible']}"
    if value is None:
        return ""
    if row["key"] == "voltage":
        return f"{value:.4f} V"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return f"{value} {row['unit'] or ''}".strip()


def source_lines(result: dict) -> list[str]:
    """The registry's entries, as ``run --source`` would see them, and how the
    pipeline's kernels run."""
    lines = [f"sources (run --source auto takes {result['auto'] or 'none'}):"]
    for offer in result["sources"]:
        if offer["available"]:
            lines.append(f"  yes  {offer['name']:<9} {', '.join(offer['columns'])} ({offer['detail']})")
        else:
            lines.append(f"  no   {offer['name']:<9} {offer['reason']}")
    if result.get("register_rate"):
        lines.append(f"register sampler: {result['register_rate']['said']}")
    return lines + [f"kernels: {result['kernels']}"]


def print_plain(result: dict) -> None:
    print(describe_host(result["host"]))
    for row in result["signals"]:
        if row["available"]:
            detail = f"{row['source']}, {row['rate']}"
            value = format_value(row)
            print(f"  yes  {row['signal']:<36} {detail}{'; ' + value if value else ''}")
        else:
            print(f"  no   {row['signal']:<36} {row['reason']}")
    print("\n".join(source_lines(result)))


def print_rich(result: dict) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=describe_host(result["host"]), title_justify="left")
    for column in ("signal", "available", "source / reason", "rate", "value"):
        table.add_column(column)
    for row in result["signals"]:
        ok = row["available"]
        table.add_row(row["signal"], Text("yes", "green") if ok else Text("no", "red"),
                      row["source"] if ok else row["reason"], row["rate"] or "",
                      format_value(row))
    console = rich_console()
    console.print(table)
    for line in source_lines(result):
        console.print(line)
