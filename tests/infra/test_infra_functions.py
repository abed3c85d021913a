"""The Lambda functions in the template: handlers that import, runtime settings, environments that match what
each function's code reads, the flush trigger's stream mapping and the secret's rotation."""

from __future__ import annotations

import importlib
import json

import pytest
from lakesync_infra.config import ALL_FUNCTIONS, LakeSyncConfig
from lakesync_infra.function_access import driver_functions
from lakesync_infra.functions import application_log_level
from lakesync_infra.packaging import LAMBDA_PYTHON

from lakesync.api_routes import ROUTES
from lakesync.aws.settings import variables as settings_vars
from lakesync.aws.settings.api import Settings
from lakesync.aws.settings.lake import FlushTriggerSettings
from tests.infra.conftest import OPTIONS

WITH_DRIVERS = driver_functions(LakeSyncConfig.from_settings("dev", {"sqlSourcePulls": OPTIONS["sqlSourcePulls"]}))
"""The functions the test environment deploys with the SQL drivers (``sqlSourcePulls`` adds ``pull``)."""


def _powertools_variables() -> set[str]:
    from aws_lambda_powertools.shared import constants

    return {v for v in vars(constants).values() if isinstance(v, str) and v.startswith("POWERTOOLS_")}


def _placeholder(logical: str) -> str:
    """A valid stand-in for a token (table, bucket and job names all accept it)."""
    return f"tok-{logical.lower()}"


def _env(cfn, fn) -> dict[str, str]:
    variables = fn.get("Environment", {}).get("Variables", {})
    return {k: cfn.render(v, _placeholder) for k, v in variables.items()}


def test_every_function_is_deployed_once(cfn, glue_cfn):
    # Given the template's functions with a functions.* handler
    # Then there is exactly one per function the code defines (the API's and the AWS-side ones)
    assert sorted(cfn.functions()) == sorted(ALL_FUNCTIONS)
    # And with the Glue flush engine, every one but the flush function
    assert sorted(glue_cfn.functions()) == sorted(set(ALL_FUNCTIONS) - {"flush"})


@pytest.mark.parametrize("name", ALL_FUNCTIONS)
def test_function_handler_string_imports(cfn, name):
    # Given the function's handler string in the template
    module_name, _, attr = cfn.functions()[name]["Handler"].rpartition(".")
    # When it is imported
    handler = getattr(importlib.import_module(module_name), attr)
    # Then it names a callable entry point
    assert callable(handler)


def test_route_handlers_are_the_functions_handlers(cfn):
    # Given the route table's handler strings
    # Then each is the handler of a deployed function
    handlers = {fn["Handler"] for fn in cfn.functions().values()}
    assert {route.handler for route in ROUTES} <= handlers


@pytest.mark.parametrize("name", ALL_FUNCTIONS)
def test_function_runs_python_on_its_assets_architecture_traced_with_retained_logs(cfn, options, name):
    # Given a function
    fn = cfn.functions()[name]
    # Then it runs the runtime its asset was built for, on Graviton (the functions with the SQL drivers -- materialise,
    # the connector poller, admin -- on x86_64: the PostgreSQL driver has no ARM64 wheel for the runtime's Amazon
    # Linux 2; so does the flush function: pyiceberg-core has none either), with active tracing
    assert fn["Runtime"] == f"python{LAMBDA_PYTHON}"
    assert fn["Architectures"] == (["x86_64"] if name in WITH_DRIVERS or name == "flush" else ["arm64"])
    assert fn["TracingConfig"] == {"Mode": "Active"}
    # And logs in Lambda's JSON format without Lambda's own START and REPORT lines (lambdaSystemLogLevel WARN), and
    # with Lambda's filter of its own lines at INFO, the level the metrics' EMF lines (which carry none) are given
    logging = fn["LoggingConfig"]
    assert (logging["LogFormat"], logging["SystemLogLevel"], logging["ApplicationLogLevel"]) == ("JSON", "WARN", "INFO")
    # And logs to its own log group, which has the environment's retention
    group = fn["LoggingConfig"]["LogGroup"]["Ref"]
    assert cfn.resources[group]["Properties"]["RetentionInDays"] == options["logRetentionDays"]
    assert fn["Role"]["Fn::GetAtt"][1] == "Arn"


@pytest.mark.parametrize("name", ALL_FUNCTIONS)
def test_function_environment_is_only_what_its_code_reads(cfn, name):
    # Given the variables the template sets on the function
    env = _env(cfn, cfn.functions()[name])
    # Then each LakeSync one is a variable that function's code reads, and the rest are Powertools settings
    lakesync = {k for k in env if k.startswith("LAKESYNC_")}
    assert lakesync <= settings_vars.FUNCTION_ENV_VARS[name]
    assert set(env) - lakesync <= _powertools_variables()


API_FUNCTIONS = [n for n in ALL_FUNCTIONS if settings_vars.FUNCTION_ENV_VARS[n] >= {settings_vars.JWT_SECRET_ARN}]


@pytest.mark.parametrize("name", API_FUNCTIONS)
def test_api_function_environment_is_a_valid_configuration(cfn, ids, options, name):
    # Given an API function's environment, tokens replaced by valid stand-ins
    fn = cfn.functions()[name]
    env = _env(cfn, fn)
    # When the function's own settings parser reads it
    parsed = Settings.from_env(env)
    # Then it is valid and names the stack's tables, secret and configured options
    for kind, table in parsed.tables.as_dict().items():
        assert table == _placeholder(ids[f"table:{kind}"])
    assert parsed.jwt_secret_arn == _placeholder(ids["secret:jwt"])
    assert parsed.gateway_ids == frozenset(options["gatewayIds"])
    assert dict(parsed.sub_shards) == options["subShards"]
    assert parsed.flush_threshold_bytes == options["flushThresholdBytes"]
    assert parsed.max_body_bytes == options["maxBodyBytes"]
    assert parsed.pull_basis_ttl_ms == options["pullBasisTtlMs"]
    # And only the checkpoint function, and admin (a rules backtest reads the covering checkpoint of a released log),
    # are given the checkpoint bucket
    expected_bucket = _placeholder(ids["bucket:checkpoints"]) if name in ("checkpoint", "admin") else None
    assert parsed.checkpoint_bucket == expected_bucket


def test_flush_trigger_environment_names_the_flush_job_with_the_glue_engine(glue_cfn, glue_ids):
    # Given the flush trigger's environment with flushEngine glue
    env = _env(glue_cfn, glue_cfn.functions()["flush_trigger"])
    # When the function reads which flush it starts
    parsed = FlushTriggerSettings.from_env(env)
    # Then it is the flush job, and the trigger starts no flush function
    assert parsed.job_name == _placeholder(glue_ids["job:flush"])
    assert parsed.flush_function is None


def test_flush_trigger_environment_names_both_engines(cfn, ids):
    # Given the flush trigger's environment (the default engine: auto)
    env = _env(cfn, cfn.functions()["flush_trigger"])
    # When the function reads which flush it starts
    parsed = FlushTriggerSettings.from_env(env)
    # Then it is the flush function, with its timeout, whose runs it records in the stack's config table, and the
    # Glue flush job
    assert parsed.flush_function is not None and parsed.tables is not None
    flush = cfn.functions()["flush"]
    assert (parsed.flush_function.name, parsed.flush_function.timeout_s) == (
        _placeholder(flush["logical"]),
        flush["Timeout"],
    )
    assert parsed.tables.config == _placeholder(ids["table:config"])
    assert parsed.job_name == _placeholder(ids["job:flush"])


def test_reserved_concurrency_is_applied_where_configured(cfn, options):
    # Given the configured reserved concurrency
    reserved = {name: fn.get("ReservedConcurrentExecutions") for name, fn in cfn.functions().items()}
    # Then exactly those functions reserve it (and the connector poller its cap: test_infra_connectors)
    configured = {k: v for k, v in reserved.items() if v is not None and k != "connector_poll"}
    assert configured == options["reservedConcurrency"]


def test_flush_trigger_consumes_flush_requests_from_the_config_stream(cfn, ids):
    # Given the flush trigger's event source mapping
    trigger = cfn.functions()["flush_trigger"]
    (mapping,) = [
        m
        for m in cfn.of_type("AWS::Lambda::EventSourceMapping").values()
        if m["FunctionName"] == {"Ref": trigger["logical"]}
    ]
    # Then it reads the config table's stream, which carries new images
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": [ids["table:config"], "StreamArn"]}
    config_table = cfn.resources[ids["table:config"]]["Properties"]
    assert config_table["StreamSpecification"] == {"StreamViewType": "NEW_IMAGE"}
    # And reports batch item failures, sends exhausted batches to its failure queue
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert mapping["DestinationConfig"]["OnFailure"]["Destination"] == {
        "Fn::GetAtt": [ids["queue:stream_failures"], "Arn"]
    }
    # And lets through only new flush requests (the key layout of
    # lakesync.aws.config_store.DynamoDBConfigStore.request_flush), under the dynamodb key alone (run against records
    # in test_infra_streams)
    (flt,) = mapping["FilterCriteria"]["Filters"]
    pattern = json.loads(flt["Pattern"])
    assert pattern == {"dynamodb": {"NewImage": {"gw": {"S": [{"exists": True}]}, "sk": {"S": [{"prefix": "flush#"}]}}}}


def test_flush_trigger_timeout_covers_its_wait_for_a_busy_job(cfn):
    # Given the trigger's wait budget for a busy flush job
    from lakesync.aws.flush_trigger import MAX_WAIT_S, SAFETY_S

    # Then its timeout lets it use the whole budget before Lambda stops it
    assert cfn.functions()["flush_trigger"]["Timeout"] >= MAX_WAIT_S + SAFETY_S


def test_jwt_secret_rotates_with_the_rotation_function(cfn, ids):
    # Given the secret's rotation schedule
    (rotation,) = cfn.of_type("AWS::SecretsManager::RotationSchedule").values()
    rotate = cfn.functions()["rotate_secret"]
    # Then the rotation function rotates the JWT secret every configured period, not at deploy time
    assert rotation["SecretId"] == {"Ref": ids["secret:jwt"]}
    assert rotation["RotationLambdaARN"] == {"Fn::GetAtt": [rotate["logical"], "Arn"]}
    assert rotation["RotationRules"]["ScheduleExpression"] == "rate(30 days)"
    assert rotation["RotateImmediatelyOnUpdate"] is False
    # And Secrets Manager may invoke it
    permissions = cfn.of_type("AWS::Lambda::Permission").values()
    assert any(
        p["Principal"] == "secretsmanager.amazonaws.com"
        and p["FunctionName"] == {"Fn::GetAtt": [rotate["logical"], "Arn"]}
        for p in permissions
    )


@pytest.mark.parametrize(
    ("log_level", "lambda_filter"), [("DEBUG", "DEBUG"), ("INFO", "INFO"), ("WARNING", "INFO"), ("ERROR", "INFO")]
)
def test_lambdas_filter_of_the_functions_lines_is_never_stricter_than_info(log_level, lambda_filter):
    # Given a configured logLevel
    # Then Lambda's application log filter passes INFO (the EMF metric lines), and DEBUG when that is configured;
    # a stricter level is the logger's own (tests/functions/test_fn_log_levels.py)
    assert application_log_level(log_level).value == lambda_filter
