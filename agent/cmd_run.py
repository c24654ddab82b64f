"""`phasewatch run` (being built)."""

from .errors import UserError


def add_arguments(parser):
    parser.add_argument("rest", nargs="*")


def run(args) -> int:
    raise UserError("'run' is not available in this build yet")
