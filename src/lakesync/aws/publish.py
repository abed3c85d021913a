"""The flush's producer side of materialisation: claim-check payloads to S3, job messages to SQS (docs/materialise.md).

After the flush's Iceberg commit, :func:`publish_flushed` publishes every flushed range not yet published: for each
shard the entries ``(start, watermark]``, where ``start`` is the head's published position ``ps`` (or its release
mark when it was never published), cut into ranges of ``range_size`` from ``start``. Each range's payload goes to
the claim-check bucket under a key that is a function of the range, then one message goes to the queue; the head's
``ps`` advances over the contiguous prefix of ranges that were sent.

Exactly once from the consumer's point of view: a range is published before ``ps`` passes it, so a crash anywhere
leaves it at or behind ``ps`` and the next run publishes it (again, at worst: the same key, the same bytes, and a
duplicate message that the idempotent consumer applies without effect). The flush never releases buffer entries
above ``ps``, so a range can always be read again. A range that still fails after retries is left for the next run
and counted (metric ``MaterialisePublishFailures``, alarmed); it never fails the flush.

Shards of gateways with no destination configured are not published: ``ps`` moves to the watermark (publishing
everything is the embedded default's choice, ``publish_all``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from botocore.config import Config

from lakesync.aws.clients import job_client
from lakesync.aws.flush_store import FlushStore, ShardRange
from lakesync.core.log import ShardHead, ShardId
from lakesync.core.materialise import MaterialiseJob, encode_payload, payload_key

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sqs import SQSClient

log = logging.getLogger(__name__)

METRIC_NAMESPACE = "LakeSync"
FAILURE_METRIC = "MaterialisePublishFailures"
_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 8}, connect_timeout=5, read_timeout=30)


@dataclass(frozen=True, slots=True)
class PublishConfig:
    """Where the flush publishes materialisation jobs (picklable; ``None`` fields fall back to the environment).

    Attributes:
        bucket: The claim-check bucket.
        queue_url: The materialisation queue.
        publish_all: Publish every gateway's shards, not only those of gateways with a destination configured.
        endpoint_url: An endpoint override for S3, SQS and CloudWatch (locally, the moto server).
        region: The region.
        access_key_id: Credentials (locally); ``None`` uses the job's role.
        secret_access_key: Credentials (locally).
        attempts: Attempts per range before it is left for the next run.
        threads: Ranges published at once.
    """

    bucket: str
    queue_url: str
    publish_all: bool = False
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    attempts: int = 3
    threads: int = 8

    def client(self, service: str) -> Any:
        """A new boto3 client of ``service`` for this configuration."""
        return job_client(
            service,
            _CLIENT_CONFIG,
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
        )


class JobSink(Protocol):
    """Where payloads and job messages go (S3 + SQS on AWS)."""

    def put_payload(self, key: str, data: bytes) -> None:
        """Write a payload object."""
        ...

    def send(self, job: MaterialiseJob) -> None:
        """Send one job message."""
        ...

    def report_failures(self, count: int) -> None:
        """Record ``count`` ranges that could not be published (the alarmed metric)."""
        ...


class ClaimCheckSink:
    """S3 payloads, SQS messages and the failure metric in CloudWatch."""

    def __init__(self, config: PublishConfig, *, s3: S3Client | None = None, sqs: SQSClient | None = None) -> None:
        self.config = config
        self._s3 = s3 or config.client("s3")
        self._sqs = sqs or config.client("sqs")

    def put_payload(self, key: str, data: bytes) -> None:
        self._s3.put_object(
            Bucket=self.config.bucket, Key=key, Body=data, ContentType="application/json", ContentEncoding="gzip"
        )

    def send(self, job: MaterialiseJob) -> None:
        self._sqs.send_message(QueueUrl=self.config.queue_url, MessageBody=job.to_message())

    def report_failures(self, count: int) -> None:
        try:
            self.config.client("cloudwatch").put_metric_data(
                Namespace=METRIC_NAMESPACE,
                MetricData=[
                    {
                        "MetricName": FAILURE_METRIC,
                        "Dimensions": [{"Name": "service", "Value": "flush"}],
                        "Value": float(count),
                        "Unit": "Count",
                    }
                ],
            )
        except Exception:  # the metric is best effort; the log line below the caller's is the record
            log.exception("could not record the %s metric", FAILURE_METRIC)


@dataclass(frozen=True, slots=True)
class PublishReport:
    """What one publishing pass did.

    Attributes:
        jobs: Ranges published (payload written and message sent).
        deltas: Entries in them.
        failed: Ranges left for the next run after failing every attempt.
        skipped_shards: Shards whose position moved without publishing (no destination for their gateway).
        published: ``{shard key: published position}`` after the pass, for every shard considered.
    """

    jobs: int = 0
    deltas: int = 0
    failed: int = 0
    skipped_shards: int = 0
    published: Mapping[str, int] = field(default_factory=dict)


def plan_publish(
    heads: Mapping[ShardId, ShardHead], watermarks: Mapping[str, int], range_size: int
) -> dict[ShardId, list[ShardRange]]:
    """The ranges to publish per shard (pure): ``(start, watermark]`` cut every ``range_size`` from ``start``, where
    ``start`` is the published position, or the release mark for a shard never published."""
    plan: dict[ShardId, list[ShardRange]] = {}
    for shard, head in sorted(heads.items()):
        start = head.published_seq if head.published_seq is not None else head.released_seq
        end = watermarks.get(shard.key, 0)
        plan[shard] = [ShardRange(shard.key, lo, min(lo + range_size, end)) for lo in range(start, end, range_size)]
    return plan


def publish_flushed(
    store: FlushStore,
    sink: JobSink,
    heads: Mapping[ShardId, ShardHead],
    watermarks: Mapping[str, int],
    *,
    run_id: str,
    bucket: str,
    publish_all: bool = False,
    range_size: int = 5000,
    attempts: int = 3,
    threads: int = 8,
    after_first_send: Callable[[], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> PublishReport:
    """Publish every committed range not yet published and advance the heads' published positions.

    Args:
        store: The flush job's store (reads ranges, moves ``ps``, lists destinations).
        sink: Where payloads and messages go.
        heads: The shards' heads as read before the run (their ``ps`` and release marks).
        watermarks: The delta log's committed watermarks after the run (what may be published).
        run_id: The flush run, carried by every message.
        bucket: The claim-check bucket named in the messages.
        publish_all: Publish for every gateway (the embedded default).
        range_size: Entries per job.
        attempts: Attempts per range.
        threads: Ranges in flight at once.
        after_first_send: A test hook called once after the first message is sent (crash simulation).
        sleep: Back-off between attempts.

    Returns:
        What was published; never raises for a range that failed (it is counted and left for the next run).
    """
    plan = plan_publish(heads, watermarks, range_size)
    with_destinations = {g: publish_all or store.has_destinations(g) for g in sorted({s.gateway for s in plan})}
    published: dict[str, int] = {}
    skipped = 0
    work: list[ShardRange] = []
    for shard, ranges in plan.items():
        if not ranges:
            continue
        if not with_destinations[shard.gateway]:
            store.advance_published(shard, ranges[-1].hi)
            published[shard.key] = ranges[-1].hi
            skipped += 1
        else:
            work.extend(ranges)
    hook = _Once(after_first_send)

    def one(shard_range: ShardRange) -> int:
        for attempt in range(attempts):
            try:
                job = _publish_range(store, sink, shard_range, run_id, bucket)
            except Exception:
                if attempt + 1 == attempts:
                    log.exception("publishing %s (%d, %d] failed", shard_range.shard, shard_range.lo, shard_range.hi)
                    return 0
                sleep(min(5.0, 0.2 * 4**attempt))
                continue
            hook()
            return job.deltas
        return 0

    with ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="publish") as pool:
        outcomes = dict(zip(work, pool.map(one, work), strict=True))
    failed = sum(1 for r, n in outcomes.items() if n == 0)
    for shard, ranges in plan.items():
        sent = [r for r in ranges if outcomes.get(r, 0) > 0]
        prefix_end = None
        for r in ranges:
            if outcomes.get(r, 0) == 0:
                break
            prefix_end = r.hi
        if sent and prefix_end is not None:
            store.advance_published(shard, prefix_end)
            published[shard.key] = prefix_end
        elif shard.key not in published:
            head = heads[shard]
            published[shard.key] = head.published_seq if head.published_seq is not None else head.released_seq
    if failed:
        log.error("%d materialisation range(s) could not be published; the next flush retries them", failed)
        sink.report_failures(failed)
    return PublishReport(
        jobs=sum(1 for n in outcomes.values() if n > 0),
        deltas=sum(outcomes.values()),
        failed=failed,
        skipped_shards=skipped,
        published=published,
    )


def _publish_range(
    store: FlushStore, sink: JobSink, shard_range: ShardRange, run_id: str, bucket: str
) -> MaterialiseJob:
    shard = ShardId.parse(shard_range.shard)
    entries = store.read_stored_deltas(shard_range)
    payload = encode_payload(shard.gateway, shard.table, shard.key, shard_range.lo, shard_range.hi, entries)
    key = payload_key(shard.gateway, shard.table, shard.sub, shard_range.lo, shard_range.hi)
    sink.put_payload(key, payload.data)
    job = MaterialiseJob(
        gateway=shard.gateway,
        table=shard.table,
        shard=shard.key,
        lo=shard_range.lo,
        hi=shard_range.hi,
        deltas=payload.deltas,
        rows=payload.rows,
        bytes=len(payload.data),
        sha256=payload.sha256,
        bucket=bucket,
        key=key,
        run_id=run_id,
    )
    sink.send(job)
    return job


class _Once:
    def __init__(self, hook: Callable[[], None] | None) -> None:
        self._hook = hook

    def __call__(self) -> None:
        hook, self._hook = self._hook, None
        if hook is not None:
            hook()


__all__ = [
    "FAILURE_METRIC",
    "ClaimCheckSink",
    "JobSink",
    "PublishConfig",
    "PublishReport",
    "plan_publish",
    "publish_flushed",
]
