"""The lake tick in the template: every job's schedule invokes the tick function (never Glue) with that job's name,
on the configured expression; the tick is small, configured with what the flush does (the stack's tables, job names
or the flush function, gateways, checkpoint bucket, publishing, retention) and may start runs of the lake's jobs
only -- with each flush engine: the Glue jobs' runs, and the flush function's by ``Invoke`` and its run records. And
what an idle deployment pays for by the hour: the alarms (each watches something no other sees) and a dashboard,
only when asked for, that fits CloudWatch's free tier.
"""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Template
from lakesync_infra.config import ALL_FUNCTIONS, LakeSyncConfig
from lakesync_infra.function_access import RUN_RECORDS
from lakesync_infra.jobs import JOB_KINDS, SCHEDULE_MAX_AGE, SCHEDULE_RETRIES
from lakesync_infra.monitoring import DASHBOARD_METRICS, Monitoring

from lakesync.aws.settings.lake import FlushFunctionRef, LakeTickSettings
from lakesync.core.lake_work import DEFAULT_COMPACT_POLICY, DEFAULT_RETENTION_MS, CompactPolicy
from tests.infra.test_infra_access import _client_operations

TICK = "lake_tick"


def _placeholder(logical: str) -> str:
    return f"tok-{logical.lower()}"


def _rate_minutes(expression: str) -> int:
    """Minutes of a ``rate(n unit)`` expression."""
    amount, unit = expression.removeprefix("rate(").removesuffix(")").split()
    return int(amount) * {"minute": 1, "hour": 60, "day": 1440}[unit.removesuffix("s")]


def _schedules(cfn: Any) -> dict[str, dict[str, Any]]:
    """The schedules by the job their input names."""
    out = {}
    for schedule in cfn.of_type("AWS::Scheduler::Schedule").values():
        job = json.loads(cfn.render(schedule["Target"]["Input"]))["job"]
        assert job not in out
        out[job] = schedule
    return out


def _job_arn(ids: dict[str, str], kind: str) -> str:
    return f"arn:<AWS::Partition>:glue:<AWS::Region>:<AWS::AccountId>:job/<{ids[f'job:{kind}']}>"


@pytest.mark.parametrize("kind", JOB_KINDS)
def test_schedule_invokes_the_lake_tick_for_its_job_on_the_configured_expression(cfn, ids, synth, kind):
    # Given the job's schedule
    schedule = _schedules(cfn)[kind]
    target = schedule["Target"]
    # Then it runs on the configured expression
    config = synth.stack.config
    if kind == "flush":
        assert _rate_minutes(schedule["ScheduleExpression"]) == config.flush_interval_minutes
    else:
        assert schedule["ScheduleExpression"] == getattr(config, f"{kind}_schedule")
    # And invokes the lake tick function (not Glue) with the job's name, retrying a failed invocation briefly
    assert target["Arn"] == {"Fn::GetAtt": [ids[f"function:{TICK}"], "Arn"]}
    assert json.loads(cfn.render(target["Input"])) == {"job": kind}
    assert target["RetryPolicy"] == {
        "MaximumRetryAttempts": SCHEDULE_RETRIES,
        "MaximumEventAgeInSeconds": SCHEDULE_MAX_AGE.to_seconds(),
    }
    # And its role may invoke that function and nothing else
    role = target["RoleArn"]["Fn::GetAtt"][0]
    tick = f"<{ids[f'function:{TICK}']}.Arn>"
    assert sorted(cfn.allowed(role)) == [("lambda:InvokeFunction", tick), ("lambda:InvokeFunction", f"{tick}:*")]


def test_no_schedule_starts_a_glue_job_directly(either_engine):
    # Given every schedule and every other principal allowed to start a Glue job run (with each flush engine)
    cfn = either_engine.cfn
    schedules = _schedules(cfn)
    starters = {
        logical
        for logical, props in cfn.of_type("AWS::IAM::Role").items()
        if any(a == "glue:StartJobRun" for a, _ in cfn.allowed(logical))
    }
    # Then there is one schedule per job, none targets Glue, and only the tick may start runs -- and the flush trigger,
    # where the Glue flush job is deployed
    assert sorted(schedules) == sorted(JOB_KINDS)
    assert not any("glue" in cfn.render(s["Target"]["Arn"]) for s in schedules.values())
    functions = cfn.functions()
    expected = {cfn.role_of(functions[TICK])}
    if "glue" in either_engine.engines:
        expected.add(cfn.role_of(functions["flush_trigger"]))
    assert starters == expected


def test_lake_tick_is_small_and_configured_with_what_the_flush_does(either_engine, options):
    # Given the tick function and the flush's configuration: the flush function's environment and/or the Glue
    # flush job's arguments
    cfn, ids = either_engine.cfn, either_engine.ids
    fn = cfn.functions()[TICK]
    env = {k: cfn.render(v, _placeholder) for k, v in fn["Environment"]["Variables"].items()}
    flushes = []
    if "function" in either_engine.engines:
        flush_env = cfn.functions()["flush"]["Environment"]["Variables"]
        claim_check, queue = "LAKESYNC_CLAIM_CHECK_BUCKET" in flush_env, "LAKESYNC_MATERIALISE_QUEUE_URL" in flush_env
        flushes.append((claim_check and queue, flush_env["LAKESYNC_FLUSH_RETENTION_MS"]))
    if "glue" in either_engine.engines:
        job = cfn.resources[ids["job:flush"]]["Properties"]["DefaultArguments"]
        claim_check, queue = "--claim_check_bucket" in job, "--materialise_queue_url" in job
        flushes.append((claim_check and queue, job["--retention_ms"]))
    # When the tick reads its settings
    parsed = LakeTickSettings.from_env(env)
    # Then it is a small, short function
    assert (fn["MemorySize"], fn["Architectures"]) == (256, ["arm64"])
    assert fn["Timeout"] <= 60
    # And it sees the stack's tables, jobs, gateways and checkpoint bucket
    for kind, table in parsed.tables.as_dict().items():
        assert table == _placeholder(ids[f"table:{kind}"])
    assert dict(parsed.job_names) == {kind: _placeholder(ids[f"job:{kind}"]) for kind in either_engine.stack.jobs.jobs}
    assert parsed.gateway_ids == tuple(sorted(options["gatewayIds"]))
    assert parsed.checkpoint_bucket == _placeholder(ids["bucket:checkpoints"])
    # And starts the flush function, knowing its timeout, exactly where it is deployed, and the Glue flush job where
    # that is
    if "function" in either_engine.engines:
        flush = cfn.functions()["flush"]
        assert parsed.flush_function == FlushFunctionRef(_placeholder(flush["logical"]), flush["Timeout"])
    else:
        assert parsed.flush_function is None
    assert ("flush" in parsed.job_names) == ("glue" in either_engine.engines)
    # And applies each engine's release rule: publishing exactly when the flush publishes, the same retention
    for publishes, retention in flushes:
        assert parsed.flush_publishes == publishes
        assert retention == str(DEFAULT_RETENTION_MS)
    # And compacts by the configured policy (the defaults: 16 flush runs or 6 hours)
    config = either_engine.stack.config
    assert parsed.compact_policy == CompactPolicy(
        config.compact_min_flush_runs, config.compact_max_wait_minutes * 60_000
    )
    assert parsed.compact_policy == DEFAULT_COMPACT_POLICY


def test_lake_tick_may_start_runs_of_the_lakes_jobs_only(either_engine):
    # Given the Glue operations the job starter calls (with each flush engine)
    cfn, ids = either_engine.cfn, either_engine.ids
    ops = _client_operations("lakesync.aws.jobs")
    assert ops == {"GetJobRuns", "StartJobRun"}
    # Then the tick's role allows each of them on each Glue job (the flush job where it is deployed), and no Glue
    # action anywhere else
    granted = cfn.allowed(cfn.role_of(cfn.functions()[TICK]))
    glue = {(a, r) for a, r in granted if a.startswith("glue:")}
    kinds = JOB_KINDS if "glue" in either_engine.engines else ("compact", "checkpoint")
    assert glue == {(f"glue:{op}", _job_arn(ids, kind)) for op in ops for kind in kinds}
    # And it may invoke the flush function, where there is one, and no other function
    invokes = {(a, r) for a, r in granted if a.startswith("lambda:")}
    if "function" in either_engine.engines:
        assert invokes == {("lambda:InvokeFunction", f"<{ids['function:flush']}.Arn>")}
    else:
        assert invokes == set()
    # And it writes nothing to DynamoDB or S3 but the flush function's run records
    writes = {(a, r) for a, r in granted if a.split(":")[0] in ("dynamodb", "s3") and not _read(a)}
    if "function" in either_engine.engines:
        config = f"<{ids['table:config']}.Arn>"
        assert writes == {(a, config) for a in RUN_RECORDS["config"] if not _read(a)}
    else:
        assert writes == set()


def _read(action: str) -> bool:
    return action.split(":")[1].startswith(("Get", "BatchGet", "Query", "List", "Describe"))


# -- what an idle deployment pays by the hour ---------------------------------------------------------------------


EXPECTED_ALARMS = {
    "MaterialiseDeadLettersDepth",
    "FlushTriggerFailuresDepth",
    "Api5xx",
    "FlushTriggerErrors",
    "MaterialiseErrors",
    "RotateSecretErrors",
    "LakeTickErrors",
    "MaterialisePublishFailures",
    "MaterialiseQueueAge",
    "BroadcastFailuresDepth",
    "WsBroadcastErrors",
    "BroadcastIteratorAge",
    "ConnectorPollErrors",
    "CheckpointAge",
    "FlushLag",
    "FlushErrors",
    "DeltasShardWrites",
    "DeltasShardReads",
    "HeadsShardWrites",
    "HeadsShardReads",
}


def test_alarms_are_the_ones_no_other_alarm_covers_and_all_notify(either_engine):
    # Given the stack's alarms (with each flush engine)
    cfn, ids = either_engine.cfn, either_engine.ids
    alarms = cfn.of_type("AWS::CloudWatch::Alarm")
    names = {logical.removeprefix("Monitoring")[:-8] for logical in alarms}
    # Then they are exactly: the DLQs, API 5xx, the errors of the functions outside the API (the tick's, the
    # broadcaster's and the flush function's among them), the two materialisation ones and the broadcaster's lag --
    # at $0.10 a month each; with the Glue flush engine there is no flush function to alarm on (the Glue failure
    # rule reports its job)
    assert names == (EXPECTED_ALARMS if "function" in either_engine.engines else EXPECTED_ALARMS - {"FlushErrors"})
    # And every one notifies the alarm topic
    assert all(a["AlarmActions"] == [{"Ref": ids["topic:alarms"]}] for a in alarms.values())
    # And the tick's errors alarm watches the tick
    (tick_alarm,) = [a for k, a in alarms.items() if k.startswith("MonitoringLakeTickErrors")]
    assert tick_alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": ids[f"function:{TICK}"]}}]
    # And the flush function's errors alarm (a run that raised or timed out) watches the flush function
    if "function" in either_engine.engines:
        (flush_alarm,) = [a for k, a in alarms.items() if k.startswith("MonitoringFlushErrors")]
        assert flush_alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": ids["function:flush"]}}]
        assert (flush_alarm["MetricName"], flush_alarm["Threshold"]) == ("Errors", 1)


def test_checkpoint_age_alarm_watches_the_lake_ticks_metric_beyond_a_day(cfn):
    # Given the checkpoint-age alarm (issue 12.7: a stalled checkpoint keeps the buffer from being released)
    (alarm,) = [a for k, a in cfn.of_type("AWS::CloudWatch::Alarm").items() if k.startswith("MonitoringCheckpointAge")]
    # Then it watches the lake tick's CheckpointAgeSeconds in the LakeSync namespace, the hourly maximum
    assert (alarm["Namespace"], alarm["MetricName"]) == ("LakeSync", "CheckpointAgeSeconds")
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "lake_tick"}]
    assert (alarm["Statistic"], alarm["Period"], alarm["Unit"]) == ("Maximum", 3600, "Seconds")
    # And fires once the newest checkpoint lags flushed data by a day; no data (an idle or quiet tick) is not an alarm
    assert alarm["Threshold"] == 24 * 3600
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["TreatMissingData"] == "notBreaching"


def test_failed_glue_runs_notify_the_topic_through_the_rule(either_engine):
    # Given the rule on Glue's job state changes (with each flush engine)
    cfn, ids = either_engine.cfn, either_engine.ids
    (rule,) = [r for r in cfn.of_type("AWS::Events::Rule").values() if "aws.glue" in json.dumps(r)]
    # Then it matches the failed runs of every Glue job the stack deploys, the restore job started by hand included
    assert rule["EventPattern"]["detail"]["state"] == ["FAILED", "TIMEOUT", "ERROR"]
    assert sorted(json.dumps(n) for n in rule["EventPattern"]["detail"]["jobName"]) == sorted(
        json.dumps({"Ref": ids[f"job:{kind}"]}) for kind in [*either_engine.stack.jobs.jobs, "restore"]
    )
    assert [t["Arn"] for t in rule["Targets"]] == [{"Ref": ids["topic:alarms"]}]


def test_dashboard_fits_the_free_tier(cfn):
    # Given the dashboard's widgets
    (dashboard,) = cfn.of_type("AWS::CloudWatch::Dashboard").values()
    body = json.loads(cfn.render(dashboard["DashboardBody"]))
    metrics = [m for w in body["widgets"] for m in w["properties"].get("metrics", [])]
    # Then it shows at most 50 metrics (a free dashboard's size), among them the tick's invocations and errors
    assert 0 < len(metrics) <= DASHBOARD_METRICS == 50
    tick = cfn.functions()[TICK]["logical"]
    shown = {(m[1], m[3]) for m in metrics if m[0] == "AWS/Lambda"}
    assert {("Invocations", f"<{tick}>"), ("Errors", f"<{tick}>")} <= shown


def monitoring_template(config: LakeSyncConfig) -> Template:
    """The monitoring construct of ``config``'s environment alone, over stand-in resources."""
    stack = cdk.Stack(cdk.App())
    functions = {
        name: lambda_.Function(
            stack,
            f"Fn{i}",
            code=lambda_.Code.from_inline("def h(e, c): pass"),
            handler="index.h",
            runtime=lambda_.Runtime.PYTHON_3_11,
        )
        for i, name in enumerate(ALL_FUNCTIONS)
    }
    dlqs = ("MaterialiseDeadLetters", "FlushTriggerFailures", "BroadcastFailures")
    queues = {name: sqs.Queue(stack, name) for name in ("Queue", *dlqs)}
    Monitoring(
        stack,
        "Monitoring",
        config=config,
        functions=functions,
        dead_letter_queues={k: v for k, v in queues.items() if k != "Queue"},
        job_names={kind: f"job-{kind}" for kind in JOB_KINDS},
        http_api=apigwv2.HttpApi(stack, "Api"),
        materialise_queue=queues["Queue"],
        materialise_dead_letters=queues["MaterialiseDeadLetters"],
        materialise=functions["materialise"],
        shard_tables={
            kind: dynamodb.Table(
                stack, kind, partition_key=dynamodb.Attribute(name="shard", type=dynamodb.AttributeType.STRING)
            )
            for kind in ("deltas", "heads")
        },
    )
    return Template.from_stack(stack)


@pytest.mark.parametrize("dashboard", [False, True])
def test_dashboard_is_created_only_when_the_environment_asks_for_it(dashboard):
    # Given the monitoring construct of an environment with or without a dashboard, over stand-in resources
    template = monitoring_template(LakeSyncConfig.from_settings("dev", {"dashboard": dashboard}))
    # Then the dashboard exists exactly when asked for, and the alarms are the same either way
    template.resource_count_is("AWS::CloudWatch::Dashboard", 1 if dashboard else 0)
    template.resource_count_is("AWS::CloudWatch::Alarm", len(EXPECTED_ALARMS))
