"""The Lambda functions' configuration: environment variables, validated once per cold start. The variables' names,
which function reads which, and the limits on their values are :mod:`lakesync.aws.settings_vars`.

Variables (every API function reads the list below; ``health`` and ``rotate_secret`` read none,
``flush_trigger`` reads :class:`FlushTriggerSettings` -- see :data:`FUNCTION_ENV_VARS`):

* ``LAKESYNC_GATEWAY_IDS`` -- comma-separated gateway ids served (default ``default``).
* ``LAKESYNC_TABLE_DELTAS`` / ``_ROWS`` / ``_HEADS`` / ``_DEDUP`` / ``_CONFIG`` / ``_ACTIONS`` -- DynamoDB table
  names (CDK generates them), *or* ``LAKESYNC_TABLE_PREFIX`` alone (``{prefix}-deltas`` ..., the local shortcut).
* ``LAKESYNC_JWT_SECRET`` (+ optional ``LAKESYNC_JWT_SECRET_PREVIOUS`` during a rotation) *or*
  ``LAKESYNC_JWT_SECRET_ARN`` (Secrets Manager; the ``AWSCURRENT`` and ``AWSPREVIOUS`` versions are both accepted).
  Every key is at least :data:`~lakesync.auth.MIN_KEY_BYTES` (32) bytes.
* ``LAKESYNC_MAX_TOKEN_LIFETIME_S`` -- the longest lifetime a token may claim (default 86,400: 24 hours; 60 to
  2,592,000): longer tokens are refused with 401 (:func:`lakesync.auth.verify_token`).
* ``LAKESYNC_FLUSH_THRESHOLD_BYTES``, ``LAKESYNC_BACKPRESSURE_BYTES`` -- buffer limits per shard.
* ``LAKESYNC_RATE_LIMITS`` -- per-caller rate limits over the defaults (:mod:`lakesync.gateway.limits`):
  ``family=requests/seconds`` entries, comma-separated (families ``push``, ``pull``, ``checkpoint``, ``actions``,
  ``socket``), ``family=off`` to lift one, ``off`` to lift all.
* ``LAKESYNC_SUB_SHARDS`` -- JSON object ``{"table": n}`` of hash sub-shards for hot tables.
* ``LAKESYNC_MAX_BODY_BYTES`` -- largest request body (default 1 MiB, at most :data:`MAX_BODY_BYTES_LIMIT`: a
  protobuf body arrives base64-encoded inside the API Gateway event, which must fit Lambda's invocation payload).
* ``LAKESYNC_PULL_BASIS_TTL_MS`` -- how long a process serves cursor pulls from its last read of the sync rules and
  the shard registry (default 1,000, at most 60,000; 0 reads them for every pull): :mod:`lakesync.gateway.basis_cache`.
* ``LAKESYNC_CHECKPOINT_BUCKET`` -- the S3 bucket holding checkpoints (only the ``checkpoint`` function uses it;
  unset: no checkpoints, the route answers 404).
* ``LAKESYNC_CLAIM_CHECK_BUCKET`` -- the bucket of the materialisation payloads (read by ``materialise`` alone, with
  the table names).
* ``LAKESYNC_FLUSH_JOB_NAME`` -- the Glue flush job ``flush_trigger`` and ``lake_tick`` start (where it is
  deployed), the latter with ``LAKESYNC_COMPACT_JOB_NAME`` and ``LAKESYNC_CHECKPOINT_JOB_NAME``;
  ``LAKESYNC_FLUSH_FUNCTION_NAME`` and ``LAKESYNC_FLUSH_FUNCTION_TIMEOUT_S`` the flush function they queue runs of
  (where it is deployed); with both, ``LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG`` -- the largest backlog (unflushed
  entries) a run goes to the function for (:func:`lakesync.core.lake_work.choose_flush_engine`).
* ``LAKESYNC_FLUSH_PUBLISHES`` -- ``true`` when the flush job publishes materialisation jobs (``lake_tick`` alone:
  the flush then releases only published entries, and the tick must apply the same rule).

The WebSocket functions (``ws_*``) read :class:`RealtimeSettings` besides:

* ``LAKESYNC_CONNECTIONS_TABLE`` -- the sessions table (CDK generates it), or ``{LAKESYNC_TABLE_PREFIX}-connections``
  when only the prefix is set (the local shortcut).
* ``LAKESYNC_WS_CALLBACK_URL`` -- the WebSocket API stage's callback URL for the management API
  (``https://{api}.execute-api.{region}.amazonaws.com/{stage}``; locally the front's), read by ``ws_message`` (to
  close a session) and ``ws_broadcast`` (to send); ``ws_broadcast`` reads the table names too (sync rules).

``lake_tick`` reads :class:`LakeTickSettings`: the gateway ids, the table names, the checkpoint bucket (optional),
the job names and the flush function's (the deployed flush engines), ``LAKESYNC_FLUSH_PUBLISHES`` and the compaction
policy (``LAKESYNC_COMPACT_MIN_FLUSH_RUNS``, ``LAKESYNC_COMPACT_MAX_WAIT_MINUTES``).

An empty variable counts as unset. Every problem is reported at once in one :class:`SettingsError`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final

from lakesync.auth import DEFAULT_MAX_LIFETIME_S, check_signing_key
from lakesync.aws.settings_env import Env, flag_problem
from lakesync.aws.settings_vars import (
    ALLOW_PLAIN_HTTP,
    ALLOWED_NETWORKS,
    BACKPRESSURE_BYTES,
    CHECKPOINT_BUCKET,
    CLAIM_CHECK_BUCKET,
    COMPACT_MAX_WAIT_MINUTES,
    COMPACT_MIN_FLUSH_RUNS,
    CONNECTIONS_TABLE,
    CONNECTOR_POLL_FUNCTION_ARN,
    CONNECTOR_SCHEDULE_GROUP,
    CONNECTOR_SCHEDULER,
    CONNECTOR_SCHEDULER_ROLE_ARN,
    CONNECTOR_SECRET_PREFIX,
    CONNECTOR_SECRETS_DIR,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PULL_BASIS_TTL_MS,
    DESTINATION_SECRET_PREFIX,
    FLUSH_FUNCTION_MAX_BACKLOG,
    FLUSH_FUNCTION_NAME,
    FLUSH_FUNCTION_TIMEOUT_S,
    FLUSH_JOB_NAME,
    FLUSH_MAX_DELTAS,
    FLUSH_PUBLISHES,
    FLUSH_RETENTION_MS,
    FLUSH_THRESHOLD_BYTES,
    GATEWAY_IDS,
    JOB_NAME_VARS,
    JWT_SECRET,
    JWT_SECRET_ARN,
    JWT_SECRET_PREVIOUS,
    LAKE_CATALOG,
    LAKE_CATALOG_URI,
    LAKE_NAMESPACE,
    LAKE_WAREHOUSE,
    MATERIALISE_QUEUE_URL,
    MAX_BODY_BYTES,
    MAX_BODY_BYTES_LIMIT,
    MAX_COMPACT_MIN_FLUSH_RUNS,
    MAX_PULL_BASIS_TTL_MS,
    MAX_TOKEN_LIFETIME_LIMIT_S,
    MAX_TOKEN_LIFETIME_S,
    MIN_TOKEN_LIFETIME_LIMIT_S,
    NETWORK_ENV_VARS,
    PULL_BASIS_TTL_MS,
    RATE_LIMITS,
    SUB_SHARDS,
    TABLE_PREFIX,
    TABLE_VARS,
    WS_CALLBACK_URL,
)
from lakesync.aws.tables import TableNames, connections_table_name
from lakesync.core.schema import is_valid_identifier
from lakesync.gateway.deps import GatewaySettings
from lakesync.gateway.limits import DEFAULT_LIMITS, RateLimit, parse_limits

if TYPE_CHECKING:
    # Only the lake tick's settings need it: the API functions' INIT does not import the lake's work rules.
    from lakesync.core.lake_work import CompactPolicy
    from lakesync.core.network import IPNetwork, NetworkPolicy

_DEFAULTS: Final = GatewaySettings()
_GATEWAY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
_TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")
_MAX_SUB_SHARDS = 256
_CALLBACK_URL = re.compile(r"https?://[A-Za-z0-9.-]+(?::\d{1,5})?(?:/[A-Za-z0-9._~$-]+)*/?")
"""A stage's callback URL (``https://{api}.execute-api.{region}.amazonaws.com/{stage}``; ``http`` for local)."""
_FUNCTION_NAME = re.compile(r"(arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:\d{12}:function:)?[A-Za-z0-9_-]{1,140}")
"""A Lambda function's name or ARN (no version or alias)."""
_NAMESPACE = re.compile(r"[a-z0-9_]{1,255}")
_SECRET_PREFIX = re.compile(r"[A-Za-z0-9/_+=.@-]{1,256}")
_DESTINATION_SECRET_PREFIX = re.compile(r"[A-Za-z0-9/_+=.@-]{1,400}")
DEFAULT_FLUSH_MAX_DELTAS: Final = 200_000
"""Most entries one run of the flush function appends: well inside its 15 minutes and its memory (a larger backlog
is flushed by the runs that follow)."""


@functools.cache
def _job_name() -> re.Pattern[str]:
    """A Glue job name (its API's pattern); compiled on first use, as its character ranges take milliseconds."""
    return re.compile(r"[\u0020-\uD7FF\uE000-\uFFFD\U00010000-\U0010FFFF\t]{1,255}")


class SettingsError(ValueError):
    """The environment does not describe a usable configuration."""


def _check(env: Env) -> None:
    """Raise every problem ``env`` recorded, in order, in one :class:`SettingsError`."""
    if env.errors:
        raise SettingsError("Invalid LakeSync configuration: " + "; ".join(env.errors))


@dataclass(frozen=True, slots=True)
class Settings:
    """Validated configuration of the API functions.

    Attributes:
        gateway_ids: Gateways served; any other gets 404.
        tables: Physical DynamoDB table names.
        jwt_secrets: ``(primary, previous?)`` from the environment; empty when ``jwt_secret_arn`` is set.
        jwt_secret_arn: Secrets Manager id of the JWT secret, fetched on first use.
        max_token_lifetime_s: The longest lifetime a token may claim (``LAKESYNC_MAX_TOKEN_LIFETIME_S``).
        flush_threshold_bytes: Unflushed bytes per shard that request a flush.
        backpressure_bytes: Unflushed bytes per shard that make pushes 503 (``None``: twice the threshold).
        sub_shards: Hash sub-shards per hot table.
        max_body_bytes: Largest request body accepted.
        checkpoint_bucket: S3 bucket of the checkpoints, or ``None`` when checkpoints are not served.
        pull_basis_ttl_ms: How long a process serves cursor pulls from its last read of the sync rules and the shard
            registry (``LAKESYNC_PULL_BASIS_TTL_MS``; 0 reads them for every pull).
        rate_limits: Per-caller rate limits by route family (``LAKESYNC_RATE_LIMITS``; empty: none).
    """

    gateway_ids: frozenset[str]
    tables: TableNames
    jwt_secrets: tuple[str, ...] = ()
    jwt_secret_arn: str | None = None
    max_token_lifetime_s: int = DEFAULT_MAX_LIFETIME_S
    flush_threshold_bytes: int = _DEFAULTS.flush_threshold_bytes
    backpressure_bytes: int | None = None
    sub_shards: Mapping[str, int] = field(default_factory=dict, hash=False)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    checkpoint_bucket: str | None = None
    pull_basis_ttl_ms: int = DEFAULT_PULL_BASIS_TTL_MS
    rate_limits: Mapping[str, RateLimit] = field(default_factory=lambda: dict(DEFAULT_LIMITS), hash=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Read and validate the variables.

        Raises:
            SettingsError: listing every missing or invalid variable.
        """
        env = Env(environ)
        lifetime = (DEFAULT_MAX_LIFETIME_S, MIN_TOKEN_LIFETIME_LIMIT_S, MAX_TOKEN_LIFETIME_LIMIT_S)
        settings = cls(
            gateway_ids=_gateway_ids(env),
            tables=_tables(env),
            jwt_secrets=_secrets(env),
            jwt_secret_arn=env.raw(JWT_SECRET_ARN),
            max_token_lifetime_s=env.integer(MAX_TOKEN_LIFETIME_S, *lifetime, unit="s"),
            flush_threshold_bytes=env.integer(FLUSH_THRESHOLD_BYTES, _DEFAULTS.flush_threshold_bytes, 1),
            backpressure_bytes=env.optional_integer(BACKPRESSURE_BYTES, 0),
            sub_shards=_sub_shards(env),
            max_body_bytes=env.integer(MAX_BODY_BYTES, DEFAULT_MAX_BODY_BYTES, 1, MAX_BODY_BYTES_LIMIT),
            checkpoint_bucket=env.bucket(CHECKPOINT_BUCKET),
            pull_basis_ttl_ms=env.integer(
                PULL_BASIS_TTL_MS, DEFAULT_PULL_BASIS_TTL_MS, 0, MAX_PULL_BASIS_TTL_MS, unit="ms"
            ),
            rate_limits=_rate_limits(env),
        )
        _check(env)
        return settings

    def gateway_settings(self) -> GatewaySettings:
        """The services' settings."""
        return GatewaySettings(
            gateway_ids=self.gateway_ids,
            flush_threshold_bytes=self.flush_threshold_bytes,
            backpressure_bytes=self.backpressure_bytes,
            sub_shards=dict(self.sub_shards),
        )


def _rate_limits(env: Env) -> dict[str, RateLimit]:
    raw = env.raw(RATE_LIMITS)
    if raw is None:
        return dict(DEFAULT_LIMITS)
    try:
        return parse_limits(raw)
    except ValueError as exc:
        env.problem(f"{RATE_LIMITS}: {exc}")
        return dict(DEFAULT_LIMITS)


def _gateway_ids(env: Env) -> frozenset[str]:
    ids = [part.strip() for part in (env.raw(GATEWAY_IDS) or "default").split(",")]
    bad = [i for i in ids if not _GATEWAY_ID.fullmatch(i)]
    if bad:
        env.problem(f"{GATEWAY_IDS} holds invalid gateway ids {bad!r} (letters, digits, _ . : - ; at most 128)")
    return frozenset(ids)


def _tables(env: Env) -> TableNames:
    given = {kind: env.text(var) for kind, var in TABLE_VARS.items() if var in env}
    prefix = env.text(TABLE_PREFIX)
    if prefix and given:
        env.problem(f"set either {TABLE_PREFIX} or the {len(TABLE_VARS)} LAKESYNC_TABLE_* names, not both")
    if prefix:
        names = TableNames.with_prefix(prefix)
    else:
        missing = [var for kind, var in TABLE_VARS.items() if kind not in given]
        if missing:
            env.problem(f"missing {', '.join(missing)} (or set {TABLE_PREFIX})")
        names = TableNames(**{kind: given.get(kind, "") for kind in TABLE_VARS})
    for kind, name in names.as_dict().items():
        if (kind in given or prefix) and not _TABLE_NAME.fullmatch(name):
            env.problem(f"table name {name!r} ({kind}) is not a valid DynamoDB table name")
    return names


def _secrets(env: Env) -> tuple[str, ...]:
    if JWT_SECRET_ARN in env:
        if JWT_SECRET in env or JWT_SECRET_PREVIOUS in env:
            env.problem(f"set either {JWT_SECRET_ARN} or {JWT_SECRET} (+ {JWT_SECRET_PREVIOUS}), not both")
        return ()
    if JWT_SECRET not in env:
        env.problem(f"missing {JWT_SECRET} (or {JWT_SECRET_ARN})")
        return ()
    secrets = tuple(env.values[var] for var in (JWT_SECRET, JWT_SECRET_PREVIOUS) if var in env)
    for var, secret in zip((JWT_SECRET, JWT_SECRET_PREVIOUS), secrets, strict=False):
        try:
            check_signing_key(secret, var)
        except ValueError as exc:
            env.problem(str(exc))
    return secrets


def _sub_shards(env: Env) -> dict[str, int]:
    doc = env.json_object(SUB_SHARDS, '{"table": n}')
    if doc is None:
        return {}
    shards: dict[str, int] = {}
    for table, n in doc.items():
        if not is_valid_identifier(table):
            env.problem(f"{SUB_SHARDS}: {table!r} is not a valid table name")
        elif isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= _MAX_SUB_SHARDS:
            env.problem(f"{SUB_SHARDS}: {table} must map to an integer in 1..{_MAX_SUB_SHARDS}, got {n!r}")
        else:
            shards[table] = n
    return shards


@dataclass(frozen=True, slots=True)
class MaterialiseSettings:
    """Validated configuration of the ``materialise`` function.

    Attributes:
        tables: Physical DynamoDB table names (the config table holds destinations and schemas).
        claim_check_bucket: The bucket of the payloads.
    """

    tables: TableNames
    claim_check_bucket: str
    network: NetworkPolicy = field(default_factory=lambda: network_policy({}))
    destination_secret_prefix: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> MaterialiseSettings:
        """Read and validate the variables.

        Raises:
            SettingsError: listing every missing or invalid variable.
        """
        env = Env(environ)
        tables = _tables(env)
        bucket = env.bucket(CLAIM_CHECK_BUCKET)
        if bucket is None:
            env.problem(f"missing {CLAIM_CHECK_BUCKET}")
        network = network_policy(env.values, env.errors)
        prefix = destination_secret_prefix(env.values, env.errors)
        _check(env)
        assert bucket is not None
        return cls(tables=tables, claim_check_bucket=bucket, network=network, destination_secret_prefix=prefix)


def _default_compact_policy() -> CompactPolicy:
    from lakesync.core.lake_work import DEFAULT_COMPACT_POLICY

    return DEFAULT_COMPACT_POLICY


def _default_max_backlog() -> int:
    from lakesync.core.lake_work import DEFAULT_FUNCTION_MAX_BACKLOG

    return DEFAULT_FUNCTION_MAX_BACKLOG


@dataclass(frozen=True, slots=True)
class LakeTickSettings:
    """Validated configuration of the ``lake_tick`` function.

    Attributes:
        gateway_ids: The gateways the lake jobs process (sorted).
        tables: Physical DynamoDB table names (heads, shard registry and flush requests, the log's commit index).
        job_names: ``flush`` / ``compact`` / ``checkpoint`` -> Glue job name (no ``flush`` when only the flush
            function is deployed).
        flush_publishes: Whether the flush job publishes materialisation jobs.
        checkpoint_bucket: The checkpoint bucket (``None``: no checkpoints; nothing can be released).
        flush_function: The flush function (:class:`FlushFunctionRef`), or ``None`` (only the Glue flush job).
        flush_function_max_backlog: The largest backlog (unflushed entries) a run goes to the function for when both
            engines are deployed (``LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG``; :func:`lakesync.core.lake_work.
            choose_flush_engine`).
        compact_policy: When flushed files are worth a compaction run (``LAKESYNC_COMPACT_MIN_FLUSH_RUNS``, 1 to 25,
            default 16; ``LAKESYNC_COMPACT_MAX_WAIT_MINUTES``, default 360).
    """

    gateway_ids: tuple[str, ...]
    tables: TableNames
    job_names: Mapping[str, str]
    flush_publishes: bool
    checkpoint_bucket: str | None = None
    flush_function: FlushFunctionRef | None = None
    compact_policy: CompactPolicy = field(default_factory=_default_compact_policy)
    flush_function_max_backlog: int = field(default_factory=_default_max_backlog)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> LakeTickSettings:
        """Read and validate the variables.

        Raises:
            SettingsError: listing every missing or invalid variable.
        """
        env = Env(environ)
        gateways = _gateway_ids(env)
        tables = _tables(env)
        function = _flush_function(env)
        names = {
            job: env.name(var, _job_name(), "a Glue job name") if var in env else env.required(var)
            for job, var in JOB_NAME_VARS.items()
            if not (job == "flush" and function is not None and var not in env)  # the flush function alone
        }
        max_backlog = env.integer(FLUSH_FUNCTION_MAX_BACKLOG, _default_max_backlog(), 0, unit="deltas")
        publishes = env.flag(FLUSH_PUBLISHES, note="whether the flush job publishes")
        bucket = env.bucket(CHECKPOINT_BUCKET)
        default = _default_compact_policy()
        most = MAX_COMPACT_MIN_FLUSH_RUNS
        min_runs = env.integer(COMPACT_MIN_FLUSH_RUNS, default.min_flush_runs, 1, most, unit="runs")
        wait_min = env.integer(COMPACT_MAX_WAIT_MINUTES, default.max_wait_ms // 60_000, 0, unit="minutes")
        _check(env)
        policy = replace(default, min_flush_runs=min_runs, max_wait_ms=wait_min * 60_000)
        return cls(tuple(sorted(gateways)), tables, names, publishes, bucket, function, policy, max_backlog)


@dataclass(frozen=True, slots=True)
class FlushTriggerSettings:
    """Validated configuration of the ``flush_trigger`` function: the flush's deployed engines, as the tick's.

    Attributes:
        gateway_ids: The gateways whose shards make the backlog (sorted).
        tables: The tables (the flush function's run records, the heads for the backlog); ``None`` with the Glue job
            alone.
        job_name: The Glue flush job, or ``None`` (only the flush function).
        flush_function: The flush function, or ``None`` (only the Glue job).
        flush_function_max_backlog: As :attr:`LakeTickSettings.flush_function_max_backlog`.
    """

    gateway_ids: tuple[str, ...]
    tables: TableNames | None
    job_name: str | None
    flush_function: FlushFunctionRef | None
    flush_function_max_backlog: int = field(default_factory=_default_max_backlog)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> FlushTriggerSettings:
        """Read and validate the variables: ``LAKESYNC_FLUSH_JOB_NAME`` and/or ``LAKESYNC_FLUSH_FUNCTION_NAME`` (with
        the tables); with both, the gateways and ``LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG`` too.

        Raises:
            SettingsError: listing every missing or invalid variable.
        """
        env = Env(environ)
        function = _flush_function(env)
        job = env.name(FLUSH_JOB_NAME, _job_name(), "a Glue job name") or None
        if job is None and function is None:
            env.problem(f"missing {FLUSH_JOB_NAME} (or {FLUSH_FUNCTION_NAME})")
        gateways = _gateway_ids(env)
        tables = _tables(env) if function is not None else None
        max_backlog = env.integer(FLUSH_FUNCTION_MAX_BACKLOG, _default_max_backlog(), 0, unit="deltas")
        _check(env)
        return cls(tuple(sorted(gateways)), tables, job, function, max_backlog)


@dataclass(frozen=True, slots=True)
class FlushFunctionRef:
    """Where the flush runs when it is a Lambda function: its name and its timeout (a run recorded as unfinished
    for longer has ended, whatever its record says)."""

    name: str
    timeout_s: int = 900


def _flush_function(env: Env) -> FlushFunctionRef | None:
    if FLUSH_FUNCTION_NAME not in env:
        return None
    name = env.name(FLUSH_FUNCTION_NAME, _FUNCTION_NAME, "a Lambda function name or ARN")
    timeout = env.integer(FLUSH_FUNCTION_TIMEOUT_S, 900, 1, 900, unit="seconds")
    return FlushFunctionRef(name, timeout)


@dataclass(frozen=True, slots=True)
class FlushFunctionSettings:
    """Validated configuration of the ``flush`` function (:mod:`lakesync.aws.flush_function`).

    Attributes:
        gateway_ids: The gateways flushed (sorted).
        tables: Physical DynamoDB table names.
        warehouse: The lake's warehouse: ``s3://bucket/prefix`` (Glue catalog) or a local directory.
        catalog: ``glue`` (the Glue Data Catalog) or ``local`` (a sqlite catalog at ``catalog_uri``).
        catalog_uri: The local catalog's sqlite file.
        namespace: The lake's namespace (Glue database).
        checkpoint_bucket: The checkpoint bucket, whose latest manifests bound the release (``None``: no release).
        claim_check_bucket: Where materialisation payloads go (with ``materialise_queue_url``; ``None``: no
            publishing).
        materialise_queue_url: The materialisation queue.
        retention_ms: Flushed entries younger than this stay in the buffer.
        max_deltas: Most entries one run appends (a larger backlog takes several runs).
        region: The region (``AWS_REGION``, which Lambda sets), for the Glue catalog and S3.
    """

    gateway_ids: tuple[str, ...]
    tables: TableNames
    warehouse: str
    catalog: str = "glue"
    catalog_uri: str | None = None
    namespace: str = "lakesync"
    checkpoint_bucket: str | None = None
    claim_check_bucket: str | None = None
    materialise_queue_url: str | None = None
    retention_ms: int = 24 * 3600 * 1000
    max_deltas: int = DEFAULT_FLUSH_MAX_DELTAS
    region: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> FlushFunctionSettings:
        """Read and validate the variables.

        Raises:
            SettingsError: listing every missing or invalid variable.
        """
        env = Env(environ)
        gateways = _gateway_ids(env)
        tables = _tables(env)
        warehouse = env.required(LAKE_WAREHOUSE)
        catalog = env.text(LAKE_CATALOG, "glue")
        catalog_uri = env.optional(LAKE_CATALOG_URI)
        if catalog not in ("glue", "local"):
            env.problem(f"{LAKE_CATALOG} must be glue or local, got {catalog!r}")
        elif catalog == "local" and catalog_uri is None:
            env.problem(f"{LAKE_CATALOG}=local needs {LAKE_CATALOG_URI} (the catalog's sqlite file)")
        elif catalog == "glue" and not warehouse.startswith("s3://") and warehouse:
            env.problem(f"{LAKE_WAREHOUSE} must be an s3:// URI with the Glue catalog, got {warehouse!r}")
        namespace = env.name(LAKE_NAMESPACE, _NAMESPACE, "a Glue database name", default="lakesync")
        checkpoint_bucket = env.bucket(CHECKPOINT_BUCKET)
        claim_bucket = env.bucket(CLAIM_CHECK_BUCKET)
        queue_url = env.optional(MATERIALISE_QUEUE_URL)
        if (claim_bucket is None) != (queue_url is None):
            env.problem(f"{CLAIM_CHECK_BUCKET} and {MATERIALISE_QUEUE_URL} go together")
        retention = env.integer(FLUSH_RETENTION_MS, 24 * 3600 * 1000, 0)
        max_deltas = env.integer(FLUSH_MAX_DELTAS, DEFAULT_FLUSH_MAX_DELTAS, 1)
        _check(env)
        return cls(
            tuple(sorted(gateways)),
            tables,
            warehouse,
            catalog,
            catalog_uri,
            namespace,
            checkpoint_bucket,
            claim_bucket,
            queue_url,
            retention,
            max_deltas,
            environ.get("AWS_REGION") or None,
        )


@dataclass(frozen=True, slots=True)
class RealtimeSettings:
    """Validated configuration of the WebSocket functions (besides the API settings ``ws_connect`` and
    ``ws_message`` read).

    Attributes:
        connections_table: The sessions table.
        callback_url: The WebSocket API stage's callback URL (``None`` where the function does not send).
    """

    connections_table: str
    callback_url: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str], *, sends: bool = False) -> RealtimeSettings:
        """Read and validate the variables; ``sends``: the callback URL is required.

        Raises:
            SettingsError: listing every missing or invalid variable.
        """
        env = Env(environ)
        table = _connections_table(env)
        url = _callback_url(env, required=sends)
        _check(env)
        return cls(table, url)


@dataclass(frozen=True, slots=True)
class BroadcastSettings:
    """Validated configuration of ``ws_broadcast``.

    Attributes:
        tables: Physical DynamoDB table names (the config table holds the sync rules).
        realtime: The sessions table and the callback URL (required).
    """

    tables: TableNames
    realtime: RealtimeSettings

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> BroadcastSettings:
        """Read and validate the variables.

        Raises:
            SettingsError: listing every missing or invalid variable.
        """
        env = Env(environ)
        tables = _tables(env)
        table = _connections_table(env)
        url = _callback_url(env, required=True)
        _check(env)
        return cls(tables, RealtimeSettings(table, url))


def _connections_table(env: Env) -> str:
    prefix = env.text(TABLE_PREFIX)
    name = env.text(CONNECTIONS_TABLE) or (connections_table_name(prefix) if prefix else "")
    if not name:
        env.problem(f"missing {CONNECTIONS_TABLE} (or set {TABLE_PREFIX})")
    elif not _TABLE_NAME.fullmatch(name):
        env.problem(f"{CONNECTIONS_TABLE} {name!r} is not a valid DynamoDB table name")
    return name


def _callback_url(env: Env, *, required: bool) -> str | None:
    url = env.required(WS_CALLBACK_URL) if required else env.text(WS_CALLBACK_URL)
    if not url:
        return None
    if not _CALLBACK_URL.fullmatch(url):
        env.problem(f"{WS_CALLBACK_URL} {url!r} is not an http(s) URL of a WebSocket API stage")
    return url.rstrip("/")


@dataclass(frozen=True, slots=True)
class ConnectorSettings:
    """Where connectors keep their secrets and how their pollers are scheduled (all optional variables).

    * ``LAKESYNC_CONNECTOR_SCHEDULER`` -- ``eventbridge`` (needs ``LAKESYNC_CONNECTOR_SCHEDULE_GROUP``,
      ``LAKESYNC_CONNECTOR_POLL_FUNCTION_ARN`` and ``LAKESYNC_CONNECTOR_SCHEDULER_ROLE_ARN``; the default when those
      are set), ``local`` (the embedded default's poll loop finds connectors in the config table), or unset: no
      scheduler, so registering a connector with ``ingest`` fails.
    * ``LAKESYNC_CONNECTOR_SECRETS_DIR`` -- keep connector secrets as 0600 files there (the embedded default);
      unset: AWS Secrets Manager.
    * ``LAKESYNC_CONNECTOR_SECRET_PREFIX`` -- name prefix of the secrets registration creates (``lakesync/connectors``).
    * ``LAKESYNC_ALLOWED_NETWORKS`` / ``LAKESYNC_ALLOW_PLAIN_HTTP`` -- where connectors may connect
      (:func:`network_policy`).
    * ``LAKESYNC_DESTINATION_SECRET_PREFIX`` -- the destinations' secret prefix, checked at their registration.
    """

    scheduler: str | None = None
    schedule_group: str | None = None
    poll_function_arn: str | None = None
    scheduler_role_arn: str | None = None
    secrets_dir: str | None = None
    secret_prefix: str = "lakesync/connectors"
    network: NetworkPolicy = field(default_factory=lambda: network_policy({}))
    destination_secret_prefix: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ConnectorSettings:
        """Read and validate the variables.

        Raises:
            SettingsError: an unknown scheduler, or ``eventbridge`` without its three variables.
        """
        env = Env(environ, prefix="LAKESYNC_CONNECTOR")
        targets = (CONNECTOR_SCHEDULE_GROUP, CONNECTOR_POLL_FUNCTION_ARN, CONNECTOR_SCHEDULER_ROLE_ARN)
        scheduler = env.optional(CONNECTOR_SCHEDULER) or ("eventbridge" if any(t in env for t in targets) else None)
        if scheduler not in (None, "eventbridge", "local"):
            env.problem(f"{CONNECTOR_SCHEDULER} must be eventbridge or local")
        if scheduler == "eventbridge":
            for target in targets:
                env.required(target)
        prefix = env.text(CONNECTOR_SECRET_PREFIX, "lakesync/connectors")
        if not _SECRET_PREFIX.fullmatch(prefix):
            env.problem(f"{CONNECTOR_SECRET_PREFIX} is not a valid secret name prefix")
        # unlike the other readers, an empty network variable is read as set (empty)
        network = network_policy({k: v.strip() for k, v in environ.items() if k in NETWORK_ENV_VARS}, env.errors)
        destinations = destination_secret_prefix(environ, env.errors)
        _check(env)
        return cls(
            scheduler=scheduler,
            schedule_group=env.optional(CONNECTOR_SCHEDULE_GROUP),
            poll_function_arn=env.optional(CONNECTOR_POLL_FUNCTION_ARN),
            scheduler_role_arn=env.optional(CONNECTOR_SCHEDULER_ROLE_ARN),
            secrets_dir=env.optional(CONNECTOR_SECRETS_DIR),
            secret_prefix=prefix.rstrip("/"),
            network=network,
            destination_secret_prefix=destinations,
        )


def destination_secret_prefix(env: Mapping[str, str], errors: list[str]) -> str | None:
    """``LAKESYNC_DESTINATION_SECRET_PREFIX`` (``lakesync/prod/destinations/``), or ``None`` when unset."""
    raw = env.get(DESTINATION_SECRET_PREFIX, "").strip()
    if not raw:
        return None
    if not _DESTINATION_SECRET_PREFIX.fullmatch(raw):
        errors.append(f"{DESTINATION_SECRET_PREFIX} is not a valid secret name prefix")
    return raw


def network_policy(env: Mapping[str, str], errors: list[str] | None = None) -> NetworkPolicy:
    """Where connectors and destinations may connect (:class:`lakesync.core.network.NetworkPolicy`).

    * ``LAKESYNC_ALLOWED_NETWORKS`` -- comma-separated CIDRs dialled although loopback or private (an RDS in the VPC:
      ``10.0.0.0/16``); link-local and metadata ranges can never be allowed. Unset: public addresses only.
    * ``LAKESYNC_ALLOW_PLAIN_HTTP`` -- ``true`` lets API connectors use ``http://`` (``lakesync local`` only).
    """
    from lakesync.core.network import NetworkPolicy, parse_networks

    problems: list[str] = [] if errors is None else errors
    allowed: tuple[IPNetwork, ...] = ()
    try:
        allowed = parse_networks(env.get(ALLOWED_NETWORKS, "").split(","))
    except ValueError as exc:
        problems.append(f"{ALLOWED_NETWORKS}: {exc}")
    http = env.get(ALLOW_PLAIN_HTTP, "false")
    problem = flag_problem(ALLOW_PLAIN_HTTP, http)
    if problem is not None:
        problems.append(problem)
    return NetworkPolicy(allowed=allowed, allow_http=http.strip().lower() == "true")
