"""The connector schedules construct (lakesync_infra.connectors) in a small stack of its own: the schedule group, a
role only EventBridge Scheduler of this account may assume and that may only invoke the poll function, the admin
function's schedule and PassRole grants (that role, to that service, schedules of that group), connector secrets
managed by admin and only read by the others, and the connector variables on every function."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="module")
def template() -> Any:
    import aws_cdk as cdk
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk.assertions import Template
    from lakesync_infra.connectors import ConnectorSchedules

    app = cdk.App()
    stack = cdk.Stack(app, "T", env=cdk.Environment(account="123456789012", region="eu-west-1"))

    def fn(name: str) -> lambda_.Function:
        return lambda_.Function(
            stack, name, code=lambda_.Code.from_inline("x"), handler="x.h", runtime=lambda_.Runtime.PYTHON_3_11
        )

    ConnectorSchedules(stack, "Connectors", poll=fn("Poll"), admin=fn("Admin"), readers=[fn("Pull")])
    return Template.from_stack(stack)


def _statements(template: Any, role_prefix: str) -> list[dict[str, Any]]:
    out = []
    for logical, policy in template.find_resources("AWS::IAM::Policy").items():
        if logical.startswith(role_prefix):
            out.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return out


def test_the_schedule_role_only_invokes_the_poll_function(template: Any) -> None:
    roles = template.find_resources("AWS::IAM::Role")
    role = next(r for k, r in roles.items() if k.startswith("ConnectorsScheduleRole"))
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": "123456789012"}}
    statements = _statements(template, "ConnectorsScheduleRole")
    assert [s["Action"] for s in statements] == ["lambda:InvokeFunction"]
    assert statements[0]["Resource"] == {
        "Fn::GetAtt": [next(k for k in template.find_resources("AWS::Lambda::Function") if k.startswith("Poll")), "Arn"]
    }
    assert len(template.find_resources("AWS::Scheduler::ScheduleGroup")) == 1


def test_admin_manages_schedules_of_the_group_and_passes_only_that_role(template: Any) -> None:
    statements = {s["Sid"]: s for s in _statements(template, "AdminServiceRole")}
    schedules = statements["ConnectorSchedules"]
    assert sorted(schedules["Action"]) == [
        "scheduler:CreateSchedule",
        "scheduler:DeleteSchedule",
        "scheduler:UpdateSchedule",
    ]
    assert "T-connectors/*" in str(schedules["Resource"])
    passing = statements["PassScheduleRole"]
    assert passing["Action"] == "iam:PassRole"
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}
    assert "ConnectorsScheduleRole" in str(passing["Resource"])
    manage = statements["ConnectorSecretsManage"]
    assert "secretsmanager:CreateSecret" in manage["Action"] and "lakesync/connectors/*" in str(manage["Resource"])


def test_readers_only_read_connector_secrets_and_all_get_the_variables(template: Any) -> None:
    for prefix in ("PollServiceRole", "PullServiceRole"):
        statements = {s["Sid"]: s for s in _statements(template, prefix)}
        assert statements["ConnectorSecretsRead"]["Action"] == "secretsmanager:GetSecretValue"
        assert "lakesync/connectors/*" in str(statements["ConnectorSecretsRead"]["Resource"])
        assert "ConnectorSecretsManage" not in statements
    functions = template.find_resources("AWS::Lambda::Function")
    for logical, fn in functions.items():
        env = fn["Properties"]["Environment"]["Variables"]
        assert env["LAKESYNC_CONNECTOR_SECRET_PREFIX"] == "lakesync/connectors", logical
    admin = next(fn for k, fn in functions.items() if k.startswith("Admin"))
    assert {
        "LAKESYNC_CONNECTOR_SCHEDULE_GROUP",
        "LAKESYNC_CONNECTOR_POLL_FUNCTION_ARN",
        "LAKESYNC_CONNECTOR_SCHEDULER_ROLE_ARN",
    } <= set(admin["Properties"]["Environment"]["Variables"])
