"""Shard ceilings in the template: every table keyed by the shard (the key of the table whose local secondary index
keeps a shard's item collection on one partition, and the one-item-per-shard heads) has a write and a read alarm
that fires before one partition's units a second are reached, on DynamoDB's own (free) consumed-capacity metrics,
and the deployment guide names them with the remedy."""

from __future__ import annotations

import re
from typing import Any

from lakesync_infra.buffer import PARTITION_READ_UNITS, PARTITION_WRITE_UNITS
from lakesync_infra.monitoring import SHARD_ALARM_SHARE

from tests.infra.conftest import ROOT, Cfn

DEPLOYMENT = ROOT / "docs" / "deployment.md"
METRICS = {"ConsumedWriteCapacityUnits": PARTITION_WRITE_UNITS, "ConsumedReadCapacityUnits": PARTITION_READ_UNITS}


def _partition_key(table: dict[str, Any]) -> str:
    return next(k["AttributeName"] for k in table["KeySchema"] if k["KeyType"] == "HASH")


def _shard_tables(cfn: Cfn) -> set[str]:
    """Logical ids of the tables keyed like a table with a local secondary index, read from the template."""
    tables = cfn.of_type("AWS::DynamoDB::Table")
    keys = {_partition_key(t) for t in tables.values() if t.get("LocalSecondaryIndexes")}
    return {logical for logical, t in tables.items() if _partition_key(t) in keys}


def _table_alarms(cfn: Cfn) -> dict[tuple[str, str], tuple[str, dict[str, Any]]]:
    """(table logical id, metric name) -> (alarm logical id, alarm) for the alarms on DynamoDB table metrics."""
    out = {}
    for logical, alarm in cfn.of_type("AWS::CloudWatch::Alarm").items():
        if alarm.get("Namespace") == "AWS/DynamoDB":
            ((dimension,),) = [alarm["Dimensions"]]
            assert dimension["Name"] == "TableName"
            out[(dimension["Value"]["Ref"], alarm["MetricName"])] = (logical, alarm)
    return out


def test_the_shard_tables_are_the_log_and_the_heads(cfn: Cfn, ids: dict[str, str]) -> None:
    # Given the tables keyed by the shard, read from the template
    # Then they are the log (its by_commit index keeps a shard on one partition) and the heads (one item a shard)
    assert _shard_tables(cfn) == {ids["table:deltas"], ids["table:heads"]}


def test_each_shard_table_alarms_on_writes_and_reads_before_a_partitions_ceiling(cfn: Cfn, ids: dict[str, str]) -> None:
    # Given the alarms on DynamoDB's consumed capacity
    alarms = _table_alarms(cfn)
    # Then each table keyed by the shard has one for writes and one for reads, and no other table has any
    assert set(alarms) == {(table, metric) for table in _shard_tables(cfn) for metric in METRICS}
    for (_, metric), (_, alarm) in alarms.items():
        units = METRICS[metric]
        # And each sums a minute (DynamoDB's finest) and fires at a share of one partition's units a second below 1:
        # the table's units bound any one shard's, so it fires before a shard can reach its partition's ceiling
        assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 60)
        assert 0.5 <= SHARD_ALARM_SHARE < 1
        assert alarm["Threshold"] == SHARD_ALARM_SHARE * units * 60
        assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
        assert (alarm["EvaluationPeriods"], alarm["TreatMissingData"]) == (1, "notBreaching")
        # And it notifies the alarm topic and tells the operator the remedy
        assert alarm["AlarmActions"] == [{"Ref": ids["topic:alarms"]}]
        assert "subShards" in alarm["AlarmDescription"]


def test_the_partition_ceilings_are_dynamodbs() -> None:
    # The per-partition throughput DynamoDB documents ("Key range throughput exceeded (hot partitions)")
    assert (PARTITION_WRITE_UNITS, PARTITION_READ_UNITS) == (1_000, 3_000)


def test_the_deployment_guide_names_the_shard_alarms_their_ceilings_and_the_remedy(cfn: Cfn) -> None:
    # Given the guide's section on shard ceilings
    text = DEPLOYMENT.read_text(encoding="utf-8")
    match = re.search(r"^### Shard ceilings\n(.*?)(?=^#)", text, re.MULTILINE | re.DOTALL)
    assert match, "docs/deployment.md has no 'Shard ceilings' section"
    section = match.group(1)
    # Then it names every shard alarm of the template (logical ids are the construct path without its hash)
    names = {logical.removeprefix("Monitoring")[:-8] for logical, _ in _table_alarms(cfn).values()}
    assert names and all(f"`{name}`" in section for name in names)
    # And the ceilings, the 10 GB item collection, and the remedy
    for figure in (f"{PARTITION_WRITE_UNITS:,}", f"{PARTITION_READ_UNITS:,}", "10 GB", "`subShards`"):
        assert figure in section
