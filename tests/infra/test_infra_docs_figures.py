"""The deployment guide's figures, read from the synthesized template so they cannot drift again (issue 41).

``docs/deployment.md``'s "The deployment in figures" table states what a stack with the default settings holds: the
number of Lambda functions, which run on x86_64, the Glue jobs, the alarms and the roles that read or write the lake's
tables. Each test reads the figure from the session's template (``synth``: the default flush engine, every optional
setting on -- the one setting that changes a figure, ``sqlSourcePulls``, is read from the stack's configuration) and
asserts the table states exactly it; every count of functions or alarms elsewhere in the guide and the README must
agree, and the idle month's alarm line and total follow from the alarm count and the one per-alarm price of the cost
benchmark's price table.

Functions counted are the stack's own (handler ``functions.<name>.lambda_handler``); CDK's helper functions (the
``BucketDeployment`` handler; with ``removalPolicy: destroy`` the bucket emptier) are not: they run only during
deployments, and the guide says so.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest

from benchmarks.cost.prices import PRICES
from tests.infra.conftest import ROOT, Cfn, Synth

DEPLOYMENT = ROOT / "docs" / "deployment.md"
README = ROOT / "README.md"
CATALOG_ACTION = re.compile(r"^glue:\w*(Table|Database)")
"""Glue Data Catalog actions on databases and tables (what Lake Formation governs), not job runs."""


def _text(path: Any) -> str:
    return str(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def figures() -> dict[str, str]:
    """The rows of the guide's figures table: label -> value."""
    match = re.search(r"^### The deployment in figures\n(.*?)(?=^#)", _text(DEPLOYMENT), re.MULTILINE | re.DOTALL)
    assert match, "docs/deployment.md has no 'The deployment in figures' section"
    rows = re.findall(r"^\| (.+?) \| (.+?) \|$", match.group(1), re.MULTILINE)
    return {label: value for label, value in rows if label not in ("Figure", "---")}


def _names(value: str) -> set[str]:
    """The names in backticks of a table cell (a code span may hold several, separated by spaces)."""
    return {name for span in re.findall(r"`([^`]+)`", value) for name in span.split()}


def _lambda_functions(cfn: Cfn) -> dict[str, dict[str, Any]]:
    return cfn.of_type("AWS::Lambda::Function")


def test_the_function_count_is_the_stacks_own_functions(cfn: Cfn, figures: dict[str, str]) -> None:
    # Given the template's Lambda functions: ours (handlers in functions/) and the rest
    ours = cfn.functions()
    helpers = {k for k, p in _lambda_functions(cfn).items() if not p.get("Handler", "").startswith("functions.")}
    # Then the rest are CDK's own helpers (its singleton and provider functions, logical ids "Custom...")
    assert all(logical.startswith("Custom") for logical in helpers), helpers
    # And the guide counts ours, here and wherever it or the README counts Lambda functions
    assert int(figures["Lambda functions"]) == len(ours)
    for path in (DEPLOYMENT, README):
        counts = {int(n) for n in re.findall(r"(\d+) Lambda functions", _text(path))}
        assert counts <= {len(ours)}, f"{path.name} counts {counts} Lambda functions, the template has {len(ours)}"


def test_the_functions_row_names_every_function(cfn: Cfn) -> None:
    # Given the guide's "What gets deployed" row of the functions
    (row,) = [line for line in _text(DEPLOYMENT).splitlines() if line.startswith("| Functions |")]
    named = _names(row.split(" | ")[2])
    # Then it names exactly the stack's functions
    assert named == set(cfn.functions())


def test_the_architectures_are_the_templates(synth: Synth, figures: dict[str, str]) -> None:
    # Given each of our functions' architecture in the template
    arch = {name: tuple(p.get("Architectures", ["x86_64"])) for name, p in synth.cfn.functions().items()}
    x86 = {name for name, a in arch.items() if a == ("x86_64",)}
    # Then the x86_64 ones are the guide's, with pull among them exactly when the environment has sqlSourcePulls
    stated = _names(figures["on x86_64"])
    if synth.stack.config.sql_source_pulls:
        stated |= _names(figures["on x86_64 with `sqlSourcePulls: true`"])
    assert x86 == stated
    # And every other function runs on arm64, as the guide says
    assert figures["on arm64 (Graviton)"] == "every other function"
    assert {a for name, a in arch.items() if name not in x86} == {("arm64",)}


def test_the_glue_jobs_are_the_templates(synth: Synth, figures: dict[str, str]) -> None:
    # Given the template's Glue jobs, by the kind the stack gives each: the lake's jobs, and the restore job
    jobs = [*synth.stack.jobs.jobs, "restore"]
    assert {synth.ids[f"job:{kind}"] for kind in jobs} == set(synth.cfn.of_type("AWS::Glue::Job"))
    # Then the guide names exactly those
    assert _names(figures["Glue jobs"]) == set(jobs)


def _alarm_count(cfn: Cfn) -> int:
    return len(cfn.of_type("AWS::CloudWatch::Alarm"))


def test_the_alarm_count_is_the_templates_everywhere(cfn: Cfn, figures: dict[str, str]) -> None:
    # Given the template's alarms
    count = _alarm_count(cfn)
    # Then the figures table, and every count of alarms in the guide and the README, state that many
    assert int(figures["CloudWatch alarms"]) == count
    for path in (DEPLOYMENT, README):
        counts = {int(n) for n in re.findall(r"(\d+) (?:CloudWatch )?alarms\b", _text(path))}
        assert counts <= {count}, f"{path.name} counts {counts} alarms, the template has {count}"


def _cost_rows() -> list[tuple[str, str]]:
    """The idle month's table in the guide's cost notes: (item, $ / month) rows."""
    text = _text(DEPLOYMENT)
    start = text.index("| item | $ / month |")
    rows = re.findall(r"^  \| (.+?) \| (.+?) \|$", text[start:].split("\n\n", 1)[0], re.MULTILINE)
    return [(item, value) for item, value in rows if item not in ("item", "---")]


def test_the_idle_month_follows_from_the_alarm_count_and_the_one_alarm_price(cfn: Cfn) -> None:
    # Given the idle month's table, and the per-alarm price of the cost benchmark's price table (the one source)
    rows = _cost_rows()
    price = Decimal(str(PRICES["cloudwatch.alarm"].usd))
    ((line, alarm_value),) = [
        (m, v) for i, v in rows if (m := re.match(r"(\d+) CloudWatch alarms \(\$(\d+\.\d\d) each", i))
    ]
    count, stated_price = line.groups()
    # Then the alarm line counts the template's alarms at that price
    assert int(count) == _alarm_count(cfn)
    assert Decimal(stated_price) == price
    assert Decimal(alarm_value) == int(count) * price
    # And the total is the sum of the lines above it (the dashboard's is only with dashboard: true)
    (total_index,) = [n for n, (item, _) in enumerate(rows) if item.startswith("**total")]
    summed = sum(
        (Decimal(value.lstrip("~")) for item, value in rows[:total_index] if re.fullmatch(r"~?\d+\.\d\d", value)),
        Decimal(0),
    )
    assert "dashboard" in next(item for item, value in rows[:total_index] if " or " in value)
    assert Decimal(rows[total_index][1].strip("*~")) == summed


def _catalog_roles(cfn: Cfn) -> set[str]:
    """Logical ids (without CDK's 8 hex digits) of the roles allowed Glue Data Catalog actions on the lake."""
    return {
        logical[:-8]
        for logical in cfn.of_type("AWS::IAM::Role")
        if any(CATALOG_ACTION.match(action) for action, _ in cfn.allowed(logical))
    }


def test_the_lake_formation_note_names_every_role_of_the_lake_tables(cfn: Cfn, figures: dict[str, str]) -> None:
    # Given the roles that read or write the lake's tables (Glue Data Catalog actions), from the template
    roles = _catalog_roles(cfn)
    assert "FunctionsFlushRole" in roles  # the default flush engine's, which the note once left out
    # Then the figures table names exactly them
    assert _names(figures["roles that read or write the lake's tables"]) == roles
    # And the Lake Formation prerequisite names each one
    (note,) = re.findall(r"^\* If AWS Lake Formation .*?(?=^\* |^#)", _text(DEPLOYMENT), re.MULTILINE | re.DOTALL)
    assert all(f"`{role}`" in note for role in roles), note
