"""``LogKeysMarker``: the deployment's word that every function and job runs code that reads first keys.

A custom resource (:mod:`functions.log_keys_marker`) that CloudFormation creates after every function and Glue job
of the stack, so on the deploy that adds it (the upgrade to this release, or a new stack) it is written only once they
are all updated. Writers set to ``logKeys: auto`` start first keys one grace after they first see it
(:mod:`lakesync.aws.log_keys`): the grace outlasts anything that started with the code before, the longest Lambda
invocation and the longest Glue job run. If the deploy rolls back, CloudFormation deletes the resource, and the
marker with it. The resource also names the newest chunk layout the release reads (``LogFormat``): a release that
reads a newer one changes it, and the update, again after everything else, writes the marker afresh
(:mod:`lakesync.aws.deployment_marker`).

CloudFormation waits an hour by default for a custom resource's answer, so a function that cannot answer (one that
fails at import) would hold the deploy an hour, and its rollback another: the resource's ``ServiceTimeout``
(:data:`SERVICE_TIMEOUT_S`, a few times the function's own timeout) fails it within minutes instead
(https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudformation-customresource.html).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from constructs import Construct, IConstruct

from lakesync.aws.log_chunks import LOG_FORMAT
from lakesync_infra.buffer import Buffer
from lakesync_infra.config import LakeSyncConfig

LAMBDA_MAX_TIMEOUT_S: Final = 900
MARGIN_S: Final = 60
SERVICE_TIMEOUT_S: Final = 10 * 60
"""How long CloudFormation waits for the marker function's answer (1..3600 s; CloudFormation's default is 3600). It
invokes the function asynchronously, so a failed attempt is retried twice, a minute and then two after it; three
attempts of the function's timeout (:data:`lakesync_infra.functions.LOG_KEYS_MARKER_TIMEOUT_S`, a minute) end within
six minutes."""


def marker_grace_ms(config: LakeSyncConfig) -> int:
    """How long code of the release before may still run once everything is updated: Lambda's longest invocation
    or the configured Glue job timeout, whichever is longer, and a minute."""
    return (max(LAMBDA_MAX_TIMEOUT_S, config.glue_timeout_minutes * 60) + MARGIN_S) * 1000


class LogKeysMarker(Construct):
    """The marker item, written by ``function`` once every construct of ``after`` is deployed.

    Attributes:
        resource: The custom resource.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: LakeSyncConfig,
        buffer: Buffer,
        function: lambda_.IFunction,
        after: Sequence[IConstruct],
    ) -> None:
        super().__init__(scope, construct_id)
        self.resource = cdk.CustomResource(
            self,
            "Resource",
            service_token=function.function_arn,
            resource_type="Custom::LogKeysMarker",
            service_timeout=cdk.Duration.seconds(SERVICE_TIMEOUT_S),
            properties={
                "TableName": buffer.names.config,
                "GraceMs": str(marker_grace_ms(config)),
                "LogFormat": str(LOG_FORMAT),
            },
        )
        for construct in after:
            self.resource.node.add_dependency(construct)
