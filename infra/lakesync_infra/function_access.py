"""What each Lambda function is and may do: its name, timeout and memory, the DynamoDB actions it takes on each
logical table (:data:`ACCESS`, the stores' calls in ``lakesync.aws``), and what else it reads or is given
(:class:`FunctionAccess`). :mod:`lakesync_infra.functions` builds the functions and their roles from it; the access
tests replay each handler's calls against it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from lakesync_infra.common import XRAY_REASON
from lakesync_infra.config import FLUSH_FUNCTION, LakeSyncConfig
from lakesync_infra.jobs import ACCESS as JOB_ACCESS
from lakesync_infra.queues import CONSUMER_TIMEOUT

FLUSH_TRIGGER: Final = "flush_trigger"
FLUSH_TRIGGER_TIMEOUT_S: Final = 300
"""Covers the trigger's wait for a busy flush job (``lakesync.aws.flush_trigger.MAX_WAIT_S`` + ``SAFETY_S``)."""
LAKE_TICK: Final = "lake_tick"
LAKE_TICK_TIMEOUT_S: Final = 60
"""A tick is a few small reads and at most two ``GetJobRuns`` and one ``StartJobRun``: seconds."""

MATERIALISE: Final = "materialise"
AUTHORIZER: Final = "authorizer"
AUTHORIZER_TIMEOUT_S: Final = 10
AUTHORIZER_MEMORY_MB: Final = 512
"""The HTTP API's authorizer verifies one HMAC per call and reads no table: a small function (its answers cached)."""
RATE_LIMITED: Final = frozenset({"push", "pull", "checkpoint", "actions", "ws_message"})
"""The functions counting callers' requests in the dedup table (:mod:`lakesync.aws.rate_limits`): they may
``UpdateItem`` the counters' keys there, and no other key (``dynamodb:LeadingKeys``)."""
CONNECTOR_POLL: Final = "connector_poll"
CONNECTOR_POLL_TIMEOUT_S: Final = 900
"""Lambda's maximum: a poll may read up to 10 rounds of 10,000 rows; its lease (15 minutes) outlives it."""
DRIVER_FUNCTIONS: Final = (MATERIALISE, CONNECTOR_POLL, "admin")
"""The functions deployed from the asset with the SQL drivers (on :data:`MATERIALISE_ARCHITECTURE`): the consumer's
destinations, the poller's PostgreSQL/MySQL sources, and ``admin``, which connects to a database connector's source
to check it at registration (an operator's rare call: the larger asset costs it nothing that matters)."""


def driver_functions(config: LakeSyncConfig) -> frozenset[str]:
    """The functions an environment deploys from the SQL-driver asset: :data:`DRIVER_FUNCTIONS`, and ``pull`` with
    ``sqlSourcePulls``."""
    return frozenset(DRIVER_FUNCTIONS) | ({"pull"} if config.sql_source_pulls else frozenset())


FLUSH: Final = FLUSH_FUNCTION
FLUSH_TIMEOUT_S: Final = 900
"""Lambda's longest: a run flushes at most ``LAKESYNC_FLUSH_MAX_DELTAS`` entries, and may first wait for a held lease.
The tick and the trigger read it (``LAKESYNC_FLUSH_FUNCTION_TIMEOUT_S``): a run recorded as unfinished for longer
has ended."""
FLUSH_MEMORY_MB: Final = 2048
"""A run holds its entries as one Arrow table while it writes them (and CPU scales with memory)."""
FLUSH_DATABASE_ACTIONS: Final = ("glue:GetDatabase", "glue:CreateDatabase")
"""pyiceberg's GlueCatalog on the lake's database: read it, and create it when missing (``AlreadyExists`` otherwise)."""
FLUSH_TABLE_ACTIONS: Final = ("glue:GetTable", "glue:CreateTable", "glue:UpdateTable")
"""pyiceberg's GlueCatalog on the delta log table: load it, create it on the first run, commit (a new version)."""
RUN_RECORDS: Final[Mapping[str, tuple[str, ...]]] = {
    "config": ("dynamodb:Query", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")
}
"""What starting the flush function takes of the config table (:class:`lakesync.aws.flush_runs.FunctionJobStarter`):
the runs listed (Query), a run recorded as queued (PutItem), a refused ``Invoke`` recorded as failed (UpdateItem) and
the records beyond the newest kept deleted (DeleteItem)."""

BACKLOG_READS: Final[Mapping[str, tuple[str, ...]]] = {
    "config": ("dynamodb:Query",),
    "heads": ("dynamodb:BatchGetItem",),
    "deltas": ("dynamodb:Query",),
}
"""What the flush trigger reads to choose an engine when both are deployed, as
:meth:`lakesync.aws.flush_store.FlushStore.shards` reads it (the lake tick's reads of the heads): the gateways' shard
registry (config Query), their heads (BatchGetItem) and the chunks committed past each head (deltas Query)."""

BROADCAST: Final = "ws_broadcast"
BROADCAST_TIMEOUT_S: Final = 60
"""A batch of at most 100 chunks: one Query of the sessions and one PostToConnection per recipient and message."""
MATERIALISE_BATCH_SIZE: Final = 10
ENI_ACTIONS: Final = (
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
)
"""What a function in a VPC needs to manage its network interfaces (AWS's ``AWSLambdaVPCAccessExecutionRole``)."""
ENI_REASON: Final = (
    XRAY_REASON + " In a VPC, Lambda manages the function's network interfaces with its role: "
    "ec2:DescribeNetworkInterfaces/DescribeSubnets have no resource-level permissions and the interfaces' "
    "ids are not known before Lambda creates them (the actions of AWSLambdaVPCAccessExecutionRole)."
)


@dataclass(frozen=True, slots=True)
class FunctionAccess:
    """What one function's code touches and needs configured.

    Attributes:
        tables: Logical DynamoDB table -> actions.
        index_actions: Logical DynamoDB table -> actions on its secondary indexes.
        api: Whether it is an API function (gateway, tables, JWT secret and limits in its environment).
        checkpoints: Whether it reads the checkpoint bucket.
        checkpoint_objects: Whether it reads checkpoint objects by key only (``s3:GetObject`` under the checkpoints
            prefix, no listing: the broadcaster's membership tables).
        timeout_s: Timeout (API functions use the configured one).
        verifies_tokens: Whether it reads the JWT secret (an API function that is not an HTTP route, the
            connector poller, has the API settings, whose parser requires the secret's ARN, but never reads it).
    """

    tables: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    index_actions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    api: bool = True
    checkpoints: bool = False
    checkpoint_objects: bool = False
    timeout_s: int | None = None
    verifies_tokens: bool = True


_ACCESS: Final[Mapping[str, FunctionAccess]] = {
    "health": FunctionAccess(api=False),
    # push: the basis (head by GetItem, then rows and deltaIds by BatchGetItem, log entries whose rows are pending by
    # Query), a transaction putting the log item and the head (put/update) and the shard registry, then the rows
    # (BatchWriteItem on the chunk's turn, else PutItem) and the head's rows-applied mark (UpdateItem); deltaIds
    # recorded with BatchWriteItem; schemas read; flush requested. A writer that takes a turn over records the runs
    # it declares in doubt (config PutItem), reads their records (GetItem, Query) and, retiring them, deletes them
    # (DeleteItem) and their alternate rows (BatchWriteItem).
    "push": FunctionAccess(
        tables={
            "heads": ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"),
            "rows": ("dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:BatchWriteItem"),
            # deltaId records; the pusher's `since` session (GetItem/PutItem: lakesync.aws.since_sessions)
            "dedup": ("dynamodb:BatchGetItem", "dynamodb:BatchWriteItem", "dynamodb:GetItem", "dynamodb:PutItem"),
            "deltas": ("dynamodb:PutItem", "dynamodb:Query"),
            "config": ("dynamodb:Query", "dynamodb:PutItem", "dynamodb:GetItem", "dynamodb:DeleteItem"),
        }
    ),
    # pull: the sync rules with the shard registry (one Query), heads (release marks), log pages by sequence or by
    # commit HLC (index by_commit).
    "pull": FunctionAccess(
        tables={
            "heads": ("dynamodb:BatchGetItem",),
            "config": ("dynamodb:Query",),
            "deltas": ("dynamodb:Query",),
            # a `since` puller's session (lakesync.aws.since_sessions); the row index for rows it must be sent again
            "dedup": ("dynamodb:GetItem", "dynamodb:PutItem"),
            "rows": ("dynamodb:BatchGetItem",),
        },
        index_actions={"deltas": ("dynamodb:Query",)},
    ),
    # admin: sync rules and schemas read/written, flush requests, metrics from heads (each head read with a Query of
    # the log past it) and the shard registry, materialisation destinations and connectors added
    # (conditional Put) and removed (DeleteItem); an unregistered connector's position deleted (its head read by
    # GetItem, a large position's chunks by BatchGetItem). A rules backtest reads the rows as a scope difference does
    # (shard registry, heads, the log by Query, the covering checkpoint's objects by key once the log is released)
    # and the clients' kept subscriptions (GetItem in the dedup table); it writes nothing. Explain reads a row's
    # index entry (rows BatchGetItem), its shard's head and log, and the client's subscriptions and `since` session
    # (dedup GetItem).
    "admin": FunctionAccess(
        tables={
            "heads": ("dynamodb:BatchGetItem",),
            "deltas": ("dynamodb:Query",),
            "rows": ("dynamodb:BatchGetItem",),
            "config": (
                "dynamodb:Query",
                "dynamodb:GetItem",
                "dynamodb:BatchGetItem",
                "dynamodb:PutItem",
                "dynamodb:DeleteItem",
            ),
            "dedup": ("dynamodb:GetItem",),
        },
        checkpoint_objects=True,
    ),
    # checkpoint: sync rules (to filter) and the checkpoint objects.
    "checkpoint": FunctionAccess(tables={"config": ("dynamodb:GetItem",)}, checkpoints=True),
    FLUSH_TRIGGER: FunctionAccess(api=False, timeout_s=FLUSH_TRIGGER_TIMEOUT_S),
    # materialise: the gateway's destinations (dest#...) and table schemas (schema#...), one Query each.
    MATERIALISE: FunctionAccess(
        tables={"config": ("dynamodb:Query",)}, api=False, timeout_s=int(CONSUMER_TIMEOUT.to_seconds())
    ),
    "rotate_secret": FunctionAccess(api=False, timeout_s=30),
    # lake_tick: the shard registry and flush requests (config Query), the heads (BatchGetItem), the release step's
    # target (Query on the commit index, and on the log for an entry's commit HLC) and the checkpoints.
    LAKE_TICK: FunctionAccess(
        tables={"config": ("dynamodb:Query",), "heads": ("dynamodb:BatchGetItem",), "deltas": ("dynamodb:Query",)},
        index_actions={"deltas": ("dynamodb:Query",)},
        api=False,
        checkpoints=True,
        timeout_s=LAKE_TICK_TIMEOUT_S,
    ),
    # flush: the Glue flush job's buffer access (the same FlushStore calls; its run records -- config PutItem,
    # UpdateItem, Query, DeleteItem -- are among them) and the checkpoints (the release bounds).
    FLUSH: FunctionAccess(
        tables=JOB_ACCESS["flush"].tables,
        index_actions=JOB_ACCESS["flush"].index_actions,
        api=False,
        checkpoints=True,
        timeout_s=FLUSH_TIMEOUT_S,
    ),
}


# actions: the idempotency records, the gateway's registered connectors (config Query of conn#...), whose action
# handlers it runs, and each executed action's provenance row pushed through the push service (push's access).
_ACTIONS: Final = FunctionAccess(
    tables={
        "actions": ("dynamodb:BatchGetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"),
        "config": ("dynamodb:Query",),
    },
)
# connector_poll: the connector's config (config Query of conn#...), its position (lakesync.aws.connector_positions:
# the head by GetItem, a large position's chunks by BatchGetItem, written by PutItem and the superseded ones deleted,
# lease, commit and release by conditional UpdateItem), and the polled rows with their provenance pushed through
# the push service (push's access).
_CONNECTOR_POLL: Final = FunctionAccess(
    tables={
        "config": (
            "dynamodb:Query",
            "dynamodb:GetItem",
            "dynamodb:BatchGetItem",
            "dynamodb:PutItem",
            "dynamodb:UpdateItem",
            "dynamodb:DeleteItem",
        ),
    },
    timeout_s=CONNECTOR_POLL_TIMEOUT_S,
    verifies_tokens=False,
)


def _union(*accesses: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for access in accesses:
        for table, actions in access.items():
            out[table] = tuple(sorted({*out.get(table, ()), *actions}))
    return out


MEMBERSHIP_READS: Final = {table: _ACCESS["pull"].tables[table] for table in ("config", "heads", "deltas")}
"""What reading a membership table takes (:class:`lakesync.gateway.membership_view.GatewayMemberships`), the pull's
grants on those tables: the rules with the shard registry (config Query), the heads of the table's shards
(BatchGetItem, and a Query of the log past each) and its log (Query)."""

# The WebSocket functions: the sessions table, the management API and the WebSocket API itself are granted by
# lakesync_infra.realtime; here only what they touch of the buffer. $default serves pushes and pulls.
ACCESS: Final[Mapping[str, FunctionAccess]] = {
    **_ACCESS,
    "actions": FunctionAccess(
        tables=_union(_ACCESS["push"].tables, _ACTIONS.tables),
        index_actions=_union(_ACCESS["push"].index_actions, _ACTIONS.index_actions),
    ),
    CONNECTOR_POLL: FunctionAccess(
        tables=_union(_ACCESS["push"].tables, _CONNECTOR_POLL.tables),
        index_actions=_union(_ACCESS["push"].index_actions, _CONNECTOR_POLL.index_actions),
        timeout_s=_CONNECTOR_POLL.timeout_s,
        verifies_tokens=_CONNECTOR_POLL.verifies_tokens,
    ),
    "ws_connect": FunctionAccess(),
    "ws_message": FunctionAccess(
        tables=_union(_ACCESS["push"].tables, _ACCESS["pull"].tables),
        index_actions=_union(_ACCESS["push"].index_actions, _ACCESS["pull"].index_actions),
    ),
    # the HTTP API's authorizer: the API settings' gateways and JWT keys (the secret), no table.
    AUTHORIZER: FunctionAccess(timeout_s=AUTHORIZER_TIMEOUT_S),
    # the broadcaster: each gateway's sync rules (GetItem), once per batch; under rules with streams, each connected
    # client's subscriptions (GetItem in the dedup table); under rules filtering by a membership table, the table
    # read as the pull reads it (MEMBERSHIP_READS) and its checkpoint objects.
    BROADCAST: FunctionAccess(
        tables=_union({"config": ("dynamodb:GetItem",), "dedup": ("dynamodb:GetItem",)}, MEMBERSHIP_READS),
        api=False,
        checkpoint_objects=True,
        timeout_s=BROADCAST_TIMEOUT_S,
    ),
}


def function_access(config: LakeSyncConfig, name: str) -> FunctionAccess:
    """What function ``name`` touches in ``config``'s environment: :data:`ACCESS`; where the flush function is
    deployed, its run records for the lake tick and the flush trigger, which start it (:data:`RUN_RECORDS`); with
    both engines, the trigger's reads of the backlog (:data:`BACKLOG_READS`)."""
    access = ACCESS[name]
    if name not in (FLUSH_TRIGGER, LAKE_TICK) or "function" not in config.flush_engines:
        return access
    tables = _union(access.tables, RUN_RECORDS)
    if name == FLUSH_TRIGGER and len(config.flush_engines) > 1:
        tables = _union(tables, BACKLOG_READS)
    return replace(access, tables=tables)
