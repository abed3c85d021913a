"""What the materialise consumer records of a job (lakesync.gateway.materialise.report_outcome / report_failure)."""

from __future__ import annotations

from lakesync.core.errors import DestinationError
from lakesync.core.materialise import MaterialiseJob, PayloadError
from lakesync.gateway.materialise import (
    DestinationOutcome,
    JobOutcome,
    MaterialiseFailed,
    report_failure,
    report_outcome,
)
from lakesync.ports import ApplyStats

JOB = MaterialiseJob("gw", "todos", "gw#todos#0", 0, 7, 7, 3, 100, "0" * 64, "b", "materialise/k", "run1")


def test_an_applied_job_counts_its_deltas_and_rows_per_destination() -> None:
    outcome = JobOutcome(
        JOB,
        {
            "pg/todos": DestinationOutcome(ApplyStats(deltas=7, upserted=3, deleted=1), 0.0125),
            "lite/todos": DestinationOutcome(ApplyStats(deltas=7, upserted=2, deleted=0), 0.002),
        },
    )
    report = report_outcome(outcome)
    assert report.level == "info" and report.message == "Materialise job applied"
    assert report.counts == {
        "MaterialiseJobs": 1,
        "MaterialisedDeltas": 7,
        "MaterialisedRowsUpserted": 5,
        "MaterialisedRowsDeleted": 1,
    }
    assert report.fields["destinations"] == {
        "pg/todos": {"upserted": 3, "deleted": 1, "ms": 12},
        "lite/todos": {"upserted": 2, "deleted": 0, "ms": 2},
    }


def test_a_skipped_job_says_why() -> None:
    report = report_outcome(JobOutcome(JOB, skipped="no schema for table 'todos'"))
    assert report.counts == {"MaterialiseJobsSkipped": 1}
    assert report.fields == {"range": JOB.range_id, "reason": "no schema for table 'todos'"}


def test_failures_name_destinations_and_never_more() -> None:
    partial = JobOutcome(JOB, {"lite/todos": DestinationOutcome(ApplyStats(upserted=2), 0.001)})
    failed = report_failure(MaterialiseFailed(partial, {"pg/todos": DestinationError("down")}), "m1", "3")
    assert failed.level == "error"
    assert failed.counts["MaterialiseDestinationFailures"] == 1 and failed.counts["MaterialisedRowsUpserted"] == 2
    assert failed.fields["failures"] == {"pg/todos": "down"} and failed.fields["receive_count"] == "3"
    refused = report_failure(PayloadError("payload missing"), "m2", None)
    assert refused.message == "Materialise job refused" and refused.counts == {"MaterialisePayloadErrors": 1}
