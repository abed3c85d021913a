"""The restore job: ``glue_jobs/restore.py`` as a Glue job, started by hand only (docs/lake.md, "Rebuild the gateway
from the lake")::

    aws glue start-job-run --job-name <RestoreJob output> --arguments '{"--gateways":"default","--replace":"true"}'

It runs as the lake's jobs do (:meth:`lakesync_infra.jobs.Jobs.add_job`: Glue 5.1, the same bundle, security
configuration and log groups, one run at a time, no retry), but no schedule starts it and the lake tick does not know
it: it is not one of :data:`lakesync_infra.jobs.JOB_KINDS`. It runs on the standard execution class, not Flex: a
restore is wanted now, Flex may start a run late and run it slower, and the gateways are refused while it runs.

Its DefaultArguments name the stack's lake (Glue catalog, warehouse, database), tables, checkpoint bucket and region;
a run names ``--gateways`` (there is no default: a restore says which gateways it rebuilds) and, as needed,
``--replace true``, ``--lose_unflushed true``, ``--old_table_prefix P``. The job never creates a table
(``--create_tables`` stays ``false``: the tables are CloudFormation's).

Its role (:data:`ACCESS`) may do what :func:`lakesync.lake.restore_job.restore_buffer` does on the stack's tables
without creating them: list the account's table names (``ListTables``, which has no resource-level permissions), scan
and batch-delete the items of every buffer table (``--replace``), read and write the config partition (restore mark,
rules, registry, configuration), read and put the heads, query the deltas table (the entries past the lake), write the
rows; read the lake (Glue Data Catalog and the warehouse); put the checkpoint objects; the data key through DynamoDB
and S3 only. Old tables named by ``--old_table_prefix`` are not the stack's and are not granted: the job reads them
only once the role is given read access to them (else the report says the old buffer could not be read), or restore
from a shell with ``lakesync restore --env --old-table-prefix P``.
"""

from __future__ import annotations

from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_glue as glue
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from constructs import Construct

from lakesync_infra.config import LakeSyncConfig
from lakesync_infra.jobs import CATALOG_READ, JobAccess, Jobs
from lakesync_infra.lake import Lake

KIND: Final = "restore"
EXECUTION_CLASS: Final = "STANDARD"

_SCAN_AND_DELETE: Final = ("dynamodb:Scan", "dynamodb:BatchWriteItem")

ACCESS: Final = JobAccess(
    # lakesync.lake.restore_job (+ lakesync.aws.buffer_restore): registered_gateways and clear_tables list the tables
    # and scan them (clear_tables deletes every item in batches); the target holds and releases the restore mark
    # (PutItem/DeleteItem), reads rules and the registry (GetItem/Query), writes rows, configuration, registry
    # (BatchWriteItem) and heads (PutItem); the survey of the old buffer reads the registry and configuration (Query),
    # the heads (BatchGetItem) and the entry past the lake (Query on the deltas table).
    tables={
        "deltas": ("dynamodb:Query", *_SCAN_AND_DELETE),
        "rows": _SCAN_AND_DELETE,
        "heads": ("dynamodb:BatchGetItem", "dynamodb:PutItem", *_SCAN_AND_DELETE),
        "dedup": _SCAN_AND_DELETE,
        "config": (
            "dynamodb:Query",
            "dynamodb:GetItem",
            "dynamodb:PutItem",
            "dynamodb:DeleteItem",
            *_SCAN_AND_DELETE,
        ),
        "actions": _SCAN_AND_DELETE,
    },
    index_actions={},
    lake_write=False,
    catalog_actions=CATALOG_READ,
    checkpoints=("s3:PutObject",),
    lists_tables=True,
)
"""What the restore job's code touches."""


def restore_arguments(*, lake: Lake, tables_json: str, region: str) -> dict[str, str]:
    """The script's DefaultArguments (names of ``lakesync.spark.restore_reader.JOB_OPTIONS``): the stack's lake,
    tables, checkpoint bucket and region; no gateways (each run names them)."""
    return {
        "--warehouse": lake.warehouse,
        "--catalog": "glue",
        "--namespace": lake.database_name,
        "--tables": tables_json,
        "--checkpoint_bucket": lake.checkpoints.bucket_name,
        "--region": region,
        "--create_tables": "false",
    }


class RestoreJob(Construct):
    """The restore job (see the module docstring).

    Attributes:
        job: The Glue job (``ref`` is its name).
        role: Its role.
        log_groups: Its log groups, by stream (``output``, ``error``).
    """

    def __init__(self, scope: Construct, construct_id: str, *, config: LakeSyncConfig, jobs: Jobs, lake: Lake) -> None:
        super().__init__(scope, construct_id)
        self.job: glue.CfnJob
        self.role: iam.Role
        self.log_groups: dict[str, logs.LogGroup]
        self.job, self.role, self.log_groups = jobs.add_job(
            self,
            KIND,
            ACCESS,
            restore_arguments(lake=lake, tables_json=jobs.tables_json, region=cdk.Stack.of(self).region),
            execution_class=EXECUTION_CLASS,
            description=f"LakeSync {config.name}: restore the buffer from the lake, started by hand "
            f"(glue_jobs/{KIND}.py)",
            id_prefix="",  # RestoreRole, RestoreJob, RestoreOutputLogs... under this construct
        )
