"""The Glue 5.1 jobs (flush, compact, checkpoint), their artifacts, roles and schedules, and what every Glue job of
the stack runs with (:meth:`Jobs.add_job`), the restore job too.

The restore job (:mod:`lakesync_infra.restore_job`, ``glue_jobs/restore.py``) is built by :meth:`Jobs.add_job` in a
construct of its own: same runtime, bundle, security configuration and logs, but on the standard execution class, and
started only by hand (``aws glue start-job-run --job-name <RestoreJob output> --arguments
'{"--gateways":"default","--replace":"true"}'``): no schedule and no lake tick knows it, it is not one of
:data:`JOB_KINDS` nor in :attr:`Jobs.jobs`.

The flush is a Glue job with ``flushEngine`` ``auto`` (the default: beside the ``flush`` Lambda function,
:mod:`lakesync_infra.functions`; the lake tick gives it the runs whose backlog is beyond the function's) or ``glue``;
with ``function`` no Glue flush job is deployed (:func:`glue_job_kinds`). Its schedule invokes the lake tick either way,
and the bundle keeps its script.

Artifacts: the ``glue_jobs/*.py`` scripts (:data:`lakesync_infra.packaging.GLUE_SCRIPTS`: the three lake jobs' and
the restore job's) and the zip of wheels (``lakesync-<version>.gluewheels.zip``: the
``lakesync`` wheel and its pinned requirements, protobuf and PyJWT; :func:`lakesync_infra.packaging.build_glue_bundle`)
are deployed together (a ``BucketDeployment``) to ``s3://<artifacts>/glue/<content hash>/``, each under its real file
name, and a new build gets a new prefix, so a job never mixes a new script with old wheels.
``--additional-python-modules`` names the zip and ``--python-modules-installer-option --no-index`` keeps pip off PyPI:
a run installs exactly the bundled wheels and needs no internet (:func:`glue_arguments`).

Runtime: Glue 5.1 (:data:`GLUE_VERSION`) = Spark 3.5.6, Python 3.11, Iceberg 1.10.0 (:data:`GLUE_RUNTIMES`), the
versions the local tests run (pyspark pinned to 3.5.6, the Iceberg 1.10 runtime jar; a test compares them).

Spark: ``--datalake-formats iceberg`` puts Glue's Iceberg jars on the classpath; the Iceberg SQL extensions are a
static Spark setting, so they are passed with ``--conf`` (``lakesync.spark.session`` configures the Glue-backed
Iceberg catalog ``lake`` itself). Glue reads one ``--conf`` argument, so further settings follow inside its value as
`` --conf key=value``. Since Glue 5.1, Hadoop's ``s3://`` file system is S3A instead of EMRFS, and S3A without an
endpoint region assumes ``us-east-2`` (AWS's migration guide asks to set ``spark.hadoop.fs.s3a.endpoint.region``):
the lake's data and metadata go through Iceberg's ``S3FileIO`` (the job's region), but ``remove_orphan_files`` lists
the table locations through the Hadoop file system (as does anything else Glue or Spark reaches by an ``s3://`` path),
so S3A's region is set to the stack's. The Hive-compatible Glue catalog (``--enable-glue-datacatalog``) is not
enabled: nothing uses Spark's session catalog, and it would make every run depend on reading the account's
``default`` database.

Schedules (EventBridge Scheduler): no schedule starts a job. Each job's schedule -- flush every
``flushIntervalMinutes``, compact and checkpoint on their own expressions -- invokes the lake tick
(``functions/lake_tick.py``, :meth:`Jobs.schedule_ticks`) with ``{"job": <kind>}``, and the tick starts the job (or
the flush function) only when it has work (:mod:`lakesync.core.lake_work`): an idle deployment starts no run. A run
meeting a busy job is left to the next tick, as before; the schedules retry a failed invocation twice within an hour.
EventBridge Scheduler rather than an EventBridge rule: rates down to one minute, one role scoped to invoking the tick,
and the same schedule service for anything added later.

Materialisation: after its commit the flush publishes every newly flushed range (``lakesync.aws.publish``) -- the
payload to the claim-check bucket under ``materialise/``, one message to the materialisation queue, the head's
published position ``ps`` moved on -- so its role may also put those objects, send to that queue and emit its
``MaterialisePublishFailures`` metric (namespace ``LakeSync`` only).

Every job has its own role with exactly what its code does (tables and actions below; the data key only through
the services that hold data with it, ``kms:ViaService``), and runs with a security configuration that KMS-encrypts
its S3 writes, CloudWatch logs and bookmarks.

Logs: every job runs with ``--custom-logGroup-prefix /aws-glue/LakeSync-<env>`` and that security configuration. The
Glue developer guide names two places a Glue 5.x job then writes to: ``<prefix>/output`` and ``<prefix>/error``
("Logging for AWS Glue jobs"), and, with a security configuration that encrypts CloudWatch logs,
``<prefix>/<security configuration>-role/<job role name>/output`` and ``.../error`` (:func:`job_log_group`). No run
on AWS has shown which one applies to these jobs yet, so the stack creates both sets of groups (each with the
retention and the data key; the shared ``<prefix>/{output,error}`` once for all jobs) and each role may create,
associate the key with and write to any group under the stack's prefix (``<prefix>/*``, streams included): a wrong
guess can neither lose a run's logs to a group without retention nor fail the run on ``logs:AssociateKmsKey``. Narrow
the grant to the groups a real run writes once one has been seen. The role names are generated by CloudFormation,
new whenever the stack is created, so groups a late run recreates after a stack is deleted never collide with the next
deployment's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_s3_deployment as s3deploy
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as targets
from constructs import Construct

from lakesync.core.lake_work import DEFAULT_RETENTION_MS
from lakesync_infra.buffer import Buffer
from lakesync_infra.common import (
    acknowledge,
    acknowledge_wildcards,
    allow,
    allow_key,
    arn_token,
    lambda_role,
    log_group,
    secure_bucket,
)
from lakesync_infra.config import LakeSyncConfig
from lakesync_infra.lake import WAREHOUSE_PREFIX, Lake
from lakesync_infra.packaging import GLUE_SCRIPTS, GlueBundle
from lakesync_infra.queues import PAYLOADS, Queues


@dataclass(frozen=True, slots=True)
class GlueRuntime:
    """What a Glue version runs (AWS Glue's migration guide, appendix A, and its open table format appendix).

    Attributes:
        spark: Apache Spark.
        python: Python (major.minor).
        iceberg: Apache Iceberg, with ``--datalake-formats iceberg``.
        java: Java.
    """

    spark: str
    python: str
    iceberg: str
    java: str


GLUE_RUNTIMES: Final[Mapping[str, GlueRuntime]] = {
    "5.0": GlueRuntime(spark="3.5.4", python="3.11", iceberg="1.7.1", java="17"),
    "5.1": GlueRuntime(spark="3.5.6", python="3.11", iceberg="1.10.0", java="17"),
}
GLUE_VERSION: Final = "5.1"
"""The jobs' Glue version: its Spark, Python and Iceberg line are the local test runtime's (tests/infra)."""
ICEBERG_EXTENSIONS: Final = "spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
S3A_REGION: Final = "spark.hadoop.fs.s3a.endpoint.region"
TEMP_PREFIX: Final = "glue-temp"
METRIC_NAMESPACE: Final = "LakeSync"
"""The namespace of the jobs' own metrics (``lakesync.aws.publish.METRIC_NAMESPACE``)."""
JOB_KINDS: Final = ("flush", "compact", "checkpoint")
"""The lake's jobs: each has a schedule of the lake tick; each is a Glue job, but ``flush`` on the function engine."""
LOG_STREAMS: Final = ("output", "error")
SCHEDULE_RETRIES: Final = 2
SCHEDULE_MAX_AGE: Final = cdk.Duration.hours(1)

GLUE_ARGUMENTS: Final = frozenset(
    {
        "--datalake-formats",
        "--conf",
        "--additional-python-modules",
        "--python-modules-installer-option",
        "--job-language",
        "--TempDir",
        "--enable-metrics",
        "--enable-observability-metrics",
        "--custom-logGroup-prefix",
        "--job-bookmark-option",
    }
)
"""The DefaultArguments Glue itself interprets; every other one is an option of the job's script."""


@dataclass(frozen=True, slots=True)
class JobAccess:
    """What one job's code touches.

    Attributes:
        tables: Logical DynamoDB table -> actions.
        index_actions: Logical DynamoDB table -> actions on its secondary indexes.
        lake_write: Whether it writes the warehouse (else reads it).
        catalog_actions: Glue Data Catalog actions on the database and its tables.
        checkpoints: S3 actions on the checkpoint bucket's objects.
        publishes: Whether it publishes materialisation jobs (claim-check payloads, queue messages, the
            ``LakeSync`` metrics).
        lists_tables: Whether it lists the account's DynamoDB tables (``ListTables`` has no resource-level
            permissions).
    """

    tables: Mapping[str, tuple[str, ...]]
    index_actions: Mapping[str, tuple[str, ...]]
    lake_write: bool
    catalog_actions: tuple[str, ...]
    checkpoints: tuple[str, ...]
    publishes: bool = False
    lists_tables: bool = False


CATALOG_READ: Final = ("glue:GetDatabase", "glue:GetTable", "glue:GetTables")
CATALOG_WRITE: Final = (*CATALOG_READ, "glue:CreateTable", "glue:UpdateTable")

ACCESS: Final[Mapping[str, JobAccess]] = {
    # lakesync.aws.flush_store.FlushStore: heads read/advanced (flushed counters, release marks, the published
    # position), log ranges read and released (a mark on the head; the items expire by TTL; the by_commit index is
    # read to find the release point), flush requests and destinations listed,
    # requests cleared, the lease item written; latest checkpoints read; lakesync.aws.publish: materialisation.
    "flush": JobAccess(
        tables={
            "deltas": ("dynamodb:Query",),
            "heads": ("dynamodb:BatchGetItem", "dynamodb:UpdateItem"),
            "config": (
                "dynamodb:Query",
                "dynamodb:GetItem",
                "dynamodb:PutItem",
                "dynamodb:UpdateItem",
                "dynamodb:DeleteItem",
                "dynamodb:BatchWriteItem",
            ),
        },
        index_actions={"deltas": ("dynamodb:Query",)},
        lake_write=True,
        catalog_actions=CATALOG_WRITE,
        checkpoints=("s3:GetObject",),
        publishes=True,
    ),
    # lakesync.spark.compact + glue_jobs/compact.py: table schemas from the config table.
    "compact": JobAccess(
        tables={"config": ("dynamodb:Query",)},
        index_actions={},
        lake_write=True,
        catalog_actions=CATALOG_WRITE,
        checkpoints=(),
    ),
    # lakesync.spark.checkpoint: state tables read, chunks/manifest/latest.json written (latest.json read first).
    "checkpoint": JobAccess(
        tables={},
        index_actions={},
        lake_write=False,
        catalog_actions=CATALOG_READ,
        checkpoints=("s3:GetObject", "s3:PutObject"),
    ),
}


def glue_job_kinds(config: LakeSyncConfig) -> tuple[str, ...]:
    """The jobs deployed as Glue jobs: all of :data:`JOB_KINDS`, but ``flush`` only where the Glue flush engine is
    deployed (``flushEngine`` ``auto`` or ``glue``)."""
    return tuple(kind for kind in JOB_KINDS if kind != "flush" or "glue" in config.flush_engines)


def spark_conf(region: str) -> str:
    """The ``--conf`` argument: the Iceberg SQL extensions, and S3A's region (Glue 5.1 defaults it to us-east-2)."""
    return f"{ICEBERG_EXTENSIONS} --conf {S3A_REGION}={region}"


def glue_arguments(*, region: str, modules_uri: str, log_prefix: str) -> dict[str, str]:
    """The DefaultArguments Glue itself reads (:data:`GLUE_ARGUMENTS`), the same for every job."""
    return {
        "--datalake-formats": "iceberg",
        "--conf": spark_conf(region),
        "--additional-python-modules": modules_uri,
        "--python-modules-installer-option": "--no-index",
        "--job-language": "python",
        "--enable-metrics": "true",
        "--enable-observability-metrics": "true",
        "--custom-logGroup-prefix": log_prefix,
        "--job-bookmark-option": "job-bookmark-disable",
    }


def script_arguments(
    kind: str,
    *,
    config: LakeSyncConfig,
    warehouse: str,
    namespace: str,
    tables_json: str,
    region: str,
    checkpoint_bucket: str,
    claim_check_bucket: str,
    materialise_queue_url: str,
) -> dict[str, str]:
    """The job script's own options (``--name value``; names as in the script's ``JOB_OPTIONS``)."""
    gateways = ",".join(config.gateway_ids)
    lake = {"--warehouse": warehouse, "--catalog": "glue", "--namespace": namespace}
    if kind == "flush":
        return {
            **lake,
            "--tables": tables_json,
            "--gateways": gateways,
            "--region": region,
            # the retention the lake tick assumes when it decides whether a release is due
            "--retention_ms": str(DEFAULT_RETENTION_MS),
            "--checkpoint_bucket": checkpoint_bucket,
            "--claim_check_bucket": claim_check_bucket,
            "--materialise_queue_url": materialise_queue_url,
        }
    if kind == "compact":
        return {
            **lake,
            "--tables": tables_json,
            "--gateways": gateways,
            "--region": region,
            "--maintain": "true" if config.compact_maintain else "false",
        }
    if kind == "checkpoint":
        return {**lake, "--bucket": checkpoint_bucket, "--gateways": gateways, "--region": region}
    raise ValueError(f"unknown job {kind!r}")


@dataclass(frozen=True, slots=True)
class _Shared:
    """What every job of :class:`Jobs` runs with (:meth:`Jobs.add_job`)."""

    key: kms.Key
    lake: Lake
    buffer: Buffer
    queues: Queues
    prefix: str
    log_prefix: str
    security_name: str
    security: glue.CfnSecurityConfiguration
    arguments: Mapping[str, str]
    deployment: s3deploy.BucketDeployment


class Jobs(Construct):
    """The Glue jobs (:func:`glue_job_kinds`) and the lake tick's schedules.

    Attributes:
        artifacts: The bucket holding scripts, the wheel and Glue's temporary files.
        jobs: ``flush`` (where the Glue flush engine is deployed) / ``compact`` / ``checkpoint`` -> job (``ref`` is
            the job name); the lake tick's jobs only, not the restore job.
        roles: The jobs' roles, by job.
        modules_uri: ``s3://`` URI of the deployed zip of wheels.
        script_uris: ``s3://`` URI of each job's script (the restore job's too).
        tables_json: The buffer's table names as the jobs' ``--tables`` option (JSON, logical -> physical).
        schedules: The EventBridge schedules invoking the lake tick, by job (after :meth:`schedule_ticks`).
        log_groups: Each job's log groups, by stream (``output``, ``error``): where Glue writes them, see
            :func:`job_log_group`.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: LakeSyncConfig,
        key: kms.Key,
        lake: Lake,
        buffer: Buffer,
        bundle: GlueBundle,
        queues: Queues,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        self.artifacts = secure_bucket(self, "Artifacts", config, access_logs=lake.access_logs, key=key)
        prefix = f"glue/{bundle.digest}"
        deploy_logs = log_group(self, "DeployLogs", config)
        deploy_role = lambda_role(self, "DeployRole", deploy_logs)
        deployment = s3deploy.BucketDeployment(
            self,
            "Bundle",
            sources=[s3deploy.Source.asset(str(bundle.directory), exclude=[".complete", ".gitignore"])],
            # the bucket without its key: CDK would grant the handler the key with no condition; it is granted
            # through S3 below
            destination_bucket=s3.Bucket.from_bucket_attributes(
                self, "BundleDestination", bucket_arn=self.artifacts.bucket_arn
            ),
            destination_key_prefix=f"{prefix}/",
            role=deploy_role,
            log_group=deploy_logs,
            memory_limit=256,
        )
        allow_key(deploy_role, key, ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"], ["s3"], sid="ArtifactsKey")
        _acknowledge_deployment(self, deploy_role)
        self.modules_uri = f"s3://{self.artifacts.bucket_name}/{prefix}/{bundle.modules_name}"
        self.script_uris = {
            script.removesuffix(".py"): f"s3://{self.artifacts.bucket_name}/{prefix}/{script}"
            for script in GLUE_SCRIPTS
        }

        log_prefix = f"/aws-glue/{config.stack_name}"
        _allow_glue_logs(key, stack, log_prefix)
        security_name = f"{config.stack_name}-jobs"
        security = glue.CfnSecurityConfiguration(
            self,
            "Security",
            name=security_name,
            encryption_configuration=glue.CfnSecurityConfiguration.EncryptionConfigurationProperty(
                s3_encryptions=[
                    glue.CfnSecurityConfiguration.S3EncryptionProperty(
                        s3_encryption_mode="SSE-KMS", kms_key_arn=key.key_arn
                    )
                ],
                cloud_watch_encryption=glue.CfnSecurityConfiguration.CloudWatchEncryptionProperty(
                    cloud_watch_encryption_mode="SSE-KMS", kms_key_arn=key.key_arn
                ),
                job_bookmarks_encryption=glue.CfnSecurityConfiguration.JobBookmarksEncryptionProperty(
                    job_bookmarks_encryption_mode="CSE-KMS", kms_key_arn=key.key_arn
                ),
            ),
        )
        tables_json = stack.to_json_string(buffer.names.as_dict())
        self.tables_json = tables_json
        common_arguments = glue_arguments(region=stack.region, modules_uri=self.modules_uri, log_prefix=log_prefix)
        self.jobs: dict[str, glue.CfnJob] = {}
        self.roles: dict[str, iam.Role] = {}
        self.log_groups: dict[str, dict[str, logs.LogGroup]] = {}
        self.shared_log_groups = {
            stream: log_group(self, f"Jobs{stream.capitalize()}Logs", config, name=f"{log_prefix}/{stream}", key=key)
            for stream in LOG_STREAMS
        }
        self.schedules: dict[str, scheduler.Schedule] = {}
        self._config = config
        self._shared = _Shared(
            key=key,
            lake=lake,
            buffer=buffer,
            queues=queues,
            prefix=prefix,
            log_prefix=log_prefix,
            security_name=security_name,
            security=security,
            arguments=common_arguments,
            deployment=deployment,
        )
        for kind in glue_job_kinds(config):
            job, role, groups = self.add_job(
                self,
                kind,
                ACCESS[kind],
                script_arguments(
                    kind,
                    config=config,
                    warehouse=lake.warehouse,
                    namespace=lake.database_name,
                    tables_json=tables_json,
                    region=stack.region,
                    checkpoint_bucket=lake.checkpoints.bucket_name,
                    claim_check_bucket=queues.claim_check.bucket_name,
                    materialise_queue_url=queues.queue.queue_url,
                ),
            )
            self.jobs[kind] = job
            self.roles[kind] = role
            self.log_groups[kind] = groups

    def add_job(
        self,
        scope: Construct,
        kind: str,
        access: JobAccess,
        arguments: Mapping[str, str],
        *,
        execution_class: str | None = None,
        description: str | None = None,
        id_prefix: str | None = None,
    ) -> tuple[glue.CfnJob, iam.Role, dict[str, logs.LogGroup]]:
        """A Glue job running ``glue_jobs/<kind>.py`` in ``scope``, as every job runs (Glue version, bundle, security
        configuration, log groups, one run at a time, no retry), with its own role allowed ``access`` and the
        script's ``arguments``; ``execution_class`` overrides the configured one. Construct ids begin with
        ``id_prefix`` (default: the kind, capitalised: ``FlushRole``, ``FlushJob``...). Returns the job, its role and
        its log groups by stream."""
        config, shared = self._config, self._shared
        name = kind.capitalize() if id_prefix is None else id_prefix
        role = iam.Role(scope, f"{name}Role", assumed_by=iam.ServicePrincipal("glue.amazonaws.com"))
        groups = {
            stream: log_group(
                scope,
                f"{name}{stream.capitalize()}Logs",
                config,
                name=job_log_group(shared.log_prefix, shared.security_name, role.role_name, stream),
                key=shared.key,
            )
            for stream in LOG_STREAMS
        }
        temp = f"{TEMP_PREFIX}/{kind}"
        job = glue.CfnJob(
            scope,
            f"{name}Job",
            description=description or f"LakeSync {config.name}: {kind} (glue_jobs/{kind}.py)",
            role=role.role_arn,
            command=glue.CfnJob.JobCommandProperty(
                name="glueetl", python_version="3", script_location=self.script_uris[kind]
            ),
            glue_version=GLUE_VERSION,
            worker_type=config.glue_worker_type,
            execution_class=execution_class or config.glue_execution_class,
            number_of_workers=config.glue_workers,
            timeout=config.glue_timeout_minutes,
            max_retries=0,
            execution_property=glue.CfnJob.ExecutionPropertyProperty(max_concurrent_runs=1),
            security_configuration=shared.security.ref,
            default_arguments={
                **shared.arguments,
                "--TempDir": f"s3://{self.artifacts.bucket_name}/{temp}/",
                **arguments,
            },
        )
        job.node.add_dependency(shared.deployment)  # the files exist before any run can start
        self._grant(
            role,
            access,
            key=shared.key,
            lake=shared.lake,
            buffer=shared.buffer,
            queues=shared.queues,
            artifacts_read=f"{shared.prefix}/*",
            temp=temp,
            log_prefix=shared.log_prefix,
        )
        self._acknowledge_role(access, role, shared.lake, shared.queues, shared.prefix, temp, shared.log_prefix)
        return job, role, groups

    def job_arn(self, kind: str) -> str:
        """The ARN of job ``kind``."""
        return cdk.Stack.of(self).format_arn(service="glue", resource="job", resource_name=self.jobs[kind].ref)

    def schedule_ticks(self, tick: lambda_.IFunction) -> None:
        """Invoke the lake tick on each job's schedule with ``{"job": <kind>}``; one role may invoke it, no more."""
        config = self._config
        expressions = {
            "flush": scheduler.ScheduleExpression.rate(cdk.Duration.minutes(config.flush_interval_minutes)),
            "compact": scheduler.ScheduleExpression.expression(config.compact_schedule),
            "checkpoint": scheduler.ScheduleExpression.expression(config.checkpoint_schedule),
        }
        role = iam.Role(
            self,
            "TickScheduleRole",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID}}
            ),
        )
        for kind in JOB_KINDS:
            self.schedules[kind] = scheduler.Schedule(
                self,
                f"{kind.capitalize()}Schedule",
                description=f"Look for LakeSync {kind} work (the lake tick starts the job only when it has some)",
                schedule=expressions[kind],
                target=targets.LambdaInvoke(
                    tick,
                    input=scheduler.ScheduleTargetInput.from_object({"job": kind}),
                    retry_attempts=SCHEDULE_RETRIES,
                    max_event_age=SCHEDULE_MAX_AGE,
                    role=role,
                ),
            )
        acknowledge_wildcards(
            role,
            {
                f"Resource::<{cdk.Stack.of(self).get_logical_id(tick.node.default_child)}.Arn>:*": (  # type: ignore[arg-type]
                    "CDK grants invoking the lake tick's versions and aliases too (function ARN with ':*'); the "
                    "role can invoke that one function only."
                )
            },
        )

    def _acknowledge_role(
        self, access: JobAccess, role: iam.Role, lake: Lake, queues: Queues, prefix: str, temp: str, log_prefix: str
    ) -> None:
        artifacts = arn_token(self.artifacts)
        findings = {
            f"Resource::arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:{log_prefix}/*": (
                "The Glue jobs' log groups and streams under the stack's own prefix: the Glue developer guide names "
                "two layouts (<prefix>/<stream>, and <prefix>/<security configuration>-role/<role>/<stream>); until a "
                "run on AWS shows which one these jobs use, the role may write both (docs/deployment.md)."
            ),
            f"Resource::{artifacts}/{prefix}/*": "Reads its script and the zip of wheels: exactly the files of this "
            "deployment's content-addressed bundle prefix.",
            f"Resource::{artifacts}/{temp}/*": "Glue's temporary directory for this job; Glue names the objects.",
            f"Resource::{arn_token(lake.bucket)}/{WAREHOUSE_PREFIX}/*": "Iceberg data and metadata files under the "
            "warehouse prefix; Iceberg generates their names on every commit.",
            f"Resource::arn:<AWS::Partition>:glue:<AWS::Region>:<AWS::AccountId>:table/{lake.database_nag}/*": (
                "The lake's Iceberg tables in its own database: state tables (state_<table>) are created at run "
                "time, one per synced table."
            ),
            "Resource::*": "cloudwatch:PutMetricData has no resource-level permissions; each statement is limited "
            "to one metrics namespace by condition (Glue's, and LakeSync's for the flush)."
            + (
                " dynamodb:ListTables has none either: the restore lists table names only, to find its own."
                if access.lists_tables
                else ""
            ),
        }
        if access.publishes:
            findings[f"Resource::{arn_token(queues.claim_check)}/{PAYLOADS}"] = (
                "Writes materialisation payloads: one object per published range, keyed by gateway, table and "
                "range under the materialise/ prefix, at run time."
            )
        if access.checkpoints:
            findings[f"Resource::{arn_token(lake.checkpoints)}/*"] = (
                "Checkpoint objects (chunks, manifests, latest.json): keys are generated per gateway and checkpoint."
            )
        acknowledge_wildcards(role, findings)

    def _grant(
        self,
        role: iam.Role,
        access: JobAccess,
        *,
        key: kms.IKey,
        lake: Lake,
        buffer: Buffer,
        queues: Queues,
        artifacts_read: str,
        temp: str,
        log_prefix: str,
    ) -> None:
        stack = cdk.Stack.of(self)
        allow(role, ["s3:GetObject"], [self.artifacts.arn_for_objects(artifacts_read)], sid="ScriptsAndWheel")
        allow(
            role,
            ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
            [self.artifacts.arn_for_objects(f"{temp}/*")],
            sid="TempDir",
        )
        allow(role, ["s3:ListBucket"], [self.artifacts.bucket_arn, lake.bucket.bucket_arn], sid="ListBuckets")
        lake_actions = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"] if access.lake_write else ["s3:GetObject"]
        allow(role, lake_actions, [lake.bucket.arn_for_objects(f"{WAREHOUSE_PREFIX}/*")], sid="Warehouse")
        arns = lake.catalog_arns()
        allow(role, access.catalog_actions, [arns["catalog"], arns["database"], arns["tables"]], sid="Catalog")
        if "s3:GetObject" in access.checkpoints:  # a missing object is then a 404, not a 403
            allow(role, ["s3:ListBucket"], [lake.checkpoints.bucket_arn], sid="ListCheckpoints")
        if access.checkpoints:
            allow(role, access.checkpoints, [lake.checkpoints.arn_for_objects("*")], sid="Checkpoints")
        buffer.grant(role, access.tables, access.index_actions)
        if access.lists_tables:
            allow(role, ["dynamodb:ListTables"], ["*"], sid="ListTables")
        allow_key(
            role,
            key,
            [
                "kms:Decrypt",
                "kms:DescribeKey",
                "kms:Encrypt",
                "kms:GenerateDataKey",
                "kms:GenerateDataKeyWithoutPlaintext",
            ],
            key_services(access),
            sid="DataKey",
        )
        # Every group under the stack's prefix, and (the wildcard spans ``:log-stream:``) their streams.
        under_prefix = stack.format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"{log_prefix}/*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        allow(
            role,
            ["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:AssociateKmsKey"],
            [under_prefix],
            sid="GlueLogs",
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="GlueMetrics",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": "Glue"}},
            )
        )
        if access.publishes:
            queues.grant_publish(role)  # the data key (queue and bucket encryption) is granted above
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid="LakeSyncMetrics",
                    actions=["cloudwatch:PutMetricData"],
                    resources=["*"],
                    conditions={"StringEquals": {"cloudwatch:namespace": METRIC_NAMESPACE}},
                )
            )


def _acknowledge_deployment(jobs: Jobs, role: iam.Role) -> None:
    """The BucketDeployment's handler is CDK's: acknowledge the grants and runtime CDK chooses for it."""
    reason = (
        "CDK's BucketDeployment grants its handler these actions to copy the Glue bundle from the CDK asset bucket "
        "into the artifacts bucket (read the source, write/prune the destination); they are limited to those two "
        "buckets, and the handler only runs during deployments."
    )
    artifacts = arn_token(jobs.artifacts)
    findings = {
        f"Action::{action}": reason
        for action in (
            "s3:GetObject*",
            "s3:GetBucket*",
            "s3:List*",
            "s3:DeleteObject*",
            "s3:Abort*",
        )
    }
    findings["Resource::arn:<AWS::Partition>:s3:::cdk-hnb659fds-assets-<AWS::AccountId>-<AWS::Region>/*"] = reason
    findings[f"Resource::{artifacts}/*"] = reason
    acknowledge_wildcards(role, findings)
    stack = cdk.Stack.of(jobs)
    for child in stack.node.children:
        if child.node.id.startswith("Custom::CDKBucketDeployment"):
            acknowledge(
                child,
                "AwsSolutions-L1",
                "CDK's BucketDeployment handler: aws-cdk-lib pins its runtime; it only runs during deployments.",
            )


def job_log_group(prefix: str, security_configuration: str, role_name: str, stream: str) -> str:
    """Where a Glue 5.x job with ``--custom-logGroup-prefix prefix`` and a security configuration that encrypts
    CloudWatch logs writes ``stream`` (``output``: stdout/stderr; ``error``: system, Spark and Glue logger logs):
    ``<prefix>/<security configuration>-role/<job role name>/<stream>`` (AWS Glue developer guide, "Logging for AWS
    Glue jobs", "Security configuration with Amazon CloudWatch logging")."""
    return f"{prefix}/{security_configuration}-role/{role_name}/{stream}"


def key_services(access: JobAccess) -> list[str]:
    """The services a job uses the data key through: DynamoDB (the buffer tables), S3 (the warehouse, the
    checkpoints, its script bucket and temporary directory, all SSE-KMS), and SQS (the flush's materialisation
    messages). Its CloudWatch logs are encrypted by CloudWatch Logs itself, under the key's own policy."""
    services = ["s3"]
    if access.tables:
        services.append("dynamodb")
    if access.publishes:
        services.append("sqs")
    return services


def _allow_glue_logs(key: kms.Key, stack: cdk.Stack, prefix: str) -> None:
    """Let CloudWatch Logs use the key for the Glue jobs' log groups, all under ``prefix`` (the stack's own): the
    groups are created with the key, and Glue associates it again through the security configuration."""
    key.add_to_resource_policy(
        iam.PolicyStatement(
            sid="GlueJobLogs",
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.{stack.url_suffix}")],
            actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
            resources=["*"],
            conditions={
                "ArnLike": {
                    "kms:EncryptionContext:aws:logs:arn": stack.format_arn(
                        service="logs",
                        resource="log-group",
                        resource_name=f"{prefix}/*",
                        arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
                    )
                }
            },
        )
    )
