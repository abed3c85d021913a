"""The Glue job option parser (lakesync.spark.glue.resolved_options).

Focus: the local branch turns a command line into ``{name: value}`` of the declared options that are present
(unknown options ignored, absent ones left out, hyphenated spellings accepted, no abbreviations, a known option
without a value refused); the Glue branch hands ``getResolvedOptions`` only the names present and keeps only their
values. Plus the job argument parsers fed from it.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence

import pytest

from lakesync.spark import compact, flush
from lakesync.spark.glue import resolved_options

NAMES = ("warehouse", "catalog", "catalog_uri", "gateways", "retention_ms")


@pytest.fixture(autouse=True)
def no_awsglue(monkeypatch: pytest.MonkeyPatch) -> None:
    """The local branch, whatever the machine has installed (``None`` in sys.modules makes the import fail)."""
    monkeypatch.setitem(sys.modules, "awsglue", None)
    monkeypatch.setitem(sys.modules, "awsglue.utils", None)


def test_resolved_options_returns_the_known_options_given() -> None:
    # Given a Glue-style command line with the job's options among Glue's own
    argv = ["--JOB_NAME", "flush", "--warehouse", "s3://lake/wh", "--job-bookmark-option", "job-bookmark-disable",
            "--catalog", "glue", "--gateways", "gw1,gw2"]  # fmt: skip

    # When resolved
    options = resolved_options(NAMES, argv)

    # Then exactly the declared options that were given come back, as strings
    assert options == {"warehouse": "s3://lake/wh", "catalog": "glue", "gateways": "gw1,gw2"}


def test_resolved_options_leaves_absent_options_out() -> None:
    # Given no job options at all
    # When resolved, Then the dict is empty (no None values for the job parser to trip over)
    assert resolved_options(NAMES, ["--JOB_NAME", "x"]) == {}
    assert resolved_options(NAMES, []) == {}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--catalog-uri", "c.db"], {"catalog_uri": "c.db"}),
        (["--catalog-uri=c.db"], {"catalog_uri": "c.db"}),
        (["--catalog_uri=c.db"], {"catalog_uri": "c.db"}),
        (["--retention_ms", "-5"], {"retention_ms": "-5"}),
        (["--gateways", "a", "--gateways", "b"], {"gateways": "b"}),
        (["--tables", '{"deltas": "d"}', "--catalog", "local"], {"catalog": "local"}),
    ],
    ids=["hyphenated", "hyphenated-equals", "equals", "negative-number", "repeated-last-wins", "unknown-with-json"],
)
def test_resolved_options_spellings(argv: list[str], expected: dict[str, str]) -> None:
    # Given/When one spelling of an option, Then it resolves to the canonical name and its value
    assert resolved_options(NAMES, argv) == expected


def test_resolved_options_never_abbreviates() -> None:
    # Given a prefix of a known option (argparse would take it for --warehouse by default)
    # When resolved, Then it is an unknown option and ignored
    assert resolved_options(NAMES, ["--ware", "w"]) == {}


@pytest.mark.parametrize(
    "argv", [["--warehouse"], ["--warehouse", "--catalog", "local"]], ids=["at-end", "before-another-option"]
)
def test_resolved_options_refuses_a_known_option_without_value(argv: list[str]) -> None:
    # Given a known option with nothing after it
    # When/Then resolving fails naming it, instead of exiting the process
    with pytest.raises(ValueError, match="--warehouse"):
        resolved_options(NAMES, argv)


def test_resolved_options_reads_sys_argv_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a script started with options
    monkeypatch.setattr(sys, "argv", ["flush.py", "--warehouse", "w", "--other", "x"])

    # When resolved without argv, Then the program name is skipped and the options read
    assert resolved_options(NAMES) == {"warehouse": "w"}


def test_resolved_options_on_glue_asks_only_for_present_names(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given Glue's getResolvedOptions, which requires every name it is given and returns its own keys too
    calls: list[tuple[list[str], list[str]]] = []

    def get_resolved_options(args: Sequence[str], options: Sequence[str]) -> dict[str, str | None]:
        calls.append((list(args), list(options)))
        given = dict(zip(args[1::2], args[2::2], strict=False))
        return {
            **{o: given[f"--{o}"] for o in options},
            "JOB_ID": None,
            "job_bookmark_option": "job-bookmark-disable",
        }

    utils = types.ModuleType("awsglue.utils")
    utils.getResolvedOptions = get_resolved_options  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "awsglue", types.ModuleType("awsglue"))
    monkeypatch.setitem(sys.modules, "awsglue.utils", utils)
    monkeypatch.setattr(sys, "argv", ["script.py"])

    # When resolved on a Glue command line with a hyphenated spelling
    options = resolved_options(NAMES, ["--JOB_NAME", "j", "--warehouse", "w", "--catalog-uri", "c"])

    # Then Glue was asked for the present names only, with the program name first and canonical spellings
    assert calls == [(["script.py", "--JOB_NAME", "j", "--warehouse", "w", "--catalog_uri", "c"],
                      ["warehouse", "catalog_uri"])]  # fmt: skip
    # And only those names' values come back
    assert options == {"warehouse": "w", "catalog_uri": "c"}


def test_flush_job_options_parse_into_job_args() -> None:
    # Given a local flush command line with a checkpoint bucket
    argv = ["--table_prefix", "p", "--warehouse", "w", "--catalog", "local", "--catalog_uri", "c.db",
            "--checkpoint_bucket", "cps", "--s3_endpoint", "http://127.0.0.1:1", "--region", "eu-west-1"]  # fmt: skip

    # When resolved with the flush job's names and parsed
    args = flush.FlushJobArgs.parse(resolved_options(flush.JOB_OPTIONS, argv))

    # Then the checkpoint bucket and the S3 endpoint reach the job args
    assert (args.checkpoint_bucket, args.s3_endpoint, args.catalog_kind) == ("cps", "http://127.0.0.1:1", "local")
    assert args.config.dynamodb.region == "eu-west-1"
    # And without one there is no bucket (nothing will be released)
    bare = flush.FlushJobArgs.parse(resolved_options(flush.JOB_OPTIONS, ["--table_prefix", "p", "--warehouse", "w"]))
    assert (bare.checkpoint_bucket, bare.s3_endpoint) == (None, None)


def test_compact_job_options_parse_into_job_args() -> None:
    # Given a compaction command line
    argv = ["--warehouse", "w", "--maintain", "true", "--synced_tables", "todos,notes", "--JOB_NAME", "c"]

    # When resolved with the compaction job's names and parsed
    args = compact.CompactJobArgs.parse(resolved_options(compact.JOB_OPTIONS, argv))

    # Then they reach the job args
    assert (args.warehouse, args.maintain, args.config.tables) == ("w", True, ("todos", "notes"))
