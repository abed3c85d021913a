"""The deployment configuration parsed from CDK context: defaults, camelCase settings layered per environment,
command-line strings as JSON, and every invalid or unknown setting reported at once."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from lakesync_infra.config import (
    DEFAULT_CONNECTOR_POLL_CONCURRENCY,
    DEFAULTS_KEY,
    ENV_KEY_PREFIX,
    ENVIRONMENTS_KEY,
    ConfigError,
    LakeSyncConfig,
    environments,
    glue_database,
)

from lakesync.aws.settings.variables import MAX_BODY_BYTES_LIMIT
from lakesync.core.lake_work import DEFAULT_FUNCTION_MAX_BACKLOG
from lakesync.lake.tables import DELTA_LOG, GLUE_NAME, state_table

CDK_JSON = Path(__file__).resolve().parents[2] / "infra" / "cdk.json"
VPC = {
    "vpcId": "vpc-0123456789abcdef0",
    "availabilityZones": ["eu-west-1a", "eu-west-1b"],
    "privateSubnetIds": ["subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2"],
    "privateSubnetRouteTableIds": ["rtb-0aaaaaaaaaaaaaaa1", "rtb-0bbbbbbbbbbbbbbb2"],
    "securityGroupIds": ["sg-0ccccccccccccccc3"],
}


def test_config_defaults_are_valid_and_keep_data():
    # Given a configuration with nothing but a name
    config = LakeSyncConfig.from_settings("prod", {})
    # Then it is valid, retains data stores and serves the default gateway
    assert config.problems() == []
    assert config.removal_policy == "retain"
    assert config.gateway_ids == ("default",)
    assert config.stack_name == "LakeSync-prod"
    # And has no dashboard ($3 a month beyond an account's first three): an environment asks for one
    assert config.dashboard is False
    # And its functions trace with X-Ray unless an environment turns tracing off
    assert config.tracing is True
    # And Lambda's own START and REPORT lines are not logged (a deployment asks for them with INFO)
    assert config.lambda_system_log_level == "WARN"


def test_config_materialisation_defaults_and_vpc():
    # Given no materialisation settings, then a VPC given on the command line (a JSON string)
    plain = LakeSyncConfig.from_settings("prod", {})
    (in_vpc,) = environments({ENVIRONMENTS_KEY: "dev", ENV_KEY_PREFIX + "dev": json.dumps({"materialiseVpc": VPC})})
    # Then the consumer is bounded to 5 invocations, outside any VPC, reading secrets under lakesync/<env>/destinations/
    assert (plain.materialise_concurrency, plain.materialise_vpc) == (5, None)
    assert plain.destination_secrets == "lakesync/prod/destinations/"
    # And the VPC is parsed whole, endpoints created by default
    vpc = in_vpc.materialise_vpc
    assert vpc is not None and vpc.create_endpoints is True
    assert (vpc.vpc_id, vpc.private_subnet_ids, vpc.security_group_ids) == (
        VPC["vpcId"],
        tuple(VPC["privateSubnetIds"]),
        tuple(VPC["securityGroupIds"]),
    )
    # And a VPC that brings its own endpoints needs no route tables
    settings = {k: v for k, v in VPC.items() if k != "privateSubnetRouteTableIds"}
    own = LakeSyncConfig.from_settings("dev", {"materialiseVpc": {**settings, "createEndpoints": False}})
    assert own.materialise_vpc is not None and own.materialise_vpc.create_endpoints is False
    # And by default only the materialise function joins it; connectorFunctions adds connector functions
    assert vpc.functions == ("materialise",)
    both = LakeSyncConfig.from_settings("dev", {"materialiseVpc": {**VPC, "connectorFunctions": ["connector_poll"]}})
    assert both.materialise_vpc is not None and both.materialise_vpc.functions == ("materialise", "connector_poll")
    # And connector secrets live under a per-environment prefix
    assert plain.connector_secrets == "lakesync/prod/connectors"


def test_config_flush_engine_defaults_to_both_engines_and_overrides_name_one():
    # Given no flush engine, then each engine named
    plain = LakeSyncConfig.from_settings("prod", {})
    glue = LakeSyncConfig.from_settings("prod", {"flushEngine": "glue"})
    function = LakeSyncConfig.from_settings("prod", {"flushEngine": "function", "reservedConcurrency": {"flush": 1}})
    # Then the default deploys both engines (the tick chooses, by the measured backlog limit); an override one
    assert (plain.flush_engine, glue.flush_engine, function.flush_engine) == ("auto", "glue", "function")
    assert (plain.flush_engines, glue.flush_engines, function.flush_engines) == (
        ("function", "glue"),
        ("glue",),
        ("function",),
    )
    assert plain.flush_function_max_backlog == DEFAULT_FUNCTION_MAX_BACKLOG
    assert "flush" in plain.deployed_functions and "flush" in function.deployed_functions
    assert "flush" not in glue.deployed_functions
    assert set(plain.deployed_functions) - set(glue.deployed_functions) == {"flush"}


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"flushEngine": "spark"}, "flushEngine must be one of ['auto', 'function', 'glue']"),
        ({"flushFunctionMaxBacklog": -1}, "flushFunctionMaxBacklog"),
        ({"flushFunctionMaxBacklog": True}, "flushFunctionMaxBacklog"),
        ({"flushEngine": "glue", "reservedConcurrency": {"flush": 1}}, "'auto' or 'function'"),
    ],
)
def test_config_refuses_a_bad_flush_engine_setting(settings, fragment):
    # Given a flush engine setting that cannot be deployed
    # Then the configuration is refused, naming the problem
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        LakeSyncConfig.from_settings("prod", settings)


def test_config_cdk_json_environments_parse():
    # Given the context shipped in infra/cdk.json, naming dev and prod explicitly
    context = json.loads(CDK_JSON.read_text(encoding="utf-8"))["context"]
    # When every environment it configures is requested
    configs = environments({**context, ENVIRONMENTS_KEY: "dev,prod"})
    # Then both parse, dev throwaway and prod retained
    by_name = {c.name: c for c in configs}
    assert by_name["dev"].removal_policy == "destroy"
    assert by_name["prod"].removal_policy == "retain"


def test_config_environment_settings_override_the_defaults():
    # Given defaults and one environment's own settings
    context = {
        ENVIRONMENTS_KEY: "a,b",
        DEFAULTS_KEY: {"flushIntervalMinutes": 5, "gatewayIds": ["x"]},
        ENV_KEY_PREFIX + "b": {"flushIntervalMinutes": 30},
    }
    # When the environments are built
    a, b = environments(context)
    # Then the environment's value wins and the rest comes from the defaults
    assert (a.name, a.flush_interval_minutes, a.gateway_ids) == ("a", 5, ("x",))
    assert (b.name, b.flush_interval_minutes, b.gateway_ids) == ("b", 30, ("x",))


def test_config_command_line_strings_are_json():
    # Given settings as the CDK CLI passes -c values: strings
    context = {
        ENVIRONMENTS_KEY: "dev",
        ENV_KEY_PREFIX + "dev": json.dumps({"subShards": {"todos": 8}, "reservedConcurrency": {"push": 10}}),
        DEFAULTS_KEY: json.dumps({"gatewayIds": "a, b"}),
    }
    # When parsed
    (config,) = environments(context)
    # Then the JSON objects and the comma-separated gateway list are understood
    assert dict(config.sub_shards) == {"todos": 8}
    assert dict(config.reserved_concurrency) == {"push": 10}
    assert config.gateway_ids == ("a", "b")


def test_config_reports_every_problem_at_once():
    # Given several invalid settings and an unknown one
    settings = {
        "flushIntervalMinutes": 0,
        "logRetentionDays": 10,
        "subShards": {"bad name": 2},
        "reservedConcurrency": {"nope": 1},
        "removalPolicy": "keep",
        "gatewayIds": ["ok", "not ok!"],
        "flushIntervall": 5,
    }
    # When parsed
    with pytest.raises(ConfigError) as raised:
        LakeSyncConfig.from_settings("dev", settings)
    # Then one error names each of them
    message = str(raised.value)
    for fragment in (
        "flushIntervall",
        "flushIntervalMinutes",
        "logRetentionDays",
        "bad name",
        "nope",
        "removalPolicy",
        "not ok!",
    ):
        assert fragment in message


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"compactSchedule": "hourly"}, "compactSchedule"),
        ({"compactMinFlushRuns": 26}, "compactMinFlushRuns must be an integer in 1..25"),
        ({"compactMaxWaitMinutes": -1}, "compactMaxWaitMinutes must be an integer in 0..10080"),
        ({"apiTimeoutSeconds": 30}, "apiTimeoutSeconds"),
        ({"glueWorkers": 1}, "glueWorkers"),
        ({"glueWorkerType": "Standard"}, "glueWorkerType"),
        ({"glueExecutionClass": "SPOT"}, "glueExecutionClass must be STANDARD or FLEX"),
        ({"glueWorkerType": "G.4X"}, "FLEX runs only G.1X or G.2X"),
        ({"claimCheckDays": 7}, "claimCheckDays"),
        ({"alarmEmail": "ops"}, "alarmEmail"),
        ({"compactMaintain": "yes"}, "compactMaintain"),
        ({"dashboard": "yes"}, "dashboard"),
        ({"tracing": "off"}, "tracing"),
        ({"lambdaSystemLogLevel": "ERROR"}, "lambdaSystemLogLevel must be DEBUG, INFO or WARN"),
        ({"logLevel": "WARN"}, "logLevel must be DEBUG, INFO, WARNING or ERROR"),
        ({"sqlSourcePulls": "yes"}, "sqlSourcePulls"),
        ({"flushEngine": "spark"}, "flushEngine must be one of"),
        ({"flushEngine": "glue", "reservedConcurrency": {"flush": 1}}, "flush is deployed only with flushEngine"),
        ({"gatewayIds": []}, "gatewayIds"),
        ({"materialiseConcurrency": 1}, "materialiseConcurrency"),
        ({"destinationSecretPrefix": "lakesync/dev"}, "destinationSecretPrefix"),
        ({"materialiseVpc": {"vpcId": "vpc-1"}}, "materialiseVpc.vpcId"),
        ({"materialiseVpc": {**VPC, "privateSubnetIds": VPC["privateSubnetIds"][:1]}}, "one subnet per zone"),
        ({"materialiseVpc": {**VPC, "privateSubnetRouteTableIds": []}}, "required when createEndpoints"),
        ({"materialiseVpc": {**VPC, "securityGroupIds": []}}, "securityGroupIds"),
        ({"materialiseVpc": {**VPC, "natGateway": True}}, "unknown keys"),
        ({"materialiseVpc": {**VPC, "connectorFunctions": ["push"]}}, "connectorFunctions must be a list of"),
        ({"materialiseVpc": {**VPC, "connectorFunctions": ["pull", "pull"]}}, "connectorFunctions lists"),
    ],
)
def test_config_rejects_an_invalid_value(settings, fragment):
    # Given one invalid setting
    # When parsed
    with pytest.raises(ConfigError, match=fragment):
        LakeSyncConfig.from_settings("dev", settings)


@pytest.mark.parametrize(
    "context",
    [{}, {ENVIRONMENTS_KEY: " , "}, {ENVIRONMENTS_KEY: "a,a"}, {ENVIRONMENTS_KEY: "1bad"}],
    ids=["none", "blank", "twice", "bad-name"],
)
def test_config_environment_list_must_name_valid_distinct_environments(context):
    # Given a context without a usable environment list
    # When the environments are built
    # Then a clear error says so
    with pytest.raises(ConfigError):
        environments(context)


@pytest.mark.parametrize("name", ["dev", "prod", "a", "Dev", "DEV", "eu-west-1", "Prod-Blue-2", "x" * 24])
def test_glue_database_names_are_glue_safe_and_distinct(name):
    # Given an environment name (letters, digits, '-'; capitals allowed)
    database = LakeSyncConfig.from_settings(name, {}).database_name
    # Then its database name is one Glue accepts, also with the stack id's 8 hex digits the stack appends
    assert GLUE_NAME.fullmatch(database) and GLUE_NAME.fullmatch(f"{database}_0123abcd")
    assert database.startswith(f"lakesync_{name.lower().replace('-', '_')}")
    # And names differing only in case (two stacks) get two databases
    assert glue_database(name) != glue_database(name.swapcase()) or name == name.swapcase()


def test_glue_table_names_are_glue_safe():
    # Given the lake's tables: the delta log and state tables of synced tables of any valid name
    for table in ("todos", "Todos", "TODOS", "_x", "a" * 64):
        # Then every one matches Glue's pattern
        assert GLUE_NAME.fullmatch(state_table(table)), table
    assert GLUE_NAME.fullmatch(DELTA_LOG)


def test_reserved_concurrency_leaves_lambdas_unreserved_minimum():
    # Given the standard quota (1000) and a new account's (say 150)
    # Then 900 may be reserved on the first, but not 901, and only 50 on the second
    assert LakeSyncConfig.from_settings("p", {"reservedConcurrency": {"push": 500, "pull": 400}}).problems() == []
    with pytest.raises(ConfigError, match="at most 900 can be reserved"):
        LakeSyncConfig.from_settings("p", {"reservedConcurrency": {"push": 501, "pull": 400}})
    small = {"accountConcurrency": 150}
    assert LakeSyncConfig.from_settings("p", {**small, "reservedConcurrency": {"push": 50}}).problems() == []
    with pytest.raises(ConfigError, match="Lambda keeps 100 of the account's 150"):
        LakeSyncConfig.from_settings("p", {**small, "reservedConcurrency": {"push": 51}})
    # And an account at 100 or below (new accounts start as low as 10) can reserve nothing
    with pytest.raises(ConfigError, match="at most 0 can be reserved"):
        LakeSyncConfig.from_settings("p", {"accountConcurrency": 10, "reservedConcurrency": {"push": 1}})


def test_connector_poller_is_capped_by_default_where_the_account_leaves_room():
    # Given no setting: the poller reserves (and is capped at) the default on the standard quota
    assert LakeSyncConfig.from_settings("p", {}).connector_poll_reserved == DEFAULT_CONNECTOR_POLL_CONCURRENCY
    # And beside other reservations while they leave room for it, counted in the same budget (1000 - 100)
    fits = {"reservedConcurrency": {"push": 900 - DEFAULT_CONNECTOR_POLL_CONCURRENCY}}
    assert LakeSyncConfig.from_settings("p", fits).connector_poll_reserved == DEFAULT_CONNECTOR_POLL_CONCURRENCY
    # But where nothing is left (or can be reserved at all: a new account at 10), the default reserves nothing, so
    # the stack still deploys
    full = {"reservedConcurrency": {"push": 900 - DEFAULT_CONNECTOR_POLL_CONCURRENCY + 1}}
    assert LakeSyncConfig.from_settings("p", full).connector_poll_reserved is None
    assert LakeSyncConfig.from_settings("p", {"accountConcurrency": 10}).connector_poll_reserved is None
    # And null leaves it unreserved, a number reserves that
    assert LakeSyncConfig.from_settings("p", {"connectorPollConcurrency": None}).connector_poll_reserved is None
    assert LakeSyncConfig.from_settings("p", {"connectorPollConcurrency": "12"}).connector_poll_reserved == 12


def test_connector_poller_reservation_counts_in_the_unreserved_minimum():
    # Given a stated cap for the poller beside the API's reservations
    small = {"accountConcurrency": 150, "reservedConcurrency": {"push": 40}}
    assert LakeSyncConfig.from_settings("p", {**small, "connectorPollConcurrency": 10}).problems() == []
    # Then one more than the account's 50 reservable is refused at synth, naming every reservation and the way out
    with pytest.raises(ConfigError) as caught:
        LakeSyncConfig.from_settings("p", {**small, "connectorPollConcurrency": 11})
    message = str(caught.value)
    assert "reserve 51 concurrent executions (push 40, connector_poll 11 (connectorPollConcurrency))" in message
    assert "Lambda keeps 100 of the account's 150 (accountConcurrency) unreserved" in message
    assert (
        "at most 50 can be reserved" in message and "lower reservedConcurrency or connectorPollConcurrency" in message
    )
    # And on a new account's quota a stated cap cannot be reserved at all
    with pytest.raises(ConfigError, match="at most 0 can be reserved"):
        LakeSyncConfig.from_settings("p", {"accountConcurrency": 10, "connectorPollConcurrency": 2})


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        ({"connectorPollConcurrency": 0}, "connectorPollConcurrency must be 'auto', null or an integer in 1..10000"),
        ({"connectorPollConcurrency": True}, "connectorPollConcurrency must be 'auto', null or an integer"),
        ({"connectorPollConcurrency": "many"}, "connectorPollConcurrency must be 'auto', null or an integer"),
        ({"reservedConcurrency": {"connector_poll": 3}}, "set connector_poll's with connectorPollConcurrency"),
    ],
    ids=["zero", "bool", "word", "in-reserved-concurrency"],
)
def test_connector_poller_concurrency_is_validated(settings, fragment):
    with pytest.raises(ConfigError, match=fragment):
        LakeSyncConfig.from_settings("p", settings)


def test_vpc_route_tables_may_be_shared_by_the_subnets():
    # Given one NAT gateway's layout: every private subnet routes through one shared route table
    shared = {**VPC, "privateSubnetRouteTableIds": ["rtb-0aaaaaaaaaaaaaaa1", "rtb-0aaaaaaaaaaaaaaa1"]}
    # Then it is accepted, one entry per subnet as given
    vpc = LakeSyncConfig.from_settings("p", {"materialiseVpc": shared}).materialise_vpc
    assert vpc is not None and vpc.private_subnet_route_table_ids == ("rtb-0aaaaaaaaaaaaaaa1",) * 2
    # But a repeated subnet is still refused
    with pytest.raises(ConfigError, match="privateSubnetIds lists an entry twice"):
        LakeSyncConfig.from_settings(
            "p", {"materialiseVpc": {**shared, "privateSubnetIds": ["subnet-0aaaaaaaaaaaaaaa1"] * 2}}
        )


def test_shipped_environments_deploy_on_a_new_account():
    # Given infra/cdk.json's environments on an account with a new account's Lambda quota (10)
    context = json.loads(CDK_JSON.read_text(encoding="utf-8"))["context"]
    for name in ("dev", "prod"):
        settings = {**context[DEFAULTS_KEY], **context.get(ENV_KEY_PREFIX + name, {}), "accountConcurrency": 10}
        # Then they pass the check: they reserve nothing
        assert LakeSyncConfig.from_settings(name, settings).problems() == []


def test_max_body_bytes_is_capped_where_a_base64_body_fits_lambdas_payload():
    # Given the largest body whose base64 event fits Lambda's 6 MB (lakesync.aws.settings.variables)
    assert LakeSyncConfig.from_settings("p", {"maxBodyBytes": MAX_BODY_BYTES_LIMIT}).max_body_bytes == 4_669_437
    # Then one byte more is refused by the config check, before anything is deployed
    with pytest.raises(ConfigError, match=r"maxBodyBytes must be an integer in 1\.\.4669437"):
        LakeSyncConfig.from_settings("p", {"maxBodyBytes": MAX_BODY_BYTES_LIMIT + 1})


def test_pull_gets_the_sql_drivers_only_when_the_environment_asks_for_source_pulls() -> None:
    from lakesync_infra.function_access import DRIVER_FUNCTIONS, driver_functions

    # The hot read path stays on the small asset by default; sqlSourcePulls adds it to the driver asset's functions
    assert driver_functions(LakeSyncConfig.from_settings("dev", {})) == frozenset(DRIVER_FUNCTIONS)
    assert "pull" not in DRIVER_FUNCTIONS
    assert driver_functions(LakeSyncConfig.from_settings("dev", {"sqlSourcePulls": True})) == {
        *DRIVER_FUNCTIONS,
        "pull",
    }
