"""Push: validate a whole batch, then merge and commit it shard by shard, atomically per chunk.

Guarantees:

* Every check that can refuse a push runs before its first write, so a refused push writes nothing: the fields of
  every delta, whatever its encoding (:func:`~lakesync.core.delta.validate_row_delta`: non-empty, valid UTF-8,
  bounded ids), identifiers, DynamoDB's key limits (the row key ``{gateway}#{table}#{rowId}`` at most 2,048 bytes),
  schema, clock drift, client identity and delta size; then, for a push of several chunks, the growth of every row
  it touches, planned against the rows read before the first commit: every row image and row state the push would
  store stays within ``max_row_bytes`` and DynamoDB's 400 KB item limit. (Only a concurrent writer growing the same
  row between that read and a later chunk's commit can still stop that chunk; the chunks before it stay.)
* Each chunk of one shard (``settings.chunk_deltas`` deltas) reads its basis (head, rows) in one
  round trip and commits its log entries, row-index updates and the shard-head advance in one atomic commit guarded
  by the head's sequence and every row's version. Concurrent pushes that touch the same shard retry on conflict with
  jittered backoff, re-reading the basis.
* Per-column LWW merging is idempotent, so a delta the row already holds changes nothing and is not logged again:
  the row versions alone keep any delta from being logged twice, even when the same push races itself.
* Deltas are deduplicated by clientId + deltaId (:func:`~lakesync.core.log.dedup_key`), never by deltaId alone,
  so no client can make another client's delta vanish by sending its deltaId first. The chunk's dedup keys are
  recorded after its commit, for the dedup window, while the next chunk proceeds; the push returns only once every
  record is written (a failed record fails the push). Records are looked up only for the deltas a chunk's merge
  found changing nothing (one that changes something was never applied); a delta recorded there is acknowledged as a
  duplicate (counted in ``accepted``, receipt ``duplicate: true``). If the function stops between a
  commit and that record, a re-sent delta is merged again, changes nothing and logs nothing; its receipt is then the
  original one (its columns won) rather than ``duplicate``.
* A push spanning several shards or chunks is not atomic as a whole: if a commit fails part-way (lost races, storage
  errors), the chunks already committed stay, and re-sending the same push is safe (the committed deltas are
  skipped as duplicates).
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from lakesync.core import merge as lww
from lakesync.core.canonical import js_stringify, utf8_size
from lakesync.core.delta import RowDelta, validate_row_delta
from lakesync.core.errors import (
    BackpressureError,
    CommitConflictError,
    ForbiddenError,
    PayloadTooLargeError,
    SchemaError,
    ValidationError,
)
from lakesync.core.log import (
    ITEM_LIMIT_BYTES,
    LOG_CHUNK_MAX_ENTRIES,
    PARTITION_KEY_LIMIT_BYTES,
    ROW_RECENT_KEYS,
    Commit,
    CommitConflict,
    LogEntry,
    RowWrite,
    ShardHead,
    ShardId,
    StoredRow,
    dedup_key,
    recent_key,
    row_key,
)
from lakesync.core.messages import SyncPush
from lakesync.core.rules import Claims, WriteRefusal
from lakesync.core.schema import TableSchema, validate_delta, validate_table_name
from lakesync.gateway.basis_cache import forget_basis
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.since import note_push
from lakesync.gateway.write_guard import WriteGuard
from lakesync.io_pool import awaited, results_of, submit


@dataclass(frozen=True, slots=True)
class DeltaReceipt:
    """What happened to one pushed delta: per-column outcomes, that it was a duplicate, or that it was rejected.

    A rejected delta (``rejected``: the write rules refused it) was not applied; ``row`` is the row's state as stored,
    when the client may read it, so that it can roll its write back (``None``: gone, or not the client's to see).
    """

    delta_id: str
    duplicate: bool
    columns: tuple[lww.ColumnReceipt, ...]
    deleted: bool = False
    rejected: WriteRefusal | None = None
    row: lww.RowState | None = None

    def to_json(self) -> dict[str, object]:
        """The JSON shape returned to the pusher."""
        rejected: dict[str, object] = {}
        if self.rejected is not None:
            row = lww.state_to_json(self.row) if self.row is not None else None
            rejected = {"rejected": True, "code": self.rejected.code, "reason": self.rejected.reason, "row": row}
        return {
            "deltaId": self.delta_id,
            "duplicate": self.duplicate,
            **({"deleted": True} if self.deleted else {}),
            **rejected,
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


def push(
    deps: GatewayDeps,
    gateway: str,
    message: SyncPush,
    *,
    client_id: str,
    trusted: bool = False,
    claims: Claims | None = None,
) -> PushResult:
    """Validate and commit a push for ``gateway`` from the authenticated ``client_id``.

    An untrusted client's deltas are judged one by one against the gateway's write rules, by the client's scope: its
    buckets and its live subscriptions (:class:`~lakesync.gateway.write_guard.WriteGuard`). A forbidden delta is
    rejected in its receipt and the rest of the batch commits.

    Args:
        deps: Stores, clock and settings.
        gateway: The gateway id (already checked against the caller's token).
        message: The decoded push.
        client_id: The authenticated client (the token's subject, whose subscriptions count); every delta must carry
            it unless ``trusted``.
        trusted: Admin callers, connectors and the engine itself may push deltas on behalf of other clients, to any
            row and table.
        claims: The client's JWT claims, for the write rules (``None``: none).

    Raises:
        ValidationError, SchemaError, ClockDriftError, ForbiddenError: the batch is invalid; nothing was written.
        BackpressureError: a target shard's buffer is full; nothing was written.
        CommitConflictError: a chunk lost every commit attempt to concurrent writers.
    """
    settings = deps.settings
    deltas = message.deltas
    if len(deltas) > settings.max_deltas_per_push:
        raise ValidationError(f"Too many deltas in a single push (max {settings.max_deltas_per_push:,})")
    rules, schemas = deps.config.get_push_config(gateway) if deltas else (None, {})
    column_bytes = _validate(deps, gateway, deltas, schemas, client_id=client_id, trusted=trusted)
    guard = None if trusted else WriteGuard.for_client(deps, gateway, rules, claims or {}, client_id)
    # The pusher's `since` session (original clients only) is read while the push commits, not after it.
    sessions = deps.since_sessions
    session_read = submit(sessions.get, gateway, client_id) if sessions is not None else None

    with awaited(session_read):  # the session read ends with the push, whichever way: no request outlives it
        ordered, effective = _apply(deps, gateway, deltas, column_bytes, guard)
    server_hlc = deps.clock.now()
    # A `since` client (the original one) is handed this serverHlc as its position: record what it stands for.
    if session_read is not None:
        note_push(
            sessions,
            gateway,
            client_id,
            deltas,
            ordered,
            server_hlc,
            deps.wall_ms() // 1000,
            prefetched=True,
            session=session_read.result(),
            last_seen=message.last_seen_hlc,
        )
    return PushResult(
        server_hlc=server_hlc,
        accepted=sum(1 for r in ordered if r.rejected is None),
        entries=tuple(effective),
        receipts=ordered,
    )


def _apply(
    deps: GatewayDeps,
    gateway: str,
    deltas: Sequence[RowDelta],
    column_bytes: dict[int, int],
    guard: WriteGuard | None,
) -> tuple[tuple[DeltaReceipt, ...], list[LogEntry]]:
    """Commit a validated batch, chunk by chunk: each delta's receipt in batch order, and the effective entries."""
    settings = deps.settings
    keys = [dedup_key(d.client_id, d.delta_id) for d in deltas]
    first_index: dict[str, int] = {}
    by_shard: dict[ShardId, list[_Keyed]] = {}
    for i, (key, delta) in enumerate(zip(keys, deltas, strict=True)):
        if key in first_index:
            continue
        first_index[key] = i
        shard = ShardId.for_row(gateway, delta.table, delta.row_id, settings.sub_shards.get(delta.table, 1))
        by_shard.setdefault(shard, []).append((key, delta))
    per_chunk = min(settings.chunk_deltas, LOG_CHUNK_MAX_ENTRIES)
    chunks = [(shard, chunk) for shard, pairs in by_shard.items() for chunk in _chunked(pairs, per_chunk, column_bytes)]

    # A single chunk checks its rows' growth against its own basis before its commit; a push of several chunks
    # checks every chunk's growth before the first commit, against the rows read here (alongside the heads).
    # A push of one chunk checks backpressure on the head its basis reads (before its commit, its only write).
    single = len(chunks) == 1
    reading = _read_rows(deps, gateway, by_shard) if not single else None
    with awaited(*(reading.parts if reading is not None else ())):
        heads = deps.buffer.get_heads(list(by_shard)) if not single else {}
    if reading is not None:
        _check_growth(deps, by_shard, reading.result(), column_bytes, guard)
    for head in heads.values():
        _check_backpressure(settings.backpressure_limit, head)

    for _, delta in (pair for pairs in by_shard.values() for pair in pairs):
        deps.clock.recv(delta.hlc)

    receipts: dict[str, DeltaReceipt] = {}
    effective: list[LogEntry] = []
    records: list[Future[None]] = []
    try:
        for shard, chunk in chunks:
            chunk_receipts, chunk_effective, applied = _commit_chunk(
                deps, shard, chunk, guard, check_backpressure=single
            )
            receipts.update(chunk_receipts)
            effective.extend(chunk_effective)
            if applied:
                expires_at = deps.wall_ms() // 1000 + settings.dedup_ttl_s
                records.append(submit(deps.buffer.record_delta_ids, gateway, applied, expires_at))
    finally:
        # Every record is written (or has failed) before the push answers or raises.
        for record in records:
            record.exception()
    for record in records:
        record.result()

    # A delta repeated within the batch (same clientId and deltaId) was applied once: its later occurrences are
    # duplicates (a rejected one is rejected each time).
    ordered = tuple(
        receipts[key]
        if key in receipts and (i == first_index[key] or receipts[key].rejected is not None)
        else DeltaReceipt(d.delta_id, duplicate=True, columns=())
        for i, (key, d) in enumerate(zip(keys, deltas, strict=True))
    )
    return ordered, effective


_Keyed = tuple[str, RowDelta]
"""A delta with its dedup key."""


def _chunked(pairs: Sequence[_Keyed], most: int, column_bytes: dict[int, int]) -> list[Sequence[_Keyed]]:
    """A shard's deltas in order, cut into chunks of at most ``most`` deltas whose estimated log bytes
    (:func:`_log_estimate`) fit one log item (:data:`_LOG_CHUNK_BUDGET`). A chunk whose merged entries still outgrow
    an item (an update of a large row) is split when planned."""
    chunks: list[Sequence[_Keyed]] = []
    start = size = 0
    for i, (_, delta) in enumerate(pairs):
        estimate = _log_estimate(delta, column_bytes[id(delta)])
        if i > start and (i - start == most or size + estimate > _LOG_CHUNK_BUDGET):
            chunks.append(pairs[start:i])
            start, size = i, 0
        size += estimate
    chunks.append(pairs[start:])
    return chunks


def _log_estimate(delta: RowDelta, column_bytes: int) -> int:
    """About what a delta adds to its chunk's log item, uncompressed: its wire JSON (columns, ids, field names) and
    its columns once more as the row after it. That is an INSERT's; an UPDATE of a row larger than it logs more, and
    its chunk is split when planned."""
    return 8 + column_bytes + _id_chars(delta) + 128 + column_bytes


_ROWS_PER_READ = 100


class _RowsRead:
    """The stored rows of a push, read in parallel slices; :meth:`result` waits for them."""

    def __init__(self, parts: list[Future[dict[tuple[str, str], StoredRow]]]) -> None:
        self.parts = parts

    def result(self) -> dict[tuple[str, str], StoredRow]:
        found: dict[tuple[str, str], StoredRow] = {}
        for part in results_of(self.parts):
            found.update(part)
        return found


def _check_growth(
    deps: GatewayDeps,
    by_shard: dict[ShardId, list[_Keyed]],
    stored: dict[tuple[str, str], StoredRow],
    column_bytes: dict[int, int],
    guard: WriteGuard | None,
) -> None:
    """Refuse a push of several chunks, before its first commit, if any change would outgrow a row or an item.

    A cheap bound first, per row: no state the row can pass through is larger than its stored values plus every
    column the push sends it, with their versions. Only the rows that bound does not clear are merged delta by delta
    with the same checks as a chunk's plan (:class:`_Merger`).
    """
    settings = deps.settings
    for shard, pairs in by_shard.items():
        by_row: dict[tuple[str, str], list[RowDelta]] = {}
        for _, delta in pairs:
            by_row.setdefault((delta.table, delta.row_id), []).append(delta)
        unclear: dict[tuple[str, str], StoredRow] = {}
        for key, deltas in by_row.items():
            row = stored.get(key)
            values = _json_size(row.state.values()) if row is not None else 2
            versions = _versions_bound(row.state) if row is not None else 0
            for delta in deltas:
                values += _json_size(delta.values())
                versions += len(delta.columns) * (32 + 6 * len(delta.client_id))
            state = _ROW_ITEM_OVERHEAD + len(shard.gateway) + 2 + len(key[0]) + 4 * len(key[1]) + values + versions
            wire = max(_wire_bound(delta, column_bytes[id(delta)]) for delta in deltas)
            logged = _LOG_ITEM_OVERHEAD + len(shard.key) + wire + 2 * values
            if values > settings.max_row_bytes or state > ITEM_LIMIT_BYTES or logged > ITEM_LIMIT_BYTES:
                unclear[key] = row if row is not None else StoredRow(lww.RowState(key[0], key[1]), 0)
        if unclear:
            merger = _Merger(deps, shard, {key: row for key, row in unclear.items() if key in stored}, guard)
            for _, delta in pairs:
                if (delta.table, delta.row_id) in unclear:
                    merger.merge(delta)


def _versions_bound(state: lww.RowState) -> int:
    """What a row state's JSON adds to its values' at most: a column 28 bytes and 6 per clientId character (an
    escaped control character), the tombstone and the latest write a little more."""
    bound = sum(32 + 6 * len(c.client_id) for c in state.columns.values())
    return bound + sum(40 + 6 * len(v.client_id) for v in (state.tombstone, state.written) if v is not None)


def _wire_bound(delta: RowDelta, column_bytes: int) -> int:
    """An upper bound of the delta's wire JSON size: its columns' (measured by :func:`_validate`), its ids escaped,
    the field names."""
    return column_bytes + 6 * _id_chars(delta) + 128


def _id_chars(delta: RowDelta) -> int:
    return len(delta.table) + len(delta.row_id) + len(delta.client_id) + len(delta.delta_id)


def _read_rows(deps: GatewayDeps, gateway: str, by_shard: dict[ShardId, list[_Keyed]]) -> _RowsRead:
    rows = list(dict.fromkeys((d.table, d.row_id) for pairs in by_shard.values() for _, d in pairs))
    return _RowsRead(
        [
            submit(deps.buffer.get_rows, gateway, rows[start : start + _ROWS_PER_READ])
            for start in range(0, len(rows), _ROWS_PER_READ)
        ]
    )


def _validate(
    deps: GatewayDeps,
    gateway: str,
    deltas: Sequence[RowDelta],
    stored: dict[str, tuple[TableSchema, int]],
    *,
    client_id: str,
    trusted: bool,
) -> dict[int, int]:
    """Check every delta against the fields' rules and the ``stored`` schemas; returns the size of each delta's
    columns (wire JSON) by ``id(delta)``."""
    # The fields first, for the whole batch: JSON bodies had them checked while parsing, so a JSON and a protobuf
    # push of the same deltas fail alike.
    for i, delta in enumerate(deltas):
        validate_row_delta(delta, where=f"deltas[{i}]")
    # A schema describes the deltas of its source table (``sourceTable``, else ``table``).
    schemas = {schema.delta_table: (schema, version) for schema, version in stored.values()}
    column_bytes: dict[int, int] = {}
    for i, delta in enumerate(deltas):
        validate_table_name(delta.table)
        _check_row_key(gateway, delta, f"deltas[{i}]")
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
        column_bytes[id(delta)] = size
    return column_bytes


def _check_row_key(gateway: str, delta: RowDelta, where: str) -> None:
    """The row index is keyed by ``{gateway}#{table}#{rowId}``: DynamoDB's partition-key limit bounds the rowId."""
    if len(gateway) + len(delta.table) + 2 + 4 * len(delta.row_id) <= PARTITION_KEY_LIMIT_BYTES:
        return
    size = len(row_key(gateway, delta.table, delta.row_id).encode("utf-8"))
    if size > PARTITION_KEY_LIMIT_BYTES:
        raise ValidationError(
            f"{where}.rowId is too long: the row's key (gateway#table#rowId) would be {size:,} bytes;"
            f" the limit is {PARTITION_KEY_LIMIT_BYTES:,}"
        )


def _check_backpressure(limit: int, head: ShardHead) -> None:
    if head.unflushed_bytes >= limit:
        raise BackpressureError(
            f"Buffer backpressure exceeded ({head.unflushed_bytes} >= {limit} bytes) for table {head.shard.table!r}"
        )


def _commit_chunk(
    deps: GatewayDeps,
    shard: ShardId,
    chunk: Sequence[_Keyed],
    guard: WriteGuard | None,
    *,
    check_backpressure: bool = False,
) -> tuple[dict[str, DeltaReceipt], list[LogEntry], list[str]]:
    """Merge and commit one chunk; returns its receipts (by dedup key), its effective entries and the dedup keys to
    record: those of deltas whose row the commit does not write (a row written keeps its deltas' keys itself), never
    a rejected delta's. ``check_backpressure``: refuse the chunk if its basis head is over the limit (a push of this
    one chunk)."""
    settings = deps.settings
    now_s = deps.wall_ms() // 1000
    row_keys = list(dict.fromkeys((d.table, d.row_id) for _, d in chunk))
    for attempt in range(settings.commit_attempts):
        basis = deps.buffer.read_commit_basis(shard, row_keys)
        if check_backpressure and basis.head is not None:
            _check_backpressure(settings.backpressure_limit, basis.head)
        kept = _kept(basis.rows, chunk)
        pending = [(key, d) for key, d in chunk if key not in kept]
        if not pending:
            return {}, [], []
        commit, receipts, effective, size, log_bytes, unchanged = _plan(
            deps, shard, basis.head, basis.rows, pending, guard
        )
        if len(pending) > 1 and (size > settings.max_commit_bytes or log_bytes > _LOG_CHUNK_BUDGET):
            # Too big for one transaction or one log item: commit the halves one after the other (each atomic).
            half = len(pending) // 2
            first_receipts, first_effective, first_keys = _commit_chunk(deps, shard, pending[:half], guard)
            rest_receipts, rest_effective, rest_keys = _commit_chunk(deps, shard, pending[half:], guard)
            return {**first_receipts, **rest_receipts}, first_effective + rest_effective, first_keys + rest_keys
        if commit is not None:
            try:
                deps.buffer.commit(commit)
            except CommitConflict:
                deps.sleep(_backoff(attempt))
                continue
            if commit.new_shard:
                forget_basis(deps.pull_basis, shard.gateway)  # the registry has a shard more
            _maybe_request_flush(deps, shard, basis.head, commit.head)
        # Merging a delta its row already holds changes nothing (per-column LWW), so a delta that changed something
        # was never applied: only the deltas that changed nothing are looked up among the dedup records.
        recorded = deps.buffer.seen_delta_ids(shard.gateway, unchanged, now_s) if unchanged else set()
        for key in recorded:
            del receipts[key]  # answered as a duplicate
        written = {(w.row.state.table, w.row.state.row_id) for w in commit.rows} if commit is not None else set()
        return (
            receipts,
            effective,
            [
                key
                for key, d in pending
                if (d.table, d.row_id) not in written and key not in recorded and receipts[key].rejected is None
            ],
        )
    raise CommitConflictError(
        f"Could not commit to table {shard.table!r} after {settings.commit_attempts} attempts; retry the push"
    )


@dataclass(frozen=True, slots=True)
class _Change:
    """One effective change of a row, measured: its wire JSON and the sizes of everything its log item holds."""

    delta: RowDelta
    before: dict[str, object] | None
    after: dict[str, object] | None
    text: str
    size: int
    before_bytes: int
    after_bytes: int


class _Merger:
    """Merges deltas into rows in order and checks every item the changes would store against the limits.

    Used twice with the same checks: by a chunk's plan against its basis, and before a push of several chunks
    commits anything, against the rows read then (so a push whose later chunk would fail writes nothing).
    """

    def __init__(
        self,
        deps: GatewayDeps,
        shard: ShardId,
        stored: dict[tuple[str, str], StoredRow],
        guard: WriteGuard | None = None,
    ) -> None:
        self._settings = deps.settings
        self._shard = shard
        self._guard = guard
        self.states: dict[tuple[str, str], lww.RowState | None] = {key: row.state for key, row in stored.items()}
        self.value_bytes: dict[tuple[str, str], int] = {}
        """UTF-8 JSON size of each changed row's values, as last merged."""

    def merge(self, delta: RowDelta) -> tuple[lww.MergeResult, _Change | None] | DeltaReceipt:
        """Merge ``delta`` into its row; the change is ``None`` when the delta changes nothing. A delta the write
        rules refuse leaves the row as it was and is answered by its receipt.

        Raises:
            SchemaError: the row would grow beyond ``max_row_bytes``, or its stored state beyond an item (422).
            PayloadTooLargeError: the delta's log item would exceed an item (413).
        """
        key = (delta.table, delta.row_id)
        before_state = self.states.get(key)
        result = lww.merge(before_state, delta)
        if self._guard is not None:
            refusal = self._guard.refusal(delta, before_state, result.state)
            if refusal is not None:
                row = self._guard.readable(delta.table, before_state)
                return DeltaReceipt(delta.delta_id, duplicate=False, columns=(), rejected=refusal, row=row)
        self.states[key] = result.state
        if result.effective is None or not result.changed:
            return result, None
        before = before_state.values() if before_state is not None else None
        before_bytes = self.value_bytes.get(key)
        if before_bytes is None:
            before_bytes = _json_size(before)
        after = result.state.values()
        after_bytes = _json_size(after)
        self.value_bytes[key] = after_bytes
        limit = self._settings.max_row_bytes
        if after_bytes > limit:
            raise SchemaError(f"Row {key[0]}:{key[1]} would grow to {after_bytes} bytes; the limit is {limit}")
        self._check_state(key, result.state, after_bytes)
        text = js_stringify(result.effective.to_json())
        size = len(text.encode("utf-8", "surrogatepass"))
        logged = _LOG_ITEM_OVERHEAD + len(self._shard.key) + size + before_bytes + after_bytes
        if logged > ITEM_LIMIT_BYTES:
            raise PayloadTooLargeError(
                f"Delta {delta.delta_id} would be logged as {logged:,} bytes with the row before and after it;"
                f" the limit of an item is {ITEM_LIMIT_BYTES:,}"
            )
        return result, _Change(result.effective, before, after, text, size, before_bytes, after_bytes)

    def _check_state(self, key: tuple[str, str], state: lww.RowState, value_bytes: int) -> None:
        """The row-index item holds the row's state: every value with its column's HLC and clientId."""
        overhead = _ROW_ITEM_OVERHEAD + len(self._shard.gateway) + 2 + len(key[0]) + 4 * len(key[1])
        if overhead + value_bytes + _versions_bound(state) <= ITEM_LIMIT_BYTES:  # a cheap bound first
            return
        stored = overhead + _json_size(lww.state_to_json(state))
        if stored > ITEM_LIMIT_BYTES:
            raise SchemaError(
                f"Row {key[0]}:{key[1]} would be stored as {stored:,} bytes ({len(state.columns):,} columns with their"
                f" versions); the limit of an item is {ITEM_LIMIT_BYTES:,}"
            )


_LOG_ITEM_OVERHEAD = 160
"""Bytes of a log item beyond its shard key and its three JSON texts: attribute names and numbers."""
_ROW_ITEM_OVERHEAD = 64
"""Bytes of a row-index item beyond its key and its state JSON: attribute names and the version."""


def _plan(
    deps: GatewayDeps,
    shard: ShardId,
    head: ShardHead | None,
    stored: dict[tuple[str, str], StoredRow],
    pending: Sequence[_Keyed],
    guard: WriteGuard | None,
) -> tuple[Commit | None, dict[str, DeltaReceipt], list[LogEntry], int, int, list[str]]:
    """Merge ``pending`` into the stored rows; the commit is ``None`` when no delta changes anything.

    Returns the commit, the receipts by dedup key, the effective entries, the commit's size (:func:`_commit_bytes`),
    its log entries' size (uncompressed: the bound the log item is checked against) and the dedup keys of the deltas
    that changed nothing.
    """
    merger = _Merger(deps, shard, stored, guard)
    touched: dict[tuple[str, str], None] = {}
    receipts: dict[str, DeltaReceipt] = {}
    changes: list[_Change] = []
    unchanged: list[str] = []
    row_deltas: dict[tuple[str, str], list[str]] = {}
    for key, delta in pending:
        merged = merger.merge(delta)
        if isinstance(merged, DeltaReceipt):
            receipts[key] = merged
            continue
        result, change = merged
        row_deltas.setdefault((delta.table, delta.row_id), []).append(recent_key(key))
        receipts[key] = DeltaReceipt(
            delta.delta_id,
            duplicate=False,
            columns=result.receipts,
            deleted=result.changed and delta.op.value == "DELETE",
        )
        if change is not None:
            touched[(delta.table, delta.row_id)] = None
            changes.append(change)
        else:
            unchanged.append(key)
    if not changes:
        return None, receipts, [], 0, 0, unchanged

    base = head or ShardHead(shard)
    # Every entry gets its own commit HLC, strictly increasing with the shard's sequence whichever Lambda commits,
    # so a `since` pull can resume between two entries of one commit.
    commit_hlc = max(deps.clock.now(), base.last_commit_hlc + 1)
    entries = []
    total = 0
    size = _ITEM_OVERHEAD * (3 + len(touched))
    log_bytes = 0
    last_entry: dict[tuple[str, str], int] = {}
    for i, change in enumerate(changes, start=1):
        last_entry[(change.delta.table, change.delta.row_id)] = base.seq + i
        total += change.size
        log_bytes += 8 + change.size + change.before_bytes + change.after_bytes
        size += change.size + change.before_bytes + change.after_bytes
        entries.append(
            LogEntry(
                shard,
                base.seq + i,
                commit_hlc + i - 1,
                change.delta,
                change.before,
                change.after,
                change.size,
                change.text,
            )
        )
    new_head = ShardHead(
        shard=shard,
        seq=base.seq + len(entries),
        bytes_total=base.bytes_total + total,
        deltas_total=base.deltas_total + len(entries),
        flushed_seq=base.flushed_seq,
        flushed_bytes=base.flushed_bytes,
        flushed_deltas=base.flushed_deltas,
        last_commit_hlc=commit_hlc + len(entries) - 1,
    )
    rows = []
    for row in touched:
        state = merger.states[row]
        assert state is not None
        previous = stored.get(row)
        expected = previous.version if previous is not None else 0
        recent = (*(previous.recent if previous is not None else ()), *row_deltas[row])[-ROW_RECENT_KEYS:]
        # A row's version is the position of the last log entry it holds.
        rows.append(RowWrite(StoredRow(state, last_entry[row], recent), expected))
        size += merger.value_bytes[row] + sum(len(c.client_id) + 32 for c in state.columns.values())
    commit = Commit(
        shard=shard,
        expected_seq=base.seq if head is not None else -1,
        head=new_head,
        entries=tuple(entries),
        rows=tuple(rows),
        new_shard=head is None,
        previous_commit_hlc=base.last_commit_hlc,
    )
    return commit, receipts, entries, size, log_bytes, unchanged


_ITEM_OVERHEAD = 200
_LOG_CHUNK_BUDGET = ITEM_LIMIT_BYTES - 2 * _ITEM_OVERHEAD
"""A chunk's entries (measured uncompressed) must fit one log item."""


def _kept(rows: dict[tuple[str, str], StoredRow], chunk: Sequence[_Keyed]) -> frozenset[str]:
    """The chunk's dedup keys that a row keeps among its recent deltas: applied, so duplicates."""
    return frozenset(
        key for key, d in chunk if (row := rows.get((d.table, d.row_id))) and recent_key(key) in row.recent
    )


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


def _json_size(value: dict[str, object] | dict[str, Any] | None) -> int:
    """Bytes of the compact UTF-8 JSON the DynamoDB adapter stores for a row image or state (the same encoder)."""
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
