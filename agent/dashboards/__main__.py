"""Write the dashboards' JSON into a folder, or check that the folder is up to date."""

import argparse
import sys
from pathlib import Path

from . import rendered


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m phasewatch.dashboards",
                                     description=__doc__)
    parser.add_argument("folder", type=Path, help="where the dashboards' JSON files go")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file differs from what the code builds")
    args = parser.parse_args(argv)
    if args.check:
        stale = [name for name, text in rendered().items()
                 if not (args.folder / name).is_file()
                 or (args.folder / name).read_text() != text]
        for name in stale:
            print(f"{args.folder / name} is stale: run 'make dashboards' and commit it",
                  file=sys.stderr)
        return 1 if stale else 0
    try:
        args.folder.mkdir(parents=True, exist_ok=True)
        for name, text in rendered().items():
            (args.folder / name).write_text(text)
            print(args.folder / name)
    except OSError as error:
        print(f"cannot write the dashboards into {args.folder}: {error.strerror}; "
              "give a writable folder", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
