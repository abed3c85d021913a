"""The restore job in the template (issue 44, item 1): ``glue_jobs/restore.py`` deployed as the lake's jobs are (Glue
5.1, the same bundle, security configuration, Glue arguments and log layout, one run at a time), on the standard
execution class, started by nothing in the stack, with DefaultArguments its script parses into the stack's lake,
tables and checkpoint bucket, and a role that may not create or change a table (what it calls:
test_infra_access)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from lakesync_infra.jobs import GLUE_ARGUMENTS

from lakesync.lake.tables import NAMESPACE
from tests.infra.conftest import ENV
from tests.infra.test_infra_jobs import STACK_CREATED, _arguments, _job, _placeholder, _script


def test_restore_job_runs_as_the_lake_jobs_do_one_run_at_a_time_on_the_standard_class(cfn, ids):
    # Given the restore job and the checkpoint job (a lake job deployed in every variant)
    restore, checkpoint = _job(cfn, ids, "restore"), _job(cfn, ids, "checkpoint")
    restore_args, checkpoint_args = _arguments(cfn, restore), _arguments(cfn, checkpoint)
    # Then it runs the same Glue version, command, workers, timeout and security configuration, one run at a time
    # and never retried
    same = ("GlueVersion", "WorkerType", "NumberOfWorkers", "Timeout", "MaxRetries", "SecurityConfiguration")
    assert {k: restore[k] for k in same} == {k: checkpoint[k] for k in same}
    assert restore["GlueVersion"] == "5.1" and restore["MaxRetries"] == 0
    assert restore["Command"]["Name"] == checkpoint["Command"]["Name"] == "glueetl"
    assert restore["ExecutionProperty"] == {"MaxConcurrentRuns": 1}
    # And its script is restore.py beside the others in the deployed bundle, which it waits for
    script = cfn.render(restore["Command"]["ScriptLocation"])
    assert script == cfn.render(checkpoint["Command"]["ScriptLocation"]).replace("/checkpoint.py", "/restore.py")
    deployment = next(iter(cfn.of_type("Custom::CDKBucketDeployment")))
    assert deployment in cfn.resources[ids["job:restore"]]["DependsOn"]
    # And Glue's own arguments are the lake jobs' (Iceberg, the zip of wheels without PyPI, the log prefix), but its
    # temporary directory
    glue_own = GLUE_ARGUMENTS - {"--TempDir"}
    assert {k: restore_args[k] for k in glue_own} == {k: checkpoint_args[k] for k in glue_own}
    assert restore_args["--TempDir"] == checkpoint_args["--TempDir"].replace("/checkpoint/", "/restore/")
    # And it runs on the standard execution class: a restore is wanted now, which Flex does not promise
    assert restore["ExecutionClass"] == "STANDARD" and checkpoint["ExecutionClass"] == "FLEX"


def test_nothing_in_the_stack_starts_the_restore_job(cfn, ids, synth):
    # Given every reference to the restore job in the template
    job = ids["job:restore"]
    referring = {
        logical
        for logical, resource in cfn.resources.items()
        if logical != job and job in json.dumps(resource, separators=(",", ":"))
    }
    # Then nothing that could start it refers to it (no schedule, function variable or policy): only the rule that
    # tells the alarm topic of failed Glue runs, which matches its state changes, and an output name it
    assert referring == {ids["rule:glue_failures"]}
    (failed,) = [cfn.resources[r] for r in referring]
    assert failed["Properties"]["EventPattern"]["detail-type"] == ["Glue Job State Change"]
    assert [t["Arn"] for t in failed["Properties"]["Targets"]] == [{"Ref": ids["topic:alarms"]}]
    assert cfn.template["Outputs"]["RestoreJob"]["Value"] == {"Ref": job}
    # And the lake's jobs, which the lake tick and its schedules know, do not include it
    assert "restore" not in synth.stack.jobs.jobs


def test_restore_job_arguments_parse_into_the_stacks_lake_tables_and_bucket(cfn, ids):
    # Given the command line of a run: Glue's own arguments, the DefaultArguments, and the run's --gateways
    from lakesync.spark.glue import resolved_options
    from lakesync.spark.restore_reader import JOB_OPTIONS, RestoreJobArgs

    defaults = _arguments(cfn, _job(cfn, ids, "restore"))
    assert {k.removeprefix("--") for k in defaults if k not in GLUE_ARGUMENTS} <= set(JOB_OPTIONS)
    assert _script("restore").JOB_OPTIONS is JOB_OPTIONS
    argv = [t for k, v in {"--JOB_NAME": "restore", **defaults}.items() for t in (k, v)]
    # When the script parses it, with the run's gateways and --replace
    args = RestoreJobArgs.parse(resolved_options(JOB_OPTIONS, [*argv, "--gateways", "default", "--replace", "true"]))
    # Then it reads the stack's lake through the Glue catalog and restores into the stack's tables
    assert (args.catalog_kind, args.catalog_uri) == ("glue", None)
    assert args.warehouse == f"s3://{_placeholder(ids['bucket:warehouse'])}/warehouse"
    assert args.namespace == f"{NAMESPACE}_{ENV}_{STACK_CREATED}"
    tables = args.tables.as_dict()
    assert tables == {kind: _placeholder(ids[f"table:{kind}"]) for kind in tables}
    assert args.checkpoint_bucket == _placeholder(ids["bucket:checkpoints"])
    assert args.region == "<AWS::Region>"
    # And it never creates a table, and replaces only when the run says so
    assert (args.gateways, args.replace, args.lose_unflushed, args.create_tables) == (("default",), True, False, False)
    # And a run that names no gateway is refused before anything starts
    with pytest.raises(ValueError, match="--gateways"):
        RestoreJobArgs.parse(resolved_options(JOB_OPTIONS, argv))


def test_restore_role_reads_the_lake_writes_checkpoints_and_never_creates_or_changes_a_table(cfn, ids):
    # Given the restore job's role
    role = _job(cfn, ids, "restore")["Role"]["Fn::GetAtt"][0]
    allowed: list[tuple[str, Any]] = cfn.allowed(role)
    actions = {a for a, _ in allowed}
    # Then it may read the lake (the Glue Data Catalog, the warehouse) and write nothing there
    assert {a for a in actions if a.startswith("glue:")} == {"glue:GetDatabase", "glue:GetTable", "glue:GetTables"}
    warehouse = f"<{ids['bucket:warehouse']}.Arn>/warehouse/*"
    assert sorted(a for a, r in allowed if r == warehouse) == ["s3:GetObject"]
    # And put checkpoint objects (no read: a restore cuts a new checkpoint)
    assert sorted(a for a, r in allowed if r == f"<{ids['bucket:checkpoints']}.Arn>/*") == ["s3:PutObject"]
    # And neither create, change nor delete a table (CloudFormation's), nor describe one
    table_level = {"CreateTable", "DeleteTable", "UpdateTable", "UpdateTimeToLive", "DescribeTable"}
    assert not {a for a in actions if a.removeprefix("dynamodb:") in table_level}
    # And list the tables, the one DynamoDB action on every resource (ListTables has no resource-level permissions)
    assert [a for a, r in allowed if r == "*" and a.startswith("dynamodb:")] == ["dynamodb:ListTables"]
