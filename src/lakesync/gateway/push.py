"""Push: validate a whole batch, then merge and commit it shard by shard, atomically per chunk.

Guarantees:

* Validation (identifiers, schema, clock drift, client identity, sizes) covers the whole batch before anything is
  written; a rejected push writes nothing.
* Each chunk of one shard (``settings.chunk_deltas`` deltas) reads its basis (head, rows, recorded deltaIds) in one
  round trip and commits its log entries, row-index updates and the shard-head advance in one atomic commit guarded
  by the head's sequence and every row's version. Concurrent pushes that touch the same shard retry on conflict with
  jittered backoff, re-reading the basis.
* Per-column LWW merging is idempotent, so a delta the row already holds changes nothing and is not logged again:
  the row versions alone keep any delta from being logged twice, even when the same push races itself.
* The chunk's deltaIds are recorded after its commit, for the dedup window, while the next chunk proceeds; the push
  returns only once every record is written (a failed record fails the push). A deltaId recorded there is acknowledged
  as a duplicate (counted in ``accepted``, receipt ``duplicate: true``) without being merged. If the function stops
  between a commit and that record, a re-sent delta is merged again, changes nothing and logs nothing; its receipt
  is then the original one (its columns won) rather than ``duplicate``.
* A push spanning several shards or chunks is not atomic as a whole: if it fails part-way, the chunks already
  committed stay, and re-sending the same push is safe (the committed deltas are skipped as duplicates).
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from lakesync.core import merge as lww
from lakesync.core.canonical import js_stringify, utf8_size
from lakesync.core.delta import RowDelta
from lakesync.core.errors import (
    BackpressureError,
    CommitConflictError,
    ForbiddenError,
    PayloadTooLargeError,
    SchemaError,
    ValidationError,
)
from lakesync.core.messages import SyncPush
from lakesync.core.schema import validate_delta, validate_table_name
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.io_pool import io_pool
from lakesync.gateway.model import (
    Commit,
    CommitConflict,
    LogEntry,
    RowWrite,
    ShardHead,
    ShardId,
    StoredRow,
)


@dataclass(frozen=True, slots=True)
class DeltaReceipt:
    """What happened to one pushed delta: per-column outcomes, or that it was a duplicate."""

    delta_id: str
    duplicate: bool
    columns: tuple[lww.ColumnReceipt, ...]
    deleted: bool = False

    def to_json(self) -> dict[str, object]:
        """The JSON shape returned to the pusher."""
        return {
            "deltaId": self.delta_id,
            "duplicate": self.duplicate,
            **({"deleted": True} if self.deleted else {}),
            "columns": [
                {
                    "column": r.column,
                    "applied": r.applied,
                    "winnerHlc": str(r.winner_hlc),
                    "winnerClientId": r.winner_client_id,
                }
                for r in self.columns
            ],
        }


@dataclass(frozen=True, slots=True)
class PushResult:
    """The push response: server clock, accepted count, effective deltas and receipts."""

    server_hlc: int
    accepted: int
    entries: tuple[LogEntry, ...]
    """The effective deltas as logged, in order (their rendered wire JSON is reused in the response)."""
    receipts: tuple[DeltaReceipt, ...]

    @property
    def deltas(self) -> tuple[RowDelta, ...]:
        """The effective deltas, in order."""
        return tuple(e.delta for e in self.entries)

    def to_json(self) -> dict[str, object]:
        """The wire JSON shape ``{serverHlc, accepted, deltas, receipts}``."""
        return {
            "serverHlc": str(self.server_hlc),
            "accepted": self.accepted,
            "deltas": [e.wire_value() for e in self.entries],
            "receipts": [r.to_json() for r in self.receipts],
        }


def push(deps: GatewayDeps, gateway: str, message: SyncPush, *, client_id: str, trusted: bool = False) -> PushResult:
    """Validate and commit a push for ``gateway`` from the authenticated ``client_id``.

    Args:
        deps: Stores, clock and settings.
        gateway: The gateway id (already checked against the caller's token).
        message: The decoded push.
        client_id: The authenticated client; every delta must carry it unless ``trusted``.
        trusted: Admin callers (connectors, backfills) may push deltas on behalf of other clients.

    Raises:
        ValidationError, SchemaError, ClockDriftError, ForbiddenError: the batch is invalid; nothing was written.
        BackpressureError: a target shard's buffer is full; nothing was written.
        CommitConflictError: a chunk lost every commit attempt to concurrent writers.
    """
    settings = deps.settings
    deltas = message.deltas
    if len(deltas) > settings.max_deltas_per_push:
        raise ValidationError(f"Too many deltas in a single push (max {settings.max_deltas_per_push:,})")
    _validate(deps, gateway, deltas, client_id=client_id, trusted=trusted)

    unique: list[RowDelta] = []
    first_index: dict[str, int] = {}
    for i, delta in enumerate(deltas):
        if delta.delta_id not in first_index:
            first_index[delta.delta_id] = i
            unique.append(delta)

    by_shard: dict[ShardId, list[RowDelta]] = {}
    for delta in unique:
        shard = ShardId.for_row(gateway, delta.table, delta.row_id, settings.sub_shards.get(delta.table, 1))
        by_shard.setdefault(shard, []).append(delta)

    heads = deps.buffer.get_heads(list(by_shard))
    for head in heads.values():
        if head.unflushed_bytes >= settings.backpressure_limit:
            raise BackpressureError(
                f"Buffer backpressure exceeded ({head.unflushed_bytes} >= {settings.backpressure_limit} bytes)"
                f" for table {head.shard.table!r}"
            )

    for delta in unique:
        deps.clock.recv(delta.hlc)

    receipts: dict[str, DeltaReceipt] = {}
    effective: list[LogEntry] = []
    records: list[Future[None]] = []
    try:
        for shard, shard_deltas in by_shard.items():
            for start in range(0, len(shard_deltas), settings.chunk_deltas):
                chunk = shard_deltas[start : start + settings.chunk_deltas]
                chunk_receipts, chunk_effective, applied = _commit_chunk(deps, shard, chunk)
                receipts.update(chunk_receipts)
                effective.extend(chunk_effective)
                if applied:
                    expires_at = deps.wall_ms() // 1000 + settings.dedup_ttl_s
                    records.append(io_pool().submit(deps.buffer.record_delta_ids, gateway, applied, expires_at))
    finally:
        # Every record is written (or has failed) before the push answers or raises.
        for record in records:
            record.exception()
    for record in records:
        record.result()

    # A deltaId repeated within the batch was applied once: its later occurrences are duplicates.
    ordered = tuple(
        DeltaReceipt(d.delta_id, duplicate=True, columns=())
        if i != first_index[d.delta_id] or d.delta_id not in receipts
        else receipts[d.delta_id]
        for i, d in enumerate(deltas)
    )
    return PushResult(
        server_hlc=deps.clock.now(),
        accepted=len(deltas),
        entries=tuple(effective),
        receipts=ordered,
    )


def _validate(deps: GatewayDeps, gateway: str, deltas: Sequence[RowDelta], *, client_id: str, trusted: bool) -> None:
    stored = deps.config.get_schemas(gateway) if deltas else {}
    # A schema describes the deltas of its source table (``sourceTable``, else ``table``).
    schemas = {schema.delta_table: (schema, version) for schema, version in stored.values()}
    for delta in deltas:
        validate_table_name(delta.table)
        if not trusted and delta.client_id != client_id:
            raise ForbiddenError("Client ID mismatch: delta clientId does not match authenticated identity")
        if delta.table in schemas:
            schema, version = schemas[delta.table]
            validate_delta(schema, delta, version=version)
        deps.clock.check_drift(delta.hlc)
        size = utf8_size([c.to_json() for c in delta.columns])
        if size > deps.settings.max_row_bytes:
            raise PayloadTooLargeError(
                f"Delta {delta.delta_id} is {size} bytes; the limit per row is {deps.settings.max_row_bytes}"
            )


def _commit_chunk(
    deps: GatewayDeps, shard: ShardId, chunk: Sequence[RowDelta]
) -> tuple[dict[str, DeltaReceipt], list[LogEntry], list[str]]:
    """Merge and commit one chunk; returns its receipts, its effective entries and the deltaIds to record."""
    settings = deps.settings
    now_s = deps.wall_ms() // 1000
    delta_ids = [d.delta_id for d in chunk]
    row_keys = list(dict.fromkeys((d.table, d.row_id) for d in chunk))
    for attempt in range(settings.commit_attempts):
        basis = deps.buffer.read_commit_basis(shard, delta_ids, row_keys, now_s)
        pending = [d for d in chunk if d.delta_id not in basis.seen]
        if not pending:
            return {}, [], []
        commit, receipts, effective = _plan(deps, shard, basis.head, basis.rows, pending)
        if len(pending) > 1 and _commit_bytes(commit) > settings.max_commit_bytes:
            # Too big for one transaction: commit the halves one after the other (each atomic on its own).
            half = len(pending) // 2
            first_receipts, first_effective, first_ids = _commit_chunk(deps, shard, pending[:half])
            rest_receipts, rest_effective, rest_ids = _commit_chunk(deps, shard, pending[half:])
            return {**first_receipts, **rest_receipts}, first_effective + rest_effective, first_ids + rest_ids
        if commit is not None:
            try:
                deps.buffer.commit(commit)
            except CommitConflict:
                deps.sleep(_backoff(attempt))
                continue
            _maybe_request_flush(deps, shard, basis.head, commit.head)
        return receipts, effective, [d.delta_id for d in pending]
    raise CommitConflictError(
        f"Could not commit to table {shard.table!r} after {settings.commit_attempts} attempts; retry the push"
    )


def _plan(
    deps: GatewayDeps,
    shard: ShardId,
    head: ShardHead | None,
    stored: dict[tuple[str, str], StoredRow],
    pending: Sequence[RowDelta],
) -> tuple[Commit | None, dict[str, DeltaReceipt], list[LogEntry]]:
    """Merge ``pending`` into the stored rows; the commit is ``None`` when no delta changes anything."""
    states: dict[tuple[str, str], lww.RowState | None] = {key: row.state for key, row in stored.items()}
    touched: set[tuple[str, str]] = set()
    receipts: dict[str, DeltaReceipt] = {}
    changes: list[tuple[RowDelta, dict[str, object] | None, dict[str, object] | None]] = []
    for delta in pending:
        key = (delta.table, delta.row_id)
        before_state = states.get(key)
        before = before_state.values() if before_state is not None else None
        result = lww.merge(before_state, delta)
        states[key] = result.state
        receipts[delta.delta_id] = DeltaReceipt(
            delta.delta_id,
            duplicate=False,
            columns=result.receipts,
            deleted=result.changed and delta.op.value == "DELETE",
        )
        if result.effective is not None and result.changed:
            touched.add(key)
            changes.append((result.effective, before, result.state.values()))

    for key in touched:
        state = states[key]
        assert state is not None
        size = utf8_size(state.values() or {})
        if size > deps.settings.max_row_bytes:
            raise SchemaError(
                f"Row {key[0]}:{key[1]} would grow to {size} bytes; the limit is {deps.settings.max_row_bytes}"
            )

    base = head or ShardHead(shard)
    # Every entry gets its own commit HLC, strictly increasing with the shard's sequence whichever Lambda commits,
    # so a `since` pull can resume between two entries of one commit.
    commit_hlc = max(deps.clock.now(), base.last_commit_hlc + 1)
    entries = []
    total = 0
    for i, (delta, before, after) in enumerate(changes, start=1):
        text = js_stringify(delta.to_json())
        size = len(text.encode("utf-8", "surrogatepass"))
        total += size
        entries.append(LogEntry(shard, base.seq + i, commit_hlc + i - 1, delta, before, after, size, text))
    new_head = ShardHead(
        shard=shard,
        seq=base.seq + len(entries),
        bytes_total=base.bytes_total + total,
        deltas_total=base.deltas_total + len(entries),
        flushed_seq=base.flushed_seq,
        flushed_bytes=base.flushed_bytes,
        flushed_deltas=base.flushed_deltas,
        last_commit_hlc=commit_hlc + len(entries) - 1 if entries else base.last_commit_hlc,
    )
    rows = []
    for key in touched:
        state = states[key]
        assert state is not None
        previous = stored.get(key)
        expected = previous.version if previous is not None else 0
        rows.append(RowWrite(StoredRow(state, expected + 1), expected))
    if not entries:
        return None, receipts, []
    commit = Commit(
        shard=shard,
        expected_seq=base.seq if head is not None else -1,
        head=new_head,
        entries=tuple(entries),
        rows=tuple(rows),
        new_shard=head is None,
    )
    return commit, receipts, entries


_ITEM_OVERHEAD = 200


def _commit_bytes(commit: Commit | None) -> int:
    """A generous estimate of the transaction's size (attribute names, keys and JSON of every item).

    Row images are measured with the C JSON encoder: within a few bytes of their stored size, at a fraction of the
    cost of the exact JavaScript rendering (the budget leaves half a megabyte under DynamoDB's limit).
    """
    if commit is None:
        return 0
    total = _ITEM_OVERHEAD * (2 + len(commit.entries) + len(commit.rows))
    for entry in commit.entries:
        total += entry.size + _json_size(entry.before) + _json_size(entry.after)
    for write in commit.rows:
        state = write.row.state
        total += _json_size(state.values()) + sum(len(c.client_id) + 32 for c in state.columns.values())
    return total


def _json_size(value: dict[str, object] | None) -> int:
    if not value:
        return 2
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))


def _backoff(attempt: int) -> float:
    return float(min(0.2, 0.002 * (2 ** min(attempt, 7))) * random.uniform(0.5, 1.0))


def _maybe_request_flush(deps: GatewayDeps, shard: ShardId, before: ShardHead | None, after: ShardHead) -> None:
    threshold = deps.settings.flush_threshold_bytes
    was = before.unflushed_bytes if before is not None else 0
    if was < threshold <= after.unflushed_bytes:
        deps.config.request_flush(
            shard.gateway,
            {
                "id": uuid.uuid4().hex,
                "reason": "threshold",
                "shard": shard.key,
                "unflushedBytes": after.unflushed_bytes,
                "atMs": deps.wall_ms(),
            },
        )
