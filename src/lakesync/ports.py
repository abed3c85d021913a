"""Ports: the storage and integration boundaries the gateway services depend on.

Adapters implement them: :mod:`lakesync.gateway.memory` in memory (tests, pure logic) and :mod:`lakesync.aws` on
DynamoDB and S3. The contract tests in ``tests/contract`` run one behaviour suite against every adapter.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from lakesync.core.connectors import ConnectorConfig
    from lakesync.core.delta import RowDelta
    from lakesync.core.destinations import DestinationConfig
    from lakesync.core.errors import LakeSyncError
    from lakesync.core.filters import MembershipSource
    from lakesync.core.log import Commit, CommitBasis, LogEntry, PullBasis, ShardHead, ShardId, StoredRow
    from lakesync.core.realtime import Connection
    from lakesync.core.row_history import LakeRow
    from lakesync.core.rules import SyncRules
    from lakesync.core.schema import TableSchema
    from lakesync.core.scope import Scope
    from lakesync.core.since import SinceSession
    from lakesync.core.streams import Subscription


class BufferStore(Protocol):
    """The delta buffer: shard heads, the commit-ordered log, the row index and deltaId dedup."""

    def get_heads(
        self, shards: Sequence[ShardId], *, reaching: Mapping[ShardId, int] | None = None
    ) -> dict[ShardId, ShardHead]:
        """Consistent read of the heads of ``shards``; missing shards are absent from the result.

        ``reaching``: positions the caller only compares with the heads. A head known to be at or past its shard's
        position may then be one the log has already passed (a store whose log can run ahead of the stored head
        need not look further); a head short of it is read in full."""
        ...

    def list_shards(self, gateway: str) -> list[ShardId]:
        """Every shard that has ever been committed to for ``gateway``."""
        ...

    def get_rows(self, gateway: str, rows: Sequence[tuple[str, str]]) -> dict[tuple[str, str], StoredRow]:
        """Consistent read of row-index entries by ``(table, row_id)``; missing rows are absent."""
        ...

    def seen_delta_ids(self, gateway: str, delta_ids: Sequence[str], now_s: int) -> set[str]:
        """The deltaIds already recorded and not yet expired."""
        ...

    def read_commit_basis(self, shard: ShardId, rows: Sequence[tuple[str, str]]) -> CommitBasis:
        """Consistent read, in one round trip where the store allows, of what a push chunk plans against: the
        shard's head and the row-index entries of ``rows``."""
        ...

    def commit(self, commit: Commit) -> None:
        """Apply a commit atomically.

        Raises:
            CommitConflict: the head or a row changed since it was read.
        """
        ...

    def record_delta_ids(self, gateway: str, delta_ids: Sequence[str], expires_at: int) -> None:
        """Remember ``delta_ids`` until ``expires_at`` (epoch seconds); recording one again moves its expiry."""
        ...

    def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> list[LogEntry]:
        """Up to ``limit`` entries ``after_seq + 1, after_seq + 2, ...`` in commit order (consistent read).

        The entries returned always continue the sequence: the read stops at the first gap (a commit still being
        applied, or entries released by the flush job), so a reader never skips an entry it has not seen. With
        ``images=False`` the row images are not read: every entry's ``before`` and ``after`` are ``None``."""
        ...

    def read_log_at(
        self, shard: ShardId, seq: int, limit: int, *, images: bool = True
    ) -> tuple[int | None, list[LogEntry]]:
        """What a cursor standing at entry ``seq`` checks and reads: the commit HLC of entry ``seq`` (``None`` when
        the buffer neither holds it nor records it with the entry after it), and up to ``limit`` entries after it (as
        :meth:`read_log` reads them).

        ``(None, [])`` may also mean the store read neither entry ``seq`` nor the entries after it in its chunk (it
        read only the chunks that start after it, and found none): the caller checks the position against the head,
        and reads with :meth:`read_log` when the head is past it."""
        ...

    def read_log_by_commit_hlc(
        self, shard: ShardId, after_commit_hlc: int, limit: int, *, images: bool = True
    ) -> list[LogEntry]:
        """Up to ``limit`` entries with ``commit_hlc > after_commit_hlc``, ordered by commit HLC (``images`` as for
        :meth:`read_log`)."""
        ...


def read_from_entry(
    buffer: BufferStore, shard: ShardId, seq: int, limit: int, *, images: bool = True
) -> tuple[int | None, list[LogEntry]]:
    """:meth:`BufferStore.read_log_at` by :meth:`BufferStore.read_log` alone: from entry ``seq`` itself (one entry
    more), its commit HLC when the buffer holds it, else the entries after it read again."""
    entries = buffer.read_log(shard, seq - 1, limit + 1, images=images)
    if entries and entries[0].seq == seq:
        return entries[0].commit_hlc, entries[1:]
    return None, buffer.read_log(shard, seq, limit, images=images)


def commit_hlc_at(buffer: BufferStore, shard: ShardId, seq: int) -> int | None:
    """The commit HLC of the shard's entry ``seq`` (one entry read, without row images); ``None`` when the buffer
    does not hold it."""
    found = buffer.read_log(shard, seq - 1, 1, images=False)
    return found[0].commit_hlc if found and found[0].seq == seq else None


class PullBasisReader(Protocol):
    """The gateway's sync rules and shard registry, read together (in one request where one store keeps both)."""

    def read_pull_basis(self, gateway: str) -> PullBasis:
        """Consistent read of the sync rules and the registered shards of ``gateway``."""
        ...


class ConfigStore(Protocol):
    """Per-gateway configuration: sync rules, table schemas, flush requests, materialisation destinations."""

    def get_sync_rules(self, gateway: str) -> SyncRules | None:
        """The gateway's sync rules, or ``None`` when none are stored."""
        ...

    def put_sync_rules(self, gateway: str, rules: SyncRules) -> None:
        """Replace the gateway's sync rules."""
        ...

    def get_schemas(self, gateway: str) -> dict[str, tuple[TableSchema, int]]:
        """Every table schema of the gateway with its version."""
        ...

    def get_push_config(self, gateway: str) -> tuple[SyncRules | None, dict[str, tuple[TableSchema, int]]]:
        """What a push checks its deltas against, in one read: the sync rules and every table schema (versioned)."""
        ...

    def put_schema(self, gateway: str, schema: TableSchema, version: int, expected_version: int) -> None:
        """Store a schema version; fails with ``CommitConflict`` if the stored version is not ``expected_version``."""
        ...

    def request_flush(self, gateway: str, request: Mapping[str, Any]) -> None:
        """Record a flush request for the flush job to pick up."""
        ...

    def list_flush_requests(self, gateway: str) -> list[dict[str, Any]]:
        """Pending flush requests, oldest first."""
        ...

    def list_destinations(self, gateway: str) -> list[DestinationConfig]:
        """The gateway's materialisation destinations, sorted by name."""
        ...

    def add_destination(self, gateway: str, config: DestinationConfig) -> None:
        """Register a materialisation destination; atomic, so of two concurrent adds of one name exactly one wins.

        Raises:
            AlreadyExistsError: the gateway already has a destination named ``config.name`` (nothing changes).
        """
        ...

    def remove_destination(self, gateway: str, name: str) -> bool:
        """Drop the destination ``name``; ``False`` when the gateway has none of that name."""
        ...

    def list_connectors(self, gateway: str) -> list[ConnectorConfig]:
        """The gateway's registered connectors (stored configs: credentials are references), sorted by name."""
        ...

    def get_connector(self, gateway: str, name: str) -> ConnectorConfig | None:
        """The connector ``name``, or ``None``."""
        ...

    def add_connector(self, gateway: str, config: ConnectorConfig) -> None:
        """Register a connector; atomic, so of two concurrent adds of one name exactly one wins.

        Raises:
            AlreadyExistsError: the gateway already has a connector named ``config.name`` (nothing changes).
        """
        ...

    def remove_connector(self, gateway: str, name: str) -> bool:
        """Drop the connector ``name``; ``False`` when the gateway has none of that name."""
        ...


class ActionStore(Protocol):
    """Action idempotency records: results cached by actionId and idempotency key, with a TTL, one namespace per
    (gateway, client): a key of one client is never the key of another (:func:`lakesync.core.actions.action_record_key`
    is the stored key)."""

    def get(self, gateway: str, client_id: str, keys: Sequence[str], now_s: int) -> dict[str, dict[str, Any]]:
        """The client's unexpired records by key."""
        ...

    def claim(self, gateway: str, client_id: str, key: str, expires_at: int, now_s: int) -> bool:
        """Atomically mark the client's ``key`` as in progress; ``False`` if an unexpired record already exists."""
        ...

    def put(
        self, gateway: str, client_id: str, keys: Sequence[str], record: Mapping[str, Any], expires_at: int
    ) -> None:
        """Store a final record under every key of the client."""
        ...

    def release(self, gateway: str, client_id: str, key: str) -> None:
        """Drop the client's in-progress claim on ``key`` (the action failed and may be retried)."""
        ...


class SourceAdapter(Protocol):
    """An external system that serves deltas for adapter-sourced pulls (``?source=``)."""

    name: str

    def query_deltas_since(self, since_hlc: int, limit: int) -> list[RowDelta]:
        """Deltas with ``hlc > since_hlc`` in HLC order, at most ``limit``."""
        ...


class ObjectStore(Protocol):
    """Whole objects by key in one bucket (S3 on AWS): checkpoints, claim-check payloads."""

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        """Write (or replace) the object ``key``; once this returns, ``get`` sees it."""
        ...

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or ``None`` when there is no object ``key``."""
        ...

    def list_keys(self, prefix: str) -> list[str]:
        """Every key starting with ``prefix``, in ascending (byte) order."""
        ...


@dataclass(frozen=True, slots=True)
class ApplyStats:
    """What one :meth:`Destination.apply` call did.

    Attributes:
        deltas: Deltas received.
        upserted: Destination rows written (inserted, updated or un-deleted).
        deleted: Destination rows deleted (hard) or marked deleted (soft).
        unchanged: Rows whose merged state did not change (duplicates, redeliveries, older writes).
    """

    deltas: int = 0
    upserted: int = 0
    deleted: int = 0
    unchanged: int = 0


class Destination(Protocol):
    """A query database that materialised rows are written to (``lakesync.sql`` implements it per driver)."""

    name: str

    def apply(self, schema: TableSchema, deltas: Sequence[RowDelta]) -> ApplyStats:
        """Merge ``deltas`` (all of ``schema.delta_table``) into the destination table ``schema.table``, atomically.

        Creates the table, or adds the schema's new columns, first. Each destination row equals the per-column LWW
        fold (:mod:`lakesync.core.merge`) of every delta ever applied to it, whatever the order and however often a
        delta is applied. Either every change of the call is committed or none is.

        Raises:
            DestinationError: the destination refused or failed; nothing of this call was written.
        """
        ...

    def rows(self, schema: TableSchema) -> dict[str, dict[str, Any]]:
        """The destination table's live rows by ``row_id`` (soft-deleted rows excluded), schema columns only."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


@dataclass(frozen=True, slots=True)
class ResolvedDestinations:
    """The destinations of a job: those open, and by name those that could not be opened."""

    opened: Sequence[Destination]
    failures: Mapping[str, LakeSyncError] = field(default_factory=dict)


class DestinationProvider(Protocol):
    """The destinations a job of ``gateway``/``table`` goes to (connections opened and cached by the provider)."""

    def destinations(self, gateway: str, table: str) -> ResolvedDestinations:
        """Open (or reuse) the destinations configured for ``gateway`` that take ``table``.

        Raises:
            DestinationError: the configuration cannot be read (every destination of the job is unknown).
        """
        ...

    def discard(self, destination: Destination) -> None:
        """Forget a destination after it failed, so the next job reconnects."""
        ...


class ConnectionStore(Protocol):
    """The open WebSocket sessions (:class:`~lakesync.core.realtime.Connection`), by id and by gateway."""

    def put_connection(self, connection: Connection) -> None:
        """Record a session opened by an upgrade (it expires at ``connection.expires_at``)."""
        ...

    def get_connection(self, connection_id: str) -> Connection | None:
        """The session with this id, ``None`` when unknown (an expired one is returned: the services judge expiry)."""
        ...

    def remove_connection(self, connection_id: str) -> None:
        """Forget a session (closed or gone); forgetting an unknown one does nothing."""
        ...

    def list_connections(self, gateway: str) -> list[Connection]:
        """The sessions of ``gateway``, expired ones included until removed (a session opened a moment ago may be
        missing: a client pulls on connect)."""
        ...


class ConnectionSender(Protocol):
    """Sends to a WebSocket session by id: API Gateway's management API on AWS, the local front's sockets locally."""

    def send(self, connection_id: str, data: bytes) -> bool:
        """Send one message; ``False`` when the session is gone (API Gateway's 410)."""
        ...

    def close(self, connection_id: str) -> None:
        """Close the session (a gone session is not an error)."""
        ...


@dataclass(frozen=True, slots=True)
class StoredPosition:
    """A connector's stored poll position.

    Attributes:
        position: Where the next poll resumes (``{}``: the beginning).
        version: Incremented by every committed poll (0: never polled); part of each polled delta's id.
        lease: The token of the poller holding the connector, if any.
        lease_until_ms: When that lease expires (epoch ms).
    """

    position: Mapping[str, Any]
    version: int = 0
    lease: str | None = None
    lease_until_ms: int = 0


class ConnectorPositionStore(Protocol):
    """Connector poll positions with a lease: one poller at a time per connector, and a position only moves forward
    from the version its poller started from."""

    def read_position(self, gateway: str, name: str) -> StoredPosition:
        """The stored position (consistent read); ``StoredPosition({})`` when the connector was never polled."""
        ...

    def acquire(self, gateway: str, name: str, version: int, token: str, until_ms: int, now_ms: int) -> bool:
        """Take the lease with ``token`` until ``until_ms`` if the stored version is still ``version`` and no other
        lease is live at ``now_ms``; ``False`` otherwise (another poller holds it, or has moved the position)."""
        ...

    def commit(self, gateway: str, name: str, token: str, version: int, position: Mapping[str, Any]) -> bool:
        """Store ``position`` as version ``version + 1`` and drop the lease, if the stored version is ``version`` and
        the lease is still ``token``'s; ``False`` (nothing changes) otherwise."""
        ...

    def renew(self, gateway: str, name: str, token: str, until_ms: int) -> bool:
        """Extend ``token``'s lease to ``until_ms`` if it is still ``token``'s (a poll in progress keeps it);
        ``False`` (nothing changes) once it was taken over, committed or released."""
        ...

    def release(self, gateway: str, name: str, token: str) -> bool:
        """Drop ``token``'s lease (a failed poll) so the next poll need not wait for it to expire; ``False`` (nothing
        changes) when the lease is not ``token``'s."""
        ...

    def leases(self, gateway: str) -> dict[str, str]:
        """The leases on record for the gateway's connectors, live or expired: ``{connector: token}``."""
        ...

    def delete_position(self, gateway: str, name: str) -> None:
        """Forget the connector's position (it was unregistered)."""
        ...


class ConnectorScheduler(Protocol):
    """Runs a connector's poller periodically: EventBridge Scheduler on AWS, the local poll loop locally."""

    def schedule(self, gateway: str, name: str, interval_ms: int) -> None:
        """Create or update the connector's schedule.

        Raises:
            AdapterError: the scheduler refused.
        """
        ...

    def unschedule(self, gateway: str, name: str) -> None:
        """Remove the connector's schedule (a missing one is not an error)."""
        ...


class RateLimitCounter(Protocol):
    """The shared state of the per-caller rate limits: a request count per caller key and fixed window, shared by
    every process serving the gateway (:mod:`lakesync.gateway.limits` takes allowance from it in slices)."""

    def take(self, key: str, window: int, want: int, limit: int, expires_at: int) -> int:
        """Add up to ``want`` (at least 1) to the count of ``key`` in ``window``, never past ``limit``, atomically.

        Returns:
            How much was added: ``want``, what was left below ``limit`` when that is less, or 0 when the window's
            count had reached ``limit``.

        ``expires_at`` (Unix seconds): the counter may be forgotten after it (the window has ended by then).
        """
        ...


class SinceSessionStore(Protocol):
    """Sessions of ``since`` clients, by gateway and clientId."""

    def get(self, gateway: str, client_id: str) -> SinceSession | None:
        """The client's session (consistent read), or ``None``."""
        ...

    def put(self, gateway: str, client_id: str, session: SinceSession, expires_at: int) -> None:
        """Store ``session`` as version ``session.version + 1`` if the stored version is still ``session.version``
        (0: none stored).

        Raises:
            CommitConflict: another request changed the session meanwhile.
        """
        ...


class SubscriptionStore(Protocol):
    """Each client's stream subscriptions, by gateway and clientId (the token's ``sub``).

    A subscription is identified by its stream and parameters (:class:`~lakesync.core.streams.Subscription` equality);
    its ``expires_at`` (epoch milliseconds) is when it runs out. One that has run out is never returned and no longer
    counts, and a later write drops it. :func:`put_subscription` is the rule every implementation applies.
    """

    def get(self, gateway: str, client_id: str, now_ms: int) -> list[Subscription]:
        """The client's subscriptions live at ``now_ms`` (consistent read), sorted by stream and parameters."""
        ...

    def put(self, gateway: str, client_id: str, subscription: Subscription, now_ms: int, limit: int) -> bool:
        """Store ``subscription``, or refresh the expiry of the equal one held; ``False`` (nothing stored) when the
        client already holds ``limit`` other live subscriptions. Atomic: two concurrent puts at the bound cannot both
        be stored.

        Raises:
            CommitConflictError: concurrent writes of the client's subscriptions kept winning; retry.
        """
        ...

    def remove(self, gateway: str, client_id: str, subscription: Subscription, now_ms: int) -> bool:
        """Remove the live subscription equal to ``subscription``; whether there was one."""
        ...

    def get_served(self, gateway: str, client_id: str) -> dict[str, Scope]:
        """The scopes pulls served the client lately, by fingerprint, as :func:`~lakesync.core.scope.held_scope`
        tells them (consistent read; :mod:`lakesync.gateway.scope_change`); a kept scope that cannot be read is
        left out."""
        ...

    def put_served(self, gateway: str, client_id: str, scope: Scope, held: Mapping[str, Scope] | None = None) -> None:
        """Record that a pull is about to hand the client a cursor of ``scope`` (kept as :func:`keep_served` says);
        ``held``: the kept scopes as the caller just read them (``None``: read them)."""
        ...


class MembershipReader(Protocol):
    """Reads the membership tables streams and buckets name (:class:`~lakesync.core.filters.Membership`): the live
    rows of a gateway's tables, as of the latest commits."""

    def source(self, gateway: str) -> MembershipSource:
        """A membership source over ``gateway``'s live rows, current at the call (one pull, push or broadcast uses
        one)."""
        ...


class LakeRowReader(Protocol):
    """The lake's history of one row (``lakesync explain``): Spark SQL locally (:mod:`lakesync.spark.explain`),
    Athena on AWS (:mod:`lakesync.lake.athena_explain`)."""

    def read_row(self, gateway: str, table: str, row_id: str) -> LakeRow:
        """The row's deltas in the delta log (each with when it was flushed) and its state-table row."""
        ...


def put_subscription(
    held: Sequence[Subscription], subscription: Subscription, now_ms: int, limit: int
) -> list[Subscription] | None:
    """The subscriptions a client holds after :meth:`SubscriptionStore.put` of ``subscription``: the live ones of
    ``held``, the equal one replaced, sorted; ``None`` when that would be more than ``limit``."""
    kept = [s for s in held if not s.expired(now_ms) and s != subscription]
    if len(kept) >= limit:
        return None
    return sorted([*kept, subscription], key=subscription_order)


MAX_SERVED_SCOPES: Final = 16
"""Served scopes a client's record keeps (the latest). A cursor names at most 10 (the scope it holds, the target of
the difference under way and the 8 unfinished ones it may hold), each kept by the pull that handed it out, and a pull
keeps at most one: so the client's own pulls never drop a scope its cursor still names."""


def keep_served(held: Mapping[str, Scope], scope: Scope) -> dict[str, Scope]:
    """The served scopes after :meth:`SubscriptionStore.put_served`: ``held`` (oldest first) with ``scope`` last,
    the oldest dropped past :data:`MAX_SERVED_SCOPES`."""
    kept = {fp: held_scope for fp, held_scope in held.items() if fp != scope.fingerprint}
    kept[scope.fingerprint] = scope
    return dict(list(kept.items())[-MAX_SERVED_SCOPES:])


def subscription_order(subscription: Subscription) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The order of a client's subscriptions: by stream, then parameters."""
    return subscription.stream, subscription.params
