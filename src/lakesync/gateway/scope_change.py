"""The cursor pull of rules with streams: the caller's scope (its buckets and its live subscriptions), and a change of
that scope served as a difference (docs/streams.md, "The pull follows the scope").

A cursor served under such rules records the scope's fingerprint (:class:`~lakesync.gateway.cursor.CursorScope`);
the subscriptions each served scope was resolved from are kept per client
(:meth:`~lakesync.ports.SubscriptionStore.put_served`). When a pull finds the client's scope is no longer the one its
cursor holds (a subscribe, an unsubscribe, a subscription run out), it does not read the log: it serves the
difference as of the cursor's positions, page by page, the positions unchanged:

* each row's state at the positions is the covering checkpoint's row folded with the log after the checkpoint up to
  the positions (or, while nothing has been released, the log from its start);
* a row the new scope covers and the old one did not is sent with its deltas (its state);
* a row the old scope (or an earlier, unfinished difference's) covered and the new one does not is sent as a
  ``DELETE`` at HLC 0 under the caller's own id: *drop the row*, which no write can be (an HLC 0 tombstone is below
  every version) and which names no other client;
* then the cursor records the new scope and the log continues from the same positions under it: every change after
  the positions is judged by the new scope, every change up to them is in the difference, so nothing is sent twice or
  lost.

The source by cost. While nothing of the shards has been released, the state as of the positions is the log from
its start, but the latest checkpoint can stand for the log up to its own positions when those are all at or below the
cursor's (for the tables the difference reads) and it holds those tables. It is read, with the log after it, when
that is estimated cheaper: the checkpoint holds ``manifest.deltas`` deltas (``manifest.rows`` rows, one chunk object
per ``chunk_bytes``, every chunk read), the log it replaces ``sum(manifest.positions)`` entries of those shards (a
shard's sequence numbers are dense). A log entry carries its delta and its row images, so it is at least the bytes of
a checkpoint delta (``manifest.bytes / manifest.deltas``): the checkpoint is read when it has fewer deltas than the
log entries it replaces (a table updated over and over: many entries, one folded row each), the log otherwise (ties
too: it needs no object read). Below :data:`MIN_LOG_FOR_A_CHECKPOINT` entries to the cursor the manifest is not even
read. The row index cannot serve it: it is keyed by row and cannot list a table.

A scope that cannot be told again (the cursor's is no longer kept, or the rules or memberships changed so that its
subscriptions resolve differently) and a difference whose log was released past a checkpoint newer than the cursor
answer 410: the client reloads the checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from lakesync.core.checkpoint import Manifest, load_manifest
from lakesync.core.claims import Claims
from lakesync.core.delta import RowDelta
from lakesync.core.errors import StorageError
from lakesync.core.filters import Row
from lakesync.core.log import LogEntry, ShardId
from lakesync.core.merge import fold
from lakesync.core.rules import SyncRules
from lakesync.core.scope import UNCONFINED, Scope, difference, resolve_scope
from lakesync.gateway.checkpoint import chunk_rows
from lakesync.gateway.cursor import CursorScope, encode_cursor
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.log_pages import PAGE_MAX, PullResult, expired_any_error
from lakesync.gateway.log_tail import RowKey, read_tail
from lakesync.gateway.scope_moves import drop_delta

__all__ = ["MIN_LOG_FOR_A_CHECKPOINT", "ScopeView", "difference_page", "scope_view"]

MIN_LOG_FOR_A_CHECKPOINT: Final = PAGE_MAX
"""Log entries (up to the cursor, of the shards a difference reads) below which it reads the log without looking for
a checkpoint: one log page costs about what the manifest's ``GetObject`` does."""
_ROW_OVERHEAD: Final = 96
_MAX_UNFINISHED: Final = 8


@dataclass(frozen=True, slots=True)
class ScopeView:
    """What a cursor pull of a subscriber serves.

    Attributes:
        scope: The client's scope now.
        held: The scope whose rows the client holds up to the cursor's positions.
        unfinished: Scopes of unfinished differences: the client may hold the rows any of them covers and surely
            holds only those all of them (and ``held``) cover.
        mark: Where the difference stands (its ``target`` the new scope); ``None``: no difference to serve.
    """

    scope: Scope
    held: Scope
    unfinished: tuple[Scope, ...]
    mark: CursorScope | None

    def judge(self, table: str, values: Row | None) -> str | None:
        """``"enter"`` for a row to send, ``"leave"`` for a row to drop, ``None`` for one the client has right."""
        if values is None:
            return None
        # An unfinished difference may have sent what entered its scope and dropped what left it: the client
        # surely holds the rows every one of those scopes covers, and may hold those any of them covers.
        covered = [s.covers(table, values) for s in (self.held, *self.unfinished)]
        if self.scope.covers(table, values):
            return None if all(covered) else "enter"
        return "leave" if any(covered) else None

    def tables(self) -> frozenset[str] | None:
        """The tables a row may enter or leave in (``None``: any)."""
        tables: set[str] = set()
        for old in (self.held, *self.unfinished):
            change = difference(old, self.scope)
            for condition in (*change.entered, *change.left):
                if not condition.tables:
                    return None
                tables.update(condition.tables)
        return frozenset(tables)


def scope_view(
    deps: GatewayDeps,
    gateway: str,
    rules: SyncRules | None,
    claims: Claims,
    subscriber: str,
    served: CursorScope | None,
    positions: Mapping[str, int],
) -> ScopeView:
    """The scope a pull of ``subscriber`` serves, and the difference to serve first when its cursor (``served``,
    at ``positions``) holds another scope.

    The scope the cursor holds is read from the client's kept scopes only when it is not the scope now, so a pull
    whose scope did not change reads nothing more than the subscriptions (under rules with streams) and the
    memberships (under rules naming them). A scope is kept before a cursor of it is first handed out.

    Raises:
        CursorExpiredError: the cursor's scope can no longer be told (410).
    """
    store = deps.subscriptions
    assert store is not None
    now_ms = deps.wall_ms()
    memberships = deps.membership_source(gateway)
    subscriptions = store.get(gateway, subscriber, now_ms) if rules is not None and rules.streams else ()
    scope = resolve_scope(rules, claims, subscriptions, memberships, now_ms)
    known = [scope, UNCONFINED]  # the scope now, and that of rules that do not confine
    if served is None:
        # A checkpoint's cursor (or none): the client holds what its buckets covered when it was served, which is
        # what they cover now unless the rules or the memberships changed in between.
        buckets = resolve_scope(rules, claims, (), memberships)
        known.append(buckets)
        served = CursorScope(buckets.fingerprint)
    elif served.target is None and served.fingerprint == scope.fingerprint and positions:
        return ScopeView(scope, scope, (), None)  # the scope the cursor holds, kept when the cursor was made
    if not positions:
        view = ScopeView(scope, scope, (), None)  # nothing consumed: the log from its start is the whole scope
    elif served.target is None:
        mark = None if served.fingerprint == scope.fingerprint else CursorScope(served.fingerprint, scope.fingerprint)
        view = ScopeView(scope, scope, (), mark)
    else:
        mark = served
        if served.target != scope.fingerprint:
            # The scope changed again while a difference was served: start over towards the new one; rows of the
            # unfinished one may be held.
            unfinished = tuple(dict.fromkeys([*served.maybe, served.target]))
            if len(unfinished) > _MAX_UNFINISHED:
                raise expired_any_error(gateway)
            mark = CursorScope(served.fingerprint, scope.fingerprint, unfinished)
        view = ScopeView(scope, scope, (), mark)
    return _told(deps, gateway, subscriber, view, known)


def _told(deps: GatewayDeps, gateway: str, subscriber: str, view: ScopeView, known: Sequence[Scope]) -> ScopeView:
    """``view`` with the scopes its mark names told from ``known`` or the client's kept scopes, and the scope now
    kept (unless it is that of rules that do not confine, which is told without it).

    Raises:
        CursorExpiredError: a scope the mark names can no longer be told (410).
    """
    store = deps.subscriptions
    assert store is not None
    scope = view.scope
    if view.mark is None and scope.fingerprint == known[1].fingerprint:
        return view  # every row, under rules that do not confine: nothing to tell, nothing to keep
    stored = store.get_served(gateway, subscriber)
    if scope.fingerprint not in stored and scope.fingerprint != known[1].fingerprint:
        store.put_served(gateway, subscriber, scope, stored)
    kept = {**stored, **{k.fingerprint: k for k in known}}

    def told(fingerprint: str) -> Scope:
        held = kept.get(fingerprint)
        if held is None:
            raise expired_any_error(gateway)
        return held

    mark = view.mark
    if mark is None:
        return view
    held = told(mark.fingerprint)
    if mark.fingerprint not in stored and mark.fingerprint != known[1].fingerprint:
        # A cursor without a scope holds its buckets' (told from ``known`` now): kept, so that the difference's next
        # pages, whose cursors name it, can tell it again.
        store.put_served(gateway, subscriber, held)
    return ScopeView(scope, held, tuple(told(f) for f in mark.maybe), mark)


@dataclass
class _Page:
    """A difference page being filled."""

    limit: int
    budget: int
    items: list[LogEntry | RowDelta]
    size: int = 0

    @property
    def full(self) -> bool:
        return len(self.items) >= self.limit or self.size >= self.budget

    def add_entries(self, entries: Sequence[LogEntry | RowDelta]) -> None:
        self.items.extend(entries)
        self.size += sum(_size(e) for e in entries)


def _size(item: LogEntry | RowDelta) -> int:
    if isinstance(item, LogEntry):
        return item.size
    return _ROW_OVERHEAD + len(json.dumps(item.values(), separators=(",", ":")))


def difference_page(
    deps: GatewayDeps,
    gateway: str,
    shards: Sequence[ShardId],
    positions: Mapping[str, int],
    marks: Mapping[str, int],
    limit: int,
    view: ScopeView,
    subscriber: str,
) -> PullResult:
    """One page of the difference of ``view`` as of ``positions``; its cursor keeps the positions and says where the
    difference stands, or, once it is done, the new scope.

    Raises:
        CursorExpiredError: the log was released past a checkpoint newer than the positions (410).
        StorageError: a checkpoint chunk is missing or corrupt.
    """
    mark = view.mark
    assert mark is not None and mark.target is not None
    tables = view.tables()
    relevant = [s for s in shards if positions.get(s.key, 0) > 0 and (tables is None or s.table in tables)]
    manifest, mark = _base(deps, gateway, relevant, positions, mark, tables)
    tail = _tail(deps, gateway, relevant, positions, marks, manifest)
    page = _Page(limit, deps.settings.max_page_bytes, [])
    mark = _checkpoint_rows(deps, manifest, mark, tail, tables, view, subscriber, page)
    if manifest is None or mark.chunk >= len(manifest.chunks):
        mark = _tail_rows(tail, mark, view, subscriber, page)
    done = (manifest is None or mark.chunk >= len(manifest.chunks)) and mark.tail >= len(_new_rows(tail))
    after = CursorScope(mark.target or "") if done else mark
    return PullResult(tuple(page.items), deps.clock.now(), True, encode_cursor(positions, marks, after))


def _base(
    deps: GatewayDeps,
    gateway: str,
    shards: Sequence[ShardId],
    positions: Mapping[str, int],
    mark: CursorScope,
    tables: frozenset[str] | None,
) -> tuple[Manifest | None, CursorScope]:
    """The checkpoint the difference reads (``None``: the log from its start) and the mark, started over when the
    log it relied on was released meanwhile. While nothing is released, a checkpoint at or below the positions is
    read when that is cheaper than the log (:func:`_cheaper_checkpoint`)."""
    heads = deps.buffer.get_heads(list(shards)) if shards else {}
    manifest = None
    if mark.checkpoint and deps.objects is not None:
        manifest = load_manifest(deps.objects.get, gateway, mark.checkpoint)
    base = manifest.positions if manifest is not None else {}
    if (mark.checkpoint and manifest is None) or any(h.released_seq > base.get(h.shard.key, 0) for h in heads.values()):
        mark = replace(mark, checkpoint="", chunk=0, row=0, tail=0)
    if mark.checkpoint or mark.chunk or mark.row or mark.tail:
        return manifest, mark
    if not any(h.released_seq for h in heads.values()):
        manifest = _cheaper_checkpoint(deps, gateway, shards, positions, tables)
        return manifest, mark if manifest is None else replace(mark, checkpoint=manifest.checkpoint_id)
    # Only a difference over a released log reads a checkpoint: a pull's cold start does not load the resync.
    from lakesync.gateway.resync import covering_checkpoint

    manifest = covering_checkpoint(deps, gateway, heads)
    if manifest is None or any(manifest.positions.get(s.key, 0) > positions.get(s.key, 0) for s in shards):
        raise expired_any_error(gateway)
    return manifest, replace(mark, checkpoint=manifest.checkpoint_id)


def _cheaper_checkpoint(
    deps: GatewayDeps,
    gateway: str,
    shards: Sequence[ShardId],
    positions: Mapping[str, int],
    tables: frozenset[str] | None,
) -> Manifest | None:
    """The latest checkpoint when it can stand for the log up to its positions and reading it is estimated cheaper
    (module docstring, "The source by cost"); ``None``: the log from its start."""
    objects = deps.objects
    if objects is None or sum(positions.get(s.key, 0) for s in shards) < MIN_LOG_FOR_A_CHECKPOINT:
        return None
    try:
        manifest = load_manifest(objects.get, gateway)
    except StorageError:
        return None  # the log is all there: serve from it rather than fail on a checkpoint it does not need
    if manifest is None or not {s.table for s in shards} <= set(manifest.tables):
        return None
    for key, seq in manifest.positions.items():
        # Every row of the checkpoint the difference may send must be at or below the cursor's positions.
        if (tables is None or ShardId.parse(key).table in tables) and seq > positions.get(key, 0):
            return None
    replaced = sum(manifest.positions.get(s.key, 0) for s in shards)
    return manifest if manifest.deltas < replaced else None


def _tail(
    deps: GatewayDeps,
    gateway: str,
    shards: Sequence[ShardId],
    positions: Mapping[str, int],
    marks: Mapping[str, int],
    manifest: Manifest | None,
) -> dict[RowKey, list[LogEntry]]:
    """The log after the base (the checkpoint's positions, or the start) up to ``positions``, by row: read by the
    difference's first page, kept for its next ones (``deps.tails``)."""
    base = manifest.positions if manifest is not None else {}
    return read_tail(deps.buffer, gateway, shards, base, positions, cache=deps.tails, end_marks=marks)


def _checkpoint_rows(
    deps: GatewayDeps,
    manifest: Manifest | None,
    mark: CursorScope,
    tail: Mapping[RowKey, list[LogEntry]],
    tables: frozenset[str] | None,
    view: ScopeView,
    subscriber: str,
    page: _Page,
) -> CursorScope:
    """Serve the checkpoint's rows (each folded with its log after the checkpoint) from the mark into ``page``."""
    objects = deps.objects
    if manifest is None or objects is None:
        return mark
    from lakesync.gateway.resync import MAX_CHUNKS_PER_PAGE

    chunk, row, read = mark.chunk, mark.row, 0
    while chunk < len(manifest.chunks) and read < MAX_CHUNKS_PER_PAGE and not page.full:
        rows = chunk_rows(objects, manifest.chunks[chunk])
        read += 1
        while row < len(rows) and not page.full:
            deltas = rows[row]
            row += 1
            table, row_id = deltas[0].table, deltas[0].row_id
            if tables is not None and table not in tables:
                continue
            later = tail.get((table, row_id), [])
            state = fold([*deltas, *(e.delta for e in later)])
            verdict = view.judge(table, None if state is None else state.values())
            if verdict == "enter":
                page.add_entries([*deltas, *later])
            elif verdict == "leave":
                page.add_entries([drop_delta(table, row_id, subscriber)])
        if row >= len(rows):
            chunk, row = chunk + 1, 0
    return replace(mark, chunk=chunk, row=row)


def _new_rows(tail: Mapping[RowKey, list[LogEntry]]) -> list[RowKey]:
    """The rows of the tail that did not exist at its start (so the checkpoint has none of their live state), in
    order."""
    return sorted(key for key, entries in tail.items() if entries[0].before is None)


def _tail_rows(
    tail: Mapping[RowKey, list[LogEntry]], mark: CursorScope, view: ScopeView, subscriber: str, page: _Page
) -> CursorScope:
    """Serve the rows the log after the checkpoint created, from the mark into ``page``."""
    keys = _new_rows(tail)
    done = mark.tail
    while done < len(keys) and not page.full:
        table, row_id = keys[done]
        entries = tail[keys[done]]
        done += 1
        verdict = view.judge(table, entries[-1].after)
        if verdict == "enter":
            page.add_entries(entries)
        elif verdict == "leave":
            page.add_entries([drop_delta(table, row_id, subscriber)])
    return replace(mark, tail=done)
