"""The lake functions' settings: :class:`LakeTickSettings` (``lake_tick``), :class:`FlushTriggerSettings`
(``flush_trigger``) and :class:`FlushFunctionSettings` (``flush``), with :class:`FlushFunctionRef`, the flush function
the first two queue runs of.

* ``LAKESYNC_FLUSH_JOB_NAME`` -- the Glue flush job ``flush_trigger`` and ``lake_tick`` start (where it is
  deployed), the latter with ``LAKESYNC_COMPACT_JOB_NAME`` and ``LAKESYNC_CHECKPOINT_JOB_NAME``;
  ``LAKESYNC_FLUSH_FUNCTION_NAME`` and ``LAKESYNC_FLUSH_FUNCTION_TIMEOUT_S`` the flush function they queue runs of
  (where it is deployed); with both, ``LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG`` -- the largest backlog (unflushed
  entries) a run goes to the function for (:func:`lakesync.core.lake_work.choose_flush_engine`).
* ``LAKESYNC_FLUSH_PUBLISHES`` -- ``true`` when the flush job publishes materialisation jobs (``lake_tick`` alone:
  the flush then releases only published entries, and the tick must apply the same rule).

``lake_tick`` reads besides the gateway ids, the table names, the checkpoint bucket (optional) and the compaction
policy (``LAKESYNC_COMPACT_MIN_FLUSH_RUNS``, ``LAKESYNC_COMPACT_MAX_WAIT_MINUTES``). The ``flush`` function reads the
lake's ``LAKESYNC_LAKE_*`` variables (:class:`FlushFunctionSettings`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final

from lakesync.aws.settings.env import Env
from lakesync.aws.settings.validators import gateway_ids, table_names
from lakesync.aws.settings.variables import (
    CHECKPOINT_BUCKET,
    CLAIM_CHECK_BUCKET,
    COMPACT_MAX_WAIT_MINUTES,
    COMPACT_MIN_FLUSH_RUNS,
    FLUSH_FUNCTION_MAX_BACKLOG,
    FLUSH_FUNCTION_NAME,
    FLUSH_FUNCTION_TIMEOUT_S,
    FLUSH_JOB_NAME,
    FLUSH_MAX_DELTAS,
    FLUSH_PUBLISHES,
    FLUSH_RETENTION_MS,
    JOB_NAME_VARS,
    LAKE_CATALOG,
    LAKE_CATALOG_URI,
    LAKE_NAMESPACE,
    LAKE_WAREHOUSE,
    MATERIALISE_QUEUE_URL,
    MAX_COMPACT_MIN_FLUSH_RUNS,
)
from lakesync.aws.tables import TableNames

if TYPE_CHECKING:
    # Only the lake tick's settings need it: the API functions' INIT does not import the lake's work rules.
    from lakesync.core.lake_work import CompactPolicy

_FUNCTION_NAME = re.compile(r"(arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:\d{12}:function:)?[A-Za-z0-9_-]{1,140}")
"""A Lambda function's name or ARN (no version or alias)."""
_NAMESPACE = re.compile(r"[a-z0-9_]{1,255}")
DEFAULT_FLUSH_MAX_DELTAS: Final = 200_000
"""Most entries one run of the flush function appends: well inside its 15 minutes and its memory (a larger backlog
is flushed by the runs that follow)."""


@functools.cache
def _job_name() -> re.Pattern[str]:
    """A Glue job name (its API's pattern); compiled on first use, as its character ranges take milliseconds."""
    return re.compile(r"[\u0020-\uD7FF\uE000-\uFFFD\U00010000-\U0010FFFF\t]{1,255}")


def _default_compact_policy() -> CompactPolicy:
    from lakesync.core.lake_work import DEFAULT_COMPACT_POLICY

    return DEFAULT_COMPACT_POLICY


def _default_max_backlog() -> int:
    from lakesync.core.lake_work import DEFAULT_FUNCTION_MAX_BACKLOG

    return DEFAULT_FUNCTION_MAX_BACKLOG


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
        gateways = gateway_ids(env)
        tables = table_names(env)
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
        env.check()
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
        gateways = gateway_ids(env)
        tables = table_names(env) if function is not None else None
        max_backlog = env.integer(FLUSH_FUNCTION_MAX_BACKLOG, _default_max_backlog(), 0, unit="deltas")
        env.check()
        return cls(tuple(sorted(gateways)), tables, job, function, max_backlog)


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
        gateways = gateway_ids(env)
        tables = table_names(env)
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
        env.check()
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
