"""The flush's engines in the template. By default (``flushEngine: auto``) both are deployed -- the flush function and
the Glue flush job -- and the lake tick and the flush trigger may start either, configured to choose by the backlog
(``LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG``). The flush function: its runtime, architecture, memory, timeout and
asynchronous invoke configuration; an environment that is what the Glue flush job is given; a role holding the Glue
flush job's access to the buffer, the lake and publishing and nothing more (replayed against moto in
test_infra_access); only the lake tick and the flush trigger may start it. The overrides deploy one engine:
``glue`` the Glue flush job and today's wiring, with no flush function; ``function`` the function, with no Glue flush
job.
"""

from __future__ import annotations

from typing import Any

from lakesync_infra.function_access import FLUSH_MEMORY_MB, FLUSH_TIMEOUT_S, RUN_RECORDS
from lakesync_infra.jobs import ACCESS as JOB_ACCESS
from lakesync_infra.jobs import JOB_KINDS

from lakesync.aws.flush_runs import ASYNC_EVENT_AGE_S
from lakesync.aws.settings import variables as settings_vars
from lakesync.aws.settings.lake import (
    DEFAULT_FLUSH_MAX_DELTAS,
    FlushFunctionSettings,
    FlushTriggerSettings,
    LakeTickSettings,
)
from lakesync.core.lake_work import DEFAULT_RETENTION_MS
from tests.infra.conftest import Cfn, Synth

FLUSH = "flush"
STARTERS = ("flush_trigger", "lake_tick")
GLUE = "arn:<AWS::Partition>:glue:<AWS::Region>:<AWS::AccountId>:"


def _placeholder(logical: str) -> str:
    return f"tok-{logical.lower()}"


def _env(cfn: Cfn, name: str) -> dict[str, str]:
    variables = cfn.functions()[name]["Environment"]["Variables"]
    return {k: cfn.render(v, _placeholder) for k, v in variables.items()}


def _flush_arn(ids: dict[str, str]) -> str:
    return f"<{ids['function:flush']}.Arn>"


def test_flush_function_runs_on_x86_64_with_2_gb_and_lambdas_longest_timeout(cfn, synth):
    # Given the flush function
    fn = cfn.functions()[FLUSH]
    # Then it runs the flush handler on the runtime's Python, on x86_64 (pyiceberg-core has no ARM64 wheel for the
    # runtime's Amazon Linux 2), with 2 GB (one Arrow table per run) and 15 minutes, traced
    assert fn["Handler"] == "functions.flush.lambda_handler"
    assert fn["Runtime"] == "python3.11"
    assert fn["Architectures"] == ["x86_64"]
    assert (fn["MemorySize"], fn["Timeout"]) == (FLUSH_MEMORY_MB, FLUSH_TIMEOUT_S) == (2048, 900)
    assert fn["TracingConfig"] == {"Mode": "Active"}
    # And it is deployed from its own asset, which no other function shares
    others = {f["Code"]["S3Key"] for name, f in cfn.functions().items() if name != FLUSH}
    assert fn["Code"]["S3Key"] not in others
    assert (synth.outdir / f"asset.{fn['Code']['S3Key'].removesuffix('.zip')}" / "lakesync" / "lake").is_dir()
    # And no concurrency is reserved for it (one run at a time is the starters' rule and the flush lease's)
    assert "ReservedConcurrentExecutions" not in fn


def test_flush_function_is_invoked_asynchronously_without_retries_within_an_hour(cfn, ids):
    # Given the flush function's event invoke configuration
    flush = {"Ref": ids["function:flush"]}
    (config,) = [c for c in cfn.of_type("AWS::Lambda::EventInvokeConfig").values() if c["FunctionName"] == flush]
    # Then Lambda never retries a failed run (it is recorded; the next tick starts a new one) and drops a queued run
    # after the event age the run records assume
    assert config["MaximumRetryAttempts"] == 0
    assert config["MaximumEventAgeInSeconds"] == ASYNC_EVENT_AGE_S == 3600
    assert config["Qualifier"] == "$LATEST"


def test_flush_function_environment_is_what_the_glue_flush_job_is_given(cfn, ids, glue_cfn, glue_ids, options):
    # Given the flush function's environment, and the Glue flush job's arguments (flushEngine glue)
    env = _env(cfn, FLUSH)
    arguments = glue_cfn.resources[glue_ids["job:flush"]]["Properties"]["DefaultArguments"]
    job = {k: glue_cfn.render(v, _placeholder) for k, v in arguments.items()}
    # Then it reads only variables the function's code reads
    assert set(env) - {"POWERTOOLS_LOG_LEVEL"} <= settings_vars.FUNCTION_ENV_VARS[FLUSH]
    # And flushes the same warehouse, catalog, database, gateways and tables, releases up to the same checkpoints
    # with the same retention, and publishes to the same bucket and queue as the job
    assert (
        env[settings_vars.LAKE_WAREHOUSE]
        == job["--warehouse"]
        == f"s3://{_placeholder(ids['bucket:warehouse'])}/warehouse"
    )
    assert env[settings_vars.LAKE_CATALOG] == job["--catalog"] == "glue"
    assert (
        env[settings_vars.LAKE_NAMESPACE]
        == job["--namespace"]
        == cfn.render(cfn.resources[ids["database"]]["Properties"]["DatabaseInput"]["Name"])
    )
    assert env[settings_vars.GATEWAY_IDS] == job["--gateways"] == ",".join(options["gatewayIds"])
    assert env[settings_vars.CHECKPOINT_BUCKET] == job["--checkpoint_bucket"]
    assert env[settings_vars.FLUSH_RETENTION_MS] == job["--retention_ms"] == str(DEFAULT_RETENTION_MS)
    assert env[settings_vars.CLAIM_CHECK_BUCKET] == job["--claim_check_bucket"]
    assert env[settings_vars.MATERIALISE_QUEUE_URL] == job["--materialise_queue_url"]
    # And the function's own parser accepts it (the database token read as a name the stack could give)
    parsed = FlushFunctionSettings.from_env({**env, settings_vars.LAKE_NAMESPACE: "lakesync_dev_0123abcd"})
    assert parsed.tables.as_dict() == {kind: _placeholder(ids[f"table:{kind}"]) for kind in parsed.tables.as_dict()}
    assert parsed.checkpoint_bucket == _placeholder(ids["bucket:checkpoints"])
    assert parsed.claim_check_bucket == _placeholder(ids["bucket:claim_check"])
    assert parsed.materialise_queue_url == _placeholder(ids["queue:materialise"])
    assert parsed.max_deltas == DEFAULT_FLUSH_MAX_DELTAS


def _by_service(cfn: Cfn, role: str) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set[tuple[str, str]]] = {}
    for action, resource in cfn.allowed(role):
        out.setdefault(action.split(":")[0], set()).add((action, resource))
    return out


def test_flush_function_role_holds_the_glue_flush_jobs_access_and_no_more(cfn, ids, glue_synth):
    # Given the flush function's role, and the Glue flush job's (flushEngine glue)
    role = cfn.role_of(cfn.functions()[FLUSH])
    granted = _by_service(cfn, role)
    job = _by_service(glue_synth.cfn, glue_synth.flush_role("glue"))
    warehouse, lake = f"<{ids['bucket:warehouse']}.Arn>/warehouse/*", f"<{ids['bucket:warehouse']}.Arn>"
    checkpoints = f"<{ids['bucket:checkpoints']}.Arn>"
    claim_check = f"<{ids['bucket:claim_check']}.Arn>"
    # Then it logs, traces, reads and writes the buffer, the lake and the catalog, reads checkpoints, publishes, and
    # nothing else
    assert set(granted) == {"logs", "xray", "dynamodb", "s3", "glue", "sqs", "kms", "cloudwatch"}
    # the buffer: exactly the Glue flush job's table grants (the same FlushStore; its run records among them)
    assert granted["dynamodb"] == job["dynamodb"]
    assert {a for a, _ in granted["dynamodb"]} == {a for acts in JOB_ACCESS["flush"].tables.values() for a in acts}
    # the lake: the job's object actions under the warehouse prefix, listing the bucket (a missing file is a 404);
    # the checkpoints read; payloads written under the materialise/ prefix -- not the job's artifacts or temp dir
    assert granted["s3"] == {
        ("s3:ListBucket", lake),
        *((a, warehouse) for a in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject")),
        ("s3:ListBucket", checkpoints),
        ("s3:GetObject", f"{checkpoints}/*"),
        ("s3:PutObject", f"{claim_check}/materialise/*"),
    }
    assert {p for p in job["s3"] if p[1].startswith(lake)} == {p for p in granted["s3"] if p[1].startswith(lake)}
    # the catalog: the lake's database (read; created when missing) and its delta log table, no other table
    database = cfn.render(cfn.resources[ids["database"]]["Properties"]["DatabaseInput"]["Name"])
    on_database = {f"{GLUE}catalog", f"{GLUE}database/{database}"}
    on_delta_log = {*on_database, f"{GLUE}table/{database}/deltas"}
    assert granted["glue"] == {
        *((a, r) for a in ("glue:GetDatabase", "glue:CreateDatabase") for r in on_database),
        *((a, r) for a in ("glue:GetTable", "glue:CreateTable", "glue:UpdateTable") for r in on_delta_log),
    }
    # publishing: the materialisation queue only
    assert granted["sqs"] == {("sqs:SendMessage", f"<{ids['queue:materialise']}.Arn>")}
    # the data key, only through the services holding data with it
    assert {a for a, _ in granted["kms"]} <= {"kms:Decrypt", "kms:DescribeKey", "kms:Encrypt", "kms:GenerateDataKey"}
    assert {r for _, r in granted["kms"]} == {f"<{ids['key:data']}.Arn>"}
    # the publish failures metric, in the LakeSync namespace only
    (metrics,) = [s for s in cfn.role_statements(role) if s["Action"] == "cloudwatch:PutMetricData"]
    assert metrics["Condition"] == {"StringEquals": {"cloudwatch:namespace": "LakeSync"}}


def _invokers(cfn: Cfn, arn: str) -> set[str]:
    """The roles that may invoke the function ``arn`` (its versions included)."""
    return {
        logical
        for logical in cfn.of_type("AWS::IAM::Role")
        if any(a.startswith("lambda:") and r in (arn, f"{arn}:*", "*") for a, r in cfn.allowed(logical))
    }


def test_only_the_lake_tick_and_the_flush_trigger_may_start_the_flush_function(cfn, ids):
    # Given who may invoke the flush function
    functions = cfn.functions()
    starters = {cfn.role_of(functions[name]) for name in STARTERS}
    # Then it is the lake tick and the flush trigger, each allowed exactly that function (no version, no other)
    assert _invokers(cfn, _flush_arn(ids)) == starters
    for role in starters:
        assert {p for p in cfn.allowed(role) if p[0].startswith("lambda:")} == {
            ("lambda:InvokeFunction", _flush_arn(ids))
        }
    # And no service or schedule may invoke it (no resource policy), and no schedule targets it
    flush = ({"Ref": ids["function:flush"]}, {"Fn::GetAtt": [ids["function:flush"], "Arn"]})
    assert not [p for p in cfn.of_type("AWS::Lambda::Permission").values() if p["FunctionName"] in flush]
    assert not [s for s in cfn.of_type("AWS::Scheduler::Schedule").values() if ids["function:flush"] in str(s)]
    # And both are configured with its name and timeout, and record its runs in the config table (the writes of
    # RUN_RECORDS)
    for name in STARTERS:
        env = _env(cfn, name)
        assert env[settings_vars.FLUSH_FUNCTION_NAME] == _placeholder(ids["function:flush"])
        assert env[settings_vars.FLUSH_FUNCTION_TIMEOUT_S] == str(functions[FLUSH]["Timeout"])
        granted = cfn.allowed(cfn.role_of(functions[name]))
        config = f"<{ids['table:config']}.Arn>"
        assert {(a, config) for a in RUN_RECORDS["config"]} <= set(granted)


def test_default_deploys_both_engines_and_the_starters_may_start_either(synth: Synth) -> None:
    # Given the default environment (flushEngine auto)
    cfn, ids, config = synth.cfn, synth.ids, synth.stack.config
    functions = cfn.functions()
    assert config.flush_engine == "auto"
    # Then the flush function and the Glue flush job are both deployed
    assert FLUSH in functions
    assert sorted(synth.stack.jobs.jobs) == sorted(JOB_KINDS)
    job = f"{GLUE}job/<{ids['job:flush']}>"
    # And the lake tick may start the three Glue jobs and invoke the function, and is configured with both engines
    # and the function's backlog limit
    tick_role = cfn.role_of(functions["lake_tick"])
    tick_granted = set(cfn.allowed(tick_role))
    assert {("glue:StartJobRun", job), ("glue:GetJobRuns", job), ("lambda:InvokeFunction", _flush_arn(ids))} <= (
        tick_granted
    )
    tick = LakeTickSettings.from_env(_env(cfn, "lake_tick"))
    assert tick.flush_function is not None and tick.flush_function.name == _placeholder(ids["function:flush"])
    assert dict(tick.job_names) == {kind: _placeholder(ids[f"job:{kind}"]) for kind in JOB_KINDS}
    assert tick.flush_function_max_backlog == config.flush_function_max_backlog
    # And the flush trigger may start either (a STANDARD Glue run or an Invoke) and read the backlog it chooses by:
    # the shard registry (config Query), the heads (BatchGetItem) and the chunks past them (Query)
    trigger_role = cfn.role_of(functions["flush_trigger"])
    trigger_granted = set(cfn.allowed(trigger_role))
    assert {(a, r) for a, r in trigger_granted if a.startswith(("glue:", "lambda:"))} == {
        ("glue:StartJobRun", job),
        ("glue:GetJobRuns", job),
        ("lambda:InvokeFunction", _flush_arn(ids)),
    }
    assert ("dynamodb:Query", f"<{ids['table:config']}.Arn>") in trigger_granted
    assert ("dynamodb:BatchGetItem", f"<{ids['table:heads']}.Arn>") in trigger_granted
    assert ("dynamodb:Query", f"<{ids['table:deltas']}.Arn>") in trigger_granted
    trigger = FlushTriggerSettings.from_env(_env(cfn, "flush_trigger"))
    assert trigger.job_name == _placeholder(ids["job:flush"])
    assert trigger.flush_function == tick.flush_function
    assert trigger.gateway_ids == tuple(sorted(config.gateway_ids)) == tick.gateway_ids
    assert trigger.flush_function_max_backlog == tick.flush_function_max_backlog
    # And a failed run of either is reported: the function's errors alarm, the Glue failure rule on the flush job
    assert [k for k in cfn.of_type("AWS::CloudWatch::Alarm") if k.startswith("MonitoringFlushErrors")]
    rules = [r for r in cfn.of_type("AWS::Events::Rule").values() if "Glue Job State Change" in str(r)]
    assert any(ids["job:flush"] in str(r["EventPattern"]) for r in rules)


def test_function_engine_deploys_the_function_alone(function_synth: Synth) -> None:
    # Given the environment with flushEngine function
    cfn, ids = function_synth.cfn, function_synth.ids
    functions = cfn.functions()
    # Then the flush function is deployed and no Glue flush job
    assert FLUSH in functions
    assert "job:flush" not in ids and sorted(function_synth.stack.jobs.jobs) == ["checkpoint", "compact"]
    # And the tick and the trigger start the function only: no Glue flush job named, no backlog limit, and the
    # trigger reads no heads (one engine: nothing to choose)
    for name in STARTERS:
        env = _env(cfn, name)
        assert env[settings_vars.FLUSH_FUNCTION_NAME] == _placeholder(ids["function:flush"])
        assert not {settings_vars.FLUSH_JOB_NAME, settings_vars.FLUSH_FUNCTION_MAX_BACKLOG} & set(env), name
    trigger = cfn.allowed(cfn.role_of(functions["flush_trigger"]))
    assert not [a for a, _ in trigger if a.startswith("glue:")]
    assert not [r for a, r in trigger if r in (f"<{ids['table:heads']}.Arn>", f"<{ids['table:deltas']}.Arn>")]
    assert FlushTriggerSettings.from_env(_env(cfn, "flush_trigger")).job_name is None


def test_the_stack_outputs_the_flush_function_and_the_flush_job(synth, glue_synth):
    # Given the outputs of the default and of the Glue engine
    outputs = synth.cfn.template["Outputs"]
    glue_outputs = glue_synth.cfn.template["Outputs"]
    # Then the default names both the flush function and the flush job (to start either by hand), the Glue engine
    # the flush job alone
    assert outputs["FlushFunction"]["Value"] == {"Ref": synth.ids["function:flush"]}
    assert outputs["FlushJob"]["Value"] == {"Ref": synth.ids["job:flush"]}
    assert glue_outputs["FlushJob"]["Value"] == {"Ref": glue_synth.ids["job:flush"]}
    assert "FlushFunction" not in glue_outputs


def test_glue_engine_keeps_todays_wiring(glue_synth: Synth) -> None:
    # Given the environment with flushEngine glue
    cfn, ids = glue_synth.cfn, glue_synth.ids
    functions = cfn.functions()
    # Then no flush function is deployed, and no role may invoke a function of ours but the schedules and services
    assert FLUSH not in functions and "function:flush" not in ids
    for name in STARTERS:
        role = cfn.role_of(functions[name])
        assert not [a for a, _ in cfn.allowed(role) if a.startswith("lambda:")], name
        env = _env(cfn, name)
        assert not {settings_vars.FLUSH_FUNCTION_NAME, settings_vars.FLUSH_FUNCTION_TIMEOUT_S} & set(env), name
        # And the tick and the trigger read and write no run records
        config = f"<{ids['table:config']}.Arn>"
        writes = {a for a, r in cfn.allowed(role) if r == config and not a.endswith(("Query", "GetItem"))}
        assert writes == set(), name
    # And the trigger starts the Glue flush job, the tick the three Glue jobs
    job = f"{GLUE}job/<{ids['job:flush']}>"
    trigger = cfn.allowed(cfn.role_of(functions["flush_trigger"]))
    assert {(a, r) for a, r in trigger if a.startswith("glue:")} == {
        ("glue:StartJobRun", job),
        ("glue:GetJobRuns", job),
    }
    assert _env(cfn, "flush_trigger")[settings_vars.FLUSH_JOB_NAME] == _placeholder(ids["job:flush"])
    tick = LakeTickSettings.from_env(_env(cfn, "lake_tick"))
    assert tick.flush_function is None
    assert dict(tick.job_names) == {kind: _placeholder(ids[f"job:{kind}"]) for kind in JOB_KINDS}
    # And a failed Glue flush run is reported by the Glue failure rule (no flush function errors alarm)
    alarms = [k for k in cfn.of_type("AWS::CloudWatch::Alarm") if k.startswith("MonitoringFlushErrors")]
    assert alarms == []


def test_flush_function_errors_alarm(cfn: Cfn, ids: dict[str, Any]) -> None:
    # Given the alarms
    (alarm,) = [a for k, a in cfn.of_type("AWS::CloudWatch::Alarm").items() if k.startswith("MonitoringFlushErrors")]
    # Then a flush run that raised or timed out (the Glue flush job's failed runs, for the function) notifies the
    # alarm topic
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == ("AWS/Lambda", "Errors", "Sum")
    assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": ids["function:flush"]}}]
    assert (alarm["Threshold"], alarm["ComparisonOperator"]) == (1, "GreaterThanOrEqualToThreshold")
    assert alarm["AlarmActions"] == [{"Ref": ids["topic:alarms"]}]
