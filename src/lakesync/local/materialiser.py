"""The embedded default's materialisation consumer: the local moto SQS queue -> ``functions.materialise``.

:class:`LocalMaterialiser` plays the Lambda service's SQS event source mapping: it long-polls the queue, hands each
batch to the same ``lambda_handler`` the AWS function runs (an SQS event of the same shape), deletes the messages
the handler did not report as failed, and makes the failed ones visible again after a short back-off. The queue's
redrive policy moves a message that keeps failing to the dead-letter queue after its ``maxReceiveCount`` receives,
as on AWS.

By default rows go to ``<data-dir>/materialised.db`` (SQLite); ``lakesync local --materialise URL`` (postgresql://,
mysql://, sqlite:///) points it elsewhere. Destinations configured through the admin routes get the jobs too.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lakesync.local.front import LambdaContext

logger = logging.getLogger(__name__)

MAX_RECEIVE_COUNT = 5
RETRY_VISIBILITY_S = 2
"""Seconds a failed message stays invisible before it is retried (the handler's back-off)."""


@dataclass(frozen=True, slots=True)
class PollReport:
    """One receive-and-handle round: messages received, applied (deleted) and failed (left for a retry)."""

    received: int
    applied: int
    failed: int


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    """An SQS event as the Lambda service delivers it, from ``ReceiveMessage`` results."""
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": m.get("Attributes", {}),
                "messageAttributes": m.get("MessageAttributes", {}),
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
            for m in messages
        ]
    }


class LocalMaterialiser:
    """Polls the materialisation queue on a background thread and runs the materialise handler on each batch.

    Args:
        sqs: A boto3 SQS client of the local stack.
        queue_url: The materialisation queue.
        handler: The Lambda handler (``functions.materialise.lambda_handler``).
        batch_size: Messages per invocation (at most 10).
        wait_s: Long-poll wait per receive.
        retry_visibility_s: Seconds a failed message stays invisible before it is retried.
    """

    def __init__(
        self,
        sqs: Any,
        queue_url: str,
        handler: Callable[[dict[str, Any], Any], dict[str, Any]],
        *,
        batch_size: int = 10,
        wait_s: int = 1,
        retry_visibility_s: int = RETRY_VISIBILITY_S,
    ) -> None:
        self._sqs = sqs
        self._queue_url = queue_url
        self._handler = handler
        self._batch_size = batch_size
        self._wait_s = wait_s
        self._retry_visibility_s = retry_visibility_s
        attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]
        self._queue_arn = attributes["QueueArn"]
        self._region = self._queue_arn.split(":")[3]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def poll_once(self, wait_s: int | None = None) -> PollReport:
        """Receive one batch, run the handler on it, delete what succeeded; failed messages come back after the
        retry visibility."""
        with self._lock:
            out = self._sqs.receive_message(
                QueueUrl=self._queue_url,
                MaxNumberOfMessages=self._batch_size,
                WaitTimeSeconds=self._wait_s if wait_s is None else wait_s,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            messages = out.get("Messages", [])
            if not messages:
                return PollReport(0, 0, 0)
            try:
                context = LambdaContext(
                    function_name="materialise",
                    aws_request_id=uuid.uuid4().hex,
                    invoked_function_arn=f"arn:aws:lambda:{self._region}:123456789012:function:materialise",
                    deadline_monotonic=time.monotonic() + 120,
                )
                response = self._handler(sqs_event(messages, self._queue_arn, self._region), context)
                failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
            except Exception:  # the whole invocation failed: every message comes back, as on Lambda
                logger.exception("materialise handler failed")
                failed = {m["MessageId"] for m in messages}
            done = [m for m in messages if m["MessageId"] not in failed]
            for start in range(0, len(done), 10):
                self._sqs.delete_message_batch(
                    QueueUrl=self._queue_url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                        for i, m in enumerate(done[start : start + 10])
                    ],
                )
            for m in messages:
                if m["MessageId"] in failed:
                    self._sqs.change_message_visibility(
                        QueueUrl=self._queue_url,
                        ReceiptHandle=m["ReceiptHandle"],
                        VisibilityTimeout=self._retry_visibility_s,
                    )
            return PollReport(len(messages), len(done), len(failed))

    def drain(self, timeout_s: float = 60.0, *, settle_s: float = 0.0) -> int:
        """Handle messages until the queue is empty (and stays empty for ``settle_s``) or ``timeout_s`` passes.

        Returns:
            Messages applied.
        """
        deadline = time.monotonic() + timeout_s
        applied = 0
        quiet_since: float | None = None
        while time.monotonic() < deadline:
            report = self.poll_once(wait_s=0)
            applied += report.applied
            if report.received:
                quiet_since = None
                continue
            if self.pending() == 0:
                now = time.monotonic()
                quiet_since = quiet_since or now
                if now - quiet_since >= settle_s:
                    return applied
            time.sleep(0.2)
        return applied

    def pending(self) -> int:
        """Messages visible or in flight on the queue."""
        attributes = self._sqs.get_queue_attributes(
            QueueUrl=self._queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesNotVisible"])

    def start(self) -> LocalMaterialiser:
        """Poll on a background thread until :meth:`stop`."""
        self._thread = threading.Thread(target=self._loop, name="lakesync-materialise", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop polling (the batch in progress finishes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except Exception:  # moto restarting, a transient error: keep polling
                logger.exception("materialise poll failed")
                self._stop.wait(1.0)


__all__ = ["MAX_RECEIVE_COUNT", "LocalMaterialiser", "PollReport", "sqs_event"]
