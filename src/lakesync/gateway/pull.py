"""Pull: commit-ordered, paged, filtered by sync rules, with a cursor that loses nothing.

Two ways to say where a client is:

* **cursor** (ours): an opaque token holding, per shard, the last commit sequence the client consumed. Every commit
  gets the next sequence of its shard under an optimistic guard, and the log is read consistently, so a pull from a
  cursor returns every later commit exactly once -- including commits that finished late.
* **since** (the original client's ``serverHlc``): served so that the original client converges and never gets
  stuck (:mod:`lakesync.gateway.since`): exact positions from the client's session, full rows with an op its applier
  can apply, ``DELETE``+``INSERT`` where the server cannot know what it holds.

Every page carries a cursor, holds at most ``limit`` deltas and ``max_page_bytes`` (a Lambda response must stay under
6 MB), and says ``hasMore`` when it was cut.

The flush job may release (delete) the oldest part of a shard's log once it is in the lake and covered by a
checkpoint; a pull whose position is behind the released part (cursor sequence below ``released_seq``, ``since``
below ``released_hlc``, or no position at all) fails with :class:`CursorExpiredError` instead of silently skipping
it, and the client reloads the checkpoint. The original client does not handle that, so a ``since`` pull of a client
with a session is answered with a resync from the checkpoint instead (:mod:`lakesync.gateway.resync`).

What a pull reads: the sync rules with the shard registry (one request on DynamoDB, :class:`PullBasisReader`), then
every shard's log. A cursor pull reads the release marks (the shard heads) only of shards whose log read came back
empty: a log read stops at the first gap, so a shard released past the cursor returns nothing rather than skipping,
and its marks then turn the empty read into :class:`CursorExpiredError`. A ``since`` pull reads the heads before and
after the log (a read by commit HLC cannot see a gap) and ends with their sequences as its cursor.

``hasMore`` is true exactly when entries remain that this pull did not scan. A pull that filters out most of the log
stops after ``max_scan_per_pull`` scanned entries with ``hasMore`` true and a cursor past what it scanned; it never
reports ``hasMore`` false while unscanned entries remain.

Sync rules are evaluated against the row before and after each change (:func:`lakesync.core.rules.change_visible`):
a client sees a change if the row was in one of its buckets before it or is after it, so DELETEs and updates that
move a row out of a bucket reach the clients that held the row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Final

from lakesync.core.delta import RowDelta, is_valid_client_id
from lakesync.core.errors import AdapterError, AdapterNotFoundError, LakeSyncError
from lakesync.core.log import LogEntry, PullBasis, ShardId
from lakesync.core.rules import Claims, SyncRules, change_visible, rules_apply
from lakesync.gateway.basis_cache import fresh_reader, kept_basis
from lakesync.gateway.cursor import CursorScope, cursor_marks, cursor_scope, decode_cursor, encode_cursor
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.log_pages import (
    PullResult,
    Regressed,
    ShardReader,
    collect_page,
    entry_visible,
    expired_error,
    page_size,
    regressed_error,
)
from lakesync.gateway.scope_change import ScopeView, difference_page, scope_view
from lakesync.gateway.scope_moves import shape_moves
from lakesync.gateway.since_pull import SinceRequest, pull_since
from lakesync.io_pool import awaited, results_of, submit
from lakesync.ports import BufferStore, ConfigStore, PullBasisReader

__all__ = ["PullResult", "StoresPullBasis", "entry_visible", "json_page_bytes", "pull", "with_page_bytes"]

_EARLY_SHARDS: Final = 64


LAMBDA_RESPONSE_BYTES: Final = 6_291_556
"""The largest response a synchronously invoked Lambda function may return (its "6 MB" quota)."""
_RESPONSE_ENVELOPE_BYTES: Final = 64 * 1024


def json_page_bytes(settings: GatewaySettings) -> int:
    """The largest JSON pull page (stored bytes of its deltas) whose response Lambda still returns: 1,971,244 with the
    default ``max_row_bytes``.

    The Lambda runtime serialises the response with non-ASCII characters escaped, so a stored character of 2 or 4
    UTF-8 bytes becomes 6 or 12 (``\\uXXXX``), and a quote or backslash 2: at most 3 times the stored size. A page is
    cut once it holds the limit, so it may pass it by one delta (at most a row: ``max_row_bytes``, plus its ids);
    64 KiB cover the envelope and headers.
    """
    return (LAMBDA_RESPONSE_BYTES - _RESPONSE_ENVELOPE_BYTES) // 3 - settings.max_row_bytes - 4096


def with_page_bytes(deps: GatewayDeps, page_bytes: int) -> GatewayDeps:
    """``deps`` with pull pages of at most ``page_bytes`` stored bytes (unchanged when already smaller)."""
    if deps.settings.max_page_bytes <= page_bytes:
        return deps
    return replace(deps, settings=replace(deps.settings, max_page_bytes=page_bytes))


def pull(
    deps: GatewayDeps,
    gateway: str,
    *,
    limit: int,
    claims: Claims,
    cursor: str | None = None,
    since: int | None = None,
    source: str | None = None,
    client_id: str | None = None,
    subscriber: str | None = None,
) -> PullResult:
    """Serve one pull page for ``gateway``.

    Args:
        deps: Stores, clock and settings.
        gateway: The gateway id.
        limit: Most deltas to return (1..10000).
        claims: The caller's JWT claims for sync rules.
        cursor: Resume from this cursor (exactly-once); takes precedence over ``since``.
        since: Resume after this server HLC, in row form (:mod:`lakesync.gateway.since`).
        source: Pull from a named source adapter instead of the buffer.
        client_id: The (authenticated) client whose ``since`` session is used; ``None`` serves ``since`` without one,
            as does an id no push accepts (not valid Unicode, or over ``MAX_ID_BYTES``): such a client has written no
            delta, and its id might not fit the session store's key.
        subscriber: The token's client (``sub``), whose stream subscriptions a cursor pull serves when the rules
            have streams (:mod:`lakesync.gateway.scope_change`); ``None``: its buckets alone.
    """
    if client_id is not None and not is_valid_client_id(client_id):
        client_id = None
    if source:
        return _pull_from_source(deps, gateway, source, since or 0, limit, claims)
    positions = decode_cursor(cursor, gateway) if cursor else {}
    marks = cursor_marks(cursor) if cursor else {}
    basis_reader = deps.pull_basis or StoresPullBasis(deps.config, deps.buffer)
    if cursor is not None or since is None:
        served = _Served(subscriber, cursor)
        return _pull_by_cursor(deps, gateway, basis_reader, positions, limit, claims, marks, served)
    # A `since` session records positions per shard: its pulls read the rules and the registry as they are now.
    basis = fresh_reader(basis_reader).read_pull_basis(gateway)
    return pull_since(SinceRequest(deps, gateway, list(basis.shards), since, limit, basis.rules, claims, client_id))


class StoresPullBasis:
    """:class:`~lakesync.ports.PullBasisReader` over a config store and a buffer store: both reads sent at once."""

    def __init__(self, config: ConfigStore, buffer: BufferStore) -> None:
        self._config = config
        self._buffer = buffer

    def read_pull_basis(self, gateway: str) -> PullBasis:
        """The sync rules and the registered shards of ``gateway``."""
        rules_read = submit(self._config.get_sync_rules, gateway)
        with awaited(rules_read):
            shards = tuple(sorted(self._buffer.list_shards(gateway)))
        return PullBasis(rules_read.result(), shards)


def _pull_by_cursor(
    deps: GatewayDeps,
    gateway: str,
    basis_reader: PullBasisReader,
    positions: dict[str, int],
    limit: int,
    claims: Claims,
    marks: Mapping[str, int],
    served: _Served,
) -> PullResult:
    page = page_size(limit)

    def new_reader(shard: ShardId, images: bool) -> ShardReader:
        after = positions.get(shard.key, 0)
        return ShardReader(deps, shard, page, after_seq=after, images=images, verify_hlc=marks.get(shard.key))

    # The shards the cursor names are read while the rules and the registry are (with the row images, which only
    # the rules need: they are not known yet); the log read does not depend on them. Only the shards the registry
    # holds are served; a cursor naming more shards than a deployment plausibly has is not read ahead (a forged one
    # would make the pull read shards that do not exist). When the rules and the registry are at hand without a
    # read, the log is read knowing them: a lone shard in this thread, without handing it to the pool.
    basis = kept_basis(basis_reader, gateway)
    early: dict[str, ShardReader] = {}
    early_reads: dict[str, Future[LogEntry | None]] = {}
    if basis is None:
        if len(positions) <= _EARLY_SHARDS:
            early = {key: new_reader(ShardId.parse(key), True) for key in positions}
        early_reads = {key: submit(r.peek) for key, r in early.items()}
        with awaited(*early_reads.values()):
            basis = basis_reader.read_pull_basis(gateway)
    rules = basis.rules
    images = rules_apply(rules)  # the row images only serve the sync rules
    readers = [early.get(s.key) or new_reader(s, images) for s in basis.shards]
    try:
        if len(readers) == 1 and not early_reads:
            readers[0].peek()
        else:
            results_of([early_reads.get(r.shard.key) or submit(r.peek) for r in readers])
        # A log read stops at the first gap, so a shard released past its position reads as empty and nothing is
        # skipped. Only for such shards can the release marks matter: they tell "caught up" from "released" (410).
        idle = [reader.shard for reader in readers if reader.peek() is None]
    except Regressed as exc:
        raise regressed_error(gateway, exc.shard) from None
    checked = list(dict.fromkeys([*idle, *(reader.shard for reader in readers if reader.unverified)]))
    by_shard = {reader.shard: reader for reader in readers}
    # Each head is only compared with the position: a head at or past it needs no look for chunks past it.
    reaching = {shard: positions.get(shard.key, 0) for shard in checked}
    for head in deps.buffer.get_heads(checked, reaching=reaching).values() if checked else ():
        position = positions.get(head.shard.key, 0)
        if position < head.released_seq:
            raise expired_error(gateway, head)
        reader = by_shard[head.shard]
        try:
            reader.check_against(head)
        except Regressed:
            raise regressed_error(gateway, head.shard) from None
        if position > head.seq or (reader.unverified and position > head.released_seq):
            # The cursor is ahead of the log, or the entry it stands on vanished without a release.
            raise regressed_error(gateway, head.shard)
    view = served.view(deps, gateway, rules, claims, positions)
    if view is not None and view.mark is not None:
        assert served.subscriber is not None
        return difference_page(deps, gateway, basis.shards, positions, marks, limit, view, served.subscriber)
    judged = view.scope if view is not None and images else None
    collected, has_more = collect_page(deps, readers, limit, rules, claims, judged)
    new_positions, new_marks = dict(positions), dict(marks)
    for reader in readers:
        if reader.after_seq:
            new_positions[reader.shard.key] = reader.after_seq
        if reader.last_hlc is not None:
            new_marks[reader.shard.key] = reader.last_hlc
    scope = CursorScope(view.scope.fingerprint) if view is not None else None
    items: Sequence[LogEntry | RowDelta] = collected
    if judged is not None and served.subscriber is not None:
        items = shape_moves(deps.buffer, gateway, collected, judged, served.subscriber)
    return PullResult(tuple(items), deps.clock.now(), has_more, encode_cursor(new_positions, new_marks, scope))


@dataclass(frozen=True, slots=True)
class _Served:
    """Who a cursor pull serves subscriptions to, and its cursor (whose scope is read only under rules with
    streams)."""

    subscriber: str | None
    cursor: str | None

    def view(
        self, deps: GatewayDeps, gateway: str, rules: SyncRules | None, claims: Claims, positions: Mapping[str, int]
    ) -> ScopeView | None:
        """The scope to serve: ``None`` (the buckets, as ever, with a cursor that records no scope) when the pull
        names no subscriber or the deployment keeps no scopes."""
        if not self.subscriber or deps.subscriptions is None:
            return None
        scope = cursor_scope(self.cursor) if self.cursor else None
        return scope_view(deps, gateway, rules, claims, self.subscriber, scope, positions)


def _pull_from_source(deps: GatewayDeps, gateway: str, name: str, since: int, limit: int, claims: Claims) -> PullResult:
    adapter = deps.sources.get(name)
    if adapter is None and deps.connectors is not None:
        adapter = deps.connectors.source(gateway, name)
    if adapter is None:
        raise AdapterNotFoundError(f'Source adapter "{name}" not found')
    rules = deps.config.get_sync_rules(gateway)
    try:
        fetched = adapter.query_deltas_since(since, limit + 1)
    except LakeSyncError:
        raise
    except Exception as exc:  # an external system failed; report it as such, never as a 500
        raise AdapterError(f'Source adapter "{name}" failed: {type(exc).__name__}') from exc
    has_more = len(fetched) > limit
    deltas = fetched[:limit]
    if rules_apply(rules):
        assert rules is not None
        deltas = [d for d in deltas if change_visible(rules, claims, d.table, None, d.values())]
    return PullResult(tuple(deltas), deps.clock.now(), has_more, None)
