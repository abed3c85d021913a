"""The flush job's view of the DynamoDB buffer: shards and heads, log ranges as delta-log rows, the flush lease,
flushed counters, flush requests and the release of flushed log items (docs/lake.md).

Invariants:

* Every read is strongly consistent. A range ``(lo, hi]`` is returned only when every sequence in it was read:
  ``hi`` never exceeds a head's ``seq``, so each entry of the range has committed, and a gap can only be a
  transaction a Query observed half-applied -- the read is retried briefly and then fails, never returns a partial
  range.
* The flushed counters of a head only move forward, under the condition ``fs = <the value the job planned from>``;
  pushes never touch ``fs``/``fb``/``fd``, so only a second flush can fail that condition.
* Release only records ``rs``/``rh`` on the head (forward only); pulls behind the marks are refused from that
  moment. No item is deleted: every log item carries ``exp`` (its commit + 14 days) and DynamoDB's TTL deletes it
  for free (docs/buffer.md). Only items that are flushed, covered by the checkpoint
  and older than the retention are ever marked.
* Only one flush runs at a time: the lease is one config item, taken with a conditional put (free, expired or
  already ours) and renewed under the condition that it is still ours and unexpired.
* Executors build their own client from :class:`DynamoConfig` (plain strings; picklable); no boto3 object crosses
  a process boundary.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from botocore.config import Config
from botocore.exceptions import ClientError

from lakesync.aws.buffer.items import ChunkAttr, HeadAttr, chunk_span, head_key
from lakesync.aws.buffer.log_chunks import COMMIT_MARK_EVERY
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.clients import job_client
from lakesync.aws.errors import condition_failed, error_code
from lakesync.aws.items import DESTINATION_PREFIX, REGISTRY_PREFIX, registry_shard
from lakesync.aws.tables import TableNames
from lakesync.core.canonical import canonical_value
from lakesync.core.errors import FlushError, StorageError
from lakesync.core.log import LogEntry, ShardHead, ShardId
from lakesync.ports import commit_hlc_at

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = [
    "LEASE_GATEWAY",
    "LEASE_SK",
    "STOPPED_WRITER_MS",
    "DynamoConfig",
    "FlushStore",
    "Lease",
    "LogRecord",
    "ShardRange",
    "log_record",
]

Item = dict[str, Any]

LEASE_GATEWAY = "#lakesync"
"""Partition key of the lease item: not a valid gateway id (those start with a letter or digit)."""
LEASE_SK = "flushlease"

FLUSH_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 8}, connect_timeout=5, read_timeout=60)
"""A batch job, unlike the Lambda path (``lakesync.aws.clients``), can wait out throttling and slow pages."""

LogRecord = dict[str, Any]
"""One log entry as a JSON-ready delta-log record: the delta log's columns (docs/lake.md) with ``commit_ms`` (the
commit HLC's wall time, epoch ms) in place of ``commit_ts``, plus ``size``, the entry's stored size in bytes."""


@dataclass(frozen=True, slots=True)
class DynamoConfig:
    """How to reach the buffer: picklable, so Spark executors can build their own client.

    ``None`` fields fall back to the environment (on Glue: the job's role and region).
    """

    tables: TableNames
    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)

    def client(self) -> DynamoDBClient:
        """A new DynamoDB client for this configuration."""
        client: DynamoDBClient = job_client(
            "dynamodb",
            FLUSH_CLIENT_CONFIG,
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
        )
        return client


@dataclass(frozen=True, slots=True, order=True)
class ShardRange:
    """The log entries of one shard with ``lo < seq <= hi``."""

    shard: str
    lo: int
    hi: int

    @property
    def size(self) -> int:
        """Number of entries in the range."""
        return self.hi - self.lo


@dataclass(frozen=True, slots=True)
class Lease:
    """The flush lease as stored: who holds it and until when (epoch ms)."""

    owner: str
    until_ms: int


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _storage_error(exc: ClientError, what: str) -> StorageError:
    return StorageError(f"DynamoDB {what} failed: {error_code(exc)}")


def log_record(entry: LogEntry) -> LogRecord:
    """A log entry as a delta-log record; column values become their canonical JSON (``stable_stringify``).

    The record is made from the stored wire JSON as parsed (no :class:`~lakesync.core.delta.RowDelta` is built),
    or from the entry's delta when the store gave no wire JSON.
    """
    shard = entry.shard
    wire = json.loads(entry.wire_json) if entry.wire_json is not None else entry.delta.to_json()
    return {
        "gateway": shard.gateway,
        "tbl": wire["table"],
        "row_id": wire["rowId"],
        "op": wire["op"],
        "client_id": wire["clientId"],
        "hlc": int(wire["hlc"]),
        "delta_id": wire["deltaId"],
        "columns": [{"name": c["column"], "value": canonical_value(c["value"])} for c in wire["columns"]],
        "shard": shard.key,
        "seq": entry.seq,
        "commit_hlc": entry.commit_hlc,
        "commit_ms": entry.commit_hlc >> 16,
        "size": entry.size,
    }


_CHUNK_SPAN: Final = f"{ChunkAttr.SEQ}, {ChunkAttr.COUNT}, {ChunkAttr.FIRST_HLC}"
"""What :func:`chunk_span` reads of a log item: all a walk by commit HLC needs."""

STOPPED_WRITER_MS: Final = 60_000
"""Chunks past a stored head committed this long ago were left by a writer that stopped (a live one moves the head
within milliseconds): the flush settles the head over them."""


class FlushStore:
    """DynamoDB operations of the flush job.

    Args:
        client: A DynamoDB client.
        names: The physical table names.
        sleep: Injected for tests; used between retries of a range read.
        read_attempts: How often a range read is retried while it shows a gap.
        commit_mark_every: How many entries apart the log's commit marks are expected to be (sizes the walk of
            :meth:`release_target`; its answer does not depend on it).
    """

    def __init__(
        self,
        client: DynamoDBClient,
        names: TableNames,
        *,
        sleep: Callable[[float], None] = time.sleep,
        read_attempts: int = 12,
        commit_mark_every: int = COMMIT_MARK_EVERY,
    ) -> None:
        self._db = client
        self._t = names
        self._buffer = DynamoDBBufferStore(client, names, commit_mark_every=commit_mark_every)
        self._mark_every = commit_mark_every
        self._sleep = sleep
        self._read_attempts = read_attempts

    @classmethod
    def from_config(cls, config: DynamoConfig) -> FlushStore:
        """A store with its own client (what each Spark task does)."""
        return cls(config.client(), config.tables)

    # -- paging helpers --------------------------------------------------------------------------------------------
    def _pages(self, op: Callable[..., Any], what: str, **kwargs: Any) -> Iterator[Item]:
        while True:
            try:
                out = op(**kwargs)
            except ClientError as exc:
                raise _storage_error(exc, what) from exc
            yield from out.get("Items", [])
            last = out.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last

    def _batch_write(self, table: str, requests: list[Item]) -> None:
        for start in range(0, len(requests), 25):
            pending: dict[str, Any] = {table: requests[start : start + 25]}
            for attempt in range(20):
                try:
                    out = self._db.batch_write_item(RequestItems=pending)
                except ClientError as exc:
                    raise _storage_error(exc, "BatchWriteItem") from exc
                pending = dict(out.get("UnprocessedItems") or {})
                if not pending:
                    break
                self._sleep(min(1.0, 0.05 * 2**attempt))
            else:
                raise StorageError("DynamoDB BatchWriteItem kept returning unprocessed items")

    # -- shards and heads ----------------------------------------------------------------------------------------
    def shards(
        self, gateways: Sequence[str] | None = None, *, settle_before_ms: int | None = None
    ) -> tuple[list[str], dict[ShardId, ShardHead]]:
        """The gateways and the heads of their shards (consistent reads).

        Args:
            gateways: Only these gateways; ``None`` means every gateway with shards or flush requests.
            settle_before_ms: Move each stored head over the chunks a stopped writer left past it, committed before
                this time, first (:meth:`DynamoDBBufferStore.settle_heads`; the flush run's read, under its lease).

        Returns:
            The gateways (sorted) and the head of every registered shard.
        """
        registered: list[ShardId] = []
        found: set[str] = set()
        if gateways is None:
            for item in self._pages(
                self._db.scan,
                "Scan",
                TableName=self._t.config,
                ConsistentRead=True,
                ProjectionExpression="gw, sk",
                FilterExpression="begins_with(sk, :shard) OR begins_with(sk, :flush)",
                ExpressionAttributeValues={":shard": _s(REGISTRY_PREFIX), ":flush": _s("flush#")},
            ):
                if item["gw"]["S"] == LEASE_GATEWAY:
                    continue
                found.add(item["gw"]["S"])
                if item["sk"]["S"].startswith(REGISTRY_PREFIX):
                    registered.append(registry_shard(item["sk"]["S"]))
        else:
            for gateway in gateways:
                found.add(gateway)
                registered.extend(self._buffer.list_shards(gateway))
        if settle_before_ms is not None:
            return sorted(found), self._buffer.settle_heads(registered, settle_before_ms)
        return sorted(found), self.heads(registered)

    def heads(self, shards: Sequence[ShardId]) -> dict[ShardId, ShardHead]:
        """The heads of ``shards`` that exist (consistent reads)."""
        return self._buffer.get_heads(shards)

    # -- the log -------------------------------------------------------------------------------------------------
    def _complete_range(self, shard: str, lo: int, hi: int) -> list[LogEntry]:
        shard_id = ShardId.parse(shard)
        for attempt in range(self._read_attempts):
            entries = self._buffer.read_log(shard_id, lo, hi - lo, images=False)
            if len(entries) == hi - lo:
                return entries
            # A Query is not isolated from a transaction being applied; committed entries show up within ms.
            self._sleep(min(0.5, 0.01 * 2**attempt))
        raise FlushError(
            f"the log of shard {shard!r} has a gap in ({lo}, {hi}]: entries below its head are missing"
            " (released, or expired by the log's TTL before a flush read them)"
        )

    def read_records(self, shard_range: ShardRange) -> list[LogRecord]:
        """Every entry of the range as a delta-log record, in sequence order.

        Raises:
            FlushError: an entry of the range stayed missing (a released or corrupted log).
        """
        if shard_range.size <= 0:
            return []
        return [log_record(e) for e in self._complete_range(shard_range.shard, shard_range.lo, shard_range.hi)]

    def read_stored_deltas(self, shard_range: ShardRange) -> list[tuple[str, str]]:
        """``(row_id, stored wire JSON)`` of every entry of the range, in sequence order (the payload of a
        materialisation job; row images are not read).

        Raises:
            FlushError: an entry of the range stayed missing (a released or corrupted log).
        """
        if shard_range.size <= 0:
            return []
        out = []
        for entry in self._complete_range(shard_range.shard, shard_range.lo, shard_range.hi):
            assert entry.wire_json is not None
            out.append((json.loads(entry.wire_json)["rowId"], entry.wire_json))
        return out

    def commit_hlc_at(self, shard: ShardId, seq: int) -> int | None:
        """The commit HLC of the shard's entry ``seq``, or ``None`` when the buffer does not hold it."""
        return commit_hlc_at(self._buffer, shard, seq)

    def range_bytes(self, shard_range: ShardRange) -> int:
        """Total stored size of the range's entries (to advance ``fb`` for entries flushed by a crashed run)."""
        if shard_range.size <= 0:
            return 0
        return sum(e.size for e in self._complete_range(shard_range.shard, shard_range.lo, shard_range.hi))

    # -- heads: flushed counters -----------------------------------------------------------------------------------
    def advance_flushed(self, shard: ShardId, expected_seq: int, seq: int, add_bytes: int, add_deltas: int) -> bool:
        """Set ``fs`` to ``seq`` and add to ``fb``/``fd``, if ``fs`` is still ``expected_seq``.

        Returns:
            True if advanced; False if the head already is at or beyond ``seq`` (a rerun).

        Raises:
            FlushError: ``fs`` moved elsewhere (another flush ran concurrently).
        """
        try:
            self._db.update_item(
                TableName=self._t.heads,
                Key=head_key(shard),
                UpdateExpression=(
                    f"SET {HeadAttr.FLUSHED_SEQ} = :to, {HeadAttr.FLUSHED_BYTES} = {HeadAttr.FLUSHED_BYTES} + :b,"
                    f" {HeadAttr.FLUSHED_DELTAS} = {HeadAttr.FLUSHED_DELTAS} + :d"
                ),
                ConditionExpression=f"{HeadAttr.FLUSHED_SEQ} = :old",
                ExpressionAttributeValues={
                    ":to": _n(seq),
                    ":b": _n(add_bytes),
                    ":d": _n(add_deltas),
                    ":old": _n(expected_seq),
                },
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise _storage_error(exc, "UpdateItem") from exc
            current = self.heads([shard]).get(shard)
            if current is not None and current.flushed_seq >= seq:
                return False
            raise FlushError(
                f"the flushed sequence of shard {shard.key!r} moved from {expected_seq} to "
                f"{current.flushed_seq if current else None} during the flush; is another flush running?"
            ) from exc
        return True

    # -- heads: published position (materialisation) -------------------------------------------------------------
    def advance_published(self, shard: ShardId, seq: int) -> bool:
        """Move the head's published position ``ps`` forward to ``seq``; False if it already is at or beyond it."""
        try:
            self._db.update_item(
                TableName=self._t.heads,
                Key=head_key(shard),
                UpdateExpression=f"SET {HeadAttr.PUBLISHED_SEQ} = :to",
                ConditionExpression=(
                    f"attribute_exists(#sh) AND (attribute_not_exists({HeadAttr.PUBLISHED_SEQ})"
                    f" OR {HeadAttr.PUBLISHED_SEQ} < :to)"
                ),
                ExpressionAttributeNames={"#sh": HeadAttr.SHARD},
                ExpressionAttributeValues={":to": _n(seq)},
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise _storage_error(exc, "UpdateItem") from exc
            return False
        return True

    def has_destinations(self, gateway: str) -> bool:
        """Whether any materialisation destination is configured for ``gateway`` (config items ``dest#...``)."""
        try:
            out = self._db.query(
                TableName=self._t.config,
                ConsistentRead=True,
                KeyConditionExpression="gw = :g AND begins_with(sk, :p)",
                ExpressionAttributeValues={":g": _s(gateway), ":p": _s(DESTINATION_PREFIX)},
                ProjectionExpression="sk",
                Limit=1,
            )
        except ClientError as exc:
            raise _storage_error(exc, "Query") from exc
        return bool(out.get("Items"))

    # -- release -------------------------------------------------------------------------------------------------
    def release_target(self, shard: ShardId, up_to_seq: int, cutoff_hlc: int) -> tuple[int, int] | None:
        """The last entry at or below ``up_to_seq`` whose commit HLC is at or below ``cutoff_hlc``.

        Commit HLCs grow with the sequence within a shard, so the entries to release are a prefix of the log.

        Returns:
            ``(seq, commit_hlc)`` of that entry, or None if the buffer holds none -- or holds entries at or below the
            cutoff past ``up_to_seq`` but not the entry ``up_to_seq`` itself.
        """
        if up_to_seq <= 0:
            return None
        # Let `last` be the last entry the buffer holds whose commit HLC is at or below the cutoff. The answer is
        # `last` when it is at or below `up_to_seq`, else the entry `up_to_seq` (its commit HLC is below `last`'s), or
        # None when the buffer does not hold that entry.
        # The last commit mark at or below the cutoff (the sparse index `by_commit`) shows every entry up to its
        # sequence is at or below it too, so `last` is at or after it.
        mark = self._buffer.last_commit_mark(shard, cutoff_hlc)
        if mark is not None:
            first, count, first_hlc = chunk_span(mark)
            if first + count - 1 >= up_to_seq:
                if first <= up_to_seq:
                    return up_to_seq, first_hlc + (up_to_seq - first)
                hlc = self.commit_hlc_at(shard, up_to_seq)
                return (up_to_seq, hlc) if hlc is not None else None
            found: tuple[int, int] | None = (first + count - 1, first_hlc + count - 1)
            after_seq = first + count - 1
        else:
            found, after_seq = None, 0
        # Walk the chunks after it (the next mark ends past the cutoff: about a mark interval of entries away) while
        # they begin at or below the cutoff, up to the one holding `up_to_seq`.
        for item in self._chunks_after(shard, after_seq, min(self._mark_every + 2, up_to_seq - after_seq)):
            first, count, first_hlc = chunk_span(item)
            if first_hlc > cutoff_hlc:
                break
            if first > up_to_seq:
                return None  # `last` is past `up_to_seq`, and the buffer does not hold the entry `up_to_seq`
            seq = min(first + count - 1, first + (cutoff_hlc - first_hlc), up_to_seq)
            found = seq, first_hlc + (seq - first)
            if seq == up_to_seq or seq < first + count - 1:
                break  # `up_to_seq`, or `last` (the next entry is past the cutoff)
        return found

    def _chunks_after(self, shard: ShardId, after_seq: int, limit: int) -> Iterator[Item]:
        """``seq``, ``n`` and ``c`` of the log items holding the entries after ``after_seq``, in order, ``limit`` to a
        request."""
        return self._buffer.chunk_items(shard, after_seq, lambda: limit, projection=_CHUNK_SPAN)

    def mark_released(self, shard: ShardId, seq: int, commit_hlc: int) -> None:
        """Record ``rs``/``rh`` on the head (only forward)."""
        try:
            self._db.update_item(
                TableName=self._t.heads,
                Key=head_key(shard),
                UpdateExpression=f"SET {HeadAttr.RELEASED_SEQ} = :rs, {HeadAttr.RELEASED_HLC} = :rh",
                ConditionExpression=f"attribute_not_exists({HeadAttr.RELEASED_SEQ}) OR {HeadAttr.RELEASED_SEQ} < :rs",
                ExpressionAttributeValues={":rs": _n(seq), ":rh": _n(commit_hlc)},
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise _storage_error(exc, "UpdateItem") from exc

    # -- flush requests ------------------------------------------------------------------------------------------
    def clear_flush_requests(self, gateways: Iterable[str], up_to_ms: int) -> int:
        """Delete the flush requests of ``gateways`` recorded at or before ``up_to_ms``; returns how many."""
        deleted = 0
        for gateway in gateways:
            keys = [
                {"gw": item["gw"], "sk": item["sk"]}
                for item in self._pages(
                    self._db.query,
                    "Query",
                    TableName=self._t.config,
                    ConsistentRead=True,
                    ProjectionExpression="gw, sk",
                    # Request keys are flush#{atMs:015d}#{id}; "$" sorts right after "#".
                    KeyConditionExpression="gw = :gw AND sk BETWEEN :lo AND :hi",
                    ExpressionAttributeValues={
                        ":gw": _s(gateway),
                        ":lo": _s("flush#"),
                        ":hi": _s(f"flush#{up_to_ms:015d}$"),
                    },
                )
            ]
            self._batch_write(self._t.config, [{"DeleteRequest": {"Key": key}} for key in keys])
            deleted += len(keys)
        return deleted

    # -- the lease -----------------------------------------------------------------------------------------------
    def acquire_lease(self, owner: str, now_ms: int, ttl_ms: int) -> bool:
        """Take the flush lease until ``now_ms + ttl_ms`` if it is free, expired or already ``owner``'s."""
        try:
            self._db.put_item(
                TableName=self._t.config,
                Item={
                    "gw": _s(LEASE_GATEWAY),
                    "sk": _s(LEASE_SK),
                    "owner": _s(owner),
                    "until": _n(now_ms + ttl_ms),
                },
                ConditionExpression="attribute_not_exists(sk) OR #u <= :now OR #o = :me",
                ExpressionAttributeNames={"#u": "until", "#o": "owner"},
                ExpressionAttributeValues={":now": _n(now_ms), ":me": _s(owner)},
            )
        except ClientError as exc:
            if condition_failed(exc):
                return False
            raise _storage_error(exc, "PutItem") from exc
        return True

    def renew_lease(self, owner: str, now_ms: int, ttl_ms: int) -> bool:
        """Extend ``owner``'s lease to ``now_ms + ttl_ms``; False if it expired or someone else holds it."""
        try:
            self._db.update_item(
                TableName=self._t.config,
                Key={"gw": _s(LEASE_GATEWAY), "sk": _s(LEASE_SK)},
                UpdateExpression="SET #u = :until",
                ConditionExpression="#o = :me AND #u > :now",
                ExpressionAttributeNames={"#u": "until", "#o": "owner"},
                ExpressionAttributeValues={":until": _n(now_ms + ttl_ms), ":me": _s(owner), ":now": _n(now_ms)},
            )
        except ClientError as exc:
            if condition_failed(exc):
                return False
            raise _storage_error(exc, "UpdateItem") from exc
        return True

    def release_lease(self, owner: str) -> None:
        """Give the lease up if ``owner`` still holds it."""
        try:
            self._db.delete_item(
                TableName=self._t.config,
                Key={"gw": _s(LEASE_GATEWAY), "sk": _s(LEASE_SK)},
                ConditionExpression="#o = :me",
                ExpressionAttributeNames={"#o": "owner"},
                ExpressionAttributeValues={":me": _s(owner)},
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise _storage_error(exc, "DeleteItem") from exc

    def lease(self) -> Lease | None:
        """The lease item as stored, expired or not."""
        try:
            out = self._db.get_item(
                TableName=self._t.config,
                Key={"gw": _s(LEASE_GATEWAY), "sk": _s(LEASE_SK)},
                ConsistentRead=True,
            )
        except ClientError as exc:
            raise _storage_error(exc, "GetItem") from exc
        item = out.get("Item")
        return Lease(item["owner"]["S"], int(item["until"]["N"])) if item else None
