"""Materialisation jobs: the claim-check message and its payload (pure; no I/O).

After its Iceberg commit, the flush publishes one *job* per table batch: a contiguous range ``(lo, hi]`` of one
shard's commit log. The payload -- the range's effective deltas, gzip-compressed JSON -- goes to the claim-check
bucket under a key that is a function of the range (:func:`payload_key`), so re-publishing a range (a rerun after a
crash) writes the same object again. The SQS message (:class:`MaterialiseJob`) carries the pointer, the gateway,
the table, counts, the payload's SHA-256 and the flush run id.

Payload (``application/json``, gzip)::

    {"v": 1, "gateway": g, "table": t, "shard": "g#t#0", "range": [lo, hi], "deltas": [<wire RowDelta>, ...]}

The consumer checks the payload against the message (checksum, counts, gateway, table, range) before it writes
anything, so a missing, truncated or corrupt payload gives a clear :class:`PayloadError` and no partial write.
Folding the effective deltas gives the same row as folding every pushed delta: a delta's losing columns lose to
writes that are themselves logged, so they can never win a fold.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from lakesync.core.delta import RowDelta
from lakesync.core.errors import ValidationError

PAYLOAD_PREFIX: Final = "materialise/"
"""Key prefix of every payload in the claim-check bucket."""
FORMAT_VERSION: Final = 1
MAX_MESSAGE_BYTES: Final = 256 * 1024
"""SQS's message size limit; a job message is a few hundred bytes."""


class PayloadError(ValidationError):
    """A job message or its payload is missing, malformed or does not match (permanent: retrying cannot help)."""

    code = "MATERIALISE_PAYLOAD_ERROR"


@dataclass(frozen=True, slots=True)
class MaterialiseJob:
    """One claim-check message: which range of which shard, and where its payload lies.

    Attributes:
        gateway: The gateway id.
        table: The delta table name.
        shard: The shard key (``gateway#table#sub``).
        lo: The range's exclusive lower bound (commit sequence).
        hi: The range's inclusive upper bound.
        deltas: Entries in the payload (``hi - lo``).
        rows: Distinct rows they touch.
        bytes: The payload's size (compressed).
        sha256: Hex SHA-256 of the payload object.
        bucket: The claim-check bucket.
        key: The payload's key.
        run_id: The flush run that published it.
    """

    gateway: str
    table: str
    shard: str
    lo: int
    hi: int
    deltas: int
    rows: int
    bytes: int
    sha256: str
    bucket: str
    key: str
    run_id: str

    @property
    def range_id(self) -> str:
        """``shard:lo-hi``: identifies the range (a republished range has the same id)."""
        return f"{self.shard}:{self.lo}-{self.hi}"

    def to_json(self) -> dict[str, Any]:
        """The message body as JSON."""
        return {
            "v": FORMAT_VERSION,
            "gateway": self.gateway,
            "table": self.table,
            "shard": self.shard,
            "range": [self.lo, self.hi],
            "counts": {"deltas": self.deltas, "rows": self.rows, "bytes": self.bytes},
            "sha256": self.sha256,
            "payload": {"bucket": self.bucket, "key": self.key},
            "run": self.run_id,
        }

    def to_message(self) -> str:
        """The SQS message body."""
        return json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_message(cls, body: str) -> MaterialiseJob:
        """Parse and check an SQS message body.

        Raises:
            PayloadError: the body is not a job message of this version.
        """
        try:
            doc = json.loads(body)
        except (ValueError, RecursionError):
            raise PayloadError("Materialise message is not JSON") from None
        if not isinstance(doc, dict) or doc.get("v") != FORMAT_VERSION:
            raise PayloadError(f"Materialise message is not a version {FORMAT_VERSION} job")
        try:
            lo, hi = doc["range"]
            counts, payload = doc["counts"], doc["payload"]
            job = cls(
                gateway=_text(doc["gateway"]),
                table=_text(doc["table"]),
                shard=_text(doc["shard"]),
                lo=_count(lo),
                hi=_count(hi),
                deltas=_count(counts["deltas"]),
                rows=_count(counts["rows"]),
                bytes=_count(counts["bytes"]),
                sha256=_text(doc["sha256"]),
                bucket=_text(payload["bucket"]),
                key=_text(payload["key"]),
                run_id=_text(doc["run"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PayloadError(f"Materialise message is malformed: {exc}") from None
        if job.hi <= job.lo or job.deltas != job.hi - job.lo or len(job.sha256) != 64:
            raise PayloadError(f"Materialise message for {job.range_id} has inconsistent counts or checksum")
        if not job.key.startswith(PAYLOAD_PREFIX):
            raise PayloadError(f"Materialise payload key {job.key!r} is outside {PAYLOAD_PREFIX!r}")
        return job


def _text(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a non-empty string, got {type(value).__name__}")
    return value


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected a non-negative integer, got {value!r}")
    return value


def payload_key(gateway: str, table: str, sub: int, lo: int, hi: int) -> str:
    """The payload's key: a function of the range alone, so republishing a range rewrites the same object."""
    return f"{PAYLOAD_PREFIX}{gateway}/{table}/{sub}/{lo:020d}-{hi:020d}.json.gz"


@dataclass(frozen=True, slots=True)
class Payload:
    """An encoded payload and the figures its message carries."""

    data: bytes
    sha256: str
    deltas: int
    rows: int


def encode_payload(
    gateway: str, table: str, shard: str, lo: int, hi: int, stored_deltas: Sequence[tuple[str, str]]
) -> Payload:
    """Encode a range's deltas.

    Args:
        gateway: The gateway id.
        table: The delta table.
        shard: The shard key.
        lo: Exclusive lower bound of the range.
        hi: Inclusive upper bound.
        stored_deltas: ``(row_id, wire JSON text)`` of every entry in the range, in sequence order (the log's stored
            delta text is spliced in as it is).

    Raises:
        ValueError: the entries do not fill the range.
    """
    if len(stored_deltas) != hi - lo:
        raise ValueError(f"{shard} ({lo}, {hi}] has {hi - lo} entries, got {len(stored_deltas)}")
    head = json.dumps(
        {"v": FORMAT_VERSION, "gateway": gateway, "table": table, "shard": shard, "range": [lo, hi]},
        separators=(",", ":"),
    )
    text = head[:-1] + ',"deltas":[' + ",".join(text for _, text in stored_deltas) + "]}"
    data = gzip.compress(text.encode("utf-8"), compresslevel=6, mtime=0)
    return Payload(data, hashlib.sha256(data).hexdigest(), len(stored_deltas), len({r for r, _ in stored_deltas}))


def decode_payload(job: MaterialiseJob, data: bytes | None) -> list[RowDelta]:
    """The deltas of a job's payload, checked against the message before anything is applied.

    Raises:
        PayloadError: the payload is missing, corrupt (checksum), not a payload, or of another range or table.
    """
    if data is None:
        raise PayloadError(f"Materialise payload s3://{job.bucket}/{job.key} of {job.range_id} is missing")
    if hashlib.sha256(data).hexdigest() != job.sha256:
        raise PayloadError(f"Materialise payload {job.key} of {job.range_id} fails its checksum (corrupt or replaced)")
    try:
        doc = json.loads(gzip.decompress(data))
    except (OSError, EOFError, ValueError, RecursionError):
        raise PayloadError(f"Materialise payload {job.key} of {job.range_id} is not gzip JSON") from None
    if not isinstance(doc, Mapping):
        raise PayloadError(f"Materialise payload {job.key} is not an object")
    expected = {"gateway": job.gateway, "table": job.table, "shard": job.shard, "range": [job.lo, job.hi]}
    for field_name, value in expected.items():
        if doc.get(field_name) != value:
            raise PayloadError(f"Materialise payload {job.key} names another {field_name} than its message")
    raw = doc.get("deltas")
    if not isinstance(raw, list) or len(raw) != job.deltas:
        raise PayloadError(f"Materialise payload {job.key} holds {_size(raw)} deltas, its message says {job.deltas}")
    try:
        deltas = [RowDelta.from_json(item) for item in raw]
    except ValidationError as exc:
        raise PayloadError(f"Materialise payload {job.key} holds an invalid delta: {exc.message}") from None
    if any(d.table != job.table for d in deltas):
        raise PayloadError(f"Materialise payload {job.key} holds deltas of another table than {job.table!r}")
    return deltas


def _size(raw: object) -> str:
    return str(len(raw)) if isinstance(raw, list) else "no list of"


__all__ = [
    "FORMAT_VERSION",
    "MAX_MESSAGE_BYTES",
    "PAYLOAD_PREFIX",
    "MaterialiseJob",
    "Payload",
    "PayloadError",
    "decode_payload",
    "encode_payload",
    "payload_key",
]
