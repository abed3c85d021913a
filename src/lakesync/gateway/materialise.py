"""The materialisation consumer: one claim-check job applied to every destination of its gateway and table.

:func:`materialise_job` parses the message, fetches and checks the payload (checksum, counts, gateway, table and
range all match the message) *before* any destination is touched, then applies the deltas to each destination
configured for the gateway and table, with each table schema whose delta table is the job's table. Destinations are
isolated: one failing does not stop the others, and the job then fails as a whole (:class:`MaterialiseFailed`) so
the queue redelivers it. A redelivery re-applies the job everywhere; destinations that already hold it change
nothing (each row is the per-column LWW fold of its deltas), and the one that failed catches up.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lakesync.core.errors import DestinationError, LakeSyncError
from lakesync.core.materialise import MaterialiseJob, PayloadError, decode_payload
from lakesync.core.schema import TableSchema
from lakesync.ports import ApplyStats, ConfigStore, Destination, ObjectStore


@dataclass(frozen=True, slots=True)
class ResolvedDestinations:
    """The destinations of a job: those open, and by name those that could not be opened."""

    opened: Sequence[Destination]
    failures: Mapping[str, LakeSyncError] = field(default_factory=dict)


class DestinationProvider(Protocol):
    """The destinations a job of ``gateway``/``table`` goes to (connections opened and cached by the provider)."""

    def destinations(self, gateway: str, table: str) -> ResolvedDestinations:
        """Open (or reuse) the destinations configured for ``gateway`` that take ``table``.

        Raises:
            DestinationError: the configuration cannot be read (every destination of the job is unknown).
        """
        ...

    def discard(self, destination: Destination) -> None:
        """Forget a destination after it failed, so the next job reconnects."""
        ...


@dataclass(frozen=True, slots=True)
class MaterialiseDeps:
    """What the consumer needs.

    Attributes:
        payloads: The claim-check bucket.
        bucket: Its name (a job naming another bucket is refused).
        config: The gateway configuration (table schemas).
        destinations: Where rows go.
    """

    payloads: ObjectStore
    bucket: str
    config: ConfigStore
    destinations: DestinationProvider


@dataclass(frozen=True, slots=True)
class DestinationOutcome:
    """What one destination did with a job: its figures and how long it took."""

    stats: ApplyStats
    seconds: float


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """What a job did.

    Attributes:
        job: The job.
        applied: Per ``destination/table``, its outcome.
        skipped: Why nothing was applied (no schema for the table, no destination), or None.
    """

    job: MaterialiseJob
    applied: Mapping[str, DestinationOutcome] = field(default_factory=dict)
    skipped: str | None = None


class MaterialiseFailed(LakeSyncError):
    """Some destinations failed a job (others may have applied it); the job must be redelivered.

    Attributes:
        outcome: What the destinations that succeeded did.
        failures: Per ``destination/table``, the error.
    """

    code = "MATERIALISE_FAILED"

    def __init__(self, outcome: JobOutcome, failures: Mapping[str, LakeSyncError]) -> None:
        names = ", ".join(sorted(failures))
        super().__init__(f"Materialising {outcome.job.range_id} failed for {names}")
        self.outcome = outcome
        self.failures = dict(failures)


def materialise_job(deps: MaterialiseDeps, body: str) -> JobOutcome:
    """Apply one job message.

    Raises:
        PayloadError: the message or its payload is missing, malformed or corrupt (nothing was written).
        MaterialiseFailed: at least one destination failed (the others applied the job).
    """
    job = MaterialiseJob.from_message(body)
    if job.bucket != deps.bucket:
        raise PayloadError(f"Materialise job {job.range_id} points at bucket {job.bucket!r}, not {deps.bucket!r}")
    deltas = decode_payload(job, deps.payloads.get(job.key))
    schemas = _schemas_of(deps.config.get_schemas(job.gateway), job.table)
    if not schemas:
        return JobOutcome(job, skipped=f"no schema for table {job.table!r}")
    resolved = deps.destinations.destinations(job.gateway, job.table)
    if not resolved.opened and not resolved.failures:
        return JobOutcome(job, skipped=f"no destination for table {job.table!r}")
    applied: dict[str, DestinationOutcome] = {}
    failures: dict[str, LakeSyncError] = dict(resolved.failures)
    for destination in resolved.opened:
        for schema in schemas:
            label = f"{destination.name}/{schema.table}"
            started = time.perf_counter()
            try:
                stats = destination.apply(schema, deltas)
            except LakeSyncError as exc:
                failures[label] = exc
                deps.destinations.discard(destination)
                break
            except Exception as exc:  # a driver error the destination did not wrap: isolate it all the same
                failures[label] = DestinationError(f"{type(exc).__name__} in destination {destination.name!r}")
                deps.destinations.discard(destination)
                break
            applied[label] = DestinationOutcome(stats, time.perf_counter() - started)
    outcome = JobOutcome(job, applied)
    if failures:
        raise MaterialiseFailed(outcome, failures)
    return outcome


def _schemas_of(schemas: Mapping[str, tuple[TableSchema, int]], table: str) -> list[TableSchema]:
    """Every schema whose deltas come from ``table`` (several destination tables may share a source table)."""
    return sorted((s for s, _ in schemas.values() if s.delta_table == table), key=lambda s: s.table)


__all__ = [
    "DestinationOutcome",
    "DestinationProvider",
    "JobOutcome",
    "JobReport",
    "MaterialiseDeps",
    "MaterialiseFailed",
    "ResolvedDestinations",
    "materialise_job",
    "report_failure",
    "report_outcome",
]


@dataclass(frozen=True, slots=True)
class JobReport:
    """What the consumer records of one job: a log line and the metrics (name -> count) to add."""

    level: str
    message: str
    fields: Mapping[str, object]
    counts: Mapping[str, int]


def _row_counts(applied: Mapping[str, DestinationOutcome]) -> dict[str, int]:
    return {
        "MaterialisedRowsUpserted": sum(o.stats.upserted for o in applied.values()),
        "MaterialisedRowsDeleted": sum(o.stats.deleted for o in applied.values()),
    }


def report_outcome(outcome: JobOutcome) -> JobReport:
    """The record of a job that was applied (or skipped)."""
    job = outcome.job
    if outcome.skipped is not None:
        skipped: dict[str, object] = {"range": job.range_id, "reason": outcome.skipped}
        return JobReport("info", "Materialise job skipped", skipped, {"MaterialiseJobsSkipped": 1})
    destinations = {
        name: {"upserted": o.stats.upserted, "deleted": o.stats.deleted, "ms": round(o.seconds * 1000)}
        for name, o in outcome.applied.items()
    }
    fields: dict[str, object] = {
        "range": job.range_id,
        "run": job.run_id,
        "deltas": job.deltas,
        "destinations": destinations,
    }
    counts = {"MaterialiseJobs": 1, "MaterialisedDeltas": job.deltas, **_row_counts(outcome.applied)}
    return JobReport("info", "Materialise job applied", fields, counts)


def report_failure(error: LakeSyncError, message_id: str, receive_count: str | None) -> JobReport:
    """The record of a job that failed: refused (a bad message or payload) or failed by some destinations."""
    if isinstance(error, MaterialiseFailed):
        failed: dict[str, object] = {
            "message_id": message_id,
            "range": error.outcome.job.range_id,
            "failures": {name: e.message for name, e in error.failures.items()},
            "applied": sorted(error.outcome.applied),
            "receive_count": receive_count,
        }
        counts = {"MaterialiseDestinationFailures": len(error.failures), **_row_counts(error.outcome.applied)}
        return JobReport("error", "Materialise job failed for some destinations", failed, counts)
    fields = {"message_id": message_id, "error": error.message, "receive_count": receive_count}
    return JobReport("error", "Materialise job refused", fields, {"MaterialisePayloadErrors": 1})
