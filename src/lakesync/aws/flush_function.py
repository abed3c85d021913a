"""The flush as a Lambda function: one run of :func:`lakesync.lake.flush.run_flush` on the pyiceberg engine.

A Glue run bills at least a minute of two workers (about a cent on Flex) however little it flushes, which made the
flush most of the lake's cost per delta. The same run in a function -- the same plan, lease, heads, publishing and
release; the write by :class:`~lakesync.lake.iceberg_flush.IcebergDeltaLog` -- bills its seconds.

One invocation (``functions.flush``, queued by the lake tick or the flush trigger through
:class:`~lakesync.aws.flush_runs.FunctionJobStarter`):

1. records the run as started (:class:`~lakesync.aws.flush_runs.FlushRunLog`);
2. reads the release bounds from the latest checkpoints (when a checkpoint bucket is configured);
3. runs the flush; while another run holds the lease it waits for it (polling), within a budget of the invocation's
   remaining time, so a run that was asked for after a request still begins its flush after that request;
4. records the end (``SUCCEEDED``, or ``FAILED`` with the error), which the tick and the trigger read.

A failure is re-raised after it is recorded: the invocation fails, and the asynchronous invoke is not retried (the
stack sets no retries); the next tick starts a new run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from lakesync.aws.checkpoints import ReleaseBounds, read_release_bounds
from lakesync.aws.flush_runs import FlushRunLog, new_run_id
from lakesync.aws.flush_store import DynamoConfig, FlushStore
from lakesync.aws.publish import PublishConfig
from lakesync.aws.settings.lake import FlushFunctionSettings
from lakesync.core.hlc import system_clock

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from lakesync.lake.flush import DeltaLog, FlushConfig, FlushReport

__all__ = ["FlushFunction", "lake_catalog"]

_RESERVE_MS: Final = 120_000
"""Time kept back from the invocation for the flush itself once the lease is free."""


def lake_catalog(settings: FlushFunctionSettings) -> Catalog:
    """The lake's catalog: the Glue Data Catalog (S3 warehouse; the function's role and region), or the local sqlite
    catalog ``lakesync local`` and the tests share with Spark."""
    if settings.catalog == "local":
        from lakesync.lake.catalog import local_catalog

        assert settings.catalog_uri is not None
        return local_catalog(settings.catalog_uri, settings.warehouse)
    from pyiceberg.catalog.glue import GlueCatalog

    properties = {"warehouse": settings.warehouse}
    if settings.region:
        properties |= {"glue.region": settings.region, "s3.region": settings.region}
    return GlueCatalog("lake", None, **properties)


class FlushFunction:
    """The flush function's service (the handler builds it once per cold start).

    Args:
        settings: The function's settings.
        runs: The run records (default: over a DynamoDB client of the environment).
        store: The buffer's flush view (default: from ``settings``).
        catalog: The lake's catalog (default: :func:`lake_catalog`, made on first use).
        now_ms: The wall clock.
        sleep: Waits between lease attempts.
    """

    def __init__(
        self,
        settings: FlushFunctionSettings,
        *,
        runs: FlushRunLog | None = None,
        store: FlushStore | None = None,
        catalog: Catalog | None = None,
        now_ms: Callable[[], int] = system_clock,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings
        if store is None or runs is None:
            client = self._dynamo().client()
            store = store or FlushStore(client, settings.tables)
            runs = runs or FlushRunLog(client, settings.tables)
        self._store = store
        self._runs = runs
        self._catalog = catalog
        self._engine: tuple[DeltaLog, FlushConfig] | None = None
        self._now_ms = now_ms
        self._sleep = sleep

    def _dynamo(self) -> DynamoConfig:
        return DynamoConfig(self.settings.tables, region=self.settings.region)

    def config(self) -> FlushConfig:
        """The run's configuration from the settings."""
        from lakesync.lake.flush import FlushConfig

        s = self.settings
        publish = None
        if s.claim_check_bucket is not None and s.materialise_queue_url is not None:
            publish = PublishConfig(s.claim_check_bucket, s.materialise_queue_url, region=s.region)
        return FlushConfig(
            dynamodb=self._dynamo(),
            namespace=s.namespace,
            gateways=s.gateway_ids,
            retention_ms=s.retention_ms,
            max_deltas_per_run=s.max_deltas,
            publish=publish,
        )

    def flush(self, run_id: str | None, remaining_ms: Callable[[], int]) -> dict[str, Any]:
        """Flush and record the run; a JSON-ready report.

        A flush that appended its cap (``max_deltas``: a backlog) is run again while the invocation has time, so a
        backlog is drained by one invocation rather than one per tick; the report sums the flushes.

        Args:
            run_id: The run the starter queued, or ``None`` (an invocation by hand: a new run is recorded).
            remaining_ms: The invocation's remaining time.

        Raises:
            FlushError: the lease stayed held past the wait budget, or a flush failed (the run is recorded first).
        """
        run_id = run_id or new_run_id(self._now_ms())
        self._runs.running(run_id, self._now_ms())
        reports: list[FlushReport] = []
        try:
            bounds = read_release_bounds(
                self.settings.checkpoint_bucket, self.settings.gateway_ids, region_name=self.settings.region
            )
            while True:
                started = time.monotonic()
                reports.append(self._run(bounds, remaining_ms))
                took_ms = (time.monotonic() - started) * 1000
                if reports[-1].deltas < self.settings.max_deltas or remaining_ms() < _RESERVE_MS + 2 * took_ms:
                    break
        except Exception as exc:
            self._runs.finished(run_id, False, self._now_ms(), f"{type(exc).__name__}: {exc}")
            raise
        self._runs.finished(run_id, True, self._now_ms())
        last = reports[-1]
        return {
            "run": run_id,
            "flushes": len(reports),
            "flush_runs": [r.run_id for r in reports],
            "snapshot_ids": [r.snapshot_id for r in reports if r.snapshot_id is not None],
            "deltas": sum(r.deltas for r in reports),
            "bytes": sum(r.bytes for r in reports),
            "shards": max(r.shards for r in reports),
            "heads_advanced": sum(r.heads_advanced for r in reports),
            "requests_cleared": sum(r.requests_cleared for r in reports),
            "released": sum(r.released for r in reports),
            "published_jobs": sum(r.published_jobs for r in reports),
            "publish_failures": sum(r.publish_failures for r in reports),
            "durations_ms": dict(last.durations_ms),
        }

    def _run(self, bounds: ReleaseBounds, remaining_ms: Callable[[], int]) -> FlushReport:
        from lakesync.lake.flush import flush_when_free, run_flush

        delta_log, config = self._delta_log()
        checkpointed = self.settings.checkpoint_bucket is not None
        return flush_when_free(
            lambda: run_flush(
                delta_log,
                config,
                checkpoint_positions=bounds.positions if checkpointed else None,
                checkpoint_hlcs=bounds.hlcs if checkpointed else None,
                now_ms=self._now_ms,
                store=self._store,
            ),
            may_wait=lambda wait_s: remaining_ms() - wait_s * 1000 >= _RESERVE_MS,
            sleep=self._sleep,
        )

    def _delta_log(self) -> tuple[DeltaLog, FlushConfig]:
        """The engine and the run's configuration, made once per container (the engine remembers the table exists)."""
        if self._engine is None:
            from lakesync.lake.iceberg_flush import IcebergDeltaLog

            if self._catalog is None:
                self._catalog = lake_catalog(self.settings)
            config = self.config()
            self._engine = (IcebergDeltaLog(self._catalog, config), config)
        return self._engine
