"""The deployment's configuration: one frozen :class:`LakeSyncConfig` per environment, parsed from CDK context.

Context keys (``infra/cdk.json`` holds the defaults; ``-c key=value`` overrides them):

* ``lakesync:environments`` -- comma-separated environment names (one stack ``LakeSync-<name>`` each).
* ``lakesync:defaults`` -- a JSON object of settings for every environment.
* ``lakesync:env:<name>`` -- a JSON object of settings for one environment (wins over the defaults).

Settings use the camelCase spelling of the fields below (``gatewayIds``, ``flushIntervalMinutes``...); a value given
on the command line as a string is parsed as JSON. Unknown keys and invalid values are errors, all reported at once:
a typo must not silently deploy a default.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Final, Literal

from lakesync.api_routes import FUNCTIONS
from lakesync.aws.settings.variables import MAX_BODY_BYTES_LIMIT, MAX_PULL_BASIS_TTL_MS
from lakesync.core.lake_work import DEFAULT_FUNCTION_MAX_BACKLOG, FlushEngine
from lakesync.core.lake_work import FLUSH_ENGINES as FLUSH_ENGINE_KINDS
from lakesync.core.network import parse_networks
from lakesync.core.schema import is_valid_identifier
from lakesync.gateway.limits import parse_limits
from lakesync.lake.tables import GLUE_NAME, NAMESPACE

ENVIRONMENTS_KEY: Final = "lakesync:environments"
DEFAULTS_KEY: Final = "lakesync:defaults"
ENV_KEY_PREFIX: Final = "lakesync:env:"

FLUSH_FUNCTION: Final = "flush"
"""The flush function, deployed with ``flushEngine`` ``auto`` (the default) or ``function``."""
EXTRA_FUNCTIONS: Final = (
    "flush_trigger",
    "materialise",
    "rotate_secret",
    "lake_tick",
    "connector_poll",
    FLUSH_FUNCTION,
    "authorizer",
)
"""Functions deployed besides the API's (their handler modules are ``functions.<name>``)."""
REALTIME_FUNCTIONS: Final = ("ws_connect", "ws_message", "ws_broadcast")
"""The WebSocket API's route functions and the broadcaster (:mod:`lakesync_infra.realtime` wires them)."""
ALL_FUNCTIONS: Final = (*FUNCTIONS, *EXTRA_FUNCTIONS, *REALTIME_FUNCTIONS)

# CloudWatch Logs accepts only these retention periods.
LOG_RETENTION_DAYS: Final = frozenset(
    {1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}
)
FLUSH_ENGINES: Final = ("auto", "function", "glue")
API_GATEWAY_LOGS_ROLES: Final = ("existing", "create")
GLUE_WORKER_TYPES: Final = frozenset({"G.1X", "G.2X", "G.4X", "G.8X"})
_ENV_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,23}")
_GATEWAY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_SCHEDULE = re.compile(r"(rate|cron)\(.+\)")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_MAX_SUB_SHARDS = 256
_SECRET_PREFIX = re.compile(r"[A-Za-z0-9/_+=.@-]{1,400}/")
_AWS_IDS: Final = {
    "vpcId": re.compile(r"vpc-[0-9a-f]{8}(?:[0-9a-f]{9})?"),
    "privateSubnetIds": re.compile(r"subnet-[0-9a-f]{8}(?:[0-9a-f]{9})?"),
    "privateSubnetRouteTableIds": re.compile(r"rtb-[0-9a-f]{8}(?:[0-9a-f]{9})?"),
    "securityGroupIds": re.compile(r"sg-[0-9a-f]{8}(?:[0-9a-f]{9})?"),
}
_AZ = re.compile(r"[a-z]{2}(?:-[a-z]+)+-\d[a-z]|[a-z]{3}\d-az\d+")
UNRESERVED_MINIMUM: Final = 100
"""Lambda refuses a reservation that leaves fewer unreserved concurrent executions than this in the account and
region (AWS Lambda developer guide, "Configuring reserved concurrency")."""
DEFAULT_ACCOUNT_CONCURRENCY: Final = 1000
"""Lambda's default quota of concurrent executions per account and region. New accounts often start far lower (some
at 10) and AWS raises the quota with use: state the account's real quota (``accountConcurrency``; the Service Quotas
console, "Concurrent executions") when reserving concurrency."""
CONNECTOR_POLL: Final = "connector_poll"
DEFAULT_CONNECTOR_POLL_CONCURRENCY: Final = 5
"""Concurrent executions reserved for -- and so the most taken by -- the connector pollers by default
(``connectorPollConcurrency``). Each connector's schedule invokes the poller every minute and a poll may last 15
minutes, so a few slow connectors could otherwise hold dozens of executions and throttle the API; polls over the cap
are throttled and retried by Lambda (asynchronous invocations), and the next tick polls again anyway."""
CONNECTOR_FUNCTIONS: Final = (CONNECTOR_POLL, "pull", "actions")
"""The functions that open connectors (the poller, ``source=`` pulls, action handlers): ``materialiseVpc`` may place
them in its VPC too (``connectorFunctions``), so they reach private databases."""
_MAX_RESERVED = 10_000
DEFAULT_FLUSH_LAG_ALARM_MINUTES: Final = 60
"""The ``FlushLag`` alarm's least default threshold: an hour, four ticks of the default flush interval."""
FLUSH_LAG_ALARM_INTERVALS: Final = 4
"""By default the ``FlushLag`` alarm fires beyond this many flush intervals (when longer than
:data:`DEFAULT_FLUSH_LAG_ALARM_MINUTES`): a commit waits up to one interval for its tick in normal operation, plus its
run; a busy or deferred tick adds one more."""
MAX_FLUSH_LAG_ALARM_MINUTES: Final = 7 * 24 * 60
"""Half the buffer's 14-day log TTL (:data:`lakesync.core.log.LOG_TTL_S`): unflushed entries older than the TTL are
gone, so the alarm must leave a week to act."""
_MAX_SUBNETS = 16  # Lambda's limits on a function's VPC configuration
_MAX_SECURITY_GROUPS = 5


class ConfigError(ValueError):
    """The CDK context does not describe a usable deployment."""


@dataclass(frozen=True, slots=True)
class MaterialiseVpc:
    """The existing VPC the materialise function runs in (to reach RDS/Aurora or other private databases).

    Imported offline from these attributes (``ec2.Vpc.from_vpc_attributes``): the synth never looks anything up.

    Attributes:
        vpc_id: The VPC.
        availability_zones: The zones of the subnets, in the same order.
        private_subnet_ids: Private subnets the function's network interfaces go in (one per zone).
        security_group_ids: Security groups of the function (they must allow its outbound traffic: HTTPS 443 to
            the endpoints, the databases' ports).
        private_subnet_route_table_ids: The subnets' route tables (same order; subnets sharing one repeat it), where
            the S3 and DynamoDB gateway endpoints are added; required when ``create_endpoints``.
        create_endpoints: Whether the stack creates the VPC endpoints the function needs to reach AWS (gateway:
            S3, DynamoDB; interface: Secrets Manager). ``False``: the VPC provides them, or a NAT gateway.
        connector_functions: Connector functions (of :data:`CONNECTOR_FUNCTIONS`) placed in the same subnets and
            security groups, to reach connector sources in the VPC. The endpoints serve them too; a connector of an
            internet API (Jira, Salesforce) then needs a NAT gateway in the VPC.
    """

    vpc_id: str
    availability_zones: tuple[str, ...]
    private_subnet_ids: tuple[str, ...]
    security_group_ids: tuple[str, ...]
    private_subnet_route_table_ids: tuple[str, ...] = ()
    create_endpoints: bool = True
    connector_functions: tuple[str, ...] = ()

    @property
    def functions(self) -> tuple[str, ...]:
        """Every function placed in the VPC: ``materialise`` and the configured connector functions."""
        return ("materialise", *self.connector_functions)

    @classmethod
    def parse(cls, raw: object, errors: list[str]) -> MaterialiseVpc | None:
        """Build from the ``materialiseVpc`` setting, appending every problem to ``errors`` (``None`` if unusable)."""
        key = "materialiseVpc"
        if not isinstance(raw, Mapping):
            errors.append(f"{key} must be an object {{vpcId, availabilityZones, privateSubnetIds, ...}}")
            return None
        known = {_camel(f.name): f.name for f in fields(cls)}
        if unknown := sorted(set(raw) - set(known)):
            errors.append(f"{key}: unknown keys {unknown} (known: {sorted(known)})")
        before = len(errors)
        vpc_id = raw.get("vpcId")
        if not isinstance(vpc_id, str) or not _AWS_IDS["vpcId"].fullmatch(vpc_id):
            errors.append(f"{key}.vpcId must be a VPC id (vpc-...)")
        lists = _vpc_id_lists(raw, errors)
        zones, subnets, groups = lists["availabilityZones"], lists["privateSubnetIds"], lists["securityGroupIds"]
        tables = lists["privateSubnetRouteTableIds"]
        create = raw.get("createEndpoints", True)
        if not isinstance(create, bool):
            errors.append(f"{key}.createEndpoints must be true or false")
        if not zones:
            errors.append(f"{key}.availabilityZones must name at least one zone (two for availability)")
        if len(subnets) != len(zones) or len(subnets) > _MAX_SUBNETS:
            errors.append(
                f"{key}.privateSubnetIds must hold one subnet per zone, in the zones' order (max {_MAX_SUBNETS})"
            )
        if not 1 <= len(groups) <= _MAX_SECURITY_GROUPS:
            errors.append(f"{key}.securityGroupIds must hold 1 to {_MAX_SECURITY_GROUPS} security groups")
        if tables and len(tables) != len(subnets):
            errors.append(f"{key}.privateSubnetRouteTableIds must hold one route table per subnet, in their order")
        elif create is True and not tables:
            errors.append(
                f"{key}.privateSubnetRouteTableIds is required when createEndpoints is true (the S3 and DynamoDB "
                "gateway endpoints are routes in them)"
            )
        connectors = raw.get("connectorFunctions", [])
        if not isinstance(connectors, list) or not all(c in CONNECTOR_FUNCTIONS for c in connectors):
            errors.append(f"{key}.connectorFunctions must be a list of {list(CONNECTOR_FUNCTIONS)}")
        elif len(set(connectors)) != len(connectors):
            errors.append(f"{key}.connectorFunctions lists a function twice")
        if len(errors) > before:
            return None
        return cls(str(vpc_id), zones, subnets, groups, tables, bool(create), tuple(connectors))


@dataclass(frozen=True, slots=True)
class LakeSyncConfig:
    """Everything that differs between deployments; the defaults suit a small production environment.

    Attributes:
        name: The environment's name (stack ``LakeSync-<name>``).
        account: AWS account (``None``: the CLI's, or environment-agnostic).
        region: AWS region (``None``: the CLI's, or environment-agnostic).
        gateway_ids: Gateways served (``LAKESYNC_GATEWAY_IDS``; the jobs process these).
        sub_shards: Hash sub-shards per hot table (``LAKESYNC_SUB_SHARDS``).
        flush_interval_minutes: How often the lake tick looks for flush work (the flush job starts only when there is
            some; pushes over the threshold and ``POST /v1/admin/flush`` start it sooner).
        flush_lag_alarm_minutes: The ``FlushLag`` alarm's threshold: it fires when the oldest commit not yet in the
            lake (what a restore from the lake would lose) is older than this. ``None`` (default): the longer of
            :data:`DEFAULT_FLUSH_LAG_ALARM_MINUTES` and :data:`FLUSH_LAG_ALARM_INTERVALS` flush intervals
            (:attr:`flush_lag_limit_minutes`). A value must exceed ``flush_interval_minutes`` (the lag reaches it
            between two ticks in normal operation) and be at most :data:`MAX_FLUSH_LAG_ALARM_MINUTES`.
        compact_schedule: EventBridge Scheduler expression of the lake tick for the compaction job.
        compact_min_flush_runs: Flush runs since the last compaction that make the next one due (1..25): each run
            writes a small file per partition it touches, and a compaction of a few of them would bill a Glue
            minimum for little.
        compact_max_wait_minutes: Or how long after the first of those runs finished compaction is due anyway, so a
            quiet lake is compacted, and then checkpointed, within this time.
        checkpoint_schedule: EventBridge Scheduler expression of the lake tick for the checkpoint job.
        flush_threshold_bytes: Unflushed bytes per shard that request a flush (``None``: the code's default).
        backpressure_bytes: Unflushed bytes per shard that make pushes 503 (``None``: the code's default).
        max_body_bytes: Largest request body (``None``: the code's default).
        pull_basis_ttl_ms: How long a pull function serves cursor pulls from its last read of the sync rules and
            the shard registry (``None``: the code's default, a second; 0 reads them for every pull): a rules change
            or a new table reaches other functions' cursor pulls within it (docs/pull.md, "The basis between pulls").
        reserved_concurrency: Reserved concurrent executions per function name (absent: unreserved; the connector
            poller's is ``connector_poll_concurrency``). With the poller's, their sum must leave
            :data:`UNRESERVED_MINIMUM` of ``account_concurrency`` unreserved, as Lambda requires.
        connector_poll_concurrency: Concurrent executions reserved for the connector poller, which also caps it.
            ``auto`` (default): :data:`DEFAULT_CONNECTOR_POLL_CONCURRENCY` if ``account_concurrency`` leaves room for
            it beside ``reserved_concurrency``, else none (an account at 100 or less can reserve nothing, so the
            poller runs unreserved there). A number is reserved as given and must fit; ``None``: unreserved.
        account_concurrency: The account's Lambda quota of concurrent executions in the region, which the
            reservations are checked against (default :data:`DEFAULT_ACCOUNT_CONCURRENCY`, the standard quota; a
            new account may have far less, and with 100 or less nothing can be reserved).
        lambda_memory_mb: Memory of the API functions (CPU scales with it).
        api_timeout_seconds: Timeout of the API functions (API Gateway gives up after 30 s).
        api_throttle_rate: Steady-state requests per second of the API stage.
        api_throttle_burst: Burst requests of the API stage.
        public_throttle_rate: Steady-state requests per second of each public route (health, the API document, the
            connector types): the only routes an anonymous caller reaches a function on.
        public_throttle_burst: Burst requests of each public route.
        authorizer_cache_seconds: How long API Gateway reuses the authorizer's answer for a token (0 to 3,600; 0:
            every request invokes it).
        rate_limits: The per-caller rate limits of the API functions (``LAKESYNC_RATE_LIMITS``: ``family=requests/
            seconds`` entries; ``None``: the defaults of :mod:`lakesync.gateway.limits`).
        max_token_lifetime_seconds: The longest lifetime a token may claim, enforced by every function and the
            authorizer that verify tokens (``LAKESYNC_MAX_TOKEN_LIFETIME_S``; 60 s to 30 days, default 24 h).
        cors_origins: Origins allowed by CORS preflight (empty: no CORS configuration).
        log_retention_days: Retention of every log group.
        log_level: ``POWERTOOLS_LOG_LEVEL`` of the functions.
        lambda_system_log_level: Which of Lambda's own log lines reach CloudWatch Logs (the functions log in
            Lambda's JSON format). ``WARN`` (default) drops the START and REPORT lines of every invocation, about
            350 bytes each, $0.18 per million invocations (docs/cost.md). ``INFO`` keeps them, for each invocation's
            duration and memory used in the logs (CloudWatch's Lambda metrics have the durations either way).
        lake_noncurrent_days: Days an overwritten or deleted lake/checkpoint object version is kept.
        claim_check_days: Days a claim-check payload is kept (longer than the queue's 14-day retention).
        access_log_days: Days S3 server access logs are kept.
        secret_rotation_days: Days between rotations of the JWT secret.
        glue_worker_type: Glue worker type of the jobs.
        glue_execution_class: ``FLEX`` (default): the jobs run on Glue's spare capacity at $0.29 instead of $0.44 a
            DPU-hour, and a run may wait for capacity to start (G.1X or G.2X workers only). The flush trigger (a shard
            over its flush threshold, or ``POST /v1/admin/flush``) always asks for a ``STANDARD`` run, so a buffer
            near backpressure is flushed without that wait. ``STANDARD``: every run starts at once.
        glue_workers: Glue workers per job run (at least 2).
        glue_timeout_minutes: Timeout of one job run.
        compact_maintain: Whether compaction runs Iceberg maintenance after compacting.
        flush_engine: Where the flush runs. ``auto`` (default): both the ``flush`` Lambda function on pyiceberg and
            the Glue flush job on Spark are deployed, and the lake tick and the flush trigger give each run to the
            function while the backlog (unflushed entries) is at most ``flush_function_max_backlog`` -- billed by the
            millisecond, it finishes well inside its 15 minutes -- and to the Glue job above it (parallel workers, no
            15-minute limit); a Glue job costs nothing while it does not run. ``function`` / ``glue``: only that
            engine is deployed, and every run is its. Compaction and checkpoints are Glue jobs either way.
        flush_function_max_backlog: With ``auto``: the largest backlog a run goes to the function for (default
            :data:`lakesync.core.lake_work.DEFAULT_FUNCTION_MAX_BACKLOG`, measured: ``make bench-cost``).
        sql_source_pulls: Whether ``pull`` is deployed with the SQL drivers (the ``materialise`` asset, x86_64), so
            that ``?source=`` pulls of PostgreSQL/MySQL connectors work; off, the pull function stays on the small
            ARM64 asset (the hot read path: a smaller package starts faster) and such pulls answer 502.
        tracing: Whether the functions trace with X-Ray (active tracing). Off, they neither send traces (X-Ray bills
            $5 per million recorded, about 5 % of invocations at sustained traffic) nor import the X-Ray SDK, which is
            about 0.7 s of a cold start.
        dashboard: Whether to create the CloudWatch dashboard. It is free as one of the account's first three
            dashboards (it shows at most 50 metrics) and costs $3 a month beyond them, more than the rest of an idle
            deployment, so it is opt-in; the alarms do not depend on it.
        removal_policy: ``retain`` keeps data stores when the stack is deleted; ``destroy`` removes them (and
            empties the buckets) -- for throwaway environments only.
        alarm_email: Subscribed to the alarm topic when given.
        materialise_concurrency: Most concurrent invocations of the materialise function (the SQS event source's
            maximum concurrency, 2..1000); each holds its own database connection.
        materialise_memory_mb: Memory of the materialise function.
        materialise_vpc: Run the materialise function in this VPC (``None``: outside any VPC, which suffices for
            databases reachable over the internet and for BigQuery).
        destination_secret_prefix: Name prefix of the destinations' Secrets Manager secrets, which the materialise
            function may read (``None``: ``lakesync/<name>/destinations/``; must end with ``/``). A gateway's
            destinations may name only secrets under ``<prefix><gateway>/``.
        allowed_networks: CIDRs connectors and destinations may reach although private (an RDS in the VPC:
            ``["10.0.0.0/16"]``); loopback, private and CGNAT addresses are refused otherwise, link-local and
            metadata addresses always (``LAKESYNC_ALLOWED_NETWORKS``).
        api_gateway_logs_role: API Gateway's CloudWatch Logs role, which a WebSocket stage's access logs need: one
            setting per account and region. ``existing`` (default): the account already has it (a prerequisite, or
            another stack manages it). ``create``: this stack creates it (retained when the stack is deleted); at
            most one environment per account and region may say so.
    """

    name: str
    account: str | None = None
    region: str | None = None
    gateway_ids: tuple[str, ...] = ("default",)
    sub_shards: Mapping[str, int] = field(default_factory=dict, hash=False)
    flush_interval_minutes: int = 15
    flush_lag_alarm_minutes: int | None = None
    compact_schedule: str = "rate(1 hour)"
    compact_min_flush_runs: int = 16
    compact_max_wait_minutes: int = 360
    checkpoint_schedule: str = "rate(6 hours)"
    flush_threshold_bytes: int | None = None
    backpressure_bytes: int | None = None
    max_body_bytes: int | None = None
    pull_basis_ttl_ms: int | None = None
    reserved_concurrency: Mapping[str, int] = field(default_factory=dict, hash=False)
    account_concurrency: int = DEFAULT_ACCOUNT_CONCURRENCY
    connector_poll_concurrency: int | Literal["auto"] | None = "auto"
    lambda_memory_mb: int = 1024
    api_timeout_seconds: int = 20
    api_throttle_rate: int = 200
    api_throttle_burst: int = 400
    public_throttle_rate: int = 20
    public_throttle_burst: int = 40
    authorizer_cache_seconds: int = 300
    rate_limits: str | None = None
    max_token_lifetime_seconds: int = 86_400
    cors_origins: tuple[str, ...] = ()
    log_retention_days: int = 30
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    lambda_system_log_level: Literal["DEBUG", "INFO", "WARN"] = "WARN"
    lake_noncurrent_days: int = 30
    claim_check_days: int = 15
    access_log_days: int = 90
    secret_rotation_days: int = 30
    glue_worker_type: str = "G.1X"
    glue_execution_class: Literal["STANDARD", "FLEX"] = "FLEX"
    glue_workers: int = 2
    glue_timeout_minutes: int = 60
    compact_maintain: bool = True
    flush_engine: Literal["auto", "function", "glue"] = "auto"
    flush_function_max_backlog: int = DEFAULT_FUNCTION_MAX_BACKLOG
    tracing: bool = True
    dashboard: bool = False
    sql_source_pulls: bool = False
    removal_policy: Literal["retain", "destroy"] = "retain"
    alarm_email: str | None = None
    materialise_concurrency: int = 5
    materialise_memory_mb: int = 1024
    materialise_vpc: MaterialiseVpc | None = None
    destination_secret_prefix: str | None = None
    allowed_networks: tuple[str, ...] = ()
    api_gateway_logs_role: Literal["existing", "create"] = "existing"

    @property
    def stack_name(self) -> str:
        """The environment's stack name."""
        return f"LakeSync-{self.name}"

    @property
    def deployed_functions(self) -> tuple[str, ...]:
        """The functions the environment deploys: :data:`ALL_FUNCTIONS`, without ``flush`` on the Glue engine."""
        return tuple(f for f in ALL_FUNCTIONS if f != FLUSH_FUNCTION or "function" in self.flush_engines)

    @property
    def flush_engines(self) -> tuple[FlushEngine, ...]:
        """The flush engines deployed: both with ``auto``, else the one named."""
        return FLUSH_ENGINE_KINDS if self.flush_engine == "auto" else (self.flush_engine,)

    @property
    def flush_lag_limit_minutes(self) -> int:
        """The ``FlushLag`` alarm's threshold in minutes: ``flush_lag_alarm_minutes``, or its default."""
        if self.flush_lag_alarm_minutes is not None:
            return self.flush_lag_alarm_minutes
        return max(DEFAULT_FLUSH_LAG_ALARM_MINUTES, FLUSH_LAG_ALARM_INTERVALS * self.flush_interval_minutes)

    @property
    def connector_poll_reserved(self) -> int | None:
        """The connector poller's reserved concurrency (``connector_poll_concurrency`` with ``auto`` resolved)."""
        if self.connector_poll_concurrency != "auto":
            return self.connector_poll_concurrency
        room = self.account_concurrency - UNRESERVED_MINIMUM - sum(self.reserved_concurrency.values())
        return DEFAULT_CONNECTOR_POLL_CONCURRENCY if room >= DEFAULT_CONNECTOR_POLL_CONCURRENCY else None

    @property
    def database_name(self) -> str:
        """The environment's Glue database (the jobs' Iceberg namespace): :func:`glue_database` of its name."""
        return glue_database(self.name)

    @property
    def destination_secrets(self) -> str:
        """The name prefix of the destinations' secrets (configured, or ``lakesync/<name>/destinations/``)."""
        return self.destination_secret_prefix or f"lakesync/{self.name}/destinations/"

    @property
    def connector_secrets(self) -> str:
        """The name prefix of the connectors' secrets, ``lakesync/<name>/connectors`` (registration creates
        ``<prefix>/<gateway>/<connector>/<field>``): per environment, so two environments in one account, whose
        gateways and connectors may share names, never write or read each other's credentials."""
        return f"lakesync/{self.name}/connectors"

    @classmethod
    def from_settings(cls, name: str, settings: Mapping[str, Any]) -> LakeSyncConfig:
        """Build and validate from camelCase settings.

        Raises:
            ConfigError: listing every unknown key and invalid value.
        """
        errors: list[str] = []
        known = {_camel(f.name): f.name for f in fields(cls) if f.name != "name"}
        unknown = sorted(set(settings) - set(known))
        if unknown:
            errors.append(f"unknown settings {unknown} (known: {sorted(known)})")
        values: dict[str, Any] = {known[k]: _maybe_json(v) for k, v in settings.items() if k in known}
        for key in ("gateway_ids", "cors_origins", "allowed_networks"):
            if isinstance(values.get(key), list):
                values[key] = tuple(values[key])
        if "gateway_ids" in values and isinstance(values["gateway_ids"], str):
            values["gateway_ids"] = tuple(g.strip() for g in values["gateway_ids"].split(","))
        if values.get("materialise_vpc") is not None:
            values["materialise_vpc"] = MaterialiseVpc.parse(values["materialise_vpc"], errors)
        try:
            config = cls(name=name, **values)
        except TypeError as exc:  # pragma: no cover - every field has a default, so only a bug lands here
            raise ConfigError(str(exc)) from exc
        errors.extend(config.problems())
        if errors:
            raise ConfigError(f"Invalid LakeSync configuration for environment {name!r}: " + "; ".join(errors))
        return config

    def problems(self) -> list[str]:
        """Everything wrong with this configuration (empty when valid)."""
        return [message for check in _CHECKS for message in check(self)]


# name -> (minimum, maximum, optional)
_INT_RANGES: Final[Mapping[str, tuple[int, int, bool]]] = {
    "flush_interval_minutes": (1, 24 * 60, False),
    "flush_lag_alarm_minutes": (2, MAX_FLUSH_LAG_ALARM_MINUTES, True),
    "compact_min_flush_runs": (1, 25, False),  # the flush function's run records keep 30, which the tick counts
    "compact_max_wait_minutes": (0, 7 * 24 * 60, False),
    "flush_threshold_bytes": (1, 2**40, True),
    "backpressure_bytes": (0, 2**40, True),
    # a base64-encoded (protobuf) body must fit Lambda's invocation payload with the rest of the event
    "max_body_bytes": (1, MAX_BODY_BYTES_LIMIT, True),
    "pull_basis_ttl_ms": (0, MAX_PULL_BASIS_TTL_MS, True),
    "account_concurrency": (1, 10_000_000, False),
    "lambda_memory_mb": (128, 10240, False),
    "api_timeout_seconds": (1, 29, False),
    "api_throttle_rate": (1, 1_000_000, False),
    "api_throttle_burst": (1, 1_000_000, False),
    "public_throttle_rate": (1, 1_000_000, False),
    "public_throttle_burst": (1, 1_000_000, False),
    "authorizer_cache_seconds": (0, 3600, False),  # API Gateway's range for a Lambda authorizer's cache TTL
    "max_token_lifetime_seconds": (60, 30 * 86_400, False),  # the functions' own range (aws/settings/variables)
    "lake_noncurrent_days": (1, 3650, False),
    "claim_check_days": (15, 3650, False),
    "access_log_days": (1, 3650, False),
    "secret_rotation_days": (1, 365, False),
    "glue_workers": (2, 1000, False),
    "glue_timeout_minutes": (1, 2880, False),
    "materialise_concurrency": (2, 1000, False),  # the SQS event source's MaximumConcurrency range
    "materialise_memory_mb": (128, 10240, False),
}


def _check_rate_limits(raw: object) -> list[str]:
    if not isinstance(raw, str):
        return ["rateLimits must be a string of family=requests/seconds entries"]
    try:
        parse_limits(raw)
    except ValueError as exc:
        return [f"rateLimits: {exc}"]
    return []


def _check_ints(config: LakeSyncConfig) -> list[str]:
    out = []
    for key, (lo, hi, optional) in _INT_RANGES.items():
        value = getattr(config, key)
        if value is None and optional:
            continue
        if not _is_int(value) or not lo <= value <= hi:
            out.append(f"{_camel(key)} must be an integer in {lo}..{hi}")
    return out


def _check_reserved_concurrency(reserved: object, quota: object, poll: object) -> list[str]:
    if not isinstance(reserved, Mapping):
        return ["reservedConcurrency must be an object {function: n}"]
    out = []
    for fn, n in reserved.items():
        if fn == CONNECTOR_POLL:
            out.append(f"reservedConcurrency: set {fn}'s with connectorPollConcurrency")
        elif fn not in ALL_FUNCTIONS:
            out.append(f"reservedConcurrency: unknown function {fn!r} (known: {list(ALL_FUNCTIONS)})")
        elif not _is_int(n) or n < 0:
            out.append(f"reservedConcurrency: {fn} must be an integer >= 0")
    if out or not _is_int(quota) or not all(_is_int(n) for n in reserved.values()):
        return out
    assert isinstance(quota, int)
    # "auto" reserves only what fits: only a number the configuration states can be refused
    reservations = {**reserved, **({CONNECTOR_POLL: poll} if _is_int(poll) else {})}
    total = sum(reservations.values())
    allowed = max(quota - UNRESERVED_MINIMUM, 0)
    if total > allowed:
        listed = ", ".join(
            f"{fn} {n}" + (" (connectorPollConcurrency)" if fn == CONNECTOR_POLL else "")
            for fn, n in reservations.items()
        )
        out.append(
            f"the functions reserve {total} concurrent executions ({listed}), but Lambda keeps {UNRESERVED_MINIMUM} "
            f"of the account's {quota} (accountConcurrency) unreserved for the rest, the API's functions among them, "
            f"so at most {allowed} can be reserved: lower reservedConcurrency or connectorPollConcurrency (null leaves "
            "the connector poller unreserved and uncapped), or raise the account's quota; new accounts often have a "
            "far lower quota than the standard 1000 -- check the account's Lambda 'Concurrent executions' quota and "
            "set accountConcurrency to it"
        )
    return out


def glue_database(environment: str) -> str:
    """The Glue database (Iceberg namespace) of an environment: ``lakesync_<env>``, Glue-safe and distinct per name.

    Glue keeps names in lower case and accepts only ``[a-z0-9_]``: ``-`` becomes ``_`` (environment names have no
    ``_``, so no two collide through it), and a name with capitals gets 8 hex digits of its SHA-256 appended, so
    ``Dev`` and ``dev`` (two stacks) get two databases.

    Raises:
        ValueError: the result is not a Glue name (only for names that are not valid environment names).
    """
    name = f"{NAMESPACE}_{environment.lower().replace('-', '_')}"
    if environment != environment.lower():
        name += "_" + hashlib.sha256(environment.encode("utf-8")).hexdigest()[:8]
    if not GLUE_NAME.fullmatch(name):
        raise ValueError(f"environment {environment!r} gives no valid Glue database name ({name!r})")
    return name


def _check_sub_shards(sub_shards: object) -> list[str]:
    if not isinstance(sub_shards, Mapping):
        return ['subShards must be an object {"table": n}']
    out = []
    for table, n in sub_shards.items():
        if not isinstance(table, str) or not is_valid_identifier(table):
            out.append(f"subShards: {table!r} is not a valid table name")
        elif not _is_int(n) or not 1 <= n <= _MAX_SUB_SHARDS:
            out.append(f"subShards: {table} must map to an integer in 1..{_MAX_SUB_SHARDS}")
    return out


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_tuple_of(value: object, kind: type) -> bool:
    return isinstance(value, tuple) and all(isinstance(v, kind) for v in value)


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(part.capitalize() for part in rest)


def _maybe_json(value: Any) -> Any:
    """A command-line context value arrives as a string: parse it as JSON when it is JSON."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _as_object(key: str, value: Any) -> Mapping[str, Any]:
    value = _maybe_json(value)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"context {key} must be a JSON object, got {value!r}")
    return value


def environments(context: Mapping[str, Any]) -> list[LakeSyncConfig]:
    """The configuration of every environment named by the context.

    Args:
        context: The app's context (``lakesync:*`` keys; others are ignored).

    Raises:
        ConfigError: no environment is named, or one is misconfigured.
    """
    raw = context.get(ENVIRONMENTS_KEY) or ""
    names = raw if isinstance(raw, list) else [n.strip() for n in str(raw).split(",")]
    names = [n for n in names if n]
    if not names:
        raise ConfigError(f"no environment: set context {ENVIRONMENTS_KEY} (e.g. -c {ENVIRONMENTS_KEY}=dev)")
    if len(set(names)) != len(names):
        raise ConfigError(f"{ENVIRONMENTS_KEY} names an environment twice: {names}")
    defaults = _as_object(DEFAULTS_KEY, context.get(DEFAULTS_KEY))
    configs = [
        LakeSyncConfig.from_settings(
            name, {**defaults, **_as_object(ENV_KEY_PREFIX + name, context.get(ENV_KEY_PREFIX + name))}
        )
        for name in names
    ]
    _check_one_logs_role(configs)
    return configs


def _check_one_logs_role(configs: list[LakeSyncConfig]) -> None:
    # AWS::ApiGateway::Account is one setting per account and region: two stacks creating it would overwrite each
    # other's role. Environments without an account or region deploy to the CLI's, so those compare equal.
    creators: dict[tuple[str | None, str | None], list[str]] = {}
    for config in configs:
        if config.api_gateway_logs_role == "create":
            creators.setdefault((config.account, config.region), []).append(config.name)
    for (account, region), names in creators.items():
        if len(names) > 1:
            where = f"account {account or '(the CLI default)'}, region {region or '(the CLI default)'}"
            raise ConfigError(
                f"environments {names} all set apiGatewayLogsRole: create in {where}: API Gateway keeps one "
                "CloudWatch Logs role per account and region, so let one environment create it and set the others "
                "to 'existing'"
            )


def _allowed_networks_errors(value: object) -> list[str]:
    if not _is_tuple_of(value, str):
        return ["allowedNetworks must be a list of CIDRs"]
    try:
        parse_networks(value)  # type: ignore[arg-type]
    except ValueError as exc:
        return [f"allowedNetworks: {exc}"]
    return []


def _vpc_id_lists(raw: Mapping[str, Any], errors: list[str]) -> dict[str, tuple[str, ...]]:
    """The id lists of a ``materialiseVpc`` setting (empty where invalid), appending their problems to ``errors``."""
    key = "materialiseVpc"
    lists: dict[str, tuple[str, ...]] = {}
    for name in ("availabilityZones", "privateSubnetIds", "securityGroupIds", "privateSubnetRouteTableIds"):
        value = raw.get(name, [] if name == "privateSubnetRouteTableIds" else None)
        pattern = _AWS_IDS.get(name, _AZ)
        if not isinstance(value, list) or not all(isinstance(v, str) and pattern.fullmatch(v) for v in value):
            errors.append(f"{key}.{name} must be a list of {'zone names' if name == 'availabilityZones' else 'ids'}")
            value = []
        elif len(set(value)) != len(value) and name != "privateSubnetRouteTableIds":
            # (route tables may repeat: subnets commonly share one, e.g. behind a single NAT gateway)
            errors.append(f"{key}.{name} lists an entry twice")
        lists[name] = tuple(value)
    return lists


def _check_names(config: LakeSyncConfig) -> list[str]:
    """The environment's name and its gateways' ids."""
    out: list[str] = []
    if not isinstance(config.name, str) or not _ENV_NAME.fullmatch(config.name):
        out.append(f"environment name {config.name!r} must be a letter then letters, digits or '-' (max 24)")
    if not _is_tuple_of(config.gateway_ids, str) or not config.gateway_ids:
        out.append("gatewayIds must be a non-empty list of strings")
    elif bad := [g for g in config.gateway_ids if not _GATEWAY_ID.fullmatch(g)]:
        out.append(f"gatewayIds holds invalid ids {bad}")
    return out


def _check_schedules(config: LakeSyncConfig) -> list[str]:
    """The lake tick's schedules."""
    out: list[str] = []
    for key in ("compact_schedule", "checkpoint_schedule"):
        value = getattr(config, key)
        if not isinstance(value, str) or not _SCHEDULE.fullmatch(value):
            out.append(f"{_camel(key)} must be an EventBridge Scheduler rate(...) or cron(...) expression")
    return out


def _check_flush_lag_alarm(config: LakeSyncConfig) -> list[str]:
    """The flush lag alarm's threshold against the flush interval (its range is checked with the integers)."""
    limit, interval = config.flush_lag_alarm_minutes, config.flush_interval_minutes
    if limit is None or not _is_int(limit) or not _is_int(interval) or limit > interval:
        return []
    return [
        f"flushLagAlarmMinutes ({limit}) must exceed flushIntervalMinutes ({interval}): the oldest unflushed commit "
        "reaches the flush interval between two ticks in normal operation, so the alarm would fire every interval"
    ]


def _check_concurrency(config: LakeSyncConfig) -> list[str]:
    """The connector poll's concurrency and the functions' reserved concurrency, within the account's."""
    poll = config.connector_poll_concurrency
    valid = poll in ("auto", None) or (isinstance(poll, int) and _is_int(poll) and 1 <= poll <= _MAX_RESERVED)
    if not valid:
        return [f"connectorPollConcurrency must be 'auto', null or an integer in 1..{_MAX_RESERVED}"]
    return _check_reserved_concurrency(config.reserved_concurrency, config.account_concurrency, poll)


def _check_api(config: LakeSyncConfig) -> list[str]:
    """The API's rate limits and CORS origins."""
    out: list[str] = []
    if config.rate_limits is not None:
        out.extend(_check_rate_limits(config.rate_limits))
    if not _is_tuple_of(config.cors_origins, str):
        out.append("corsOrigins must be a list of strings")
    return out


def _check_logging(config: LakeSyncConfig) -> list[str]:
    """Log retention and levels."""
    choices: tuple[tuple[object, Collection[object], str], ...] = (
        (
            config.log_retention_days,
            LOG_RETENTION_DAYS,
            f"logRetentionDays must be one of {sorted(LOG_RETENTION_DAYS)}",
        ),
        (config.log_level, ("DEBUG", "INFO", "WARNING", "ERROR"), "logLevel must be DEBUG, INFO, WARNING or ERROR"),
        (config.lambda_system_log_level, ("DEBUG", "INFO", "WARN"), "lambdaSystemLogLevel must be DEBUG, INFO or WARN"),
    )
    return [message for value, allowed, message in choices if value not in allowed]


def _check_glue(config: LakeSyncConfig) -> list[str]:
    """The Glue jobs' workers and the compaction's table maintenance."""
    out: list[str] = []
    if config.glue_worker_type not in GLUE_WORKER_TYPES:
        out.append(f"glueWorkerType must be one of {sorted(GLUE_WORKER_TYPES)}")
    if config.glue_execution_class not in ("STANDARD", "FLEX"):
        out.append("glueExecutionClass must be STANDARD or FLEX")
    elif config.glue_execution_class == "FLEX" and config.glue_worker_type not in ("G.1X", "G.2X"):
        out.append("glueExecutionClass FLEX runs only G.1X or G.2X workers (set glueExecutionClass to STANDARD)")
    if not isinstance(config.compact_maintain, bool):
        out.append("compactMaintain must be true or false")
    return out


def _check_flush_engine(config: LakeSyncConfig) -> list[str]:
    """The flush engine, and the flush function's settings."""
    out: list[str] = []
    if config.flush_engine not in FLUSH_ENGINES:
        out.append(f"flushEngine must be one of {list(FLUSH_ENGINES)}")
    elif (
        config.flush_engine == "glue"
        and isinstance(config.reserved_concurrency, Mapping)
        and FLUSH_FUNCTION in config.reserved_concurrency
    ):
        out.append("reservedConcurrency: flush is deployed only with flushEngine 'auto' or 'function'")
    if not _is_int(config.flush_function_max_backlog) or config.flush_function_max_backlog < 0:
        out.append("flushFunctionMaxBacklog must be a whole number of deltas, at least 0")
    return out


def _check_switches(config: LakeSyncConfig) -> list[str]:
    """The on/off settings and the removal policy."""
    out = [
        f"{_camel(key)} must be true or false"
        for key in ("tracing", "dashboard", "sql_source_pulls")
        if not isinstance(getattr(config, key), bool)
    ]
    if config.removal_policy not in ("retain", "destroy"):
        out.append("removalPolicy must be 'retain' or 'destroy'")
    return out


def _check_account(config: LakeSyncConfig) -> list[str]:
    """What ties the stack to its account: the alarm e-mail, account and region, the VPC, the destinations' secrets,
    the networks allowed to call the API, API Gateway's logs role."""
    out: list[str] = []
    email = config.alarm_email
    if email is not None and (not isinstance(email, str) or not _EMAIL.fullmatch(email)):
        out.append("alarmEmail must be an e-mail address")
    for key in ("account", "region"):
        value = getattr(config, key)
        if value is not None and not isinstance(value, str):
            out.append(f"{key} must be a string")
    if config.materialise_vpc is not None and not isinstance(config.materialise_vpc, MaterialiseVpc):
        out.append("materialiseVpc must be an object")  # only a direct construction lands here
    prefix = config.destination_secret_prefix
    if prefix is not None and (not isinstance(prefix, str) or not _SECRET_PREFIX.fullmatch(prefix)):
        out.append("destinationSecretPrefix must be a secret name prefix ending with '/' (letters, digits, /_+=.@-)")
    out.extend(_allowed_networks_errors(config.allowed_networks))
    if config.api_gateway_logs_role not in API_GATEWAY_LOGS_ROLES:
        out.append(f"apiGatewayLogsRole must be one of {list(API_GATEWAY_LOGS_ROLES)}")
    return out


_CHECKS: Final[tuple[Callable[[LakeSyncConfig], list[str]], ...]] = (
    _check_names,
    lambda config: _check_sub_shards(config.sub_shards),
    _check_ints,
    _check_schedules,
    _check_flush_lag_alarm,
    _check_concurrency,
    _check_api,
    _check_logging,
    _check_glue,
    _check_flush_engine,
    _check_switches,
    _check_account,
)
"""The checks of :meth:`LakeSyncConfig.problems`, in the order their messages are reported."""
