"""The ``lakesync`` command: run the embedded default, mint dev tokens, query and restore the lake, run the demo.

One module a family of subcommands, each adding its parsers (``add_parsers``): :mod:`~lakesync.cli.local` (local,
demo), :mod:`~lakesync.cli.keys` (token, rotate-key), :mod:`~lakesync.cli.data` (query, migrate),
:mod:`~lakesync.cli.recovery` (restore, rules test, explain).
"""

from __future__ import annotations

import argparse
import logging

from lakesync.cli import data, keys, local, recovery
from lakesync.cli.common import DEFAULT_DATA_DIR

__all__ = ["DEFAULT_DATA_DIR", "main"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``lakesync`` console script."""
    parser = argparse.ArgumentParser(prog="lakesync", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)
    for family in (local, keys, data, recovery):
        family.add_parsers(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    code: int = args.func(args)
    return code
