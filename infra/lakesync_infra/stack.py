"""``LakeSyncStack``: one environment, composed of one construct per capability, and the app that holds them.

Wiring (the only cross-construct dependencies)::

    DataKey ──> Buffer, Lake, Queues, Secrets, Jobs, Functions
    Lake ──> Queues (access logs), Jobs (warehouse, catalog), Functions (checkpoints; the flush function's lake)
    Buffer ──> Jobs, Functions          Jobs ──> Functions (the jobs the flush trigger and the lake tick start)
    Functions ──> Jobs (the schedules invoke the lake tick)
    Jobs (bundle, security configuration, logs), Lake, Buffer ──> RestoreJob (started by hand, never by the tick)
    Queues ──> Jobs (the flush publishes), Functions (materialise consumes), Monitoring
    MaterialiseNetwork (with materialiseVpc) ──> Functions (materialise, the configured connector functions)
    Functions (connector_poll, admin, pull, actions) ──> ConnectorSchedules (schedules, connector secrets)
    Functions ──> Api, Secrets (rotation), Monitoring          Jobs, Api ──> Monitoring
    Functions (ws_*), Buffer (the deltas stream), DataKey ──> Realtime ──> Monitoring (its DLQ)

``build_app`` is what ``infra/app.py`` and the tests call: it adds cdk-nag's AwsSolutions checks to the app, so a
synth fails on any finding that is not acknowledged (with a reason, where the construct is made).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_kms as kms
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from lakesync_infra.api import Api
from lakesync_infra.buffer import Buffer
from lakesync_infra.common import acknowledge, removal_policy
from lakesync_infra.config import REALTIME_FUNCTIONS, LakeSyncConfig, environments
from lakesync_infra.connectors import ConnectorSchedules
from lakesync_infra.functions import Functions
from lakesync_infra.jobs import Jobs
from lakesync_infra.lake import Lake
from lakesync_infra.monitoring import Monitoring
from lakesync_infra.network import MaterialiseNetwork
from lakesync_infra.packaging import GlueBundle
from lakesync_infra.queues import Queues
from lakesync_infra.realtime import Realtime
from lakesync_infra.restore_job import RestoreJob
from lakesync_infra.secrets import Secrets


@dataclass(frozen=True, slots=True)
class Artifacts:
    """The built code the stacks deploy.

    Attributes:
        lambda_asset: The Lambda code directory of every function but those below.
        glue: The Glue scripts and wheel.
        materialise_asset: The ``materialise`` function's code directory (the Lambda asset plus the SQL drivers).
        flush_asset: The ``flush`` function's code directory (the Lambda asset plus ``lakesync.lake``, pyiceberg and
            pyarrow).
    """

    lambda_asset: Path
    glue: GlueBundle
    materialise_asset: Path
    flush_asset: Path


class LakeSyncStack(cdk.Stack):
    """Everything one LakeSync environment needs."""

    def __init__(self, scope: Construct, config: LakeSyncConfig, artifacts: Artifacts) -> None:
        env = cdk.Environment(account=config.account, region=config.region) if config.account or config.region else None
        super().__init__(
            scope,
            config.stack_name,
            env=env,
            description=f"LakeSync {config.name}: sync gateway, delta buffer, Iceberg lake and jobs",
        )
        self.config = config
        self.data_key = kms.Key(
            self,
            "DataKey",
            description=f"LakeSync {config.name}: buffer, lake, checkpoints, queues, secret, job logs",
            enable_key_rotation=True,
            removal_policy=removal_policy(config),
            pending_window=cdk.Duration.days(30 if config.removal_policy == "retain" else 7),
        )
        self.buffer = Buffer(self, "Buffer", config=config, key=self.data_key)
        self.lake = Lake(self, "Lake", config=config, key=self.data_key)
        self.queues = Queues(self, "Queues", config=config, key=self.data_key, access_logs=self.lake.access_logs)
        self.secrets = Secrets(self, "Secrets", config=config, key=self.data_key)
        self.jobs = Jobs(
            self,
            "Jobs",
            config=config,
            key=self.data_key,
            lake=self.lake,
            buffer=self.buffer,
            bundle=artifacts.glue,
            queues=self.queues,
        )
        self.restore = RestoreJob(self, "Restore", config=config, jobs=self.jobs, lake=self.lake)
        self.network = (
            MaterialiseNetwork(self, "MaterialiseNetwork", settings=config.materialise_vpc)
            if config.materialise_vpc is not None
            else None
        )
        self.functions = Functions(
            self,
            "Functions",
            config=config,
            asset=artifacts.lambda_asset,
            materialise_asset=artifacts.materialise_asset,
            flush_asset=artifacts.flush_asset,
            key=self.data_key,
            buffer=self.buffer,
            jwt_secret=self.secrets.jwt_secret,
            lake=self.lake,
            job_names={kind: job.ref for kind, job in self.jobs.jobs.items()},
            job_arns={kind: self.jobs.job_arn(kind) for kind in self.jobs.jobs},
            queues=self.queues,
            network=self.network,
        )
        self.jobs.schedule_ticks(self.functions.functions["lake_tick"])
        self.secrets.enable_rotation(self.functions.functions["rotate_secret"])
        functions = self.functions.functions
        self.connectors = ConnectorSchedules(
            self,
            "Connectors",
            poll=functions["connector_poll"],
            admin=functions["admin"],
            readers=[functions["pull"], functions["actions"]],
            secret_prefix=config.connector_secrets,
            concurrency=config.connector_poll_reserved,
        )
        self.api = Api(self, "Api", config=config, functions=self.functions.functions)
        self.realtime = Realtime(
            self,
            "Realtime",
            config=config,
            key=self.data_key,
            buffer=self.buffer,
            functions={name: self.functions.functions[name] for name in REALTIME_FUNCTIONS},
        )
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            config=config,
            functions=self.functions.functions,
            dead_letter_queues={
                "MaterialiseDeadLetters": self.queues.dead_letter_queue,
                "FlushTriggerFailures": self.functions.stream_failures,
                "BroadcastFailures": self.realtime.failures,
            },
            # A failed restore notifies as a failed lake job does (its gateways stay refused until one ends).
            job_names={**{kind: job.ref for kind, job in self.jobs.jobs.items()}, "restore": self.restore.job.ref},
            http_api=self.api.http_api,
            materialise_queue=self.queues.queue,
            materialise_dead_letters=self.queues.dead_letter_queue,
            materialise=self.functions.functions["materialise"],
            shard_tables=self.buffer.shard_tables(),
        )
        cdk.CfnOutput(self, "ApiUrl", value=self.api.url, description="Base URL of the sync gateway")
        cdk.CfnOutput(
            self,
            "WebSocketUrl",
            value=self.realtime.url,
            description="Real-time socket: connect with ?gateway=<id>&encoding=base64 and a Bearer token",
        )
        cdk.CfnOutput(self, "JwtSecretArn", value=self.secrets.jwt_secret.secret_arn, description="JWT signing key")
        cdk.CfnOutput(self, "LakeBucket", value=self.lake.bucket.bucket_name)
        cdk.CfnOutput(self, "CheckpointBucket", value=self.lake.checkpoints.bucket_name)
        if "flush" in self.jobs.jobs:
            cdk.CfnOutput(self, "FlushJob", value=self.jobs.jobs["flush"].ref)
        cdk.CfnOutput(
            self,
            "RestoreJob",
            value=self.restore.job.ref,
            description="Rebuilds the buffer from the lake: aws glue start-job-run --job-name <this> --arguments "
            '\'{"--gateways":"<gw>","--replace":"true"}\'',
        )
        if "flush" in functions:
            cdk.CfnOutput(
                self,
                "FlushFunction",
                value=functions["flush"].function_name,
                description="Runs the flush (the lake tick and the flush trigger queue its runs); invoke with {}",
            )
        cdk.CfnOutput(
            self,
            "GlueDatabase",
            value=self.lake.database_name,
            description="The lake's Glue database (Iceberg namespace): query its tables with Athena",
        )
        cdk.CfnOutput(self, "MaterialiseDeadLetterQueue", value=self.queues.dead_letter_queue.queue_url)
        cdk.CfnOutput(
            self,
            "DestinationSecretPrefix",
            value=config.destination_secrets,
            description="Create the destinations' secrets under this name prefix",
        )
        cdk.CfnOutput(self, "AlarmTopic", value=self.monitoring.topic.topic_arn)
        cdk.CfnOutput(
            self,
            "ConnectorPollFunction",
            value=functions["connector_poll"].function_name,
            description="Polls one connector per invocation ({gateway, connector}); each schedule invokes it",
        )
        cdk.CfnOutput(
            self,
            "ConnectorScheduleGroup",
            value=self.connectors.group.ref,
            description="EventBridge Scheduler group of the connectors' poll schedules (one per ingest connector)",
        )
        cdk.CfnOutput(
            self,
            "ConnectorSecretPrefix",
            value=config.connector_secrets,
            description="Registration stores plaintext connector credentials under this name prefix",
        )
        cdk.Tags.of(self).add("lakesync:environment", config.name)
        _acknowledge(self)


def _acknowledge(stack: LakeSyncStack) -> None:
    """The stack-wide acknowledgments (construct-specific ones live with their constructs)."""
    acknowledge(
        stack.api,
        "AwsSolutions-APIG4",
        "Every route's function verifies the caller's HS256 JWT itself (sub, gw, role, exp), as the original "
        "gateway does; /health is public by design. An API Gateway authorizer would duplicate that check.",
    )


APP_CONTEXT: Mapping[str, Any] = {
    "aws:cdk:disable-stack-trace": True,
    "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True,
    "@aws-cdk/core:validationReportJson": True,
}
"""Context every LakeSync app gets (before cdk.json's and the command line's)."""


def build_app(
    context: Mapping[str, Any],
    artifacts: Artifacts,
    *,
    outdir: str | None = None,
    post_cli_context: Mapping[str, Any] | None = None,
) -> tuple[cdk.App, list[LakeSyncStack]]:
    """An app with one stack per environment named by the context, checked by cdk-nag's AwsSolutions pack.

    Args:
        context: Default context (``cdk.json``'s); the CDK CLI's context (``CDK_CONTEXT_JSON``) overrides it.
        artifacts: The built Lambda asset and Glue bundle.
        outdir: Where to write the cloud assembly (``None``: ``CDK_OUTDIR`` or a temporary directory).
        post_cli_context: Context that wins over everything (``-c`` of a plain ``python app.py`` run).

    Raises:
        ConfigError: the context names no environment or misconfigures one.
    """
    app = cdk.App(context={**APP_CONTEXT, **context}, outdir=outdir, post_cli_context=post_cli_context)
    configs = environments(_all_context(app, context, post_cli_context))
    stacks = [LakeSyncStack(app, config, artifacts) for config in configs]
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stacks


def _all_context(app: cdk.App, defaults: Mapping[str, Any], post: Mapping[str, Any] | None) -> dict[str, Any]:
    """The effective ``lakesync:*`` context (defaults, then the CLI's, then ``post``)."""
    keys = {k for k in (*defaults, *(post or {})) if k.startswith("lakesync:")}
    cli = app.node.try_get_context("lakesync:environments")
    out = {k: app.node.try_get_context(k) for k in keys}
    if cli is not None:
        out["lakesync:environments"] = cli
        for name in str(cli).split(","):
            for key in (f"lakesync:env:{name.strip()}", "lakesync:defaults"):
                value = app.node.try_get_context(key)
                if value is not None:
                    out[key] = value
    return out
