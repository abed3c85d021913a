"""Pull: commit-ordered, paged, filtered by sync rules, with a cursor that loses nothing.

Two ways to say where a client is:

* **cursor** (ours): an opaque token holding, per shard, the last commit sequence the client consumed. Every commit
  gets the next sequence of its shard under an optimistic guard, and the log is read consistently, so a pull from a
  cursor returns every later commit exactly once -- including commits that finished late.
* **since** (the original client's ``serverHlc``): entries whose commit HLC is after ``since``, plus -- when
  ``since`` is recent -- the entries of the re-read window before it (``since_window_ms``, longer than any commit
  attempt can take), which may still have been in flight when ``since`` was issued. Window entries do not count
  against the page limit, so paging always progresses. Delivery is at-least-once; applying a delta twice is harmless
  (per-column LWW is idempotent).

The flush job may release (delete) the oldest part of a shard's log once it is in the lake and covered by a
checkpoint; a pull whose position is behind the released part (cursor sequence below ``released_seq``, ``since``
below ``released_hlc``, or no position at all) fails with :class:`CursorExpiredError` instead of silently skipping
it, and the client reloads the checkpoint.

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

import base64
import binascii
import heapq
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from lakesync.core.delta import RowDelta
from lakesync.core.errors import (
    AdapterError,
    AdapterNotFoundError,
    CursorExpiredError,
    LakeSyncError,
    ValidationError,
)
from lakesync.core.rules import Claims, SyncRules, change_visible, rules_apply
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.io_pool import io_pool
from lakesync.gateway.model import LogEntry, PullBasis, ShardHead, ShardId
from lakesync.ports import BufferStore, ConfigStore

_CURSOR_VERSION = 1
_PAGE = 1000


def _page_size(limit: int) -> int:
    # One more than the limit: the page that fills a response also says whether more follows (no extra read).
    return min(max(limit + 1, 100), _PAGE + 1)


@dataclass(frozen=True, slots=True)
class PullResult:
    """The pull response.

    ``items`` are the pulled changes in order: log entries (whose stored wire JSON is sent as it is, their deltas
    decoded only if asked for) or deltas (from a source adapter).
    """

    items: tuple[LogEntry | RowDelta, ...]
    server_hlc: int
    has_more: bool
    cursor: str | None

    @property
    def deltas(self) -> tuple[RowDelta, ...]:
        """The pulled deltas, in order."""
        return tuple(item.delta if isinstance(item, LogEntry) else item for item in self.items)

    def to_json(self) -> dict[str, object]:
        """The wire JSON shape ``{deltas, serverHlc, hasMore, cursor}`` (stored delta JSON is reused as it is)."""
        body: dict[str, object] = {
            "deltas": [_delta_json(item) for item in self.items],
            "serverHlc": str(self.server_hlc),
            "hasMore": self.has_more,
        }
        if self.cursor is not None:
            body["cursor"] = self.cursor
        return body


def _delta_json(item: LogEntry | RowDelta) -> object:
    return item.to_json() if isinstance(item, RowDelta) else item.wire_value()


def encode_cursor(positions: Mapping[str, int]) -> str:
    """Opaque cursor text for per-shard positions."""
    raw = json.dumps({"v": _CURSOR_VERSION, "p": dict(sorted(positions.items()))}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, gateway: str) -> dict[str, int]:
    """Per-shard positions from a cursor; rejects malformed cursors and cursors of another gateway."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise ValidationError("Invalid 'cursor' parameter") from None
    if not isinstance(data, dict) or data.get("v") != _CURSOR_VERSION or not isinstance(data.get("p"), dict):
        raise ValidationError("Invalid 'cursor' parameter")
    positions: dict[str, int] = {}
    for key, value in data["p"].items():
        if not isinstance(key, str) or type(value) is not int or value < 0:
            raise ValidationError("Invalid 'cursor' parameter")
        try:
            shard = ShardId.parse(key)
        except ValueError:
            raise ValidationError("Invalid 'cursor' parameter") from None
        if shard.gateway != gateway:
            raise ValidationError("The cursor belongs to another gateway")
        positions[key] = value
    return positions


@dataclass
class _ShardReader:
    """Pages through one shard's log lazily: by sequence, or first by commit HLC then by sequence.

    Within a shard, commit HLCs increase with the sequence (the push guarantees it), so after the first entry both
    orders agree and paging by sequence never skips entries that share a commit HLC.
    """

    deps: GatewayDeps
    shard: ShardId
    page: int
    after_seq: int | None
    after_hlc: int = 0
    images: bool = True
    buffer: list[LogEntry] = field(default_factory=list)
    exhausted: bool = False

    def peek(self) -> LogEntry | None:
        if not self.buffer and not self.exhausted:
            if self.after_seq is None:
                fetched = self.deps.buffer.read_log_by_commit_hlc(
                    self.shard, self.after_hlc, self.page, images=self.images
                )
            else:
                fetched = self.deps.buffer.read_log(self.shard, self.after_seq, self.page, images=self.images)
            self.buffer = fetched[::-1]
            self.exhausted = len(fetched) < self.page
        return self.buffer[-1] if self.buffer else None

    def pop(self) -> LogEntry:
        entry = self.buffer.pop()
        self.after_seq = entry.seq
        return entry


def pull(
    deps: GatewayDeps,
    gateway: str,
    *,
    limit: int,
    claims: Claims,
    cursor: str | None = None,
    since: int | None = None,
    source: str | None = None,
) -> PullResult:
    """Serve one pull page for ``gateway``.

    Args:
        deps: Stores, clock and settings.
        gateway: The gateway id.
        limit: Most deltas to return (1..10000).
        claims: The caller's JWT claims for sync rules.
        cursor: Resume from this cursor (exactly-once); takes precedence over ``since``.
        since: Resume after this server HLC (at-least-once).
        source: Pull from a named source adapter instead of the buffer.
    """
    if source:
        return _pull_from_source(deps, gateway, source, since or 0, limit, claims)
    positions = decode_cursor(cursor, gateway) if cursor else {}
    basis = (deps.pull_basis or StoresPullBasis(deps.config, deps.buffer)).read_pull_basis(gateway)
    rules, shards = basis.rules, list(basis.shards)
    if cursor is not None or since is None:
        return _pull_by_cursor(deps, gateway, shards, positions, limit, rules, claims)
    return _pull_since(deps, gateway, shards, since, limit, rules, claims)


class StoresPullBasis:
    """:class:`~lakesync.ports.PullBasisReader` over a config store and a buffer store: both reads sent at once."""

    def __init__(self, config: ConfigStore, buffer: BufferStore) -> None:
        self._config = config
        self._buffer = buffer

    def read_pull_basis(self, gateway: str) -> PullBasis:
        """The sync rules and the registered shards of ``gateway``."""
        rules_read = io_pool().submit(self._config.get_sync_rules, gateway)
        shards = tuple(sorted(self._buffer.list_shards(gateway)))
        return PullBasis(rules_read.result(), shards)


def _visible(entry: LogEntry, rules: SyncRules | None, claims: Claims) -> bool:
    if not rules_apply(rules):
        return True
    assert rules is not None
    return change_visible(rules, claims, entry.shard.table, entry.before, entry.after)


def _merged(readers: list[_ShardReader]) -> Iterator[tuple[_ShardReader, LogEntry]]:
    heap: list[tuple[int, str, int, int]] = []
    for i, reader in enumerate(readers):
        head = reader.peek()
        if head is not None:
            heapq.heappush(heap, (head.commit_hlc, reader.shard.key, head.seq, i))
    while heap:
        _, _, _, i = heapq.heappop(heap)
        reader = readers[i]
        entry = reader.pop()
        yield reader, entry
        nxt = reader.peek()
        if nxt is not None:
            heapq.heappush(heap, (nxt.commit_hlc, reader.shard.key, nxt.seq, i))


def _collect(
    deps: GatewayDeps,
    readers: list[_ShardReader],
    limit: int,
    rules: SyncRules | None,
    claims: Claims,
    *,
    reread_until: int = -1,
    whole_commit_hlcs: bool = False,
) -> tuple[list[LogEntry], bool, LogEntry | None]:
    """Merge the shards by commit HLC and collect up to ``limit`` visible deltas.

    Entries with a commit HLC at or below ``reread_until`` (the re-read window of a ``since`` pull) are returned
    without counting against ``limit``, so every page makes progress however many commits the window holds. With
    ``whole_commit_hlcs`` a page never ends between entries of different shards that share a commit HLC (a ``since``
    position cannot point between them), so it may exceed ``limit`` by fewer than the number of shards.
    """
    collected: list[LogEntry] = []
    counted = 0
    scanned = 0
    last: LogEntry | None = None
    for _reader, entry in _merged(readers):
        scanned += 1
        last = entry
        if _visible(entry, rules, claims):
            collected.append(entry)
            if entry.commit_hlc > reread_until:
                counted += 1
        if scanned >= deps.settings.max_scan_per_pull:
            break
        if counted >= limit and not (
            whole_commit_hlcs
            and any((nxt := r.peek()) is not None and nxt.commit_hlc == entry.commit_hlc for r in readers)
        ):
            break
    has_more = any(r.peek() is not None for r in readers)
    return collected, has_more, last


def _pull_by_cursor(
    deps: GatewayDeps,
    gateway: str,
    shards: list[ShardId],
    positions: dict[str, int],
    limit: int,
    rules: SyncRules | None,
    claims: Claims,
) -> PullResult:
    page = _page_size(limit)
    images = rules_apply(rules)  # the row images only serve the sync rules
    readers = [_ShardReader(deps, s, page, after_seq=positions.get(s.key, 0), images=images) for s in shards]
    if len(readers) > 1:
        for read in [io_pool().submit(reader.peek) for reader in readers]:
            read.result()
    # A log read stops at the first gap, so a shard released past its position reads as empty and nothing is
    # skipped. Only for such shards can the release marks matter: they tell "caught up" from "released" (410).
    idle = [reader.shard for reader in readers if reader.peek() is None]
    for head in deps.buffer.get_heads(idle).values() if idle else ():
        if positions.get(head.shard.key, 0) < head.released_seq:
            raise _expired(gateway, head)
    collected, has_more, _ = _collect(deps, readers, limit, rules, claims)
    new_positions = dict(positions)
    for reader in readers:
        if reader.after_seq:
            new_positions[reader.shard.key] = reader.after_seq
    return PullResult(tuple(collected), deps.clock.now(), has_more, encode_cursor(new_positions))


def _pull_since(
    deps: GatewayDeps,
    gateway: str,
    shards: list[ShardId],
    since: int,
    limit: int,
    rules: SyncRules | None,
    claims: Claims,
) -> PullResult:
    window_ms = deps.settings.since_window_ms
    # Only a recent `since` can have commits still in flight below it; further back, everything has landed.
    recent = (since >> 16) > deps.wall_ms() - window_ms
    start = max(0, since - (window_ms << 16)) if recent else since
    heads = deps.buffer.get_heads(shards)
    for head in heads.values():
        if since < head.released_hlc:
            raise _expired(gateway, head)
    page = _page_size(limit)
    images = rules_apply(rules)
    readers = [_ShardReader(deps, s, page, after_seq=None, after_hlc=start, images=images) for s in shards]
    collected, has_more, last = _collect(
        deps, readers, limit, rules, claims, reread_until=since, whole_commit_hlcs=True
    )
    # A release that marked and deleted entries after the check above would go unnoticed (reads by commit HLC
    # cannot see a gap): check the marks again now that the log has been read.
    for head in deps.buffer.get_heads(shards).values():
        if since < head.released_hlc:
            raise _expired(gateway, head)
    if has_more:
        assert last is not None
        # The next `since` resumes after the last scanned entry. Entries of other shards can carry the same commit
        # HLC; if one is still unscanned, resume just before it (re-delivering the few that share it) so none is lost.
        resume = last.commit_hlc
        if any((nxt := r.peek()) is not None and nxt.commit_hlc == resume for r in readers):
            resume -= 1
        return PullResult(tuple(collected), max(resume, since), True, None)
    positions = {s.key: heads[s].seq for s in shards if s in heads}
    return PullResult(tuple(collected), deps.clock.now(), False, encode_cursor(positions))


def _expired(gateway: str, head: ShardHead) -> CursorExpiredError:
    return CursorExpiredError(
        f"The buffer of table {head.shard.table!r} was released past this pull position; load the checkpoint"
        f" (GET /v1/sync/{gateway}/checkpoint) and pull from its cursor"
    )


def _pull_from_source(deps: GatewayDeps, gateway: str, name: str, since: int, limit: int, claims: Claims) -> PullResult:
    adapter = deps.sources.get(name)
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
