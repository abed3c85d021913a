"""What a failed commit transaction means (lakesync.aws.dynamodb._commit_error), from DynamoDB's documented error
shapes: a lost race is retried, throttling is 503 busy, a full item collection is 503 backpressure naming the remedy,
anything else a storage error at once."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from lakesync.aws.dynamodb import _client_error, _commit_error
from lakesync.core.errors import BackpressureError, StorageBusyError, StorageError
from lakesync.core.log import CommitConflict, ShardId

SHARD = ShardId("default", "todos", 0)


def _cancelled(*codes: str) -> ClientError:
    response: Any = {
        "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
        "CancellationReasons": [{"Code": code, "Message": f"{code} happened"} for code in codes],
    }
    return ClientError(response, "TransactWriteItems")


def _failed(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "no"}}, "TransactWriteItems")  # type: ignore[typeddict-item]


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (_cancelled("None", "ConditionalCheckFailed"), CommitConflict),
        (_cancelled("TransactionConflict", "None"), CommitConflict),
        (_cancelled("ThrottlingError", "None"), StorageBusyError),
        (_failed("ProvisionedThroughputExceededException"), StorageBusyError),
        (_cancelled("ItemCollectionSizeLimitExceeded", "None"), BackpressureError),
        (_cancelled("ItemCollectionSizeLimitExceeded", "ConditionalCheckFailed"), BackpressureError),
        (_failed("ItemCollectionSizeLimitExceededException"), BackpressureError),
        (_cancelled("ValidationError", "None"), StorageError),
    ],
)
def test_commit_errors_map_to_what_the_client_can_do(error: ClientError, kind: type[Exception]) -> None:
    mapped = _commit_error(SHARD, error)
    assert type(mapped) is kind


def test_a_full_item_collection_is_a_503_naming_the_shard_and_the_remedy() -> None:
    mapped = _commit_error(SHARD, _cancelled("ItemCollectionSizeLimitExceeded"))
    assert isinstance(mapped, BackpressureError)
    body = mapped.to_body()
    assert (mapped.status, body["code"]) == (503, "BACKPRESSURE_ERROR")
    assert SHARD.key in body["error"] and "LAKESYNC_SUB_SHARDS" in body["error"]


@pytest.mark.parametrize(
    ("code", "kind", "status"),
    [
        ("ProvisionedThroughputExceededException", StorageBusyError, 503),
        ("ThrottlingException", StorageBusyError, 503),
        ("RequestLimitExceeded", StorageBusyError, 503),
        ("ValidationException", StorageError, 500),
        ("ResourceNotFoundException", StorageError, 500),
    ],
)
def test_a_throttled_read_or_write_outside_a_commit_is_503_busy_anything_else_500(
    code: str, kind: type[Exception], status: int
) -> None:
    mapped = _client_error(_failed(code), "Query")
    assert type(mapped) is kind and mapped.status == status
    assert code in mapped.message and "Query" in mapped.message
