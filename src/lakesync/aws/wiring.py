"""The services' dependencies on AWS: every port bound to its DynamoDB, S3 or Secrets Manager adapter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from lakesync.aws.action_store import DynamoDBActionStore
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.clients import dynamodb_client, lambda_client
from lakesync.aws.config_store import DynamoDBConfigStore, DynamoDBPullBasisReader
from lakesync.aws.objects import S3ObjectStore
from lakesync.aws.rate_limits import DynamoDBRateLimitCounter
from lakesync.aws.settings.api import Settings
from lakesync.aws.settings.connectors import ConnectorSettings
from lakesync.aws.settings.env import SettingsError
from lakesync.aws.settings.lake import FlushFunctionRef, FlushTriggerSettings, LakeTickSettings
from lakesync.aws.settings.materialise import MaterialiseSettings
from lakesync.aws.settings.realtime import BroadcastSettings, RealtimeSettings
from lakesync.aws.since_sessions import DynamoDBSinceSessions
from lakesync.aws.subscription_store import DynamoDBSubscriptionStore
from lakesync.gateway.basis_cache import CachedPullBasis
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.limits import RateLimiter
from lakesync.gateway.membership_view import GatewayMemberships

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from lakesync.aws.flush_runs import FunctionJobStarter
    from lakesync.aws.jobs import FlushEngines, RunStarter
    from lakesync.aws.lake_tick import JobRunner, LakeTick
    from lakesync.aws.tables import TableNames
    from lakesync.core.lake_work import FlushEngine, JobKind
    from lakesync.gateway.materialise import MaterialiseDeps
    from lakesync.gateway.realtime import BroadcastDeps
    from lakesync.ports import ConnectionSender, ConnectionStore, PullBasisReader

# Each function's builder imports what only it needs, so a function's first request loads no other's modules.


def gateway_deps(settings: Settings, connectors: ConnectorSettings | None = None) -> GatewayDeps:
    """Stores over one DynamoDB client (boto3 honours ``AWS_ENDPOINT_URL``), the checkpoint bucket when configured
    (its S3 client made on first use), the gateway settings, the membership tables read over those stores
    (:class:`~lakesync.gateway.membership_view.GatewayMemberships`), and the registered connectors
    (:func:`connector_parts`)."""
    client = dynamodb_client()
    config = DynamoDBConfigStore(client, settings.tables)
    deps = GatewayDeps(
        buffer=DynamoDBBufferStore(client, settings.tables),
        config=config,
        actions=DynamoDBActionStore(client, settings.tables),
        settings=settings.gateway_settings(),
        objects=S3ObjectStore(settings.checkpoint_bucket) if settings.checkpoint_bucket else None,
        pull_basis=_pull_basis(DynamoDBPullBasisReader(client, settings.tables), settings.pull_basis_ttl_ms),
        since_sessions=DynamoDBSinceSessions(client, settings.tables),
        limiter=_limiter(client, settings),
        subscriptions=DynamoDBSubscriptionStore(client, settings.tables),
    )
    deps.memberships = GatewayMemberships(deps)
    if connectors is not None:
        connector_parts(deps, client, settings, connectors)
    return deps


def _limiter(client: DynamoDBClient, settings: Settings) -> RateLimiter | None:
    """The per-caller rate limits over counters in the dedup table (``None`` when every limit is lifted)."""
    if not settings.rate_limits:
        return None
    return RateLimiter(DynamoDBRateLimitCounter(client, settings.tables), settings.rate_limits)


def _pull_basis(reader: PullBasisReader, ttl_ms: int) -> PullBasisReader:
    return CachedPullBasis(reader, ttl_ms / 1000) if ttl_ms > 0 else reader


def connector_parts(deps: GatewayDeps, client: object, settings: Settings, connectors: ConnectorSettings) -> None:
    """Give ``deps`` the connector runtime (secrets in Secrets Manager, or files in ``secrets_dir``), the position
    store and the scheduler (EventBridge Scheduler, the local poll loop's, or none); make the settings' network
    policy the process's (:mod:`lakesync.egress`)."""
    from pathlib import Path

    from lakesync import egress
    from lakesync.aws.connector_positions import DynamoDBPositionStore
    from lakesync.connectors.runtime import ConnectorRuntime
    from lakesync.connectors.secrets import FileSecretStore, SecretStore

    egress.configure(connectors.network)
    secrets: SecretStore
    if connectors.secrets_dir:
        secrets = FileSecretStore(Path(connectors.secrets_dir))
    else:
        from lakesync.aws.connector_secrets import SecretsManagerSecretStore
        from lakesync.aws.secrets import secretsmanager_client

        secrets = SecretsManagerSecretStore(secretsmanager_client)
    deps.connectors = ConnectorRuntime(deps.config, secrets, secret_prefix=connectors.secret_prefix)
    deps.positions = DynamoDBPositionStore(client, settings.tables)  # type: ignore[arg-type]
    deps.connector_secret_prefix = connectors.secret_prefix
    deps.destination_secret_prefix = connectors.destination_secret_prefix
    if connectors.scheduler == "eventbridge":
        from lakesync.aws.connector_scheduler import EventBridgeConnectorScheduler, scheduler_client

        assert connectors.schedule_group and connectors.poll_function_arn and connectors.scheduler_role_arn
        deps.connector_scheduler = EventBridgeConnectorScheduler(
            scheduler_client,
            group=connectors.schedule_group,
            target_arn=connectors.poll_function_arn,
            role_arn=connectors.scheduler_role_arn,
        )
    elif connectors.scheduler == "local":
        from lakesync.gateway.memory import RecordingScheduler

        deps.connector_scheduler = RecordingScheduler()


def materialise_deps(settings: MaterialiseSettings) -> MaterialiseDeps:
    """The consumer's dependencies: the claim-check bucket, the config store and the configured destinations (their
    secrets read from Secrets Manager)."""
    from lakesync import egress
    from lakesync.aws.destinations import ConfiguredDestinations
    from lakesync.aws.secrets import secretsmanager_client
    from lakesync.gateway.materialise import MaterialiseDeps

    egress.configure(settings.network)
    config = DynamoDBConfigStore(dynamodb_client(), settings.tables)
    return MaterialiseDeps(
        payloads=S3ObjectStore(settings.claim_check_bucket),
        bucket=settings.claim_check_bucket,
        config=config,
        destinations=ConfiguredDestinations(
            config, secretsmanager_client, secret_prefix=settings.destination_secret_prefix
        ),
    )


def lake_tick(settings: LakeTickSettings) -> LakeTick:
    """The lake tick: the flush store and the config store over one DynamoDB client, the checkpoint bucket when
    configured, a starter per Glue job over one Glue client, and the flush's deployed engines as one starter
    (:class:`~lakesync.aws.jobs.FlushEngines`, its backlog read from the heads); clients made here, on the first
    tick."""
    from lakesync.aws.flush_store import FlushStore
    from lakesync.aws.jobs import FlushEngines, GlueJobStarter, glue_client
    from lakesync.aws.lake_tick import LakeReader, LakeTick
    from lakesync.core.lake_work import flush_backlog

    client = dynamodb_client()
    bucket = settings.checkpoint_bucket
    reader = LakeReader(
        FlushStore(client, settings.tables),
        DynamoDBConfigStore(client, settings.tables),
        settings.gateway_ids,
        S3ObjectStore(bucket) if bucket else None,
    )
    glue = glue_client()
    runners: dict[JobKind, JobRunner] = {job: GlueJobStarter(glue, settings.job_names[job]) for job in DOWNSTREAM}
    engines: dict[FlushEngine, RunStarter] = {}
    if "flush" in settings.job_names:
        engines["glue"] = GlueJobStarter(glue, settings.job_names["flush"])
    if settings.flush_function is not None:
        engines["function"] = flush_function_starter(settings.flush_function, settings.tables, client)
    runners["flush"] = FlushEngines(
        engines,
        backlog=lambda: flush_backlog(reader.heads().values()),
        max_backlog=settings.flush_function_max_backlog,
    )
    return LakeTick(reader, runners, publishing=settings.flush_publishes, compact_policy=settings.compact_policy)


DOWNSTREAM: Final[tuple[JobKind, ...]] = ("compact", "checkpoint")
"""The lake jobs after the flush, always Glue jobs."""


def flush_trigger_starter(settings: FlushTriggerSettings) -> FlushEngines:
    """The flush trigger's starter: the deployed engines as the tick's (a Glue run asked for ``STANDARD``: a shard over
    its flush threshold is on its way to backpressure, so its flush must not wait for Flex capacity), the backlog
    read from the heads of the gateways' shards."""
    from lakesync.aws.flush_store import FlushStore
    from lakesync.aws.jobs import FlushEngines, GlueJobStarter, glue_client
    from lakesync.core.lake_work import flush_backlog

    engines: dict[FlushEngine, RunStarter] = {}
    if settings.job_name is not None:
        engines["glue"] = GlueJobStarter(glue_client(), settings.job_name, execution_class="STANDARD")
    client = dynamodb_client() if settings.tables is not None else None
    if settings.flush_function is not None:
        assert settings.tables is not None
        engines["function"] = flush_function_starter(settings.flush_function, settings.tables, client)

    def backlog() -> int:
        assert client is not None and settings.tables is not None  # both engines: the function's tables are given
        _, heads = FlushStore(client, settings.tables).shards(settings.gateway_ids)
        return flush_backlog(heads.values())

    return FlushEngines(engines, backlog=backlog, max_backlog=settings.flush_function_max_backlog)


def flush_function_starter(
    function: FlushFunctionRef, tables: TableNames, client: DynamoDBClient | None = None
) -> FunctionJobStarter:
    """The starter of the flush function: its run records in the config table, its runs queued by ``Invoke``."""
    from lakesync.aws.flush_runs import FlushRunLog, FunctionJobStarter

    records = FlushRunLog(client or dynamodb_client(), tables, timeout_s=function.timeout_s)
    return FunctionJobStarter(lambda_client(), function.name, records)


class Realtime:
    """The WebSocket functions' dependencies: the sessions table and, where the function sends, the management API
    sender (its client made on first send).

    Args:
        connections: The session store.
        sender: The sender, or ``None`` where the function is not configured to send.
    """

    def __init__(self, connections: ConnectionStore, sender: ConnectionSender | None = None) -> None:
        self.connections = connections
        self._sender = sender

    @property
    def sender(self) -> ConnectionSender:
        """The sender.

        Raises:
            SettingsError: no callback URL is configured.
        """
        if self._sender is None:
            raise SettingsError("Invalid LakeSync configuration: missing LAKESYNC_WS_CALLBACK_URL")
        return self._sender


def realtime(settings: RealtimeSettings) -> Realtime:
    """The sessions over DynamoDB and, with a callback URL, a :class:`~lakesync.aws.ws_sender.ManagementApiSender`."""
    from lakesync.aws.connections import DynamoDBConnectionStore
    from lakesync.aws.ws_sender import ManagementApiSender

    sender = ManagementApiSender(settings.callback_url) if settings.callback_url else None
    return Realtime(DynamoDBConnectionStore(dynamodb_client(), settings.connections_table), sender)


def broadcast_deps(settings: BroadcastSettings) -> BroadcastDeps:
    """The broadcaster's dependencies over one DynamoDB client: sync rules from the config table, the sessions, the
    management API, the clients' stream subscriptions (the dedup table) and the membership tables
    (:func:`_broadcast_memberships`)."""
    from lakesync.gateway.realtime import BroadcastDeps

    client = dynamodb_client()
    live = realtime(settings.realtime)
    return BroadcastDeps(
        config=DynamoDBConfigStore(client, settings.tables),
        connections=live.connections,
        sender=live.sender,
        subscriptions=DynamoDBSubscriptionStore(client, settings.tables),
        memberships=_broadcast_memberships(client, settings),
    )


def _broadcast_memberships(client: DynamoDBClient, settings: BroadcastSettings) -> GatewayMemberships:
    """The membership tables as the pull reads them (:func:`gateway_deps`): the rules and shard registry, the heads
    and the log of a table's shards, the checkpoint bucket when configured (its S3 client made on first use), the
    sub-shards. Nothing is read until a broadcast's rules name a membership table."""
    tables = settings.tables
    stores = GatewayDeps(
        buffer=DynamoDBBufferStore(client, tables),
        config=DynamoDBConfigStore(client, tables),
        actions=DynamoDBActionStore(client, tables),  # a GatewayDeps field the membership view never reads
        settings=GatewaySettings(sub_shards=dict(settings.sub_shards)),
        objects=S3ObjectStore(settings.checkpoint_bucket) if settings.checkpoint_bucket else None,
        pull_basis=DynamoDBPullBasisReader(client, tables),
    )
    return GatewayMemberships(stores)
