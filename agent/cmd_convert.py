"""``phasewatch convert IN OUT``: write a raw CSV (or a trace) in the trace format."""

from __future__ import annotations

import os

from .cmd_replay import warn
from .errors import UserError
from .trace import TraceWriter
from .tracefiles import open_trace


def add_arguments(parser) -> None:
    parser.add_argument("input", metavar="IN", help="a raw CSV (columns: docs/formats.md) or a trace")
    parser.add_argument("output", metavar="OUT", help="the trace to write, whatever its name")
    parser.add_argument("--base-mhz", type=float, metavar="MHZ",
                        help="base frequency to record (default: the CSV's TSC rate)")


def run(args) -> int:
    if os.path.abspath(args.input) == os.path.abspath(args.output):
        raise UserError(f"{args.output}: the output would overwrite the input")
    source = open_trace(args.input, base_mhz=args.base_mhz, warn=warn)
    meta = dict(source.metadata)
    if args.base_mhz:
        meta["base_freq_mhz"] = args.base_mhz
    writer = TraceWriter(args.output, meta, source.signals)
    try:
        for batch in source.batches():
            writer.write(batch)
    finally:
        writer.close()
        source.close()
    print(f"{args.output}: {writer.rows_written:,} samples, signals {', '.join(writer.signals)}")
    return 0
