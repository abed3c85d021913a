"""The membership tables of a gateway's rules, read for the buckets and streams that filter by them (docs/streams.md,
"Membership filters"): the gateway's :class:`~lakesync.ports.MembershipReader`.

The row index is keyed by row and cannot list a table, so a membership table is read as the scope difference reads
rows (:mod:`lakesync.gateway.scope_change`): the covering checkpoint's rows of the table, each folded
(:func:`~lakesync.core.merge.fold`) with the log after the checkpoint up to the shards' heads, or the log from its
start while nothing has been released.

The fold is kept per process, per (gateway, table): the live rows, the positions they are at, and an index of them by
the columns the queries' ``eq``/``in`` clauses name (a query looks its candidates up; only a query without such a
clause scans the table). A request's source catches a table up once, on its first query of it:

* the rules and the shard registry (the gateway's pull basis, kept for a moment where the deployment keeps it): only a
  table a membership of the rules names is read; the table's shards are the registry's and its configured
  sub-shards (a sub-shard the kept registry does not know yet is read all the same);
* one :meth:`~lakesync.ports.BufferStore.get_heads` of the table's shards; nothing more when they have not moved;
* the log after the kept positions up to the heads, folded in; when the log the fold relies on was released (or the
  buffer went back), it starts over from the covering checkpoint.

A source answers each query once (a request sees one answer per query however often its scopes resolve it). A table
holds at most ``max_rows`` live rows (:data:`MAX_MEMBERSHIP_ROWS`): past it, every query of the table answers
:class:`MembershipTableTooLargeError` (503, naming the table and the limit) until it shrinks, never a part of its rows.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final

from lakesync.core.canonical import js_string_coerce
from lakesync.core.errors import CursorExpiredError, StorageBusyError, StorageError
from lakesync.core.filters import INDEXABLE_OPS, MembershipQuery
from lakesync.core.log import PullBasis, ShardHead, ShardId
from lakesync.core.merge import RowState, fold, merge_all
from lakesync.gateway.basis_cache import fresh_reader
from lakesync.gateway.log_tail import read_tail

if TYPE_CHECKING:
    from lakesync.core.canonical import JsonValue
    from lakesync.core.filters import MembershipSource
    from lakesync.gateway.deps import GatewayDeps
    from lakesync.ports import PullBasisReader

__all__ = ["MAX_MEMBERSHIP_ROWS", "GatewayMemberships", "MembershipTableTooLargeError"]

logger = logging.getLogger(__name__)

MAX_MEMBERSHIP_ROWS: Final = 100_000
"""Most live rows one membership table may hold in a gateway process (its fold and index stay in memory: about
0.6 KB a row of a few short columns, its index included: some 60 MB at the limit)."""
_ATTEMPTS: Final = 3
"""Reads of a table's log a catch-up makes while a release keeps overtaking them, before it answers 503."""


class MembershipTableTooLargeError(StorageError):
    """503: a membership table holds more live rows than a gateway reads (:data:`MAX_MEMBERSHIP_ROWS`); the request
    cannot be served until the table shrinks, and unlike a 500 the message says so."""

    code = "MEMBERSHIP_TABLE_TOO_LARGE"
    status = 503


class _TableRows:
    """The live rows of one table at :attr:`positions`, indexed by column values; guarded by :attr:`lock`."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loaded = False
        self.positions: dict[str, int] = {}
        self.too_large_at: dict[str, int] | None = None
        self._states: dict[str, RowState] = {}
        self._index: dict[str, dict[str, set[str]]] = {}

    def __len__(self) -> int:
        return len(self._states)

    def reset(self) -> None:
        """Forget every row (the index keeps its columns)."""
        self.loaded, self.positions, self._states = False, {}, {}
        self._index = {column: {} for column in self._index}

    def state(self, row_id: str) -> RowState | None:
        """The row's state, when it is live."""
        return self._states.get(row_id)

    def put(self, row_id: str, state: RowState | None) -> None:
        """Set the row's state (``None`` or not live: the row is gone)."""
        old = self._states.pop(row_id, None)
        if old is not None:
            for column, text in _texts(old, self._index):
                by_value = self._index[column]
                ids = by_value[text]
                ids.discard(row_id)
                if not ids:
                    del by_value[text]
        if state is None or not state.exists:
            return
        self._states[row_id] = state
        for column, text in _texts(state, self._index):
            self._index[column].setdefault(text, set()).add(row_id)

    def answer(self, query: MembershipQuery) -> frozenset[str]:
        """The values the live rows give ``query``, from the candidates of its most selective ``eq``/``in`` clause."""
        values = (query.contributes(values) for values in self._candidates(query))
        return frozenset(v for v in values if v is not None)

    def _candidates(self, query: MembershipQuery) -> Iterable[Mapping[str, JsonValue]]:
        best: set[str] | None = None
        for clause in query.where:
            if clause.op not in INDEXABLE_OPS:
                continue
            by_value = self._column_index(clause.column)
            ids = set().union(*(by_value.get(v, ()) for v in clause.values))
            if best is None or len(ids) < len(best):
                best = ids
        states = self._states.values() if best is None else (self._states[row_id] for row_id in best)
        return (values for values in (s.values() for s in states) if values is not None)

    def _column_index(self, column: str) -> dict[str, set[str]]:
        by_value = self._index.get(column)
        if by_value is None:
            by_value = self._index[column] = {}
            for row_id, state in self._states.items():
                held = state.columns.get(column)
                if held is not None:
                    by_value.setdefault(js_string_coerce(held.value), set()).add(row_id)
        return by_value


def _texts(state: RowState, index: Mapping[str, object]) -> list[tuple[str, str]]:
    """The (column, value as a filter compares it) pairs of ``state`` on the indexed columns."""
    return [(c, js_string_coerce(state.columns[c].value)) for c in index if c in state.columns]


class GatewayMemberships:
    """The :class:`~lakesync.ports.MembershipReader` over a gateway's stores (module docstring); thread-safe.

    Args:
        deps: The gateway's stores: the buffer (heads, log), the checkpoint bucket, the rules and shard registry
            (``pull_basis``, else ``config`` and ``buffer``) and the sub-shard settings.
        max_rows: Most live rows of one membership table.
    """

    def __init__(self, deps: GatewayDeps, *, max_rows: int = MAX_MEMBERSHIP_ROWS) -> None:
        if max_rows < 1:
            raise ValueError("max_rows must be positive")
        self._deps = deps
        self._max_rows = max_rows
        self._tables: dict[tuple[str, str], _TableRows] = {}
        self._lock = threading.Lock()

    def source(self, gateway: str) -> MembershipSource:
        """A source over ``gateway``'s membership tables for one request (each table caught up on its first query)."""
        return _RequestSource(self, gateway)

    def _basis(self) -> PullBasisReader:
        if self._deps.pull_basis is not None:
            return self._deps.pull_basis
        from lakesync.gateway.pull import StoresPullBasis

        return StoresPullBasis(self._deps.config, self._deps.buffer)

    def read(self, gateway: str, query: MembershipQuery, basis: PullBasis | None) -> tuple[frozenset[str], PullBasis]:
        """The values of ``query`` after catching its table up (with ``basis``, the request's rules and registry,
        when it read them already), and the basis it used."""
        table = query.table
        if basis is None or not _names(basis, table):
            basis = self._basis().read_pull_basis(gateway)
            if not _names(basis, table):
                basis = fresh_reader(self._basis()).read_pull_basis(gateway)  # rules saved a moment ago
            self._forget_unnamed(gateway, basis)
        if not _names(basis, table):
            logger.warning("membership table %r is not named by the rules of gateway %r: no rows", table, gateway)
            return frozenset(), basis
        with self._lock:
            rows = self._tables.setdefault((gateway, table), _TableRows())
        with rows.lock:
            self._catch_up(gateway, table, rows, self._shards(gateway, table, basis, rows))
            return rows.answer(query), basis

    def answer(self, gateway: str, query: MembershipQuery) -> frozenset[str]:
        """The values of ``query`` from the rows as last caught up (none when its table was never read)."""
        with self._lock:
            rows = self._tables.get((gateway, query.table))
        if rows is None:
            return frozenset()
        with rows.lock:
            return rows.answer(query)

    def _forget_unnamed(self, gateway: str, basis: PullBasis) -> None:
        """Drop the folds of ``gateway``'s tables its rules no longer name."""
        named = basis.rules.membership_tables() if basis.rules is not None else frozenset()
        with self._lock:
            for key in [k for k in self._tables if k[0] == gateway and k[1] not in named]:
                del self._tables[key]

    def _shards(self, gateway: str, table: str, basis: PullBasis, rows: _TableRows) -> list[ShardId]:
        """The registry's shards of ``table``, its configured sub-shards and those the fold is at."""
        subs = max(1, self._deps.settings.sub_shards.get(table, 1))
        shards = {s for s in basis.shards if s.table == table}
        shards.update(ShardId(gateway, table, sub) for sub in range(subs))
        shards.update(ShardId.parse(key) for key in rows.positions)
        return sorted(shards)

    def _catch_up(self, gateway: str, table: str, rows: _TableRows, shards: Sequence[ShardId]) -> None:
        """Bring ``rows`` to the heads of ``shards`` (module docstring).

        Raises:
            MembershipTableTooLargeError: the table holds more than ``max_rows`` live rows (503).
            StorageError: the log was released past every readable checkpoint (500).
            StorageBusyError: releases kept overtaking the read (503).
        """
        buffer = self._deps.buffer
        heads = buffer.get_heads(list(shards))
        for _ in range(_ATTEMPTS):
            ends = {head.shard.key: head.seq for head in heads.values()}
            if rows.too_large_at == ends:
                raise self._too_large(table)
            if rows.loaded and _same(rows.positions, ends):
                return
            if not rows.loaded or _behind(rows.positions, heads.values()):
                self._load_base(gateway, table, rows, heads)
            try:
                tail = read_tail(buffer, gateway, list(heads), rows.positions, ends)
            except CursorExpiredError:  # released while read: start over from the checkpoint that allowed it
                rows.reset()
                heads = buffer.get_heads(list(shards))
                continue
            for (_, row_id), entries in tail.items():
                rows.put(row_id, merge_all(rows.state(row_id), (e.delta for e in entries))[0])
            rows.positions = {k: max(v, rows.positions.get(k, 0)) for k, v in ends.items()}
            self._check_size(table, rows, ends)
            return
        raise StorageBusyError(f"The log of membership table {table!r} kept being released while read; retry")

    def _load_base(self, gateway: str, table: str, rows: _TableRows, heads: Mapping[ShardId, ShardHead]) -> None:
        """Start ``rows`` over: empty at the start of the log, or the covering checkpoint's rows of ``table``."""
        rows.reset()
        if not any(head.released_seq for head in heads.values()):
            rows.loaded = True
            return
        # Only a table whose log was released reads a checkpoint: a request's cold start does not load the resync.
        from lakesync.gateway.checkpoint import chunk_rows
        from lakesync.gateway.resync import covering_checkpoint

        manifest = covering_checkpoint(self._deps, gateway, heads)
        objects = self._deps.objects
        if manifest is None or objects is None:
            raise StorageError(
                f"The log of membership table {table!r} was released past every readable checkpoint of {gateway!r}"
            )
        if not manifest.tables or table in manifest.tables:
            for info in manifest.chunks:
                for deltas in chunk_rows(objects, info):
                    if deltas[0].table == table:
                        rows.put(deltas[0].row_id, fold(deltas))
                self._check_size(table, rows, {h.shard.key: h.seq for h in heads.values()})
        rows.positions = {k: v for k, v in manifest.positions.items() if ShardId.parse(k).table == table}
        rows.loaded = True

    def _check_size(self, table: str, rows: _TableRows, ends: dict[str, int]) -> None:
        if len(rows) <= self._max_rows:
            rows.too_large_at = None
            return
        rows.reset()  # the memory goes back; the same heads answer at once, without reading again
        rows.too_large_at = ends
        raise self._too_large(table)

    def _too_large(self, table: str) -> MembershipTableTooLargeError:
        return MembershipTableTooLargeError(
            f"Membership table {table!r} holds more than {self._max_rows} live rows, more than a gateway reads to "
            "evaluate membership filters: keep membership rows in a smaller table"
        )


class _RequestSource:
    """One request's :class:`~lakesync.core.filters.MembershipSource`: each table caught up on its first query, each
    query answered once."""

    def __init__(self, reader: GatewayMemberships, gateway: str) -> None:
        self._reader = reader
        self._gateway = gateway
        self._basis: PullBasis | None = None
        self._read: set[str] = set()
        self._answers: dict[MembershipQuery, frozenset[str]] = {}
        self._lock = threading.Lock()

    def member_values(self, query: MembershipQuery) -> Collection[str]:
        """The values the live rows of ``query.table`` give ``query``, as of this request."""
        with self._lock:
            answer = self._answers.get(query)
            if answer is None:
                if query.table in self._read:
                    answer = self._reader.answer(self._gateway, query)
                else:
                    answer, self._basis = self._reader.read(self._gateway, query, self._basis)
                    self._read.add(query.table)
                self._answers[query] = answer
            return answer


def _names(basis: PullBasis, table: str) -> bool:
    return basis.rules is not None and table in basis.rules.membership_tables()


def _same(positions: Mapping[str, int], ends: Mapping[str, int]) -> bool:
    return all(positions.get(k, 0) == ends.get(k, 0) for k in {*positions, *ends})


def _behind(positions: Mapping[str, int], heads: Iterable[ShardHead]) -> bool:
    """Whether the log after ``positions`` was released, or the buffer went back behind them."""
    by_key = {head.shard.key: head for head in heads}
    if any(seq and key not in by_key for key, seq in positions.items()):
        return True
    return any(h.seq < positions.get(k, 0) or h.released_seq > positions.get(k, 0) for k, h in by_key.items())
