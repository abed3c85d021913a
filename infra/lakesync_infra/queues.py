"""Materialisation messaging: the SQS queue, its dead-letter queue and the claim-check bucket.

After its Iceberg commit, the flush job writes each published range's payload to the claim-check bucket (keys under
:data:`~lakesync.core.materialise.PAYLOAD_PREFIX`) and sends one message per range pointing at it. This construct
creates the pieces and exposes :meth:`Queues.attach_consumer`, the one way to wire a consumer (the ``materialise``
function) -- partial batch failures reported (``ReportBatchItemFailures``), concurrency bounded (each invocation holds
its own database connection), poison messages to the DLQ after ``MAX_RECEIVE_COUNT`` receives. Payloads outlive
the queue's retention (``claimCheckDays`` > 14), so a message redriven from the DLQ still finds its payload.

Both queues are KMS-encrypted with the stack key and refuse plain HTTP; the bucket is a :func:`secure_bucket`.
"""

from __future__ import annotations

from typing import Final

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from lakesync.core.materialise import PAYLOAD_PREFIX
from lakesync_infra.common import allow, allow_key, secure_bucket
from lakesync_infra.config import LakeSyncConfig

MAX_RECEIVE_COUNT: Final = 5
RETENTION: Final = cdk.Duration.days(14)  # SQS's maximum: a stuck consumer has two weeks before anything is lost
CONSUMER_TIMEOUT: Final = cdk.Duration.minutes(2)
"""Timeout a consumer function must not exceed (the visibility timeout is six times it, as AWS recommends)."""
PAYLOADS: Final = f"{PAYLOAD_PREFIX}*"
"""The claim-check objects the producer writes and the consumer reads (``materialise/*``)."""


class Queues(Construct):
    """The materialisation queue, its DLQ and the claim-check bucket.

    Attributes:
        queue: The materialisation queue.
        dead_letter_queue: Messages that failed ``MAX_RECEIVE_COUNT`` times.
        claim_check: Large payloads referenced from messages.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: LakeSyncConfig,
        key: kms.IKey,
        access_logs: s3.IBucket,
    ) -> None:
        super().__init__(scope, construct_id)
        self._key = key
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetters",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=key,
            enforce_ssl=True,
            retention_period=RETENTION,
        )
        self.queue = sqs.Queue(
            self,
            "Materialise",
            encryption=sqs.QueueEncryption.KMS,
            encryption_master_key=key,
            data_key_reuse=cdk.Duration.hours(1),
            enforce_ssl=True,
            retention_period=RETENTION,
            visibility_timeout=cdk.Duration.seconds(CONSUMER_TIMEOUT.to_seconds() * 6),
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue, max_receive_count=MAX_RECEIVE_COUNT),
        )
        self.claim_check = secure_bucket(
            self,
            "ClaimCheck",
            config,
            access_logs=access_logs,
            key=key,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="expire-payloads",
                    expiration=cdk.Duration.days(config.claim_check_days),
                    noncurrent_version_expiration=cdk.Duration.days(1),
                )
            ],
        )

    def grant_publish(self, role: iam.IRole) -> None:
        """Let ``role`` publish: write payloads under the prefix and send messages (the data key's
        ``kms:GenerateDataKey``/``kms:Decrypt`` for both is the caller's, which holds the key)."""
        allow(role, ["s3:PutObject"], [self.claim_check.arn_for_objects(PAYLOADS)], sid="ClaimCheckWrite")
        allow(role, ["sqs:SendMessage"], [self.queue.queue_arn], sid="MaterialiseSend")

    def attach_consumer(
        self,
        function: lambda_.Function,
        *,
        batch_size: int = 10,
        max_batching_window: cdk.Duration | None = None,
        max_concurrency: int | None = None,
    ) -> sources.SqsEventSource:
        """Make ``function`` the queue's consumer: partial batch failures, at most ``max_concurrency`` concurrent
        invocations (2..1000; ``None``: unbounded), read access to the claim-check payloads.

        Raises:
            ValueError: the function's timeout is longer than :data:`CONSUMER_TIMEOUT`.
        """
        timeout = function.timeout
        if timeout is None or timeout.to_seconds() > CONSUMER_TIMEOUT.to_seconds():
            raise ValueError(f"a consumer's timeout must be set and at most {CONSUMER_TIMEOUT.to_seconds()} s")
        # The queue without its key: CDK's consume grant would add kms:Decrypt with no condition; the Lambda service
        # receives with the function's role, and SQS decrypts, so the key is granted through SQS below.
        queue = sqs.Queue.from_queue_attributes(
            self, "ConsumedQueue", queue_arn=self.queue.queue_arn, queue_url=self.queue.queue_url
        )
        source = sources.SqsEventSource(
            queue,
            batch_size=batch_size,
            max_batching_window=max_batching_window,
            report_batch_item_failures=True,
            max_concurrency=max_concurrency,
        )
        function.add_event_source(source)  # grants ReceiveMessage/DeleteMessage/ChangeMessageVisibility/...
        allow(function.role, ["s3:GetObject"], [self.claim_check.arn_for_objects(PAYLOADS)], sid="ClaimCheckPayloads")  # type: ignore[arg-type]
        # ListBucket makes a missing payload (expired before a late redrive) a 404 the consumer reports as such,
        # instead of a 403.
        allow(function.role, ["s3:ListBucket"], [self.claim_check.bucket_arn], sid="ClaimCheckList")  # type: ignore[arg-type]
        allow_key(function.role, self._key, ["kms:Decrypt"], ["s3"], sid="ClaimCheckKey")  # type: ignore[arg-type]
        allow_key(function.role, self._key, ["kms:Decrypt"], ["sqs"], sid="QueueKey")  # type: ignore[arg-type]
        return source
