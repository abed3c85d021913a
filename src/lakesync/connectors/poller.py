"""The poller service: one connector's changes turned into deltas, pushed, and its position stored.

:func:`poll_connector` runs one poll of one registered connector:

1. read the stored position and take the connector's **lease** (conditional on the position's version, and on no
   other live lease): of two pollers started together only one proceeds, the other returns ``busy`` without reading
   the source or pushing anything;
2. ``ingest.poll(position, limit)``;
3. turn every :class:`~lakesync.connectors.base.ChangedRow` into a delta under the connector identity (client id
   ``ingest:{name}``, as the original): an INSERT of the row's columns, or a DELETE; HLC from the gateway clock;
   deltaId = SHA-256 of ``["ingest", connector, table, rowId, version, generation]`` where the generation is the
   stored position's version -- so re-polling the same position (after a crash) makes the same deltaIds, which the
   push dedups, and a row that returns to an earlier state in a later poll gets a new deltaId;
4. push them (and their provenance records, :data:`PROVENANCE_TABLE`) through the push service, in pushes of at most
   ``max_deltas_per_push``;
5. store the new position conditionally on the lease and the old version; a poller whose lease was taken over
   (it outlived ``lease_ms``) stores nothing.

A crash anywhere before step 5 leaves the old position: the next poll re-reads the same changes (plus newer ones)
and re-pushes the same deltaIds; nothing is lost and nothing is applied twice. While the source says ``more`` the
poller polls again, up to ``max_rounds``.

**Provenance.** Each data delta has a companion row in the gateway table ``_lakesync_provenance`` keyed by the data
delta's deltaId: ``kind`` ``"ingest"``, ``connector``, ``table``, ``rowId``, ``op``, ``version``, ``generation`` (the
position version it was polled from), ``origin`` (the source's provenance, e.g. the row's cursor value) and
``pollId``. It is an ordinary table: pulled, flushed to the lake and materialised like any other.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from lakesync.connectors.base import ChangedRow, IngestSource
from lakesync.core.canonical import JsonValue, stable_stringify
from lakesync.core.delta import ColumnDelta, DeltaOp, RowDelta
from lakesync.core.errors import StorageError
from lakesync.core.messages import SyncPush
from lakesync.gateway import push as push_service
from lakesync.gateway.deps import GatewayDeps
from lakesync.ports import ConnectorPositionStore

__all__ = [
    "PROVENANCE_TABLE",
    "PollResult",
    "ingest_client_id",
    "poll_connector",
    "poll_registered",
    "provenance_delta",
]

logger = logging.getLogger(__name__)

PROVENANCE_TABLE: Final = "_lakesync_provenance"
DEFAULT_LEASE_MS: Final = 15 * 60 * 1000
"""A lease outlives any poll: a Lambda poll ends within its 15-minute timeout."""


def ingest_client_id(name: str) -> str:
    """The connector identity deltas are pushed under (the original's ``ingest:{name}``)."""
    return f"ingest:{name}"


@dataclass(frozen=True, slots=True)
class PollResult:
    """What one :func:`poll_connector` call did.

    Attributes:
        status: ``"polled"``; ``"busy"`` (another poller holds the lease); ``"superseded"`` (the position moved
            under a poller whose lease expired: it stored nothing).
        rows: Changed rows read from the source.
        deletes: Of which deletions.
        applied: Deltas the gateway applied (duplicates of an earlier, crashed poll excluded).
        rounds: Polls run (more than one while the source said ``more``).
        version: The stored position's version after the call.
    """

    status: str
    rows: int = 0
    deletes: int = 0
    applied: int = 0
    rounds: int = 0
    version: int = 0

    def to_json(self) -> dict[str, Any]:
        """JSON for logs and the poll function's result."""
        return {
            "status": self.status,
            "rows": self.rows,
            "deletes": self.deletes,
            "applied": self.applied,
            "rounds": self.rounds,
            "version": self.version,
        }


def change_delta_id(name: str, row: ChangedRow, generation: int) -> str:
    """The deterministic deltaId of a polled change."""
    key = stable_stringify(["ingest", name, row.table, row.row_id, row.version, generation])
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def provenance_delta(
    client_id: str, record_id: str, fields: Mapping[str, JsonValue], hlc: int, *, salt: str = "provenance"
) -> RowDelta:
    """The ``_lakesync_provenance`` row ``record_id`` with ``fields`` (an INSERT; its deltaId derived from the id)."""
    delta_id = hashlib.sha256(stable_stringify([salt, client_id, record_id]).encode("utf-8")).hexdigest()
    columns = tuple(ColumnDelta(k, v) for k, v in fields.items())
    return RowDelta(DeltaOp.INSERT, PROVENANCE_TABLE, record_id, client_id, columns, hlc, delta_id)


def _deltas(deps: GatewayDeps, name: str, rows: list[ChangedRow], generation: int, poll_id: str) -> list[RowDelta]:
    client_id = ingest_client_id(name)
    polled_at = dt.datetime.fromtimestamp(deps.wall_ms() / 1000, dt.UTC).isoformat().replace("+00:00", "Z")
    out: list[RowDelta] = []
    for row in rows:
        delta_id = change_delta_id(name, row, generation)
        columns: tuple[ColumnDelta, ...] = ()
        if row.values is None:
            op = DeltaOp.DELETE
        else:
            op, columns = DeltaOp.INSERT, tuple(ColumnDelta(k, v) for k, v in row.values.items())
        out.append(RowDelta(op, row.table, row.row_id, client_id, columns, deps.clock.now(), delta_id))
        fields: dict[str, JsonValue] = {
            "kind": "ingest",
            "connector": name,
            "table": row.table,
            "rowId": row.row_id,
            "op": op.value,
            "version": row.version,
            "generation": generation,
            "origin": dict(row.origin),
            "pollId": poll_id,
            "at": polled_at,
        }
        out.append(provenance_delta(client_id, delta_id, fields, deps.clock.now()))
    return out


def poll_connector(
    deps: GatewayDeps,
    gateway: str,
    name: str,
    source: IngestSource,
    positions: ConnectorPositionStore,
    *,
    limit: int = 10_000,
    lease_ms: int = DEFAULT_LEASE_MS,
    max_rounds: int = 10,
) -> PollResult:
    """Poll connector ``name`` of ``gateway`` (see the module docstring).

    Raises:
        AdapterError: the source failed (nothing pushed by this round is lost: the position did not move).
        LakeSyncError: the push was refused (schema, backpressure, ...); the position did not move.
    """
    rows = deletes = applied = rounds = 0
    version = 0
    while rounds < max_rounds:
        stored = positions.read_position(gateway, name)
        version = stored.version
        token = uuid.uuid4().hex
        now = deps.wall_ms()
        if not positions.acquire(gateway, name, stored.version, token, now + lease_ms, now):
            return PollResult("busy" if rounds == 0 else "polled", rows, deletes, applied, rounds, version)
        try:
            batch = source.poll(stored.position, limit)
            deltas = _deltas(deps, name, list(batch.rows), stored.version, token)
            step = max(2, deps.settings.max_deltas_per_push - deps.settings.max_deltas_per_push % 2)
            for start in range(0, len(deltas), step):
                chunk = tuple(deltas[start : start + step])
                result = push_service.push(
                    deps,
                    gateway,
                    SyncPush(ingest_client_id(name), chunk),
                    client_id=ingest_client_id(name),
                    trusted=True,
                )
                applied += sum(
                    1
                    for r, d in zip(result.receipts, chunk, strict=True)
                    if not r.duplicate and d.table != PROVENANCE_TABLE
                )
        except BaseException:
            positions.release(gateway, name, token)
            raise
        rounds += 1
        rows += len(batch.rows)
        deletes += sum(1 for r in batch.rows if r.values is None)
        if not positions.commit(gateway, name, token, stored.version, batch.position):
            logger.warning("connector %s of %s: lease lost; the position was not stored", name, gateway)
            return PollResult("superseded", rows, deletes, applied, rounds, version)
        version = stored.version + 1
        if not batch.more:
            break
    return PollResult("polled", rows, deletes, applied, rounds, version)


def poll_registered(deps: GatewayDeps, gateway: str, name: str, *, limit: int = 10_000) -> PollResult:
    """Poll the registered connector ``name`` of ``gateway`` (what a schedule runs).

    A connector that is no longer registered answers ``gone`` (its schedule is removed, if one is left), one without
    ``ingest`` ``idle``.

    Raises:
        AdapterError: the source failed or the connector cannot be opened.
    """
    if deps.connectors is None or deps.positions is None:
        raise StorageError("Connectors are not configured in this deployment")
    if gateway not in deps.settings.gateway_ids:
        return PollResult("gone")
    connector = deps.connectors.connector(gateway, name)
    if connector is None:
        if deps.connector_scheduler is not None:
            deps.connector_scheduler.unschedule(gateway, name)
        return PollResult("gone")
    if connector.ingest is None:
        return PollResult("idle")
    return poll_connector(deps, gateway, name, connector.ingest, deps.positions, limit=limit)
