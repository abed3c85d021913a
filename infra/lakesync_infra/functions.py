"""The Lambda functions: one code asset (``lakesync`` + ``functions/``), one function per handler module.

Every function runs Python 3.11 (:data:`~lakesync_infra.common.LAMBDA_RUNTIME`, the Python the tests run the handlers
on) on ARM64 (``materialise`` and ``flush`` on x86_64: :data:`~lakesync_infra.common.MATERIALISE_ARCHITECTURE`,
:data:`~lakesync_infra.common.FLUSH_ARCHITECTURE`) with active X-Ray
tracing, its own log group (with retention) and its own role holding exactly what its code does: what each function
may do is :mod:`lakesync_infra.function_access` (per function, the DynamoDB actions on each logical table), and the
environment is the subset of :data:`lakesync.aws.settings.variables.FUNCTION_ENV_VARS` the function needs.

``flush_trigger`` consumes the ``config`` table's stream, filtered to new flush requests
(:data:`FLUSH_REQUEST_FILTER`: ``sk`` beginning with ``flush#``), and reports batch item failures. Each invocation
may wait minutes for a busy flush job (see :mod:`lakesync.aws.flush_trigger`), so its timeout covers that wait and
the mapping retries a reported batch up to :data:`STREAM_RETRY_ATTEMPTS` times within :data:`STREAM_MAX_RECORD_AGE`;
a batch that still fails lands (as metadata) in a DLQ, and the lake tick starts the flush for its requests anyway
(they stay recorded until served).

``ws_connect``, ``ws_message`` and ``ws_broadcast`` are the WebSocket API's routes and the
broadcaster on the ``deltas`` table's stream; their access here is what they touch of the buffer (``ws_message``
serves pushes and pulls: the union of ``push``'s and ``pull``'s; ``ws_broadcast`` reads the membership tables as the
pull reads them, and their checkpoint objects by key, with the checkpoint bucket and the sub-shards in its
environment), the rest -- the sessions table, the management API, the stream mapping, their sessions table and
callback URL variables -- is :mod:`lakesync_infra.realtime`'s.

``lake_tick`` is what the jobs' schedules invoke (:meth:`lakesync_infra.jobs.Jobs.schedule_ticks`): it reads the
heads, the shard registry and flush requests, the commit index of the log (the release step's target) and the
checkpoints, and may list and start runs of the Glue jobs and queue runs of the flush function -- nothing else
(:mod:`lakesync.aws.lake_tick`).

``flush`` (``flushEngine`` ``auto``, the default, or ``function``) is the flush as a function
(:mod:`lakesync.aws.flush_function`), with its own code asset (the API functions' plus ``lakesync.lake``, pyiceberg and
pyarrow: :func:`lakesync_infra.packaging.build_flush_asset`) on x86_64, :data:`FLUSH_MEMORY_MB` and Lambda's longest
timeout. The lake tick and the flush trigger queue its runs by asynchronous ``Invoke`` and record them in the config
table (:mod:`lakesync.aws.flush_runs`), so they may invoke that one function and write those records
(:data:`RUN_RECORDS`); Lambda does not retry a failed run (the next tick starts a new one) and drops a run still queued
after :data:`lakesync.aws.flush_runs.ASYNC_EVENT_AGE_S`. Its access is the Glue flush job's: the buffer tables
(:data:`lakesync_infra.jobs.ACCESS`), the warehouse prefix of the lake bucket, the lake's Glue database and its delta
log table (``glue:CreateDatabase`` too: pyiceberg creates the namespace when it is missing), the checkpoints,
publishing and the ``LakeSync`` metrics. With ``auto`` the Glue flush job is deployed beside it, and the tick and the
trigger may start either (``glue:StartJobRun``/``GetJobRuns`` on that job too), giving a run to the function while
the backlog is at most ``flushFunctionMaxBacklog`` (``LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG``) and to the Glue job above
it; the trigger then reads the backlog from the heads (:data:`BACKLOG_READS`) as the tick does. With ``glue`` only the
Glue job is deployed, with ``function`` only the function.

``materialise`` consumes the materialisation queue (:meth:`lakesync_infra.queues.Queues.attach_consumer`: partial
batch failures, at most ``materialiseConcurrency`` concurrent invocations) and ships with its own code asset, the
API functions' plus the SQL drivers, so the API functions stay small. It reads the gateways' destinations and table
schemas (config table Query), the claim-check payloads, and the destinations' secrets -- created at run time, so it
may read any secret named under ``destinationSecretPrefix``. With ``materialiseVpc`` it runs in those subnets
(:mod:`lakesync_infra.network`) and may manage its network interfaces.

``connector_poll`` is what the connectors' EventBridge Scheduler schedules invoke (:mod:`lakesync_infra.connectors`
grants the schedules and the connector secrets): it reads and leases the connector's position in the config table
and pushes what it polled through the push service, so its access is ``push``'s plus the position's calls. It ships
with ``materialise``'s asset (the SQL drivers its PostgreSQL/MySQL sources need) on x86_64 -- as does ``admin``,
which checks a database connector's source at registration -- runs up to 15 minutes
(the position lease outlives it) and is not retried by Lambda: the schedule's next tick is the retry. The
``actions`` function writes each action's provenance row through the push service as well, so it holds ``push``'s
access besides its own. With ``materialiseVpc.connectorFunctions`` the named connector functions run in the
materialise function's subnets too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from lakesync.aws.flush_runs import ASYNC_EVENT_AGE_S
from lakesync.aws.rate_limits import KEY_PREFIX as RATE_LIMIT_KEY_PREFIX
from lakesync.aws.settings.variables import (
    ALLOWED_NETWORKS,
    BACKPRESSURE_BYTES,
    CHECKPOINT_BUCKET,
    CLAIM_CHECK_BUCKET,
    COMPACT_MAX_WAIT_MINUTES,
    COMPACT_MIN_FLUSH_RUNS,
    DESTINATION_SECRET_PREFIX,
    FLUSH_FUNCTION_MAX_BACKLOG,
    FLUSH_FUNCTION_NAME,
    FLUSH_FUNCTION_TIMEOUT_S,
    FLUSH_JOB_NAME,
    FLUSH_PUBLISHES,
    FLUSH_RETENTION_MS,
    FLUSH_THRESHOLD_BYTES,
    GATEWAY_IDS,
    JOB_NAME_VARS,
    JWT_SECRET_ARN,
    LAKE_CATALOG,
    LAKE_NAMESPACE,
    LAKE_WAREHOUSE,
    MATERIALISE_QUEUE_URL,
    MAX_BODY_BYTES,
    MAX_TOKEN_LIFETIME_S,
    PULL_BASIS_TTL_MS,
    RATE_LIMITS,
    SUB_SHARDS,
    TABLE_VARS,
)
from lakesync.core.checkpoint import PREFIX as CHECKPOINT_PREFIX
from lakesync.core.lake_work import DEFAULT_RETENTION_MS
from lakesync.lake.tables import DELTA_LOG
from lakesync_infra.buffer import STREAM_TABLE, Buffer
from lakesync_infra.common import (
    FLUSH_ARCHITECTURE,
    LAMBDA_ARCHITECTURE,
    LAMBDA_RUNTIME,
    MATERIALISE_ARCHITECTURE,
    RUNTIME_REASON,
    XRAY_REASON,
    acknowledge,
    acknowledge_wildcards,
    allow,
    allow_key,
    arn_token,
    lambda_role,
    log_group,
    stream_source,
    via,
)
from lakesync_infra.config import ALL_FUNCTIONS, LakeSyncConfig
from lakesync_infra.function_access import (
    ACCESS,
    AUTHORIZER,
    AUTHORIZER_MEMORY_MB,
    BROADCAST,
    CONNECTOR_POLL,
    ENI_ACTIONS,
    ENI_REASON,
    FLUSH,
    FLUSH_DATABASE_ACTIONS,
    FLUSH_MEMORY_MB,
    FLUSH_TABLE_ACTIONS,
    FLUSH_TIMEOUT_S,
    FLUSH_TRIGGER,
    LAKE_TICK,
    MATERIALISE,
    MATERIALISE_BATCH_SIZE,
    RATE_LIMITED,
    FunctionAccess,
    driver_functions,
    function_access,
)
from lakesync_infra.jobs import METRIC_NAMESPACE
from lakesync_infra.lake import WAREHOUSE_PREFIX, Lake
from lakesync_infra.network import MaterialiseNetwork
from lakesync_infra.queues import PAYLOADS, Queues

POWERTOOLS_LOG_LEVEL: Final = "POWERTOOLS_LOG_LEVEL"
POWERTOOLS_TRACE_DISABLED: Final = "POWERTOOLS_TRACE_DISABLED"
"""Set when the configuration turns tracing off: the functions then build no X-Ray tracer
(:func:`lakesync.aws.tracing.tracing_enabled`)."""
FLUSH_REQUEST_PREFIX: Final = "flush#"
STREAM_RETRY_ATTEMPTS: Final = 30
STREAM_MAX_RECORD_AGE: Final = cdk.Duration.hours(2)
FLUSH_REQUEST_FILTER: Final = {
    "dynamodb": {
        "NewImage": {
            "gw": {"S": lambda_.FilterRule.exists()},
            "sk": {"S": lambda_.FilterRule.begins_with(FLUSH_REQUEST_PREFIX)},
        }
    }
}
"""New flush requests (the keys :func:`lakesync.core.flush_requests.parse_flush_request_key` reads) invoke the
trigger. DynamoDB event source mappings filter only on the ``dynamodb`` key
(https://docs.aws.amazon.com/lambda/latest/dg/with-ddb-filtering.html), so not on ``eventName``: the flush deleting a
request streams a ``REMOVE`` without ``NewImage``, which fails the filter; requests are never updated, and the handler
drops anything but an ``INSERT`` itself."""


def handler(name: str) -> str:
    """The handler string of function ``name``."""
    return f"functions.{name}.lambda_handler"


class Functions(Construct):
    """Every Lambda function.

    Attributes:
        functions: Function name (``push``, ``flush_trigger``...) -> function.
        log_groups: Their log groups.
        stream_failures: Where the flush trigger's exhausted stream batches are recorded.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: LakeSyncConfig,
        asset: Path,
        materialise_asset: Path,
        flush_asset: Path,
        key: kms.IKey,
        buffer: Buffer,
        jwt_secret: secretsmanager.ISecret,
        lake: Lake,
        job_names: Mapping[str, str],
        job_arns: Mapping[str, str],
        queues: Queues,
        network: MaterialiseNetwork | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        if set(ACCESS) != set(ALL_FUNCTIONS):
            raise ValueError(f"ACCESS must describe exactly {sorted(ALL_FUNCTIONS)}")
        code = lambda_.Code.from_asset(str(asset), exclude=[".complete"])
        drivers = lambda_.Code.from_asset(str(materialise_asset), exclude=[".complete"])
        lake_code = lambda_.Code.from_asset(str(flush_asset), exclude=[".complete"])
        in_vpc_names = set(network.functions) if network is not None else set()
        with_drivers = driver_functions(config)
        self.functions: dict[str, lambda_.Function] = {}
        self.log_groups: dict[str, logs.LogGroup] = {}
        for name in config.deployed_functions:
            self._add_function(
                name,
                config=config,
                code=lake_code if name == FLUSH else drivers if name in with_drivers else code,
                with_drivers=with_drivers,
                network=network if name in in_vpc_names else None,
                key=key,
                buffer=buffer,
                jwt_secret=jwt_secret,
                lake=lake,
                job_names=job_names,
                queues=queues,
            )
        self._wire_materialise(config, queues)
        self._wire_lake_starters(key, lake, job_arns, queues)
        self._add_flush_trigger_source(buffer, key)

    def _add_function(
        self,
        name: str,
        *,
        config: LakeSyncConfig,
        code: lambda_.Code,
        with_drivers: frozenset[str],
        network: MaterialiseNetwork | None,
        key: kms.IKey,
        buffer: Buffer,
        jwt_secret: secretsmanager.ISecret,
        lake: Lake,
        job_names: Mapping[str, str],
        queues: Queues,
    ) -> None:
        """Function ``name`` (in ``network`` when given), its log group, role and grants."""
        access = function_access(config, name)
        group = log_group(self, f"{_pascal(name)}Logs", config)
        role = lambda_role(self, f"{_pascal(name)}Role", group)
        env = _environment(name, access, config, buffer, jwt_secret, lake, job_names, queues)
        if network is not None:
            # Lambda checks them when it creates the function
            allow(role, ENI_ACTIONS, ["*"], sid="NetworkInterfaces")
        fn = lambda_.Function(
            self,
            _pascal(name),
            description=f"LakeSync {config.name}: functions.{name}",
            code=code,
            handler=handler(name),
            runtime=LAMBDA_RUNTIME,
            architecture=_architecture(name, with_drivers),
            memory_size=_memory(config, name, access),
            vpc=network.vpc if network else None,
            vpc_subnets=network.subnets if network else None,
            security_groups=network.security_groups if network else None,
            timeout=cdk.Duration.seconds(access.timeout_s or config.api_timeout_seconds),
            environment=env,
            role=role,
            log_group=group,
            logging_format=lambda_.LoggingFormat.JSON,
            system_log_level_v2=lambda_.SystemLogLevel(config.lambda_system_log_level),
            application_log_level_v2=application_log_level(config.log_level),
            tracing=lambda_.Tracing.ACTIVE if config.tracing else lambda_.Tracing.DISABLED,
            reserved_concurrent_executions=config.reserved_concurrency.get(name),
            recursive_loop=lambda_.RecursiveLoop.TERMINATE,
            # asynchronous invocations: a schedule's next tick is the retry (a poll is idempotent); a failed flush
            # run is recorded, and the next tick starts a new one
            retry_attempts=0 if name in (CONNECTOR_POLL, FLUSH) else None,
            max_event_age=cdk.Duration.seconds(ASYNC_EVENT_AGE_S) if name == FLUSH else None,
        )
        acknowledge(fn, "AwsSolutions-L1", RUNTIME_REASON)
        self.functions[name] = fn
        self.log_groups[name] = group
        self._grant_tables(role, access, buffer, key)
        if name in RATE_LIMITED:
            _grant_rate_limits(role, access, buffer, key)
        acknowledge_wildcards(role, _wildcards(name, access, config, lake, queues, in_vpc=network is not None))
        if access.api and access.verifies_tokens and name != "health":
            _grant_jwt_secret(role, key, jwt_secret)
        if access.checkpoints:
            _grant_checkpoint_reads(role, key, lake)
        if access.checkpoint_objects:
            _grant_checkpoint_object_reads(role, key, lake)

    def _wire_materialise(self, config: LakeSyncConfig, queues: Queues) -> None:
        """The materialise function: the consumer of the materialise queue, reading the destinations' secrets."""
        materialise = self.functions[MATERIALISE]
        self.materialise_source = queues.attach_consumer(
            materialise, batch_size=MATERIALISE_BATCH_SIZE, max_concurrency=config.materialise_concurrency
        )
        allow(
            materialise.role,  # type: ignore[arg-type]
            ["secretsmanager:GetSecretValue"],
            [destination_secrets_arn(self, config)],
            sid="DestinationSecrets",
        )

    def _wire_lake_starters(self, key: kms.IKey, lake: Lake, job_arns: Mapping[str, str], queues: Queues) -> None:
        """The lake tick and the flush trigger may start the Glue jobs and the flush function; its own grants."""
        trigger = self.functions[FLUSH_TRIGGER]
        tick = self.functions[LAKE_TICK]
        allow(tick.role, ["glue:StartJobRun", "glue:GetJobRuns"], list(job_arns.values()), sid="LakeJobs")  # type: ignore[arg-type]
        if "flush" in job_arns:
            allow(trigger.role, ["glue:StartJobRun", "glue:GetJobRuns"], [job_arns["flush"]], sid="StartFlushJob")  # type: ignore[arg-type]
        flush = self.functions.get(FLUSH)
        if flush is not None:
            for starter in (trigger, tick):
                starter.add_environment(FLUSH_FUNCTION_NAME, flush.function_name)
                starter.add_environment(FLUSH_FUNCTION_TIMEOUT_S, str(FLUSH_TIMEOUT_S))
                allow(starter.role, ["lambda:InvokeFunction"], [flush.function_arn], sid="StartFlush")  # type: ignore[arg-type]
            _grant_flush(flush.role, key, lake, queues)  # type: ignore[arg-type]

    def _add_flush_trigger_source(self, buffer: Buffer, key: kms.IKey) -> None:
        """The flush trigger's event source: flush requests on the stream table's stream, failures to a queue."""
        # Only batch metadata lands here (shard, sequence numbers), so SQS-managed encryption is enough and the
        # trigger needs no key grant to send.
        self.stream_failures = sqs.Queue(
            self,
            "FlushTriggerFailures",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=cdk.Duration.days(14),
        )
        acknowledge(
            self.stream_failures,
            "AwsSolutions-SQS3",
            "This queue is itself a dead-letter destination: the stream event source mapping's on-failure queue.",
        )
        self.flush_trigger_source = sources.DynamoEventSource(
            stream_source(self, "ConfigStream", buffer.tables[STREAM_TABLE]),
            starting_position=lambda_.StartingPosition.LATEST,
            batch_size=100,
            max_batching_window=cdk.Duration.seconds(1),
            filters=[lambda_.FilterCriteria.filter(FLUSH_REQUEST_FILTER)],
            report_batch_item_failures=True,
            retry_attempts=STREAM_RETRY_ATTEMPTS,
            max_record_age=STREAM_MAX_RECORD_AGE,
            bisect_batch_on_error=False,
            on_failure=sources.SqsDlq(self.stream_failures),
        )
        trigger = self.functions[FLUSH_TRIGGER]
        trigger.add_event_source(self.flush_trigger_source)  # CDK grants the stream reads
        allow_key(trigger.role, key, ["kms:Decrypt"], ["dynamodb"], sid="StreamKey")  # type: ignore[arg-type]

    def _grant_tables(self, role: iam.Role, access: FunctionAccess, buffer: Buffer, key: kms.IKey) -> None:
        buffer.grant(role, access.tables, access.index_actions)
        if access.tables:
            writes = any(not a.endswith(("GetItem", "Query")) for actions in access.tables.values() for a in actions)
            kms_actions = ["kms:Decrypt", "kms:DescribeKey"]
            if writes:
                kms_actions += ["kms:Encrypt", "kms:GenerateDataKey"]
            allow_key(role, key, kms_actions, ["dynamodb"], sid="TableKey")


def _environment(
    name: str,
    access: FunctionAccess,
    config: LakeSyncConfig,
    buffer: Buffer,
    jwt_secret: secretsmanager.ISecret,
    lake: Lake,
    job_names: Mapping[str, str],
    queues: Queues,
) -> dict[str, str]:
    """The environment variables of function ``name``."""
    env: dict[str, str] = {POWERTOOLS_LOG_LEVEL: config.log_level}
    if not config.tracing:
        env[POWERTOOLS_TRACE_DISABLED] = "true"
    if access.api:
        env.update(_api_environment(config, buffer, jwt_secret))
    if access.checkpoints or access.checkpoint_objects:
        env[CHECKPOINT_BUCKET] = lake.checkpoints.bucket_name
    if name == FLUSH_TRIGGER:
        env.update(_flush_trigger_environment(config, buffer, job_names))
    if name == LAKE_TICK:
        env.update(_lake_tick_environment(config, buffer, job_names))
    if name == BROADCAST:
        env.update({var: getattr(buffer.names, kind) for kind, var in TABLE_VARS.items()})
        env.update(_sub_shards_environment(config))
    if name == MATERIALISE:
        env.update(_materialise_environment(config, buffer, queues))
    if name == FLUSH:
        env.update(_flush_environment(config, buffer, lake, queues))
    return env


def _wildcards(
    name: str, access: FunctionAccess, config: LakeSyncConfig, lake: Lake, queues: Queues, *, in_vpc: bool
) -> dict[str, str]:
    """The reasons for the wildcard resources in function ``name``'s policy (cdk-nag's ``AwsSolutions-IAM5``)."""
    wildcards = {"Resource::*": XRAY_REASON}
    if name == "rotate_secret":
        wildcards["Resource::*"] = (
            XRAY_REASON + " CDK's rotation schedule also grants secretsmanager:GetRandomPassword, which has no"
            " resource (our rotation generates the key itself and does not call it)."
        )
    if name in (FLUSH_TRIGGER, BROADCAST):
        wildcards["Resource::*"] = (
            XRAY_REASON + " The stream event source also needs dynamodb:ListStreams, which has no resource."
        )
    if access.checkpoints:
        wildcards[f"Resource::{arn_token(lake.checkpoints)}/*"] = (
            "Reads checkpoint objects: chunk and manifest keys are generated per gateway and checkpoint id."
        )
    if access.checkpoint_objects:
        wildcards[f"Resource::{arn_token(lake.checkpoints)}/{CHECKPOINT_PREFIX}/*"] = (
            "Reads checkpoint objects by key, under the checkpoints prefix only: chunk and manifest keys are "
            "generated per gateway and checkpoint id."
        )
    if name == MATERIALISE:
        wildcards.update(_materialise_wildcards(config, queues))
    if name == FLUSH:
        wildcards.update(_flush_wildcards(lake, queues))
    if in_vpc:
        wildcards["Resource::*"] = ENI_REASON
    return wildcards


def _grant_jwt_secret(role: iam.Role, key: kms.IKey, jwt_secret: secretsmanager.ISecret) -> None:
    """Reading the token-signing secret, decrypted through Secrets Manager."""
    allow(role, ["secretsmanager:GetSecretValue"], [jwt_secret.secret_arn], sid="JwtSecret")
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="JwtSecretKey",
            actions=["kms:Decrypt"],
            resources=[key.key_arn],
            conditions={"StringEquals": {"kms:ViaService": via("secretsmanager")}},
        )
    )


def _grant_checkpoint_reads(role: iam.Role, key: kms.IKey, lake: Lake) -> None:
    """Reading the checkpoint bucket."""
    checkpoints = lake.checkpoints
    # ListBucket makes a missing object a 404 (no checkpoint yet) instead of a 403.
    allow(role, ["s3:ListBucket"], [checkpoints.bucket_arn], sid="ListCheckpoints")
    allow(role, ["s3:GetObject"], [checkpoints.arn_for_objects("*")], sid="ReadCheckpoints")
    allow_key(role, key, ["kms:Decrypt"], ["s3"], sid="CheckpointKey")


def _grant_checkpoint_object_reads(role: iam.Role, key: kms.IKey, lake: Lake) -> None:
    """Reading checkpoint objects by key, under the checkpoints prefix, without listing: a missing object answers
    403, not 404, which the membership view treats alike (it reads a checkpoint only for a released log, which one
    covers)."""
    objects = lake.checkpoints.arn_for_objects(f"{CHECKPOINT_PREFIX}/*")
    allow(role, ["s3:GetObject"], [objects], sid="ReadCheckpoints")
    allow_key(role, key, ["kms:Decrypt"], ["s3"], sid="CheckpointKey")


def _api_environment(config: LakeSyncConfig, buffer: Buffer, jwt_secret: secretsmanager.ISecret) -> dict[str, str]:
    env = {GATEWAY_IDS: ",".join(config.gateway_ids), JWT_SECRET_ARN: jwt_secret.secret_arn}
    env[MAX_TOKEN_LIFETIME_S] = str(config.max_token_lifetime_seconds)
    env.update(_egress_environment(config))
    for kind, var in TABLE_VARS.items():
        env[var] = getattr(buffer.names, kind)
    env.update(_sub_shards_environment(config))
    for var, value in (
        (FLUSH_THRESHOLD_BYTES, config.flush_threshold_bytes),
        (BACKPRESSURE_BYTES, config.backpressure_bytes),
        (MAX_BODY_BYTES, config.max_body_bytes),
        (PULL_BASIS_TTL_MS, config.pull_basis_ttl_ms),
        (RATE_LIMITS, config.rate_limits),
    ):
        if value is not None:
            env[var] = str(value)
    return env


def _sub_shards_environment(config: LakeSyncConfig) -> dict[str, str]:
    """``LAKESYNC_SUB_SHARDS`` when the environment configures sub-shards."""
    if not config.sub_shards:
        return {}
    return {SUB_SHARDS: json.dumps(dict(sorted(config.sub_shards.items())), separators=(",", ":"))}


def _lake_tick_environment(config: LakeSyncConfig, buffer: Buffer, job_names: Mapping[str, str]) -> dict[str, str]:
    # The flush always publishes (the Glue job and the function are given the claim-check bucket and the queue), and
    # the tick must know it: the flush then releases only published entries. The flush function's name is added
    # once it exists.
    env = {GATEWAY_IDS: ",".join(config.gateway_ids), FLUSH_PUBLISHES: "true"}
    if len(config.flush_engines) > 1:
        env[FLUSH_FUNCTION_MAX_BACKLOG] = str(config.flush_function_max_backlog)
    env[COMPACT_MIN_FLUSH_RUNS] = str(config.compact_min_flush_runs)
    env[COMPACT_MAX_WAIT_MINUTES] = str(config.compact_max_wait_minutes)
    for kind, var in TABLE_VARS.items():
        env[var] = getattr(buffer.names, kind)
    for job, name in job_names.items():
        env[JOB_NAME_VARS[job]] = name
    return env


def _flush_trigger_environment(config: LakeSyncConfig, buffer: Buffer, job_names: Mapping[str, str]) -> dict[str, str]:
    """The Glue flush job's name where it is deployed; the tables where the function is (its run records); with both,
    the gateways and the function's backlog limit (the trigger chooses as the tick does)."""
    env: dict[str, str] = {}
    if "flush" in job_names:
        env[FLUSH_JOB_NAME] = job_names["flush"]
    if "function" in config.flush_engines:
        env.update({var: getattr(buffer.names, kind) for kind, var in TABLE_VARS.items()})
    if len(config.flush_engines) > 1:
        env[GATEWAY_IDS] = ",".join(config.gateway_ids)
        env[FLUSH_FUNCTION_MAX_BACKLOG] = str(config.flush_function_max_backlog)
    return env


def _flush_environment(config: LakeSyncConfig, buffer: Buffer, lake: Lake, queues: Queues) -> dict[str, str]:
    # What the Glue flush job is given (lakesync_infra.jobs.script_arguments): the same warehouse, catalog, database,
    # retention, checkpoints and publishing.
    env = {
        GATEWAY_IDS: ",".join(config.gateway_ids),
        LAKE_WAREHOUSE: lake.warehouse,
        LAKE_CATALOG: "glue",
        LAKE_NAMESPACE: lake.database_name,
        CHECKPOINT_BUCKET: lake.checkpoints.bucket_name,
        CLAIM_CHECK_BUCKET: queues.claim_check.bucket_name,
        MATERIALISE_QUEUE_URL: queues.queue.queue_url,
        FLUSH_RETENTION_MS: str(DEFAULT_RETENTION_MS),
    }
    for kind, var in TABLE_VARS.items():
        env[var] = getattr(buffer.names, kind)
    return env


def _grant_flush(role: iam.IRole, key: kms.IKey, lake: Lake, queues: Queues) -> None:
    """The flush function's lake, catalog, publishing and metric grants (its tables and checkpoints are granted as
    every function's)."""
    # ListBucket makes a missing object a 404 (pyarrow's existence checks) instead of a 403.
    allow(role, ["s3:ListBucket"], [lake.bucket.bucket_arn], sid="ListWarehouse")
    allow(
        role,
        ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
        [lake.bucket.arn_for_objects(f"{WAREHOUSE_PREFIX}/*")],
        sid="Warehouse",
    )
    arns = lake.catalog_arns()
    allow(role, FLUSH_DATABASE_ACTIONS, [arns["catalog"], arns["database"]], sid="CatalogDatabase")
    delta_log = cdk.Stack.of(lake).format_arn(
        service="glue", resource="table", resource_name=f"{lake.database_name}/{DELTA_LOG}"
    )
    allow(role, FLUSH_TABLE_ACTIONS, [arns["catalog"], arns["database"], delta_log], sid="CatalogDeltaLog")
    queues.grant_publish(role)
    allow_key(role, key, ["kms:Decrypt", "kms:GenerateDataKey"], ["s3", "sqs"], sid="LakeKey")
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="LakeSyncMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": METRIC_NAMESPACE}},
        )
    )


def _materialise_environment(config: LakeSyncConfig, buffer: Buffer, queues: Queues) -> dict[str, str]:
    env = {CLAIM_CHECK_BUCKET: queues.claim_check.bucket_name}  # the job names its gateway
    for kind, var in TABLE_VARS.items():
        env[var] = getattr(buffer.names, kind)
    env.update(_egress_environment(config))
    return env


def _egress_environment(config: LakeSyncConfig) -> dict[str, str]:
    """What the functions that dial admin-configured targets need: the destination secret prefix (a gateway's
    destinations name secrets under ``<prefix><gateway>/`` only) and the allowed private networks."""
    env = {DESTINATION_SECRET_PREFIX: config.destination_secrets}
    if config.allowed_networks:
        env[ALLOWED_NETWORKS] = ",".join(config.allowed_networks)
    return env


def application_log_level(log_level: str) -> lambda_.ApplicationLogLevel:
    """Lambda's filter of the functions' own lines: never stricter than INFO, because the metrics' EMF lines carry no
    level and Lambda files them as INFO. A stricter ``logLevel`` is applied by the logger itself
    (:func:`lakesync.aws.lambda_runtime.apply_configured_log_level`)."""
    return lambda_.ApplicationLogLevel.DEBUG if log_level == "DEBUG" else lambda_.ApplicationLogLevel.INFO


def _architecture(name: str, with_drivers: frozenset[str]) -> lambda_.Architecture:
    if name == FLUSH:
        return FLUSH_ARCHITECTURE
    return MATERIALISE_ARCHITECTURE if name in with_drivers else LAMBDA_ARCHITECTURE


def _grant_rate_limits(role: iam.Role, access: FunctionAccess, buffer: Buffer, key: kms.IKey) -> None:
    """Let ``role`` count requests in the dedup table: ``UpdateItem`` on the rate limit counters' keys only."""
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="RateLimitCounters",
            actions=["dynamodb:UpdateItem"],
            resources=[buffer.tables["dedup"].table_arn],
            conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{RATE_LIMIT_KEY_PREFIX}*"]}},
        )
    )
    writes = any(not a.endswith(("GetItem", "Query")) for actions in access.tables.values() for a in actions)
    if not writes:  # a reading function's table key grant holds no encryption
        allow_key(role, key, ["kms:Encrypt", "kms:GenerateDataKey"], ["dynamodb"], sid="RateLimitKey")


def _memory(config: LakeSyncConfig, name: str, access: FunctionAccess) -> int:
    if name == AUTHORIZER:
        return AUTHORIZER_MEMORY_MB
    if name == FLUSH:
        return FLUSH_MEMORY_MB
    if name == MATERIALISE:
        return config.materialise_memory_mb
    return config.lambda_memory_mb if access.api or name == BROADCAST else 256


def destination_secrets_arn(scope: Construct, config: LakeSyncConfig) -> str:
    """ARN pattern of the destinations' secrets (Secrets Manager appends ``-`` and 6 random characters to a name)."""
    return cdk.Stack.of(scope).format_arn(
        service="secretsmanager",
        resource="secret",
        resource_name=f"{config.destination_secrets}*",
        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
    )


def _materialise_wildcards(config: LakeSyncConfig, queues: Queues) -> dict[str, str]:
    return {
        f"Resource::{arn_token(queues.claim_check)}/{PAYLOADS}": "Reads claim-check payloads: the flush job names "
        "one object per published range under the materialise/ prefix, at run time.",
        "Resource::arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:"
        f"{config.destination_secrets}*": "Destinations (and their secrets) are configured at run time through the "
        "admin API; the function may read only secrets named under the environment's destination prefix.",
    }


def _flush_wildcards(lake: Lake, queues: Queues) -> dict[str, str]:
    return {
        f"Resource::{arn_token(lake.bucket)}/{WAREHOUSE_PREFIX}/*": "Iceberg data and metadata files of the delta log "
        "under the warehouse prefix; pyiceberg generates their names on every commit.",
        f"Resource::{arn_token(queues.claim_check)}/{PAYLOADS}": "Writes materialisation payloads: one object per "
        "published range, keyed by gateway, table and range under the materialise/ prefix, at run time.",
        "Resource::*": XRAY_REASON + " cloudwatch:PutMetricData has no resource-level permissions either; its "
        "statement is limited to the LakeSync metrics namespace by condition.",
    }


def _pascal(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))
