"""``phasewatch convert IN OUT``: write a raw CSV (or a trace) in the trace format."""

from __future__ import annotations

from ..console import warn
from ..errors import UserError
from ..formats.metadata import MAX_BASE_MHZ
from ..formats.outputs import Recording, check_outputs
from ..formats.trace import TraceWriter
from ..formats.tracefiles import open_trace
from .arguments import number


def add_arguments(parser) -> None:
    parser.add_argument("input", metavar="IN", help="a raw CSV (columns: docs/formats.md) or a trace")
    parser.add_argument("output", metavar="OUT", help="the trace to write, whatever its name")
    parser.add_argument("--base-mhz", type=number(float, 0.0, MAX_BASE_MHZ, low_open=True),
                        metavar="MHZ",
                        help="base frequency to record (default: the CSV's TSC rate)")


def run(args) -> int:
    check_outputs([Recording(args.output)], inputs=[Recording(args.input)])
    source = open_trace(args.input, base_mhz=args.base_mhz, warn=warn)
    meta = dict(source.metadata)
    if args.base_mhz:
        meta["base_freq_mhz"] = args.base_mhz
    try:
        with TraceWriter(args.output, meta, source.signals, inputs=[Recording(args.input)]) as writer:
            for batch in source.batches():
                writer.write(batch)
    finally:
        source.close()
    if writer.failure:
        raise UserError(writer.failure)
    print(f"{args.output}: {writer.rows_written:,} samples, signals {', '.join(writer.signals)}")
    return 0
