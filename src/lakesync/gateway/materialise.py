"""The materialisation consumer: one claim-check job applied to every destination of its gateway and table.

:func:`materialise_job` parses the message, fetches and checks the payload (checksum, counts, gateway, table and
range all match the message) *before* any destination is touched, then applies the deltas to each destination
configured for the gateway and table, with each table schema whose delta table is the job's table. Destinations are
isolated: one failing does not stop the others, and the job then fails as a whole (:class:`MaterialiseFailed`) so
the queue redelivers it. A redelivery re-applies the job everywhere; destinations that already hold it change
nothing (each row is the per-column LWW fold of its deltas), and the one that failed catches up.
:func:`materialise_batch` does the same for a queue batch, applying the jobs of one gateway and table together.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lakesync.core.delta import RowDelta
from lakesync.core.errors import DestinationError, LakeSyncError
from lakesync.core.materialise import MaterialiseJob, PayloadError, decode_payload
from lakesync.core.schema import TableSchema
from lakesync.ports import ApplyStats, ConfigStore, DestinationProvider, ObjectStore

logger = logging.getLogger(__name__)


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
        together: The range ids of the jobs applied in the same transactions, this one included (empty when it was
            applied alone). Only the first of them carries the group's figures in ``applied``.
    """

    job: MaterialiseJob
    applied: Mapping[str, DestinationOutcome] = field(default_factory=dict)
    skipped: str | None = None
    together: tuple[str, ...] = ()


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
    (result,) = materialise_batch(deps, [body])
    if isinstance(result, LakeSyncError):
        raise result
    return result


def materialise_batch(deps: MaterialiseDeps, bodies: Sequence[str]) -> list[JobOutcome | LakeSyncError]:
    """Apply the jobs of one queue batch: per message, its outcome or why it failed.

    Jobs of the same gateway and table are applied together, in one ``apply`` per destination and schema: the result
    is the same fold (a destination row is the LWW fold of every delta applied to it, in any grouping), while rows
    that several jobs touch are read, merged and written once. If that combined apply fails anywhere (a destination,
    or the reads before them), each job of the group is applied again on its own, so a failure is reported for the
    job that causes it and the other jobs succeed (re-applying to a destination that took the combined apply changes
    nothing). A message whose job or payload is bad, or whose payload the store will not serve, fails alone, before
    anything is applied.

    Returns:
        Per message, in order: its :class:`JobOutcome` (for a job applied together with others, ``together`` names
        them and the figures are on the group's first job), a :class:`PayloadError` or the payload store's error
        (a job not fetched), a :class:`MaterialiseFailed`, or the error that stopped the job's apply.
    """
    results: list[JobOutcome | LakeSyncError | None] = [None] * len(bodies)
    groups: dict[tuple[str, str], list[tuple[int, MaterialiseJob, list[RowDelta]]]] = {}
    for index, body in enumerate(bodies):
        try:
            job, deltas = _fetch(deps, body)
        except LakeSyncError as exc:
            # A payload missing or corrupt (PayloadError), or one the store will not serve (StorageError: archived,
            # access denied, throttled): that job's failure, not its batch's.
            results[index] = exc
            continue
        groups.setdefault((job.gateway, job.table), []).append((index, job, deltas))
    for members in groups.values():
        jobs = tuple(job for _, job, _ in members)
        outcomes = _apply_or_fail(deps, jobs, [d for _, _, deltas in members for d in deltas])
        if len(members) > 1 and any(isinstance(o, LakeSyncError) for o in outcomes):
            outcomes = [_apply_or_fail(deps, (job,), deltas)[0] for _, job, deltas in members]
        for (index, _, _), outcome in zip(members, outcomes, strict=True):
            results[index] = outcome
    return [r for r in results if r is not None]


def _fetch(deps: MaterialiseDeps, body: str) -> tuple[MaterialiseJob, list[RowDelta]]:
    job = MaterialiseJob.from_message(body)
    if job.bucket != deps.bucket:
        raise PayloadError(f"Materialise job {job.range_id} points at bucket {job.bucket!r}, not {deps.bucket!r}")
    return job, decode_payload(job, deps.payloads.get(job.key))


def _apply_or_fail(
    deps: MaterialiseDeps, jobs: tuple[MaterialiseJob, ...], deltas: list[RowDelta]
) -> list[JobOutcome | LakeSyncError]:
    """:func:`_apply`, with a failure before the destinations (the config store, the destinations' settings) or
    one no destination wrapped as every job's result, so the other groups of the batch go on."""
    try:
        return _apply(deps, jobs, deltas)
    except LakeSyncError as exc:
        error = exc
    except Exception as exc:
        logger.exception("Materialise of %s failed", ", ".join(job.range_id for job in jobs))
        error = LakeSyncError(f"Materialise job failed: {type(exc).__name__}: {exc}")
    return [error] * len(jobs)


def _apply(
    deps: MaterialiseDeps, jobs: tuple[MaterialiseJob, ...], deltas: list[RowDelta]
) -> list[JobOutcome | LakeSyncError]:
    """Apply ``deltas`` (the payloads of ``jobs``, all of one gateway and table) to every destination of the table."""
    first = jobs[0]

    def each(applied: Mapping[str, DestinationOutcome] | None = None, skipped: str | None = None) -> list[JobOutcome]:
        others = tuple(j.range_id for j in jobs)
        return [
            JobOutcome(
                job,
                applied if (applied is not None and i == 0) else {},
                skipped,
                together=others if len(jobs) > 1 else (),
            )
            for i, job in enumerate(jobs)
        ]

    schemas = _schemas_of(deps.config.get_schemas(first.gateway), first.table)
    if not schemas:
        return list(each(skipped=f"no schema for table {first.table!r}"))
    resolved = deps.destinations.destinations(first.gateway, first.table)
    if not resolved.opened and not resolved.failures:
        return list(each(skipped=f"no destination for table {first.table!r}"))
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
    outcomes = each(applied)
    if failures:
        return [MaterialiseFailed(outcome, failures) for outcome in outcomes]
    return list(outcomes)


def _schemas_of(schemas: Mapping[str, tuple[TableSchema, int]], table: str) -> list[TableSchema]:
    """Every schema whose deltas come from ``table`` (several destination tables may share a source table)."""
    return sorted((s for s, _ in schemas.values() if s.delta_table == table), key=lambda s: s.table)


__all__ = [
    "DestinationOutcome",
    "JobOutcome",
    "JobReport",
    "MaterialiseDeps",
    "MaterialiseFailed",
    "materialise_batch",
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
    if outcome.together:
        fields["together"] = list(outcome.together)
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
