"""The DynamoDB tables of LakeSync: names, keys and indexes, in one place for the adapters, the local runner and CDK.

| table   | partition key            | sort key  | what                                                             |
|---------|--------------------------|-----------|------------------------------------------------------------------|
| deltas  | ``shard`` = gw#table#sub | ``seq`` N | the log: an item per commit chunk; sparse LSI ``by_commit``, TTL |
| rows    | ``pk`` = gw#table#rowId  | --        | per-column LWW state of every row, version ``v``                 |
| heads   | ``shard``                | --        | commit sequence and byte counters per shard                      |
| dedup   | ``pk`` = gw#deltaId      | --        | deltaIds seen, TTL ``exp``                                       |
| config  | ``gw``                   | ``sk`` S  | sync rules, schemas, shard registry, flush requests              |
| actions | ``pk`` = gw#key          | --        | action results by actionId / idempotency key, TTL ``exp``        |

The ``by_commit`` index is sparse: only commit marks (a chunk about every
:data:`lakesync.aws.buffer.log_chunks.COMMIT_MARK_EVERY` entries) carry its sort key ``chlc``, so only they are in it.

The deltas table streams new images (:data:`LOG_STREAM_VIEW`): the real-time broadcaster reads new log items from it.

The WebSocket sessions live in a table of their own, outside :class:`TableNames` (it is not part of the buffer: the
real-time construct owns it on AWS, and only the WebSocket functions are given its name):

| table       | partition key       | GSI ``by_gateway``        | what                                           |
|-------------|---------------------|---------------------------|------------------------------------------------|
| connections | ``id`` = connection | ``gw``, ``id``; all attrs | open sessions (``aws.connections``), TTL ``exp`` |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TTL_ATTRIBUTE = "exp"
COMMIT_INDEX = "by_commit"
LOG_STREAM_VIEW = "NEW_IMAGE"
"""The deltas table's stream: new log items, read by the real-time broadcaster."""


@dataclass(frozen=True, slots=True)
class TableNames:
    """Physical table names (CDK generates them on AWS; the local runner uses a prefix)."""

    deltas: str
    rows: str
    heads: str
    dedup: str
    config: str
    actions: str

    @classmethod
    def with_prefix(cls, prefix: str) -> TableNames:
        """Names ``{prefix}-deltas`` etc."""
        return cls(*(f"{prefix}-{kind}" for kind in ("deltas", "rows", "heads", "dedup", "config", "actions")))

    def as_dict(self) -> dict[str, str]:
        """Logical name -> physical name."""
        return {
            "deltas": self.deltas,
            "rows": self.rows,
            "heads": self.heads,
            "dedup": self.dedup,
            "config": self.config,
            "actions": self.actions,
        }


def table_specs(names: TableNames) -> list[dict[str, Any]]:
    """``CreateTable`` requests (on-demand billing) for every table."""

    def spec(name: str, pk: str, sk: tuple[str, str] | None = None, **extra: Any) -> dict[str, Any]:
        keys = [{"AttributeName": pk, "KeyType": "HASH"}]
        attrs = [{"AttributeName": pk, "AttributeType": "S"}]
        if sk is not None:
            keys.append({"AttributeName": sk[0], "KeyType": "RANGE"})
            attrs.append({"AttributeName": sk[0], "AttributeType": sk[1]})
        return {
            "TableName": name,
            "KeySchema": keys,
            "AttributeDefinitions": attrs,
            "BillingMode": "PAY_PER_REQUEST",
            **extra,
        }

    deltas = spec(
        names.deltas,
        "shard",
        ("seq", "N"),
        LocalSecondaryIndexes=[
            {
                "IndexName": COMMIT_INDEX,
                "KeySchema": [
                    {"AttributeName": "shard", "KeyType": "HASH"},
                    {"AttributeName": "chlc", "KeyType": "RANGE"},
                ],
                # Sparse: only commit marks carry `chlc` (lakesync.aws.buffer.log_chunks). A mark's count and first
                # commit HLC with its keys: where to start walking the table to find a position by commit HLC.
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["n", "c"]},
            }
        ],
        # New log items feed the real-time broadcaster (lakesync.aws.log_stream); NEW_IMAGE carries the chunk.
        StreamSpecification={"StreamEnabled": True, "StreamViewType": LOG_STREAM_VIEW},
    )
    deltas["AttributeDefinitions"].append({"AttributeName": "chlc", "AttributeType": "N"})
    return [
        deltas,
        spec(names.rows, "pk"),
        spec(names.heads, "shard"),
        spec(names.dedup, "pk"),
        spec(names.config, "gw", ("sk", "S")),
        spec(names.actions, "pk"),
    ]


TTL_TABLES = ("deltas", "dedup", "actions")


CONNECTIONS_INDEX = "by_gateway"
"""The connections table's index by gateway (every attribute projected: a broadcast needs whole sessions)."""


def connections_table_name(prefix: str) -> str:
    """The connections table's name next to :meth:`TableNames.with_prefix` ``(prefix)``'s: ``{prefix}-connections``."""
    return f"{prefix}-connections"


def connections_table_spec(name: str) -> dict[str, Any]:
    """The ``CreateTable`` request (on-demand billing) of the WebSocket sessions table; TTL is ``exp``."""
    return {
        "TableName": name,
        "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
        "AttributeDefinitions": [
            {"AttributeName": "id", "AttributeType": "S"},
            {"AttributeName": "gw", "AttributeType": "S"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
        "GlobalSecondaryIndexes": [
            {
                "IndexName": CONNECTIONS_INDEX,
                "KeySchema": [
                    {"AttributeName": "gw", "KeyType": "HASH"},
                    {"AttributeName": "id", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
    }
