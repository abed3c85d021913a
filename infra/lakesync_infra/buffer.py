"""The delta buffer: the six DynamoDB tables, built from :func:`lakesync.aws.tables.table_specs`.

The key schemas, the ``by_commit`` index and the TTL attribute come from the same specs the adapters and the local
runner use, so there is no second copy of a key name here. Every table is on-demand, encrypted with the stack's
customer-managed key, has point-in-time recovery, and (unless the environment is throwaway) deletion protection.
The ``config`` table streams new images: the flush trigger consumes its flush requests. The ``deltas`` table streams
new images as its spec says (:data:`lakesync.aws.tables.LOG_STREAM_VIEW`): the real-time broadcaster consumes new log
items (:mod:`lakesync_infra.realtime`).

A shard's log (``deltas``) and its head (``heads``) are keyed by the shard, and DynamoDB serves one partition key from
one partition: at most :data:`PARTITION_WRITE_UNITS` write and :data:`PARTITION_READ_UNITS` read units a second,
whatever the table's on-demand capacity. The ``deltas`` table's local secondary index also keeps each shard's item
collection on that one partition (10 GB). :meth:`Buffer.shard_tables` names the tables so bounded, for the alarms
(:mod:`lakesync_infra.monitoring`); hash sub-shards (``subShards``) spread a hot table over more partition keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from lakesync.aws.tables import TTL_ATTRIBUTE, TTL_TABLES, TableNames, table_specs
from lakesync_infra.common import allow, removal_policy
from lakesync_infra.config import LakeSyncConfig

STREAM_TABLE: Final = "config"
"""The table whose stream feeds the flush trigger."""
_TYPES: Final = {"S": dynamodb.AttributeType.STRING, "N": dynamodb.AttributeType.NUMBER}
_PLACEHOLDER: Final = "lakesync"
PARTITION_WRITE_UNITS: Final = 1_000
"""Write units a second one DynamoDB partition serves, on-demand tables too (Amazon DynamoDB developer guide, "Key
range throughput exceeded (hot partitions)" and "Partitions in DynamoDB")."""
PARTITION_READ_UNITS: Final = 3_000
"""Read units a second one DynamoDB partition serves (same pages)."""


def _attribute(spec: Mapping[str, Any], name: str) -> dynamodb.Attribute:
    kinds = {a["AttributeName"]: a["AttributeType"] for a in spec["AttributeDefinitions"]}
    return dynamodb.Attribute(name=name, type=_TYPES[kinds[name]])


def key_attribute(spec: Mapping[str, Any], schema: list[dict[str, str]], kind: str) -> dynamodb.Attribute | None:
    """The ``HASH`` or ``RANGE`` (``kind``) attribute of a key ``schema`` of the ``CreateTable`` request ``spec``."""
    names = [k["AttributeName"] for k in schema if k["KeyType"] == kind]
    return _attribute(spec, names[0]) if names else None


def _stream(spec: Mapping[str, Any], kind: str) -> dynamodb.StreamViewType | None:
    view = spec.get("StreamSpecification", {}).get("StreamViewType")
    if view is None and kind == STREAM_TABLE:
        view = "NEW_IMAGE"
    return dynamodb.StreamViewType(view) if view else None


class Buffer(Construct):
    """The DynamoDB tables of the buffer.

    Attributes:
        tables: Logical name (``deltas``, ``rows``...) -> table.
        names: The physical names (tokens) for the functions' and jobs' configuration.
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: LakeSyncConfig, key: kms.IKey) -> None:
        super().__init__(scope, construct_id)
        self.tables: dict[str, dynamodb.Table] = {}
        for kind, spec in self._specs().items():
            if spec.get("BillingMode") != "PAY_PER_REQUEST":
                raise ValueError(f"table {kind}: only on-demand billing is deployed")
            partition_key = key_attribute(spec, spec["KeySchema"], "HASH")
            assert partition_key is not None
            table = dynamodb.Table(
                self,
                kind.capitalize(),
                partition_key=partition_key,
                sort_key=key_attribute(spec, spec["KeySchema"], "RANGE"),
                billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
                encryption=dynamodb.TableEncryption.CUSTOMER_MANAGED,
                encryption_key=key,
                point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                    point_in_time_recovery_enabled=True
                ),
                deletion_protection=config.removal_policy == "retain",
                time_to_live_attribute=TTL_ATTRIBUTE if kind in TTL_TABLES else None,
                stream=_stream(spec, kind),
                removal_policy=removal_policy(config),
            )
            for index in spec.get("LocalSecondaryIndexes", []):
                sort_key = key_attribute(spec, index["KeySchema"], "RANGE")
                assert sort_key is not None
                projection = index["Projection"]
                table.add_local_secondary_index(
                    index_name=index["IndexName"],
                    sort_key=sort_key,
                    projection_type=dynamodb.ProjectionType(projection["ProjectionType"]),
                    non_key_attributes=projection.get("NonKeyAttributes"),
                )
            self.tables[kind] = table
        self.names = TableNames(**{kind: table.table_name for kind, table in self.tables.items()})

    def grant(
        self,
        role: iam.IRole,
        tables: Mapping[str, Sequence[str]],
        index_actions: Mapping[str, Sequence[str]],
    ) -> None:
        """Allow ``role`` the given actions on each logical table, and ``index_actions`` on its indexes."""
        for kind in sorted(set(tables) | set(index_actions)):
            table = self.tables[kind]
            if tables.get(kind):
                allow(role, tables[kind], [table.table_arn], sid=f"Table{kind.capitalize()}")
            if index_actions.get(kind):
                indexes = [f"{table.table_arn}/index/{name}" for name in self.index_names(kind)]
                allow(role, index_actions[kind], indexes, sid=f"Indexes{kind.capitalize()}")

    def shard_tables(self) -> dict[str, dynamodb.Table]:
        """The tables keyed by the shard, the partition key of the table with a local secondary index: a shard's items
        there stay on one partition (an item collection with a local index does not span partitions, nor does one
        item, the shard's head), so a shard's traffic on each is one partition's, up to :data:`PARTITION_WRITE_UNITS`
        and :data:`PARTITION_READ_UNITS`."""
        specs = self._specs()

        def partition_key(spec: Mapping[str, Any]) -> str:
            return str(next(k["AttributeName"] for k in spec["KeySchema"] if k["KeyType"] == "HASH"))

        shard_keys = {partition_key(spec) for spec in specs.values() if spec.get("LocalSecondaryIndexes")}
        return {kind: self.tables[kind] for kind, spec in specs.items() if partition_key(spec) in shard_keys}

    def index_names(self, kind: str) -> list[str]:
        """The secondary indexes of table ``kind`` (from the specs)."""
        return [index["IndexName"] for index in self._specs()[kind].get("LocalSecondaryIndexes", [])]

    @staticmethod
    def _specs() -> dict[str, dict[str, Any]]:
        """Logical table name -> its ``CreateTable`` request (the specs, with placeholder names)."""
        names = TableNames.with_prefix(_PLACEHOLDER)
        by_name = {physical: kind for kind, physical in names.as_dict().items()}
        return {by_name[spec["TableName"]]: spec for spec in table_specs(names)}
