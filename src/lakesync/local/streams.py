"""The embedded default's DynamoDB stream event source: moto's stream of a table -> a Lambda handler.

:class:`LocalStreamSource` plays the Lambda service's event source mapping for a DynamoDB stream: it reads every
shard of the stream from where it started (``LATEST``) with ``GetRecords``, keeps the records a filter admits (the
mapping's filter criteria), hands them in batches to the same ``lambda_handler`` the AWS function runs (a stream event
of the same shape), and on a partial batch failure (``batchItemFailures``) hands the records again from the first
failed one, up to ``max_retries`` times, then skips them, as a mapping with bounded retries does.

A mapping reads a shard as soon as its last read came back with records, and waits between reads of an idle one.
Here the wait ends early when :meth:`LocalStreamSource.wake` is called: the embedded default calls it on every
commit to the table (:meth:`lakesync.local.moto.MotoServer.on_write`), so a record is read as soon as it is written
instead of at the next poll, and an idle stream costs one read per ``poll_s``, not a hundred a second. The records,
their order, the batches and the retries are the same either way; only the moment of the read changes.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from lakesync.aws.log_stream import lambda_record
from lakesync.local.front import LambdaContext

__all__ = ["LocalStreamSource", "stream_event"]

logger = logging.getLogger(__name__)

RecordFilter = Callable[[dict[str, Any]], bool]


def stream_event(records: Sequence[dict[str, Any]], stream_arn: str, region: str) -> dict[str, Any]:
    """A DynamoDB stream event as the Lambda service delivers it, from ``GetRecords`` results."""
    return {"Records": [{**lambda_record(r, stream_arn), "awsRegion": region} for r in records]}


class LocalStreamSource:
    """Reads a table's stream on a background thread and runs ``handler`` on each batch of admitted records.

    Args:
        streams: A boto3 ``dynamodbstreams`` client of the local stack.
        stream_arn: The table's ``LatestStreamArn``.
        handler: The Lambda handler.
        admit: The filter criteria: records it rejects never reach the handler.
        batch_size: Records per invocation at most.
        poll_s: Seconds between reads of an idle stream, unless :meth:`wake` ends the wait sooner.
        max_retries: Times a failed record is handed again before it is skipped.
        region: ``awsRegion`` of the records.
    """

    def __init__(
        self,
        streams: Any,
        stream_arn: str,
        handler: Callable[[dict[str, Any], Any], Any],
        *,
        admit: RecordFilter = lambda record: True,
        batch_size: int = 100,
        poll_s: float = 0.01,
        max_retries: int = 3,
        region: str = "us-east-1",
        function_name: str = "lakesync-local-stream",
    ) -> None:
        self._streams = streams
        self._arn = stream_arn
        self._handler = handler
        self._admit = admit
        self._batch_size = batch_size
        self._poll_s = poll_s
        self._max_retries = max_retries
        self._region = region
        self._function_name = function_name
        self._iterators: dict[str, str | None] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._polls = threading.Condition()
        self._polls_started = 0
        self._last_idle_poll = 0
        self.delivered = 0
        self.skipped = 0

    def start(self) -> LocalStreamSource:
        """Start from the stream's current end (records written before are not delivered)."""
        self._discover_shards()
        self._thread = threading.Thread(target=self._run, name="local-stream-source", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop reading; waits for the batch in hand. Idempotent."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def drain(self, timeout_s: float = 10.0) -> bool:
        """Wait until every record written before the call has been handed to the handler; false on timeout.

        Caught up means a read of every shard that started after the call found nothing new.
        """
        with self._polls:
            after = self._polls_started
            self._wake.set()
            return self._polls.wait_for(lambda: self._last_idle_poll > after, timeout_s)

    def wake(self) -> None:
        """Records were written: read the stream now rather than at the end of the idle wait. Does not block."""
        self._wake.set()

    def poll_once(self) -> int:
        """Read every shard once and deliver what was admitted; returns the records read."""
        read = 0
        for shard_id, iterator in list(self._iterators.items()):
            if iterator is None:
                continue
            page = self._streams.get_records(ShardIterator=iterator, Limit=1000)
            self._iterators[shard_id] = page.get("NextShardIterator")
            records = page.get("Records", [])
            read += len(records)
            admitted = [r for r in records if self._admit(r)]
            for start in range(0, len(admitted), self._batch_size):
                self._deliver(admitted[start : start + self._batch_size])
        return read

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._polls:
                self._polls_started += 1
                poll = self._polls_started
            # Cleared before the read: a commit during it sets it again, and the next wait returns at once.
            self._wake.clear()
            try:
                if self.poll_once() == 0:
                    with self._polls:
                        self._last_idle_poll = poll
                        self._polls.notify_all()
                    self._wake.wait(self._poll_s)
            except Exception:
                logger.exception("reading the stream %s failed", self._arn)
                self._stop.wait(1.0)

    def _discover_shards(self) -> None:
        description = self._streams.describe_stream(StreamArn=self._arn)["StreamDescription"]
        for shard in description.get("Shards", []):
            shard_id = shard["ShardId"]
            if shard_id not in self._iterators:
                self._iterators[shard_id] = self._streams.get_shard_iterator(
                    StreamArn=self._arn, ShardId=shard_id, ShardIteratorType="LATEST"
                )["ShardIterator"]

    def _deliver(self, batch: list[dict[str, Any]]) -> None:
        attempts = 0
        while batch:
            failed = self._invoke(batch)
            if failed is None:
                self.delivered += len(batch)
                return
            self.delivered += failed
            batch = batch[failed:]
            attempts += 1
            if attempts > self._max_retries:
                logger.error("skipping %d stream records after %d attempts", len(batch), attempts)
                self.skipped += len(batch)
                return

    def _invoke(self, batch: list[dict[str, Any]]) -> int | None:
        """Run the handler; ``None`` when the batch succeeded, else the index of the first failed record."""
        context = LambdaContext(
            function_name=self._function_name,
            aws_request_id=str(uuid.uuid4()),
            invoked_function_arn=f"arn:aws:lambda:{self._region}:123456789012:function:{self._function_name}",
            log_group_name=f"/aws/lambda/{self._function_name}",
            deadline_monotonic=time.monotonic() + 60,
        )
        try:
            result = self._handler(stream_event(batch, self._arn, self._region), context)
        except Exception:
            logger.exception("stream handler failed on %d records", len(batch))
            return 0
        failures = (result or {}).get("batchItemFailures") or []
        if not failures:
            return None
        sequence_numbers = [r["dynamodb"]["SequenceNumber"] for r in batch]
        ids = {f.get("itemIdentifier") for f in failures}
        return min((i for i, seq in enumerate(sequence_numbers) if seq in ids), default=0)
