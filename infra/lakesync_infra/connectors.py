"""Connector pollers on EventBridge Scheduler: the schedule group, the role schedules invoke the poll function with,
and the grants of the functions that register connectors and open them.

The admin function creates and deletes one schedule per connector (:mod:`lakesync.aws.connector_scheduler`) in
:attr:`ConnectorSchedules.group`, each invoking the ``connector_poll`` function through :attr:`ConnectorSchedules.role`
-- which may invoke that function and nothing else, and only EventBridge Scheduler of this account may assume it. The
admin function may pass exactly that role, only to EventBridge Scheduler (``iam:PassedToService``), and manage
schedules only in that group. The poll function's reserved concurrency (``connectorPollConcurrency``,
:attr:`lakesync_infra.config.LakeSyncConfig.connector_poll_reserved`) caps how many polls run at once, so slow
connectors cannot take the executions the API needs. Connector credentials are secrets named under ``{prefix}/``:
the admin function creates, updates and deletes them (registration moves plaintext credentials there); the functions
that open connectors (the poller, ``source=`` pulls, actions) read them. Every such function gets the connector
variables of :class:`lakesync.aws.settings.connectors.ConnectorSettings`.

:class:`lakesync_infra.stack.LakeSyncStack` wires it with the stack's functions (``connector_poll``, ``admin``, and
``pull`` and ``actions`` as readers) and a per-environment secret prefix. Only the admin function gets the scheduler
variables (the poll function naming its own ARN would be a dependency cycle). The two resource wildcards -- the
group's schedules and the prefix's secrets -- are acknowledged for cdk-nag here, on each role they are granted to.
"""

from __future__ import annotations

from collections.abc import Sequence

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_scheduler as scheduler
from constructs import Construct

from lakesync.aws.settings.variables import (
    CONNECTOR_POLL_FUNCTION_ARN,
    CONNECTOR_SCHEDULE_GROUP,
    CONNECTOR_SCHEDULER_ROLE_ARN,
    CONNECTOR_SECRET_PREFIX,
)
from lakesync_infra.common import acknowledge_wildcards

DEFAULT_SECRET_PREFIX = "lakesync/connectors"
SCHEDULES_REASON = (
    "Connectors are registered at run time through the admin API, each with its own schedule: the admin function may "
    "create, update and delete schedules only in the deployment's connector schedule group."
)
SECRETS_REASON = (
    "Connector credentials are stored at registration time under {prefix}/<gateway>/<connector>/<field> (Secrets "
    "Manager appends a random suffix): the function may use only secrets under the deployment's connector prefix."
)


class ConnectorSchedules(Construct):
    """See the module docstring.

    Args:
        poll: The ``connector_poll`` function.
        admin: The admin function (registers connectors: schedules and secrets).
        readers: The other functions that open connectors (``pull``, ``actions``).
        secret_prefix: Name prefix of connector secrets.
        concurrency: Reserved (and most) concurrent executions of ``poll`` (``None``: unreserved).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        poll: lambda_.Function,
        admin: lambda_.Function,
        readers: Sequence[lambda_.Function] = (),
        secret_prefix: str = DEFAULT_SECRET_PREFIX,
        concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = cdk.Stack.of(self)
        if concurrency is not None:
            cfn_poll = poll.node.default_child
            if not isinstance(cfn_poll, lambda_.CfnFunction):
                raise TypeError(f"the poll function has no CfnFunction to reserve concurrency on: {cfn_poll!r}")
            cfn_poll.reserved_concurrent_executions = concurrency
        self.group = scheduler.CfnScheduleGroup(self, "Group", name=f"{stack.stack_name}-connectors")
        self.role = iam.Role(
            self,
            "ScheduleRole",
            description="EventBridge Scheduler invokes the LakeSync connector poll function",
            assumed_by=iam.ServicePrincipal(
                "scheduler.amazonaws.com", conditions={"StringEquals": {"aws:SourceAccount": stack.account}}
            ),
        )
        self.role.add_to_policy(
            iam.PolicyStatement(sid="InvokePoll", actions=["lambda:InvokeFunction"], resources=[poll.function_arn])
        )
        schedules = stack.format_arn(
            service="scheduler",
            resource="schedule",
            resource_name=f"{self.group.name}/*",
            arn_format=cdk.ArnFormat.SLASH_RESOURCE_NAME,
        )
        admin.add_to_role_policy(
            iam.PolicyStatement(
                sid="ConnectorSchedules",
                actions=["scheduler:CreateSchedule", "scheduler:UpdateSchedule", "scheduler:DeleteSchedule"],
                resources=[schedules],
            )
        )
        admin.add_to_role_policy(
            iam.PolicyStatement(
                sid="PassScheduleRole",
                actions=["iam:PassRole"],
                resources=[self.role.role_arn],
                conditions={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
            )
        )
        secrets = stack.format_arn(
            service="secretsmanager",
            resource="secret",
            resource_name=f"{secret_prefix}/*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        admin.add_to_role_policy(
            iam.PolicyStatement(
                sid="ConnectorSecretsManage",
                actions=[
                    "secretsmanager:CreateSecret",
                    "secretsmanager:PutSecretValue",
                    "secretsmanager:DeleteSecret",
                    "secretsmanager:TagResource",
                    "secretsmanager:GetSecretValue",
                ],
                resources=[secrets],
            )
        )
        # Only admin schedules; the poll function must not name itself (a dependency cycle), nor need the others.
        admin_env = {
            CONNECTOR_SCHEDULE_GROUP: self.group.name or "",
            CONNECTOR_POLL_FUNCTION_ARN: poll.function_arn,
            CONNECTOR_SCHEDULER_ROLE_ARN: self.role.role_arn,
            CONNECTOR_SECRET_PREFIX: secret_prefix,
        }
        for key, value in admin_env.items():
            admin.add_environment(key, value)
        for fn in (poll, *readers):
            fn.add_environment(CONNECTOR_SECRET_PREFIX, secret_prefix)
            fn.add_to_role_policy(
                iam.PolicyStatement(
                    sid="ConnectorSecretsRead", actions=["secretsmanager:GetSecretValue"], resources=[secrets]
                )
            )
        secrets_finding = f"Resource::{_nag_arn(stack, 'secretsmanager', f'secret:{secret_prefix}/*')}"
        for fn in (poll, admin, *readers):
            if fn.role is not None:
                acknowledge_wildcards(fn.role, {secrets_finding: SECRETS_REASON.format(prefix=secret_prefix)})
        if admin.role is not None:
            schedules_finding = f"Resource::{_nag_arn(stack, 'scheduler', f'schedule/{self.group.name}/*')}"
            acknowledge_wildcards(admin.role, {schedules_finding: SCHEDULES_REASON})


def _nag_arn(stack: cdk.Stack, service: str, resource: str) -> str:
    """An ARN of ``stack`` as cdk-nag spells it in a finding: pseudo parameters as ``<AWS::...>``, an environment's
    concrete account and region as they are."""

    def part(value: str, pseudo: str) -> str:
        return f"<AWS::{pseudo}>" if cdk.Token.is_unresolved(value) else value

    return (
        f"arn:{part(stack.partition, 'Partition')}:{service}:{part(stack.region, 'Region')}:"
        f"{part(stack.account, 'AccountId')}:{resource}"
    )
