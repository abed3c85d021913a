"""Job options of the Glue entry scripts (``glue_jobs/*.py``): one parser, on Glue and locally.

A job run passes its parameters as ``--name value`` (Glue adds its own, such as ``--JOB_NAME``). Each job declares
the names it knows (``JOB_OPTIONS`` of its module) and gets back a ``{name: value}`` dict of those given;
``<Job>Args.parse`` then applies defaults and checks what is required.

Rules, both branches: only the declared names are returned, and only those present (absent ones are missing from the
dict, never ``None``); everything else on the command line is ignored; a name written with hyphens is the same
option (``--catalog-uri`` is ``--catalog_uri``); a repeated option keeps its last value; names are never abbreviated.
On Glue, ``awsglue.utils.getResolvedOptions`` reads the present names; elsewhere :mod:`argparse` does.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Literal

from lakesync.aws.tables import TableNames

__all__ = ["buffer_tables", "catalog_kind", "flag", "resolved_options"]


def catalog_kind(options: Mapping[str, str]) -> Literal["local", "glue"]:
    """``--catalog``: ``glue`` (the default) or ``local``.

    Raises:
        ValueError: any other value.
    """
    kind = options.get("catalog", "glue")
    if kind not in ("local", "glue"):
        raise ValueError(f"--catalog must be local or glue, got {kind!r}")
    return "local" if kind == "local" else "glue"


def flag(options: Mapping[str, str], name: str, *, default: bool) -> bool:
    """A ``true``/``false`` option (any case), ``default`` when absent.

    Raises:
        ValueError: any other value.
    """
    value = options.get(name, "true" if default else "false").lower()
    if value not in ("true", "false"):
        raise ValueError(f"--{name} must be true or false, got {value!r}")
    return value == "true"


def buffer_tables(options: Mapping[str, str]) -> TableNames | None:
    """The DynamoDB tables: ``--tables`` (JSON ``{"deltas": name, ...}``, every logical table) or ``--table_prefix``
    (``{prefix}-deltas`` ...); ``None`` when neither is given."""
    if "tables" in options:
        return TableNames(**json.loads(options["tables"]))
    if "table_prefix" in options:
        return TableNames.with_prefix(options["table_prefix"])
    return None


def resolved_options(names: Sequence[str], argv: Sequence[str] | None = None) -> dict[str, str]:
    """The job options among ``names`` that ``argv`` gives.

    Args:
        names: The option names the job knows (``snake_case``, without ``--``).
        argv: The arguments after the program name (default ``sys.argv[1:]``).

    Returns:
        ``{name: value}`` for each known option present.

    Raises:
        ValueError: a known option is given without a value.
    """
    args = _canonical(names, list(sys.argv[1:] if argv is None else argv))
    try:
        from awsglue.utils import getResolvedOptions  # type: ignore[import-not-found]  # only on Glue
    except ImportError:
        return _local(names, args)
    # getResolvedOptions requires every name it is given and skips the first argument (the program).
    present = [name for name in names if any(a == f"--{name}" or a.startswith(f"--{name}=") for a in args)]
    resolved = getResolvedOptions([sys.argv[0] if sys.argv else "job", *args], present)
    return {name: str(resolved[name]) for name in present if resolved.get(name) is not None}


def _canonical(names: Sequence[str], args: list[str]) -> list[str]:
    """``args`` with each known option spelt with underscores (``--a-b`` -> ``--a_b``, also in ``--a-b=v``)."""
    known = set(names)
    out = []
    for arg in args:
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if name.replace("-", "_") in known:
                arg = f"--{name.replace('-', '_')}{eq}{value}"
        out.append(arg)
    return out


def _local(names: Sequence[str], args: list[str]) -> dict[str, str]:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    for name in names:
        parser.add_argument(f"--{name}", dest=name)
    try:
        parsed, _unknown = parser.parse_known_args(args)
    except argparse.ArgumentError as exc:
        raise ValueError(str(exc)) from exc
    return {name: value for name, value in vars(parsed).items() if value is not None}
