"""New log chunks from the deltas table's DynamoDB stream, as the real-time broadcaster gets them.

A committed push writes one log item per commit chunk (:mod:`lakesync.aws.buffer.log_chunks`: ``shard``, ``seq`` = the
chunk's last sequence, ``n``, ``c``, ``z``, ``exp``, and ``chlc`` on commit marks only). The table streams
``NEW_IMAGE``, so each chunk arrives once as an ``INSERT`` record carrying the whole item, its row images included: the
broadcast needs no read. An entry's commit HLC comes from ``c`` (entry ``first + i`` has ``c + i``); ``chlc`` is not
read.

Only ``INSERT``\\ s of log chunk items count. ``REMOVE``\\ s (the flush's release, DynamoDB's TTL deletes) and any
``MODIFY`` are ignored, as is an item that is not a log chunk (no ``z``): the deployed event source mapping filters
them out before they cost an invocation, and this module does not rely on it.

Records come in a Lambda event's JSON form (binary attributes base64 text, as Lambda delivers them);
:func:`lambda_record` turns a boto3 ``dynamodbstreams`` record into that form (the local poller, the tests).
"""

from __future__ import annotations

import base64
import datetime
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lakesync.aws.buffer.items import ChunkAttr
from lakesync.aws.buffer.log_chunks import chunk_first, decode_entries
from lakesync.core.errors import LakeSyncError
from lakesync.core.log import LogEntry, ShardId
from lakesync.gateway import realtime

__all__ = [
    "LogChunk",
    "StreamBroadcast",
    "StreamRecordError",
    "broadcast_records",
    "decode_record",
    "decode_stream_records",
    "lambda_record",
]

LogChunk = tuple[str, list[LogEntry]]
"""A chunk's gateway and its entries, in sequence order."""

_CHUNK_ATTRIBUTES = (ChunkAttr.SHARD, ChunkAttr.SEQ, ChunkAttr.COUNT, ChunkAttr.FIRST_HLC, ChunkAttr.ENTRIES)


class StreamRecordError(ValueError):
    """A stream record claims to be a log chunk but does not decode as one."""


def decode_record(record: Mapping[str, Any]) -> LogChunk | None:
    """The gateway and entries of one stream record, ``None`` for a record that is not a new log chunk.

    Raises:
        StreamRecordError: an inserted log item that does not decode.
    """
    if record.get("eventName") != "INSERT":
        return None
    image = (record.get("dynamodb") or {}).get("NewImage") or {}
    if not all(name in image for name in _CHUNK_ATTRIBUTES):
        return None
    try:
        shard = ShardId.parse(image[ChunkAttr.SHARD]["S"])
        key, count = int(image[ChunkAttr.SEQ]["N"]), int(image[ChunkAttr.COUNT]["N"])
        first_hlc = int(image[ChunkAttr.FIRST_HLC]["N"])
        blob = image[ChunkAttr.ENTRIES]["B"]
        data = base64.b64decode(blob, validate=True) if isinstance(blob, str) else bytes(blob)
        entries = decode_entries(shard, chunk_first(key), first_hlc, data)
    except (KeyError, TypeError, ValueError, zlib.error) as exc:  # binascii.Error and JSON errors are ValueErrors
        where = f"{image.get(ChunkAttr.SHARD)} {image.get(ChunkAttr.SEQ)}"
        raise StreamRecordError(f"log item {where} does not decode: {exc}") from exc
    if len(entries) != count:
        raise StreamRecordError(f"log item {shard.key} {key} holds {len(entries)} entries, n = {count}")
    return shard.gateway, entries


def decode_stream_records(records: Iterable[Mapping[str, Any]]) -> dict[str, list[LogEntry]]:
    """The new log entries in ``records`` by gateway, in stream order (within a shard, sequence order).

    Raises:
        StreamRecordError: an inserted log item that does not decode.
    """
    out: dict[str, list[LogEntry]] = {}
    for record in records:
        chunk = decode_record(record)
        if chunk is not None:
            out.setdefault(chunk[0], []).extend(chunk[1])
    return out


def lambda_record(record: Mapping[str, Any], event_source_arn: str) -> dict[str, Any]:
    """A boto3 ``dynamodbstreams`` ``GetRecords`` record as Lambda delivers it in a DynamoDB stream event: binary
    attributes as base64 text, the creation time as epoch seconds, and the stream's ARN as ``eventSourceARN``."""
    stream = dict(record.get("dynamodb") or {})
    created = stream.get("ApproximateCreationDateTime")
    if isinstance(created, datetime.datetime):
        stream["ApproximateCreationDateTime"] = int(created.timestamp())
    for name in ("Keys", "NewImage", "OldImage"):
        if name in stream:
            stream[name] = {k: _json_value(v) for k, v in stream[name].items()}
    return {
        **{k: v for k, v in record.items() if k != "dynamodb"},
        "dynamodb": stream,
        "eventSourceARN": event_source_arn,
    }


def _json_value(value: Mapping[str, Any]) -> dict[str, Any]:
    ((kind, inner),) = value.items()
    if kind == "B":
        return {"B": base64.b64encode(inner).decode("ascii")}
    if kind == "BS":
        return {"BS": [base64.b64encode(b).decode("ascii") for b in inner]}
    if kind == "M":
        return {"M": {k: _json_value(v) for k, v in inner.items()}}
    if kind == "L":
        return {"L": [_json_value(v) for v in inner]}
    return {kind: inner}


@dataclass(slots=True)
class StreamBroadcast:
    """What broadcasting one stream batch did.

    Attributes:
        undecodable: Sequence number -> why, for each inserted log item that does not decode.
        errors: Gateway -> the error that failed its broadcast (the sessions or sync rules could not be read, API
            Gateway kept throttling), with the sequence numbers of its records in ``error_records``.
        error_records: Gateway -> the sequence numbers of its records, for each gateway in ``errors``.
        gateways: Gateway -> its broadcast's report, for each gateway that was broadcast to.
        total: The reports summed.
    """

    undecodable: dict[str, str] = field(default_factory=dict)
    errors: dict[str, LakeSyncError] = field(default_factory=dict)
    error_records: dict[str, list[str]] = field(default_factory=dict)
    gateways: dict[str, realtime.BroadcastReport] = field(default_factory=dict)
    total: realtime.BroadcastReport = field(default_factory=realtime.BroadcastReport)

    def counts(self) -> dict[str, int]:
        """The batch's metrics, by name: failed gateways, and messages, recipients, gone sessions and pull notices
        summed over the gateways."""
        total = self.total
        return {
            "BroadcastFailures": len(self.errors),
            "BroadcastMessages": total.messages,
            "BroadcastRecipients": total.recipients,
            "GoneConnections": total.gone,
            "PullNotices": total.pull_notices,
        }

    @property
    def failed(self) -> dict[str, str]:
        """Sequence number -> why, for each record to report failed (Lambda retries the batch from the lowest)."""
        out = dict(self.undecodable)
        for gateway, exc in self.errors.items():
            out.update(dict.fromkeys(self.error_records[gateway], f"{gateway}: {exc.message}"))
        return out


def sequence_number(record: Mapping[str, Any]) -> str:
    """A stream record's ``SequenceNumber`` (its item identifier in a partial batch failure report)."""
    return str((record.get("dynamodb") or {}).get("SequenceNumber"))


def broadcast_records(
    deps: Callable[[], realtime.BroadcastDeps], records: Iterable[Mapping[str, Any]]
) -> StreamBroadcast:
    """Broadcast a stream batch's new log chunks, one :func:`lakesync.gateway.realtime.broadcast` per gateway.

    A failure fails only its own gateway's records: the other gateways are still broadcast to. ``deps`` is called
    only when the batch holds a log chunk.
    """
    out = StreamBroadcast()
    by_gateway: dict[str, list[LogEntry]] = {}
    sequences: dict[str, list[str]] = {}
    for record in records:
        try:
            chunk = decode_record(record)
        except StreamRecordError as exc:
            out.undecodable[sequence_number(record)] = str(exc)
            continue
        if chunk is not None:
            by_gateway.setdefault(chunk[0], []).extend(chunk[1])
            sequences.setdefault(chunk[0], []).append(sequence_number(record))
    if not by_gateway:
        return out
    live = deps()
    for gateway, entries in by_gateway.items():
        try:
            report = realtime.broadcast(live, gateway, entries)
        except LakeSyncError as exc:
            out.errors[gateway] = exc
            out.error_records[gateway] = sequences[gateway]
            continue
        out.gateways[gateway] = report
        out.total.add(report)
    return out
