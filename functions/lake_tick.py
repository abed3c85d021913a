"""EventBridge Scheduler -> the lake tick: start one Glue job only when it has work (:mod:`lakesync.aws.lake_tick`).

Each job's schedule invokes this function with ``{"job": "flush" | "compact" | "checkpoint"}``. The settings
(:class:`~lakesync.aws.settings.lake.LakeTickSettings`) are read and the clients made on the first invocation.
Each tick writes one log line (the decision, its reasons, the run). Custom metrics (namespace ``LakeSync``, dimension
``service=lake_tick``), each only while it has something to say, as CloudWatch bills a custom metric for every hour it
is written and no data reads as OK to the alarms:

* ``CheckpointAgeSeconds``, by the checkpoint tick while the checkpoints lag flushed data
  (:attr:`TickReport.checkpoint_age_s`), which the ``CheckpointAge`` alarm watches;
* ``FlushLagSeconds`` (the age of the oldest commit not yet in the lake) and ``UnflushedDeltas`` (how many wait), by
  the flush tick while anything is unflushed (:attr:`TickReport.flush_lag`, over the configured gateways): the data a
  restore from the lake would lose, which the ``FlushLag`` alarm watches.

An idle deployment writes none of them (the job runs themselves are in Glue's history).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import logger, one_at_a_time, tracer
from lakesync.aws.lambda_runtime import NAMESPACE
from lakesync.aws.settings.lake import LakeTickSettings
from lakesync.core.errors import ValidationError
from lakesync.core.lake_work import JOB_KINDS, JobKind

CHECKPOINT_AGE_METRIC = "CheckpointAgeSeconds"
"""The checkpoint tick's metric (the monitoring construct's ``CHECKPOINT_AGE`` alarm)."""
FLUSH_LAG_METRIC = "FlushLagSeconds"
"""The flush tick's metric of the oldest unflushed commit's age (the monitoring construct's ``FLUSH_LAG`` alarm)."""
UNFLUSHED_DELTAS_METRIC = "UnflushedDeltas"
"""The flush tick's metric of the deltas committed and not yet flushed."""

if TYPE_CHECKING:
    from lakesync.aws.lake_tick import LakeTick


def job_of(event: Mapping[str, Any]) -> JobKind:
    """The job a scheduled event names.

    Raises:
        ValidationError: the event names no known job.
    """
    job = event.get("job") if isinstance(event, Mapping) else None
    if job not in JOB_KINDS:
        raise ValidationError(f'A lake tick event is {{"job": one of {list(JOB_KINDS)}}}, got {event!r}')
    return cast("JobKind", job)


@functools.lru_cache(maxsize=1)
def get_tick() -> LakeTick:
    """The tick, built on first use from the environment (boto3 honours ``AWS_ENDPOINT_URL``)."""
    from lakesync.aws.wiring import lake_tick

    return lake_tick(LakeTickSettings.from_env(os.environ))


@one_at_a_time
@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point: what the tick decided and did (also its log line)."""
    job = job_of(event)
    report = get_tick().tick(job)
    out = report.report()
    if report.checkpoint_age_s:
        _metric(CHECKPOINT_AGE_METRIC, MetricUnit.Seconds, report.checkpoint_age_s)
    lag = report.flush_lag
    if lag is not None and lag.shards:
        if lag.age_s is not None:
            _metric(FLUSH_LAG_METRIC, MetricUnit.Seconds, lag.age_s)
        _metric(UNFLUSHED_DELTAS_METRIC, MetricUnit.Count, lag.deltas)
    log = logger.warning if report.outcome == "deferred" or report.work.stale else logger.info
    log(f"Lake tick {job}: {report.outcome}", extra=out)
    return out


def _metric(name: str, unit: MetricUnit, value: float) -> None:
    """Write one metric of the tick (an EMF line)."""
    with single_metric(
        name=name, unit=unit, value=value, namespace=NAMESPACE, default_dimensions={"service": "lake_tick"}
    ):
        pass
