"""The poller service: one connector's changes turned into deltas, pushed, and its position stored.

:func:`poll_connector` runs one poll of one registered connector:

1. read the stored position and take the connector's **lease** (conditional on the position's version, and on no
   other live lease): of two pollers started together only one proceeds, the other returns ``busy`` without reading
   the source or pushing anything;
2. ``ingest.poll(position, limit)``, while a heartbeat thread renews the lease;
3. turn every :class:`~lakesync.connectors.base.ChangedRow` into a delta under the connector identity (client id
   ``ingest:{name}``, as the original): an INSERT of the row's columns, or a DELETE; HLC from the gateway clock;
   deltaId = SHA-256 of ``["ingest", connector, table, rowId, version, generation]`` where the generation is the
   stored position's version -- so re-polling the same position (after a crash) makes the same deltaIds, which the
   push dedups, and a row that returns to an earlier state in a later poll gets a new deltaId;
4. push them (and their provenance records, :data:`PROVENANCE_TABLE`) through the push service, in pushes of at most
   ``max_deltas_per_push``, each only while the lease is live by this poller's clock;
5. store the new position conditionally on the lease and the old version.

**The lease** covers ``lease_ms`` (:data:`DEFAULT_LEASE_MS`) and is renewed every third of it while the round runs
(a write conditional on the token still being on record), never past the poll's budget ``end_ms`` (a Lambda
invocation's end): a live long poll keeps its connector, a dead poller's lease expires within one slice. A poller
whose lease ran out -- its renewals failed, or it stalled and another poller took over -- pushes nothing more (its
rows could be older than its successor's), releases the lease if it is still its own and stores nothing
(``superseded``). A renewal and a take-over are conditional writes of one record, so only one of them wins.

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
import threading
import uuid
from collections.abc import Callable, Mapping
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
    "drop_leases",
    "ingest_client_id",
    "poll_connector",
    "poll_registered",
    "provenance_delta",
]

logger = logging.getLogger(__name__)

PROVENANCE_TABLE: Final = "_lakesync_provenance"
DEFAULT_LEASE_MS: Final = 30_000
"""The slice of time a lease covers; a live poll renews it every third of that, a dead poller's expires within it."""


def ingest_client_id(name: str) -> str:
    """The connector identity deltas are pushed under (the original's ``ingest:{name}``)."""
    return f"ingest:{name}"


@dataclass(frozen=True, slots=True)
class PollResult:
    """What one :func:`poll_connector` call did.

    Attributes:
        status: ``"polled"``; ``"busy"`` (another poller holds the lease); ``"superseded"`` (the poller lost its
            lease mid-poll: it stopped pushing and stored nothing).
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


class _Lease:
    """One poll round's lease, renewed on a daemon thread while the round runs (see the module docstring)."""

    def __init__(
        self,
        positions: ConnectorPositionStore,
        gateway: str,
        name: str,
        *,
        lease_ms: int,
        wall_ms: Callable[[], int],
        end_ms: int | None,
        renew_every_ms: int | None,
    ) -> None:
        self._positions = positions
        self._gateway = gateway
        self._name = name
        self._lease_ms = lease_ms
        self._wall_ms = wall_ms
        self._end_ms = end_ms
        self._every_s = (lease_ms // 3 if renew_every_ms is None else renew_every_ms) / 1000
        self._margin_ms = lease_ms // 6
        self.token = uuid.uuid4().hex
        self._until = 0
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _span(self, now: int) -> int:
        until = now + self._lease_ms
        return until if self._end_ms is None else min(until, self._end_ms)

    def acquire(self, version: int) -> bool:
        """Take the lease at ``version`` and start renewing it; ``False`` when another poller holds it."""
        now = self._wall_ms()
        until = self._span(now)
        if not self._positions.acquire(self._gateway, self._name, version, self.token, until, now):
            return False
        self._until = until
        if self._every_s > 0:
            self._thread = threading.Thread(target=self._renew_loop, name=f"lease-{self._name}", daemon=True)
            self._thread.start()
        return True

    def renew(self) -> bool:
        """Extend the lease by a slice (never past the poll's budget); ``False`` once it is lost."""
        if self._lost.is_set():
            return False
        until = self._span(self._wall_ms())
        if until <= self._until:
            return True  # the budget's end is reached: nothing left to extend
        if self._positions.renew(self._gateway, self._name, self.token, until):
            self._until = until
            return True
        self._lost.set()
        logger.warning("connector %s of %s: lease lost (taken over after it expired)", self._name, self._gateway)
        return False

    @property
    def held(self) -> bool:
        """Whether this poller may still push: the lease was not lost and is live by this poller's clock, with a
        margin for a clock running behind another poller's."""
        return not self._lost.is_set() and self._wall_ms() < self._until - self._margin_ms

    def _renew_loop(self) -> None:
        while not self._stop.wait(self._every_s):
            try:
                if not self.renew():
                    return
            except Exception:  # a failed write is retried at the next beat; `held` runs out meanwhile
                logger.warning("connector %s of %s: lease renewal failed", self._name, self._gateway, exc_info=True)

    def stop(self) -> None:
        """Stop renewing (before the commit or release that ends the lease)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def release(self) -> None:
        """Stop renewing and drop the lease if it is still this poller's."""
        self.stop()
        self._positions.release(self._gateway, self._name, self.token)


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
    end_ms: int | None = None,
    renew_every_ms: int | None = None,
) -> PollResult:
    """Poll connector ``name`` of ``gateway`` (see the module docstring).

    Args:
        lease_ms: The slice of time a lease (or a renewal) covers.
        end_ms: The poll's budget (epoch ms, e.g. when the Lambda invocation times out): no lease reaches past it,
            and no further round starts with less than ``lease_ms`` of it left.
        renew_every_ms: How often the lease is renewed (default a third of ``lease_ms``).

    Raises:
        AdapterError: the source failed (nothing pushed by this round is lost: the position did not move).
        LakeSyncError: the push was refused (schema, backpressure, ...); the position did not move.
    """
    rows = deletes = applied = rounds = 0
    version = 0
    while rounds < max_rounds:
        if rounds and end_ms is not None and end_ms - deps.wall_ms() <= lease_ms:
            break
        stored = positions.read_position(gateway, name)
        version = stored.version
        lease = _Lease(
            positions,
            gateway,
            name,
            lease_ms=lease_ms,
            wall_ms=deps.wall_ms,
            end_ms=end_ms,
            renew_every_ms=renew_every_ms,
        )
        if not lease.acquire(stored.version):
            return PollResult("busy" if rounds == 0 else "polled", rows, deletes, applied, rounds, version)
        pushed_all = True
        try:
            batch = source.poll(stored.position, limit)
            deltas = _deltas(deps, name, list(batch.rows), stored.version, lease.token)
            step = max(2, deps.settings.max_deltas_per_push - deps.settings.max_deltas_per_push % 2)
            for start in range(0, len(deltas), step):
                if not lease.held:
                    pushed_all = False
                    break
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
            lease.release()
            raise
        rounds += 1
        rows += len(batch.rows)
        deletes += sum(1 for r in batch.rows if r.values is None)
        if not pushed_all:
            lease.release()
            logger.warning("connector %s of %s: lease lost mid-poll; the position was not stored", name, gateway)
            return PollResult("superseded", rows, deletes, applied, rounds, version)
        lease.stop()
        # Conditional on the token: still on record, no other poller took over, so every push ran under this lease.
        if not positions.commit(gateway, name, lease.token, stored.version, batch.position):
            logger.warning("connector %s of %s: lease lost; the position was not stored", name, gateway)
            return PollResult("superseded", rows, deletes, applied, rounds, version)
        version = stored.version + 1
        if not batch.more:
            break
    return PollResult("polled", rows, deletes, applied, rounds, version)


def poll_registered(
    deps: GatewayDeps, gateway: str, name: str, *, limit: int = 10_000, end_ms: int | None = None
) -> PollResult:
    """Poll the registered connector ``name`` of ``gateway`` (what a schedule runs) within the budget ``end_ms``
    (see :func:`poll_connector`).

    The registration is read afresh (not from the runtime's cached list): a connector registered a moment ago is
    polled at its first tick, one unregistered is not polled again. A connector that is no longer registered answers
    ``gone`` (its schedule is removed, if one is left), one without ``ingest`` ``idle``.

    Raises:
        AdapterError: the source failed or the connector cannot be opened.
    """
    if deps.connectors is None or deps.positions is None:
        raise StorageError("Connectors are not configured in this deployment")
    if gateway not in deps.settings.gateway_ids:
        return PollResult("gone")
    connector = deps.connectors.connector(gateway, name, fresh=True)
    if connector is None:
        if deps.connector_scheduler is not None:
            deps.connector_scheduler.unschedule(gateway, name)
        return PollResult("gone")
    if connector.ingest is None:
        return PollResult("idle")
    return poll_connector(deps, gateway, name, connector.ingest, deps.positions, limit=limit, end_ms=end_ms)


def drop_leases(positions: ConnectorPositionStore, gateway: str) -> list[str]:
    """Drop every lease on record for ``gateway``'s connectors, each conditionally on the token read (a lease taken
    meanwhile is kept); the connectors whose lease was dropped.

    Only for a process that is the sole poller of its store and has not started polling: ``lakesync local`` at
    start, whose leases on record were all left by polls of its previous run that died (``kill -9``, a crash).
    """
    return [
        name for name, token in sorted(positions.leases(gateway).items()) if positions.release(gateway, name, token)
    ]
