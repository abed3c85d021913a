"""The connector schedules construct (lakesync_infra.connectors) in a small stack of its own: the schedule group, a
role only EventBridge Scheduler of this account may assume and that may only invoke the poll function, the admin
function's schedule and PassRole grants (that role, to that service, schedules of that group), connector secrets
managed by admin and only read by the others, and the connector variables on every function. Then the same wired
into the LakeSync stack (the session's synth): the poll function, its environment, timeout and retries, its errors
alarm, and who may do what with schedules and connector secrets."""

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


# -- wired into the LakeSync stack --------------------------------------------------------------------------------

SCHEDULER_VARS = {
    "LAKESYNC_CONNECTOR_SCHEDULE_GROUP",
    "LAKESYNC_CONNECTOR_POLL_FUNCTION_ARN",
    "LAKESYNC_CONNECTOR_SCHEDULER_ROLE_ARN",
}
READERS = ("connector_poll", "pull", "actions")


def _stack_role(cfn: Any) -> str:
    (role,) = [k for k in cfn.of_type("AWS::IAM::Role") if k.startswith("ConnectorsScheduleRole")]
    return role


def test_stack_deploys_the_poll_function_with_the_connector_environment(cfn: Any, ids: dict[str, str]) -> None:
    # Given the stack's poll function
    fn = cfn.functions()["connector_poll"]
    env = fn["Environment"]["Variables"]
    # Then it runs functions.connector_poll for up to 15 minutes (its position lease outlives it), on the drivers'
    # asset (x86_64, as materialise)
    assert fn["Handler"] == "functions.connector_poll.lambda_handler"
    assert fn["Timeout"] == 900
    assert fn["Architectures"] == ["x86_64"]
    assert fn["Code"]["S3Key"] == cfn.functions()["materialise"]["Code"]["S3Key"]
    # And admin, which connects to a database connector's source at registration, has the drivers too
    assert cfn.functions()["admin"]["Code"]["S3Key"] == fn["Code"]["S3Key"]
    # And has the gateway settings and the environment's connector secret prefix, but no scheduler variables (only
    # admin schedules)
    assert env["LAKESYNC_CONNECTOR_SECRET_PREFIX"] == "lakesync/dev/connectors"
    assert env["LAKESYNC_GATEWAY_IDS"] == "default,other"
    assert not SCHEDULER_VARS & set(env)
    # And Lambda does not retry a failed poll (the schedule's next tick does)
    (config,) = [
        c for c in cfn.of_type("AWS::Lambda::EventInvokeConfig").values() if c["FunctionName"] == {"Ref": fn["logical"]}
    ]
    assert config["MaximumRetryAttempts"] == 0


def test_stack_admin_schedules_the_poll_function_through_the_schedule_role(cfn: Any) -> None:
    # Given the admin function's environment and the schedule group
    admin = cfn.functions()["admin"]
    env = admin["Environment"]["Variables"]
    poll = cfn.functions()["connector_poll"]["logical"]
    (group,) = cfn.of_type("AWS::Scheduler::ScheduleGroup").values()
    # Then admin creates schedules in the group, invoking the poll function through the schedule role
    assert env["LAKESYNC_CONNECTOR_SCHEDULE_GROUP"] == group["Name"] == "LakeSync-dev-connectors"
    assert env["LAKESYNC_CONNECTOR_POLL_FUNCTION_ARN"] == {"Fn::GetAtt": [poll, "Arn"]}
    assert env["LAKESYNC_CONNECTOR_SCHEDULER_ROLE_ARN"] == {"Fn::GetAtt": [_stack_role(cfn), "Arn"]}
    assert env["LAKESYNC_CONNECTOR_SECRET_PREFIX"] == "lakesync/dev/connectors"


def test_stack_schedule_role_may_only_invoke_the_poll_function(cfn: Any) -> None:
    # Given the schedule role
    role = _stack_role(cfn)
    trust = cfn.resources[role]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    # Then only EventBridge Scheduler of this account may assume it
    assert [(t["Principal"], t["Condition"]) for t in trust] == [
        ({"Service": "scheduler.amazonaws.com"}, {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}})
    ]
    # And it may invoke the poll function and nothing else
    poll = cfn.functions()["connector_poll"]["logical"]
    assert cfn.allowed(role) == [("lambda:InvokeFunction", f"<{poll}.Arn>")]


def test_stack_only_admin_passes_the_schedule_role_to_the_scheduler_only(cfn: Any) -> None:
    # Given every function role's iam:PassRole and scheduler grants
    role = _stack_role(cfn)
    passing, scheduling = {}, {}
    for name, fn in cfn.functions().items():
        for st in cfn.role_statements(cfn.role_of(fn)):
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            if "iam:PassRole" in actions:
                passing[name] = st
            if any(a.startswith("scheduler:") for a in actions):
                scheduling[name] = st
    # Then admin alone may pass a role: the schedule role, to EventBridge Scheduler only
    assert set(passing) == {"admin"}
    assert passing["admin"]["Resource"] == {"Fn::GetAtt": [role, "Arn"]}
    assert passing["admin"]["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}
    # And admin alone manages schedules, of the connector group only
    assert set(scheduling) == {"admin"}
    assert cfn.render(scheduling["admin"]["Resource"]) == (
        "arn:<AWS::Partition>:scheduler:<AWS::Region>:<AWS::AccountId>:schedule/LakeSync-dev-connectors/*"
    )


def test_stack_connector_secrets_are_managed_by_admin_and_read_by_the_readers_only(cfn: Any) -> None:
    # Given every function role's grants on connector secrets
    secrets = "arn:<AWS::Partition>:secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:lakesync/dev/connectors/*"
    grants: dict[str, set[str]] = {}
    for name, fn in cfn.functions().items():
        for action, resource in cfn.allowed(cfn.role_of(fn)):
            if "connectors" in resource and action.startswith("secretsmanager:"):
                assert resource == secrets, (name, resource)
                grants.setdefault(name, set()).add(action)
    # Then the poller, pull and actions may only read them, and admin manages them
    assert {name: grants[name] for name in READERS} == {name: {"secretsmanager:GetSecretValue"} for name in READERS}
    assert grants["admin"] == {
        "secretsmanager:CreateSecret",
        "secretsmanager:PutSecretValue",
        "secretsmanager:DeleteSecret",
        "secretsmanager:TagResource",
        "secretsmanager:GetSecretValue",
    }
    assert set(grants) == {*READERS, "admin"}


def test_stack_alarms_on_poll_errors(cfn: Any) -> None:
    # Given the poll function's errors alarm
    (alarm,) = [a for k, a in cfn.of_type("AWS::CloudWatch::Alarm").items() if k.startswith("MonitoringConnectorPoll")]
    poll = cfn.functions()["connector_poll"]["logical"]
    # Then it watches the function's errors and notifies the alarm topic
    assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/Lambda", "Errors")
    assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": poll}}]
    assert alarm["Threshold"] == 1 and alarm["TreatMissingData"] == "notBreaching"


def test_stack_tells_the_functions_that_dial_admin_targets_the_destination_secret_prefix(cfn: Any) -> None:
    # Given the functions that register or open destinations and connectors
    for name in ("admin", "materialise", "connector_poll", "pull", "actions"):
        env = cfn.functions()[name]["Environment"]["Variables"]
        # Then each knows the destination secret prefix, under which a gateway's destinations name their secrets
        assert env["LAKESYNC_DESTINATION_SECRET_PREFIX"] == "lakesync/dev/destinations/", name
        # And, with no allowedNetworks configured, no private network is allowed
        assert "LAKESYNC_ALLOWED_NETWORKS" not in env and "LAKESYNC_ALLOW_PLAIN_HTTP" not in env, name


def test_allowed_networks_reach_the_functions_and_never_open_link_local() -> None:
    from lakesync_infra.config import ConfigError, LakeSyncConfig
    from lakesync_infra.functions import _egress_environment

    config = LakeSyncConfig.from_settings("dev", {"allowedNetworks": ["10.0.0.0/16", "fd12::/48"]})
    assert _egress_environment(config)["LAKESYNC_ALLOWED_NETWORKS"] == "10.0.0.0/16,fd12::/48"
    for bad in (["169.254.0.0/16"], ["0.0.0.0/0"], ["fe80::/64"], ["not-a-cidr"], "10.0.0.0/8"):
        with pytest.raises(ConfigError, match="allowedNetworks"):
            LakeSyncConfig.from_settings("dev", {"allowedNetworks": bad})


def test_stack_caps_the_pollers_within_the_accounts_reservable_concurrency(cfn: Any, options: dict[str, Any]) -> None:
    from lakesync_infra.config import (
        DEFAULT_ACCOUNT_CONCURRENCY,
        DEFAULT_CONNECTOR_POLL_CONCURRENCY,
        UNRESERVED_MINIMUM,
    )

    # Given the test environment (no connectorPollConcurrency, the standard account quota, push and pull reserved)
    functions = cfn.functions()
    # Then the poll function reserves the default, which also caps how many polls run at once
    assert functions["connector_poll"]["ReservedConcurrentExecutions"] == DEFAULT_CONNECTOR_POLL_CONCURRENCY
    # And with the configured reservations it leaves Lambda's unreserved minimum to the rest (the API among them)
    reserved = {
        name: fn["ReservedConcurrentExecutions"]
        for name, fn in functions.items()
        if "ReservedConcurrentExecutions" in fn
    }
    assert reserved == {**options["reservedConcurrency"], "connector_poll": DEFAULT_CONNECTOR_POLL_CONCURRENCY}
    assert sum(reserved.values()) <= DEFAULT_ACCOUNT_CONCURRENCY - UNRESERVED_MINIMUM


def test_poll_concurrency_is_reserved_on_the_poll_function_only() -> None:
    import aws_cdk as cdk
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk.assertions import Template
    from lakesync_infra.connectors import ConnectorSchedules

    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    made = {
        name: lambda_.Function(
            stack, name, code=lambda_.Code.from_inline("x"), handler="x.h", runtime=lambda_.Runtime.PYTHON_3_11
        )
        for name in ("Poll", "Admin", "Pull")
    }
    ConnectorSchedules(
        stack, "Connectors", poll=made["Poll"], admin=made["Admin"], readers=[made["Pull"]], concurrency=3
    )
    functions = Template.from_stack(stack).find_resources("AWS::Lambda::Function")
    reserved = {
        k.rstrip("0123456789ABCDEF"): f["Properties"].get("ReservedConcurrentExecutions") for k, f in functions.items()
    }
    assert reserved == {"Poll": 3, "Admin": None, "Pull": None}
