"""One page of a gateway's log: its shards read lazily and merged by commit HLC, filtered by the sync rules, cut by
the page's limits (used by cursor and ``since`` pulls alike), and the page as the pull answers it."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Final

from lakesync.core.canonical import RawJson
from lakesync.core.delta import RowDelta
from lakesync.core.errors import CursorExpiredError
from lakesync.core.log import LogEntry, ShardHead, ShardId
from lakesync.core.rules import Claims, SyncRules, change_visible, rules_apply
from lakesync.core.scope import Scope
from lakesync.gateway.deps import GatewayDeps
from lakesync.ports import read_from_entry

__all__ = [
    "PAGE_MAX",
    "PullResult",
    "Regressed",
    "ShardReader",
    "collect_page",
    "deltas_json",
    "entry_visible",
    "expired_any_error",
    "expired_error",
    "merged",
    "page_size",
    "regressed_error",
]

PAGE_MAX: Final = 1000
"""Most entries one read of a shard asks for."""


def page_size(limit: int) -> int:
    """How many entries one read of a shard asks for to serve a page of ``limit`` deltas."""
    # One more than the limit: the page that fills a response also says whether more follows (no extra read).
    return min(max(limit + 1, 100), PAGE_MAX + 1)


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
            "deltas": deltas_json(self.items),
            "serverHlc": str(self.server_hlc),
            "hasMore": self.has_more,
        }
        if self.cursor is not None:
            body["cursor"] = self.cursor
        return body


def deltas_json(items: Sequence[LogEntry | RowDelta]) -> object:
    """The ``deltas`` of a page as JSON (stored entries' text reused as it is)."""
    # A page of stored entries (the usual one holds a thousand) is their stored text, joined once.
    wires = [item.wire_json if type(item) is LogEntry else None for item in items]
    if wires and None not in wires:
        return RawJson("[" + ",".join(wires) + "]")  # type: ignore[arg-type]  # no None left
    return [item.to_json() if isinstance(item, RowDelta) else item.wire_value() for item in items]


@dataclass
class ShardReader:
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
    verify_hlc: int | None = None
    """The commit HLC the entry at ``after_seq`` must have (from the cursor); checked by the first read."""
    at_position: bool = False
    """Read first as a cursor is (:meth:`BufferStore.read_log_at`), without an HLC to check: a position where a page
    ended, mostly the end of a chunk, which one Query settles when nothing follows it."""
    unverified: bool = False
    """The entry at ``after_seq`` was not there to check (released, or lost): the caller checks the release marks."""
    unchecked: bool = False
    """The first read found nothing after ``after_seq`` and did not look at it: the caller checks the position
    against the head (:meth:`check_against`)."""
    unchecked_hlc: int | None = None
    """The commit HLC the entry at an unchecked position must have, when a cursor recorded one."""
    last_hlc: int | None = None
    buffer: list[LogEntry] = field(default_factory=list)
    exhausted: bool = False

    def peek(self) -> LogEntry | None:
        """The next entry (reading the next page when the last is used up), or ``None`` at the end."""
        if not self.buffer and not self.exhausted:
            if self.after_seq is None:
                fetched = self.deps.buffer.read_log_by_commit_hlc(
                    self.shard, self.after_hlc, self.page, images=self.images
                )
            elif (self.verify_hlc is not None or self.at_position) and self.after_seq > 0:
                fetched = self._read_at(self.after_seq, self.verify_hlc)
            else:
                fetched = self.deps.buffer.read_log(self.shard, self.after_seq, self.page, images=self.images)
            self.buffer = fetched[::-1]
            self.exhausted = len(fetched) < self.page
        return self.buffer[-1] if self.buffer else None

    def _read_at(self, seq: int, expected_hlc: int | None) -> list[LogEntry]:
        """Read after the entry at ``seq``, checking it is the one the cursor left when ``expected_hlc`` is given."""
        self.verify_hlc, self.at_position = None, False
        hlc, fetched = self.deps.buffer.read_log_at(self.shard, seq, self.page, images=self.images)
        if hlc is not None:
            if expected_hlc is not None and hlc != expected_hlc:
                raise Regressed(self.shard)
        elif fetched:
            self.unverified = True
        else:
            self.unchecked, self.unchecked_hlc = True, expected_hlc
        return fetched

    def check_against(self, head: ShardHead) -> None:
        """Check an unchecked position (nothing was read after it) against its shard's head: at the head, by the
        head's last commit HLC when the cursor recorded one; behind it (entries the first read did not show), by
        reading from the entry itself, whose entries after it are then served."""
        if not self.unchecked or self.after_seq is None:
            return
        expected, self.unchecked, self.unchecked_hlc = self.unchecked_hlc, False, None
        if head.seq == self.after_seq:
            if expected is not None and head.last_commit_hlc != expected:
                raise Regressed(self.shard)
            return
        hlc, fetched = read_from_entry(self.deps.buffer, self.shard, self.after_seq, self.page, images=self.images)
        if hlc is None:
            self.unverified = True
        elif expected is not None and hlc != expected:
            raise Regressed(self.shard)
        self.buffer = fetched[::-1]
        self.exhausted = len(fetched) < self.page

    def pop(self) -> LogEntry:
        """Take the next entry (after :meth:`peek` showed one)."""
        entry = self.buffer.pop()
        self.after_seq = entry.seq
        self.last_hlc = entry.commit_hlc
        return entry

    def take(self, count: int, max_bytes: int) -> tuple[list[LogEntry], int]:
        """The next entries of the page read (at most ``count``, ending with the one that brings their sizes to
        ``max_bytes``), as :meth:`pop` would give them one by one, and their sizes' sum."""
        buffer = self.buffer
        taken = buffer[: -min(count, len(buffer)) - 1 : -1]
        size = 0
        for i, entry in enumerate(taken):
            size += entry.size
            if size >= max_bytes:
                del taken[i + 1 :]
                break
        if taken:
            del buffer[-len(taken) :]
            self.after_seq, self.last_hlc = taken[-1].seq, taken[-1].commit_hlc
        return taken, size


class Regressed(Exception):
    """The entry at a cursor's position is not the one the cursor was handed after."""

    def __init__(self, shard: ShardId) -> None:
        super().__init__(shard.key)
        self.shard = shard


def entry_visible(entry: LogEntry, rules: SyncRules | None, claims: Claims) -> bool:
    """Whether a client with ``claims`` receives ``entry``: its row is visible before or after the change."""
    if not rules_apply(rules):
        return True
    assert rules is not None
    return change_visible(rules, claims, entry.shard.table, entry.before, entry.after)


def merged(readers: list[ShardReader]) -> Iterator[tuple[ShardReader, LogEntry]]:
    """The readers' entries in commit-HLC order (ties by shard and sequence), each with its reader."""
    live = [reader for reader in readers if reader.peek() is not None]
    if len(live) == 1:  # one shard with entries: its own order, without the heap
        (reader,) = live
        while reader.peek() is not None:
            yield reader, reader.pop()
        return
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


def collect_page(
    deps: GatewayDeps,
    readers: list[ShardReader],
    limit: int,
    rules: SyncRules | None,
    claims: Claims,
    scope: Scope | None = None,
) -> tuple[list[LogEntry], bool]:
    """Merge the shards by commit HLC and collect up to ``limit`` visible deltas, cutting the page early (with
    ``hasMore``) once it holds ``max_page_bytes`` or scanned ``max_scan_per_pull`` entries. With ``scope`` (rules
    with streams: the client's buckets and subscriptions), a delta is visible when the scope covers its row before
    or after it; else by the rules' buckets."""
    settings = deps.settings
    live = [reader for reader in readers if reader.peek() is not None]
    if len(live) == 1 and not rules_apply(rules):
        # Every entry is visible and one shard has any: its entries in their order, a page read at a time.
        (reader,) = live
        collected: list[LogEntry] = []
        size = 0
        cap = min(limit, settings.max_scan_per_pull)
        while len(collected) < cap and size < settings.max_page_bytes and reader.peek() is not None:
            taken, taken_bytes = reader.take(cap - len(collected), settings.max_page_bytes - size)
            collected += taken
            size += taken_bytes
        return collected, reader.peek() is not None
    collected = []
    scanned = 0
    size = 0
    for _reader, entry in merged(readers):
        scanned += 1
        if (
            scope.change_visible(entry.shard.table, entry.before, entry.after)
            if scope is not None
            else entry_visible(entry, rules, claims)
        ):
            collected.append(entry)
            size += entry.size
        if len(collected) >= limit or size >= settings.max_page_bytes or scanned >= settings.max_scan_per_pull:
            break
    has_more = any(r.peek() is not None for r in readers)
    return collected, has_more


def regressed_error(gateway: str, shard: ShardId) -> CursorExpiredError:
    """410 for a cursor the shard's log no longer matches."""
    return CursorExpiredError(
        f"The log of table {shard.table!r} no longer matches this cursor (the buffer was restored or recreated"
        f" behind it); load the checkpoint (GET /v1/sync/{gateway}/checkpoint) and pull from its cursor"
    )


def expired_any_error(gateway: str) -> CursorExpiredError:
    """410 for a position behind a release."""
    return CursorExpiredError(
        f"The buffer was released past this pull position; load the checkpoint (GET /v1/sync/{gateway}/checkpoint)"
        " and pull from its cursor"
    )


def expired_error(gateway: str, head: ShardHead) -> CursorExpiredError:
    """410 for a position behind the release of ``head``'s shard."""
    return CursorExpiredError(
        f"The buffer of table {head.shard.table!r} was released past this pull position; load the checkpoint"
        f" (GET /v1/sync/{gateway}/checkpoint) and pull from its cursor"
    )
