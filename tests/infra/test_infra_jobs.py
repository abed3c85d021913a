"""The Glue jobs in the template: Glue 5.1 with Iceberg, the deployed zip of wheels installed without PyPI, arguments
the job scripts accept and parse into the Glue-catalog configuration, and the log groups (the schedules, which invoke
the lake tick: test_infra_lake_tick). The flush is a Glue job with ``flushEngine: glue`` only: its job is checked in
that variant's template, and the default deploys none."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path
from types import ModuleType

import pytest
from lakesync_infra.jobs import GLUE_ARGUMENTS, JOB_KINDS, glue_job_kinds
from lakesync_infra.packaging import GLUE_SCRIPTS
from packaging.utils import parse_wheel_filename

from lakesync.lake.tables import NAMESPACE
from tests.infra.conftest import ENV, Synth

ROOT = Path(__file__).resolve().parents[2]
STACK_CREATED = '{"Fn::Select":[0,{"Fn::Split":["-",{"Fn::Select":[2,{"Fn::Split":["/",{"Ref":"AWS::StackId"}]}]}]}]}'
"""The Glue database's last part, rendered: the first group of the stack id's UUID (8 lower-case hex digits)."""


def _script(kind: str) -> ModuleType:
    """The job's entry script, loaded as a module (its ``main`` is not run)."""
    spec = importlib.util.spec_from_file_location(f"glue_job_{kind}", ROOT / "glue_jobs" / f"{kind}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _placeholder(logical: str) -> str:
    return f"tok-{logical.lower()}"


def _job(cfn, ids, kind):
    return cfn.resources[ids[f"job:{kind}"]]["Properties"]


def _arguments(cfn, job) -> dict[str, str]:
    return {k: cfn.render(v, _placeholder) for k, v in job["DefaultArguments"].items()}


def _deploying(kind: str, synth: Synth, glue_synth: Synth) -> Synth:
    """The synth whose template has job ``kind``: the default deploys all three (the Glue flush job beside the flush
    function); the flush job's arguments are checked in the Glue engine's template, where it is the only flush."""
    return glue_synth if kind == "flush" else synth


def test_every_stack_but_the_function_override_deploys_the_glue_flush_job(synth, glue_synth, function_synth):
    # Given the default environment (flushEngine auto), and the same one with flushEngine glue and function
    # Then the default and the Glue engine deploy all three jobs, the function override compaction and checkpoint only
    assert sorted(synth.stack.jobs.jobs) == sorted(glue_job_kinds(synth.stack.config)) == sorted(JOB_KINDS)
    assert sorted(glue_synth.stack.jobs.jobs) == sorted(JOB_KINDS)
    assert sorted(function_synth.stack.jobs.jobs) == ["checkpoint", "compact"]
    # And each also the restore job, started by hand (test_infra_restore_job)
    counts = [len(s.cfn.of_type("AWS::Glue::Job")) for s in (synth, glue_synth, function_synth)]
    assert counts == [4, 4, 3]


def _bundle(cfn, synth) -> tuple[str, Path]:
    """The bundle deployment's key prefix and the staged asset directory it uploads."""
    (deployment,) = cfn.of_type("Custom::CDKBucketDeployment").values()
    (key,) = deployment["SourceObjectKeys"]
    staged = synth.outdir / f"asset.{key.removesuffix('.zip')}"
    return deployment["DestinationBucketKeyPrefix"], staged


@pytest.mark.parametrize("kind", JOB_KINDS)
def test_job_is_glue_5_1_with_iceberg_and_one_run_at_a_time(synth, glue_synth, kind):
    # Given the job
    deploying = _deploying(kind, synth, glue_synth)
    cfn, ids = deploying.cfn, deploying.ids
    job = _job(cfn, ids, kind)
    args = _arguments(cfn, job)
    # Then it is a Glue 5.1 Spark job with Iceberg and its SQL extensions, one run at a time, no bookmarks
    assert job["GlueVersion"] == "5.1"
    assert job["Command"]["Name"] == "glueetl"
    assert job["ExecutionProperty"] == {"MaxConcurrentRuns": 1}
    assert args["--datalake-formats"] == "iceberg"
    # And its one --conf argument also gives S3A (Glue 5.1's s3:// file system, else us-east-2) the stack's region
    assert args["--conf"] == (
        "spark.sql.extensions=org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
        " --conf spark.hadoop.fs.s3a.endpoint.region=<AWS::Region>"
    )
    assert args["--job-bookmark-option"] == "job-bookmark-disable"
    # And it runs with the security configuration (KMS for S3 writes, logs and bookmarks)
    assert job["SecurityConfiguration"] == {"Ref": next(iter(cfn.of_type("AWS::Glue::SecurityConfiguration")))}
    # And it runs on the Flex execution class (spare capacity, $0.29 a DPU-hour) with workers Flex can run
    assert job["ExecutionClass"] == "FLEX"
    assert job["WorkerType"] in ("G.1X", "G.2X")


@pytest.mark.parametrize("kind", JOB_KINDS)
def test_job_installs_the_deployed_zip_of_wheels_without_pypi(synth, glue_synth, kind):
    # Given the job's script location and python modules, and the bundle deployment
    synth = _deploying(kind, synth, glue_synth)
    cfn, ids = synth.cfn, synth.ids
    job = _job(cfn, ids, kind)
    prefix, staged = _bundle(cfn, synth)
    artifacts = f"s3://<{ids['bucket:artifacts']}>/{prefix}"
    modules_name, wheel_name = synth.artifacts.glue.modules_name, synth.artifacts.glue.wheel_name
    # Then both point into the bundle's prefix in the artifacts bucket, and pip may not use an index (PyPI)
    assert cfn.render(job["Command"]["ScriptLocation"]) == f"{artifacts}{kind}.py"
    assert cfn.render(job["DefaultArguments"]["--additional-python-modules"]) == f"{artifacts}{modules_name}"
    assert job["DefaultArguments"]["--python-modules-installer-option"] == "--no-index"
    assert modules_name.endswith(".gluewheels.zip")
    # And the staged bundle holds exactly the scripts (the lake's jobs' and the restore job's) and the zip under those
    # names (the object keys)
    assert {f"{k}.py" for k in (*JOB_KINDS, "restore")} == set(GLUE_SCRIPTS)
    assert sorted(p.name for p in staged.iterdir()) == sorted([*GLUE_SCRIPTS, modules_name])
    # And the zip holds the lakesync wheel, under a file name pip accepts, matching the wheel's own metadata
    name, version, _build, tags = parse_wheel_filename(wheel_name)
    assert name == "lakesync" and {str(t) for t in tags} == {"py3-none-any"}
    with (
        zipfile.ZipFile(staged / modules_name) as bundle,
        zipfile.ZipFile(bundle.open(f"wheels/{wheel_name}")) as wheel,
    ):
        metadata = wheel.read(f"lakesync-{version}.dist-info/METADATA").decode()
        assert "lakesync/spark/flush.py" in wheel.namelist()
    assert f"Version: {version}" in metadata.splitlines()
    # (tests/unit/test_glue_wheels.py installs the zip offline into a clean Python 3.11)
    # And the job starts only once the bundle is deployed
    deployment = next(iter(cfn.of_type("Custom::CDKBucketDeployment")))
    assert deployment in cfn.resources[ids[f"job:{kind}"]]["DependsOn"]


@pytest.mark.parametrize("kind", JOB_KINDS)
def test_job_arguments_are_options_its_script_accepts(synth, glue_synth, kind):
    # Given the job's DefaultArguments, with Glue's own set aside
    deploying = _deploying(kind, synth, glue_synth)
    cfn, ids = deploying.cfn, deploying.ids
    arguments = _arguments(cfn, _job(cfn, ids, kind))
    own = {k for k in arguments if k not in GLUE_ARGUMENTS}
    # Then every other one is an option the job script declares
    assert own
    assert {k.removeprefix("--") for k in own} <= set(_script(kind).JOB_OPTIONS)


@pytest.mark.parametrize("kind", JOB_KINDS)
def test_job_arguments_resolve_to_the_glue_catalog_and_the_stack_warehouse(synth, glue_synth, kind):
    # Given the command line Glue builds from the DefaultArguments (its own arguments included)
    from lakesync.spark.glue import resolved_options
    from lakesync.spark.session import session_conf

    deploying = _deploying(kind, synth, glue_synth)
    cfn, ids = deploying.cfn, deploying.ids
    script = _script(kind)
    argv = [token for key, value in _arguments(cfn, _job(cfn, ids, kind)).items() for token in (key, value)]
    # When the script's option parser and argument parser read it
    options = resolved_options(script.JOB_OPTIONS, argv)
    if kind == "checkpoint":
        config, warehouse, catalog_kind, catalog_uri = script.parse(options)
        catalog_name, namespace = config.catalog, config.namespace
    else:
        parsed = (script.FlushJobArgs if kind == "flush" else script.CompactJobArgs).parse(options)
        warehouse, catalog_kind, catalog_uri = parsed.warehouse, parsed.catalog_kind, parsed.catalog_uri
        catalog_name, namespace = parsed.config.catalog, parsed.config.namespace
    # Then the job uses the Glue Data Catalog, the stack's warehouse and the database the stack creates
    assert (catalog_kind, catalog_uri) == ("glue", None)
    assert warehouse == f"s3://{_placeholder(ids['bucket:warehouse'])}/warehouse"
    database = cfn.render(cfn.resources[ids["database"]]["Properties"]["DatabaseInput"]["Name"])
    assert namespace == database == f"{NAMESPACE}_{ENV}_{STACK_CREATED}"
    # And the session it builds is Iceberg's GlueCatalog over S3 on that warehouse
    conf = session_conf(app_name=kind, warehouse=warehouse, catalog_name=catalog_name, catalog=catalog_kind)
    assert conf[f"spark.sql.catalog.{catalog_name}.catalog-impl"] == "org.apache.iceberg.aws.glue.GlueCatalog"
    assert conf[f"spark.sql.catalog.{catalog_name}.warehouse"] == warehouse


def test_flush_and_compact_jobs_read_the_stack_tables(cfn, ids, glue_cfn, glue_ids, options):
    # Given the flush and compaction jobs' parsed arguments (the flush job's in the Glue engine's template)
    flush = _script("flush").FlushJobArgs.parse(
        {k.removeprefix("--"): v for k, v in _arguments(glue_cfn, _job(glue_cfn, glue_ids, "flush")).items()}
    )
    compact = _script("compact").CompactJobArgs.parse(
        {k.removeprefix("--"): v for k, v in _arguments(cfn, _job(cfn, ids, "compact")).items()}
    )
    tables = flush.config.dynamodb.tables.as_dict()
    # Then both name every buffer table of the stack and the configured gateways
    assert tables == {kind: _placeholder(glue_ids[f"table:{kind}"]) for kind in tables}
    assert compact.dynamo_tables is not None
    assert compact.dynamo_tables.as_dict() == {kind: _placeholder(ids[f"table:{kind}"]) for kind in tables}
    assert flush.config.gateways == tuple(options["gatewayIds"])
    assert compact.gateways == tuple(options["gatewayIds"])
    # And the flush releases up to the checkpoints of the stack's checkpoint bucket
    assert flush.checkpoint_bucket == _placeholder(glue_ids["bucket:checkpoints"])


def test_checkpoint_job_writes_to_the_bucket_the_checkpoint_function_reads(cfn, ids):
    # Given the checkpoint job's bucket and the checkpoint function's
    job_args = _arguments(cfn, _job(cfn, ids, "checkpoint"))
    function = cfn.functions()["checkpoint"]["Environment"]["Variables"]
    # Then they are the same bucket
    assert job_args["--bucket"] == _placeholder(ids["bucket:checkpoints"])
    assert function["LAKESYNC_CHECKPOINT_BUCKET"] == {"Ref": ids["bucket:checkpoints"]}


def test_jobs_log_groups_are_where_glue_writes_with_the_security_configuration(either_engine, options):
    # Given the jobs' custom log group prefix, their security configuration and the stack's log groups (with each
    # flush engine: the Glue flush job's own groups exist only with it)
    # (the restore job's as well)
    cfn, ids, kinds = either_engine.cfn, either_engine.ids, [*sorted(either_engine.stack.jobs.jobs), "restore"]
    prefixes = {_job(cfn, ids, kind)["DefaultArguments"]["--custom-logGroup-prefix"] for kind in kinds}
    (prefix,) = prefixes
    (security_id, security), *more = cfn.of_type("AWS::Glue::SecurityConfiguration").items()
    assert not more and security["EncryptionConfiguration"]["CloudWatchEncryption"]["CloudWatchEncryptionMode"]
    named = {
        cfn.render(g["LogGroupName"]): k for k, g in cfn.of_type("AWS::Logs::LogGroup").items() if "LogGroupName" in g
    }
    for kind in kinds:
        job = _job(cfn, ids, kind)
        role = job["Role"]["Fn::GetAtt"][0]
        assert job["SecurityConfiguration"] == {"Ref": security_id}
        for stream in ("output", "error"):
            # Then the stack owns both places the Glue developer guide names for a Glue 5.x job's logs: the
            # prefix's own <prefix>/<stream> (shared by the jobs), and, with a security configuration that encrypts
            # CloudWatch logs, <prefix>/<security configuration>-role/<job role name>/<stream>
            for name in (f"{prefix}/{security['Name']}-role/<{role}>/{stream}", f"{prefix}/{stream}"):
                assert name in named, sorted(named)
                group = cfn.resources[named[name]]["Properties"]
                # Each with the environment's retention and the data key
                assert group["RetentionInDays"] == options["logRetentionDays"]
                assert group["KmsKeyId"] == {"Fn::GetAtt": [ids["key:data"], "Arn"]}
        # And the role may create, associate the key with and write to the groups under the stack's prefix (and
        # their streams: the wildcard spans ":log-stream:"), so neither guess loses logs or fails AssociateKmsKey
        logs = sorted((a, r) for a, r in cfn.allowed(role) if a.startswith("logs:"))
        resources = [f"arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:{prefix}/*"]
        actions = ("logs:AssociateKmsKey", "logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents")
        assert logs == sorted((a, r) for a in actions for r in resources)
    # And nothing outside the stack's prefix, no group for a job not deployed
    assert len([n for n in named if n.startswith(f"{prefix}/")]) == 2 * len(kinds) + 2
