"""In-memory adapters of the gateway ports, for unit tests and pure-logic runs.

They honour the same contract as the DynamoDB adapters (``tests/contract`` runs one suite against both), including
commits guarded by the shard head, so logic tested against them holds on DynamoDB. (Here a commit's rows are
written with its log, at once; on DynamoDB right after it.)
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from lakesync.core.connectors import ConnectorConfig
from lakesync.core.destinations import DestinationConfig
from lakesync.core.errors import AlreadyExistsError
from lakesync.core.filters import InMemoryMemberships
from lakesync.core.log import (
    Commit,
    CommitBasis,
    CommitConflict,
    LogEntry,
    ShardHead,
    ShardId,
    StoredRow,
)
from lakesync.core.realtime import Connection
from lakesync.core.rules import SyncRules
from lakesync.core.schema import TableSchema
from lakesync.core.scope import Scope, held_scope
from lakesync.core.since import SinceSession
from lakesync.core.streams import Subscription
from lakesync.ports import StoredPosition, keep_served, put_subscription, read_from_entry


class InMemoryBufferStore:
    """The buffer in process memory; thread-safe.

    Dedup records are kept by gateway and key; the keys are opaque (the push service records
    :func:`~lakesync.core.log.dedup_key` of clientId and deltaId), as on DynamoDB.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._heads: dict[ShardId, ShardHead] = {}
        self._logs: dict[ShardId, list[LogEntry]] = {}
        self._rows: dict[tuple[str, str, str], StoredRow] = {}
        self._dedup: dict[tuple[str, str], int] = {}

    def get_heads(
        self, shards: Sequence[ShardId], *, reaching: Mapping[ShardId, int] | None = None
    ) -> dict[ShardId, ShardHead]:
        with self._lock:
            return {s: self._heads[s] for s in shards if s in self._heads}

    def list_shards(self, gateway: str) -> list[ShardId]:
        with self._lock:
            return sorted(s for s in self._heads if s.gateway == gateway)

    def get_rows(self, gateway: str, rows: Sequence[tuple[str, str]]) -> dict[tuple[str, str], StoredRow]:
        with self._lock:
            found = {}
            for table, row_id in rows:
                row = self._rows.get((gateway, table, row_id))
                if row is not None:
                    found[(table, row_id)] = row
            return found

    def seen_delta_ids(self, gateway: str, delta_ids: Sequence[str], now_s: int) -> set[str]:
        with self._lock:
            return {d for d in delta_ids if self._dedup.get((gateway, d), 0) > now_s}

    def read_commit_basis(self, shard: ShardId, rows: Sequence[tuple[str, str]]) -> CommitBasis:
        with self._lock:
            return CommitBasis(
                head=self._heads.get(shard),
                rows={
                    (table, row_id): row
                    for table, row_id in rows
                    if (row := self._rows.get((shard.gateway, table, row_id))) is not None
                },
            )

    def record_delta_ids(self, gateway: str, delta_ids: Sequence[str], expires_at: int) -> None:
        with self._lock:
            for delta_id in delta_ids:
                self._dedup[(gateway, delta_id)] = expires_at

    def commit(self, commit: Commit) -> None:
        gateway = commit.shard.gateway
        with self._lock:
            head = self._heads.get(commit.shard)
            if commit.new_shard:
                if head is not None:
                    raise CommitConflict()
            elif head is None or head.seq != commit.expected_seq:
                raise CommitConflict()
            new_head = commit.head
            if head is not None:  # like the DynamoDB head update, a commit leaves the release marks alone
                new_head = replace(new_head, released_seq=head.released_seq, released_hlc=head.released_hlc)
            self._heads[commit.shard] = new_head
            self._logs.setdefault(commit.shard, []).extend(commit.entries)
            for write in commit.rows:
                key = (gateway, write.row.state.table, write.row.state.row_id)
                current = self._rows.get(key)
                if current is None or current.version < write.row.version:  # as on DynamoDB: never backwards
                    self._rows[key] = write.row

    def read_log(self, shard: ShardId, after_seq: int, limit: int, *, images: bool = True) -> list[LogEntry]:
        with self._lock:
            log = self._logs.get(shard, [])
            start = bisect.bisect_right(log, after_seq, key=lambda e: e.seq)
            page = log[start : start + limit]
            # As on DynamoDB: entries continue the sequence or are not returned (here a gap means a release).
            return _images(page, images) if page and page[0].seq == after_seq + 1 else []

    def read_log_at(
        self, shard: ShardId, seq: int, limit: int, *, images: bool = True
    ) -> tuple[int | None, list[LogEntry]]:
        return read_from_entry(self, shard, seq, limit, images=images)

    def read_log_by_commit_hlc(
        self, shard: ShardId, after_commit_hlc: int, limit: int, *, images: bool = True
    ) -> list[LogEntry]:
        with self._lock:
            log = self._logs.get(shard, [])
            start = bisect.bisect_right(log, after_commit_hlc, key=lambda e: e.commit_hlc)
            return _images(log[start : start + limit], images)

    def release_log(self, shard: ShardId, through_seq: int) -> None:
        """Drop the log entries up to ``through_seq`` and mark the head, as the flush job's release step does."""
        with self._lock:
            log = self._logs.get(shard, [])
            gone = [e for e in log if e.seq <= through_seq]
            if not gone:
                return
            self._logs[shard] = log[len(gone) :]
            head = self._heads[shard]
            self._heads[shard] = replace(head, released_seq=gone[-1].seq, released_hlc=gone[-1].commit_hlc)

    def expire_dedup(self, now_s: int) -> None:
        """Drop expired deltaIds, as DynamoDB's TTL sweeper eventually does."""
        with self._lock:
            self._dedup = {k: v for k, v in self._dedup.items() if v > now_s}


def _images(entries: list[LogEntry], images: bool) -> list[LogEntry]:
    return entries if images else [e.with_images(None, None) for e in entries]


class InMemoryConfigStore:
    """Gateway configuration in process memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: dict[str, SyncRules] = {}
        self._schemas: dict[str, dict[str, tuple[TableSchema, int]]] = {}
        self._flush_requests: dict[str, list[dict[str, Any]]] = {}
        self._destinations: dict[str, dict[str, DestinationConfig]] = {}
        self._connectors: dict[str, dict[str, ConnectorConfig]] = {}

    def get_sync_rules(self, gateway: str) -> SyncRules | None:
        with self._lock:
            return self._rules.get(gateway)

    def put_sync_rules(self, gateway: str, rules: SyncRules) -> None:
        with self._lock:
            self._rules[gateway] = rules

    def get_schemas(self, gateway: str) -> dict[str, tuple[TableSchema, int]]:
        with self._lock:
            return dict(self._schemas.get(gateway, {}))

    def get_push_config(self, gateway: str) -> tuple[SyncRules | None, dict[str, tuple[TableSchema, int]]]:
        with self._lock:
            return self._rules.get(gateway), dict(self._schemas.get(gateway, {}))

    def put_schema(self, gateway: str, schema: TableSchema, version: int, expected_version: int) -> None:
        with self._lock:
            tables = self._schemas.setdefault(gateway, {})
            current = tables.get(schema.table)
            if (current[1] if current else 0) != expected_version:
                raise CommitConflict()
            tables[schema.table] = (schema, version)

    def request_flush(self, gateway: str, request: Mapping[str, Any]) -> None:
        with self._lock:
            self._flush_requests.setdefault(gateway, []).append(dict(request))

    def list_flush_requests(self, gateway: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._flush_requests.get(gateway, []))

    def list_destinations(self, gateway: str) -> list[DestinationConfig]:
        with self._lock:
            found = self._destinations.get(gateway, {})
            return [found[name] for name in sorted(found)]

    def add_destination(self, gateway: str, config: DestinationConfig) -> None:
        with self._lock:
            found = self._destinations.setdefault(gateway, {})
            if config.name in found:
                raise AlreadyExistsError(f'Destination "{config.name}" already exists')
            found[config.name] = config

    def remove_destination(self, gateway: str, name: str) -> bool:
        with self._lock:
            return self._destinations.get(gateway, {}).pop(name, None) is not None

    def list_connectors(self, gateway: str) -> list[ConnectorConfig]:
        with self._lock:
            found = self._connectors.get(gateway, {})
            return [found[name] for name in sorted(found)]

    def get_connector(self, gateway: str, name: str) -> ConnectorConfig | None:
        with self._lock:
            return self._connectors.get(gateway, {}).get(name)

    def add_connector(self, gateway: str, config: ConnectorConfig) -> None:
        with self._lock:
            found = self._connectors.setdefault(gateway, {})
            if config.name in found:
                raise AlreadyExistsError(f'Connector "{config.name}" already exists')
            found[config.name] = config

    def remove_connector(self, gateway: str, name: str) -> bool:
        with self._lock:
            return self._connectors.get(gateway, {}).pop(name, None) is not None


class InMemoryPositionStore:
    """Connector poll positions with leases, in process memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._positions: dict[tuple[str, str], StoredPosition] = {}

    def read_position(self, gateway: str, name: str) -> StoredPosition:
        with self._lock:
            return self._positions.get((gateway, name), StoredPosition({}))

    def acquire(self, gateway: str, name: str, version: int, token: str, until_ms: int, now_ms: int) -> bool:
        with self._lock:
            current = self._positions.get((gateway, name), StoredPosition({}))
            if current.version != version or (current.lease is not None and current.lease_until_ms > now_ms):
                return False
            self._positions[(gateway, name)] = replace(current, lease=token, lease_until_ms=until_ms)
            return True

    def commit(self, gateway: str, name: str, token: str, version: int, position: Mapping[str, Any]) -> bool:
        with self._lock:
            current = self._positions.get((gateway, name), StoredPosition({}))
            if current.version != version or current.lease != token:
                return False
            self._positions[(gateway, name)] = StoredPosition(dict(position), version + 1)
            return True

    def renew(self, gateway: str, name: str, token: str, until_ms: int) -> bool:
        with self._lock:
            current = self._positions.get((gateway, name))
            if current is None or current.lease != token:
                return False
            self._positions[(gateway, name)] = replace(current, lease_until_ms=until_ms)
            return True

    def release(self, gateway: str, name: str, token: str) -> bool:
        with self._lock:
            current = self._positions.get((gateway, name))
            if current is None or current.lease != token:
                return False
            self._positions[(gateway, name)] = replace(current, lease=None, lease_until_ms=0)
            return True

    def leases(self, gateway: str) -> dict[str, str]:
        with self._lock:
            return {n: p.lease for (g, n), p in self._positions.items() if g == gateway and p.lease is not None}

    def delete_position(self, gateway: str, name: str) -> None:
        with self._lock:
            self._positions.pop((gateway, name), None)


class RecordingScheduler:
    """A :class:`~lakesync.ports.ConnectorScheduler` that only records the schedules (tests, and the embedded
    default, whose poll loop finds connectors in the config store itself)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.schedules: dict[tuple[str, str], int] = {}

    def schedule(self, gateway: str, name: str, interval_ms: int) -> None:
        with self._lock:
            self.schedules[(gateway, name)] = interval_ms

    def unschedule(self, gateway: str, name: str) -> None:
        with self._lock:
            self.schedules.pop((gateway, name), None)


class InMemoryActionStore:
    """Action idempotency records in process memory, with expiry, per (gateway, client)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[tuple[str, str, str], tuple[dict[str, Any], int]] = {}

    def get(self, gateway: str, client_id: str, keys: Sequence[str], now_s: int) -> dict[str, dict[str, Any]]:
        with self._lock:
            found = {}
            for key in keys:
                entry = self._records.get((gateway, client_id, key))
                if entry is not None and entry[1] > now_s:
                    found[key] = entry[0]
            return found

    def claim(self, gateway: str, client_id: str, key: str, expires_at: int, now_s: int) -> bool:
        with self._lock:
            entry = self._records.get((gateway, client_id, key))
            if entry is not None and entry[1] > now_s:
                return False
            self._records[(gateway, client_id, key)] = ({"status": "pending"}, expires_at)
            return True

    def put(
        self, gateway: str, client_id: str, keys: Sequence[str], record: Mapping[str, Any], expires_at: int
    ) -> None:
        with self._lock:
            for key in keys:
                self._records[(gateway, client_id, key)] = (dict(record), expires_at)

    def release(self, gateway: str, client_id: str, key: str) -> None:
        with self._lock:
            self._records.pop((gateway, client_id, key), None)


class InMemoryConnectionStore:
    """WebSocket sessions in process memory; thread-safe. Sessions stay until removed (DynamoDB's TTL is lazy too);
    the services judge expiry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connections: dict[str, Connection] = {}

    def put_connection(self, connection: Connection) -> None:
        with self._lock:
            self._connections[connection.connection_id] = connection

    def get_connection(self, connection_id: str) -> Connection | None:
        with self._lock:
            return self._connections.get(connection_id)

    def remove_connection(self, connection_id: str) -> None:
        with self._lock:
            self._connections.pop(connection_id, None)

    def list_connections(self, gateway: str) -> list[Connection]:
        with self._lock:
            return [c for c in self._connections.values() if c.gateway == gateway]


class InMemoryObjectStore:
    """The :class:`~lakesync.ports.ObjectStore` as a dict (``objects``), for tests and benchmarks; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.objects: dict[str, bytes] = {}

    def put(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> None:
        with self._lock:
            self.objects[key] = bytes(data)

    def get(self, key: str) -> bytes | None:
        with self._lock:
            return self.objects.get(key)

    def list_keys(self, prefix: str) -> list[str]:
        with self._lock:
            return sorted(k for k in self.objects if k.startswith(prefix))


class InMemoryRateLimitCounter:
    """:class:`~lakesync.ports.RateLimitCounter` in process memory; thread-safe. Counters are kept for the life of
    the store (tests and one process: ``expires_at`` is not needed to bound it there)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, int], int] = {}

    def take(self, key: str, window: int, want: int, limit: int, expires_at: int) -> int:
        with self._lock:
            count = self._counts.get((key, window), 0)
            granted = max(0, min(want, limit - count))
            self._counts[(key, window)] = count + granted
            return granted

    def count(self, key: str, window: int) -> int:
        """The requests counted for ``key`` in ``window`` (tests)."""
        with self._lock:
            return self._counts.get((key, window), 0)


class InMemorySinceSessions:
    """:class:`SinceSessionStore` in memory (tests of pure logic; the contract tests run it beside DynamoDB)."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], tuple[str, int]] = {}
        self._lock = threading.Lock()

    def get(self, gateway: str, client_id: str) -> SinceSession | None:
        with self._lock:
            found = self._items.get((gateway, client_id))
        return None if found is None else SinceSession.from_json(json.loads(found[0]), found[1])

    def put(self, gateway: str, client_id: str, session: SinceSession, expires_at: int) -> None:
        with self._lock:
            stored = self._items.get((gateway, client_id))
            if (stored[1] if stored else 0) != session.version:
                raise CommitConflict()
            self._items[(gateway, client_id)] = (session.encode(), session.version + 1)


class InMemorySubscriptions:
    """:class:`~lakesync.ports.SubscriptionStore` in memory (the contract tests run it beside DynamoDB)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], list[Subscription]] = {}
        self._served: dict[tuple[str, str], dict[str, Scope]] = {}
        self._lock = threading.Lock()

    def get(self, gateway: str, client_id: str, now_ms: int) -> list[Subscription]:
        with self._lock:
            return [s for s in self._held.get((gateway, client_id), ()) if not s.expired(now_ms)]

    def put(self, gateway: str, client_id: str, subscription: Subscription, now_ms: int, limit: int) -> bool:
        with self._lock:
            after = put_subscription(self._held.get((gateway, client_id), ()), subscription, now_ms, limit)
            if after is not None:
                self._held[(gateway, client_id)] = after
            return after is not None

    def remove(self, gateway: str, client_id: str, subscription: Subscription, now_ms: int) -> bool:
        with self._lock:
            live = [s for s in self._held.get((gateway, client_id), ()) if not s.expired(now_ms)]
            kept = [s for s in live if s != subscription]
            self._held[(gateway, client_id)] = kept
            return len(kept) < len(live)

    def get_served(self, gateway: str, client_id: str) -> dict[str, Scope]:
        with self._lock:
            return dict(self._served.get((gateway, client_id), {}))

    def put_served(self, gateway: str, client_id: str, scope: Scope, held: Mapping[str, Scope] | None = None) -> None:
        kept = held_scope(scope.to_json())  # what the stored form keeps, as the DynamoDB store gives it back
        with self._lock:
            key = (gateway, client_id)
            self._served[key] = keep_served(self._served.get(key, {}) if held is None else held, kept)


class InMemoryMembershipReader:
    """A :class:`~lakesync.ports.MembershipReader` over membership rows held in memory, one
    :class:`~lakesync.core.filters.InMemoryMemberships` per gateway (``default`` for any other gateway)."""

    def __init__(
        self,
        default: InMemoryMemberships | None = None,
        gateways: Mapping[str, InMemoryMemberships] | None = None,
    ) -> None:
        self._default = default if default is not None else InMemoryMemberships()
        self._gateways = dict(gateways or {})

    def source(self, gateway: str) -> InMemoryMemberships:
        """The membership rows of ``gateway``."""
        return self._gateways.get(gateway, self._default)
