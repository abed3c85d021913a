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

import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Final

from lakesync.core.canonical import RawJson
from lakesync.core.delta import RowDelta, is_valid_client_id
from lakesync.core.errors import (
    AdapterError,
    AdapterNotFoundError,
    CommitConflictError,
    CursorExpiredError,
    LakeSyncError,
    StorageBusyError,
)
from lakesync.core.log import CommitConflict, LogEntry, PullBasis, ShardHead, ShardId
from lakesync.core.rules import Claims, SyncRules, change_visible, rules_apply
from lakesync.core.since import SESSION_TTL_S, Handout, Positions, ResyncMark, RowKey, SinceSession
from lakesync.gateway.basis_cache import fresh_reader, kept_basis
from lakesync.gateway.cursor import cursor_marks, decode_cursor, encode_cursor
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.since import full_row, row_form, visible_values
from lakesync.io_pool import awaited, results_of, submit
from lakesync.ports import BufferStore, ConfigStore, PullBasisReader, SinceSessionStore, read_from_entry

_PAGE = 1000
_EARLY_SHARDS: Final = 64
_UNSEEN_COMMIT_READS: Final = 8
"""Reads by commit HLC (5 ms doubling between them: about 0.6 s in all) while the head records a commit after the
position that the log does not show yet."""


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
            "deltas": _deltas_json(self.items),
            "serverHlc": str(self.server_hlc),
            "hasMore": self.has_more,
        }
        if self.cursor is not None:
            body["cursor"] = self.cursor
        return body


def _deltas_json(items: Sequence[LogEntry | RowDelta]) -> object:
    # A page of stored entries (the usual one holds a thousand) is their stored text, joined once.
    wires = [item.wire_json if type(item) is LogEntry else None for item in items]
    if wires and None not in wires:
        return RawJson("[" + ",".join(wires) + "]")  # type: ignore[arg-type]  # no None left
    return [item.to_json() if isinstance(item, RowDelta) else item.wire_value() for item in items]


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
                raise _Regressed(self.shard)
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
                raise _Regressed(self.shard)
            return
        hlc, fetched = read_from_entry(self.deps.buffer, self.shard, self.after_seq, self.page, images=self.images)
        if hlc is None:
            self.unverified = True
        elif expected is not None and hlc != expected:
            raise _Regressed(self.shard)
        self.buffer = fetched[::-1]
        self.exhausted = len(fetched) < self.page

    def pop(self) -> LogEntry:
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


class _Regressed(Exception):
    """The entry at a cursor's position is not the one the cursor was handed after."""

    def __init__(self, shard: ShardId) -> None:
        super().__init__(shard.key)
        self.shard = shard


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
    """
    if client_id is not None and not is_valid_client_id(client_id):
        client_id = None
    if source:
        return _pull_from_source(deps, gateway, source, since or 0, limit, claims)
    positions = decode_cursor(cursor, gateway) if cursor else {}
    marks = cursor_marks(cursor) if cursor else {}
    basis_reader = deps.pull_basis or StoresPullBasis(deps.config, deps.buffer)
    if cursor is not None or since is None:
        return _pull_by_cursor(deps, gateway, basis_reader, positions, limit, claims, marks)
    # A `since` session records positions per shard: its pulls read the rules and the registry as they are now.
    basis = fresh_reader(basis_reader).read_pull_basis(gateway)
    return _pull_since(deps, gateway, list(basis.shards), since, limit, basis.rules, claims, client_id)


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


def entry_visible(entry: LogEntry, rules: SyncRules | None, claims: Claims) -> bool:
    """Whether a client with ``claims`` receives ``entry``: its row is visible before or after the change."""
    if not rules_apply(rules):
        return True
    assert rules is not None
    return change_visible(rules, claims, entry.shard.table, entry.before, entry.after)


def _merged(readers: list[_ShardReader]) -> Iterator[tuple[_ShardReader, LogEntry]]:
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


def _collect(
    deps: GatewayDeps,
    readers: list[_ShardReader],
    limit: int,
    rules: SyncRules | None,
    claims: Claims,
) -> tuple[list[LogEntry], bool]:
    """Merge the shards by commit HLC and collect up to ``limit`` visible deltas, cutting the page early (with
    ``hasMore``) once it holds ``max_page_bytes`` or scanned ``max_scan_per_pull`` entries."""
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
    for _reader, entry in _merged(readers):
        scanned += 1
        if entry_visible(entry, rules, claims):
            collected.append(entry)
            size += entry.size
        if len(collected) >= limit or size >= settings.max_page_bytes or scanned >= settings.max_scan_per_pull:
            break
    has_more = any(r.peek() is not None for r in readers)
    return collected, has_more


def _pull_by_cursor(
    deps: GatewayDeps,
    gateway: str,
    basis_reader: PullBasisReader,
    positions: dict[str, int],
    limit: int,
    claims: Claims,
    marks: Mapping[str, int],
) -> PullResult:
    page = _page_size(limit)

    def new_reader(shard: ShardId, images: bool) -> _ShardReader:
        after = positions.get(shard.key, 0)
        return _ShardReader(deps, shard, page, after_seq=after, images=images, verify_hlc=marks.get(shard.key))

    # The shards the cursor names are read while the rules and the registry are (with the row images, which only
    # the rules need: they are not known yet); the log read does not depend on them. Only the shards the registry
    # holds are served; a cursor naming more shards than a deployment plausibly has is not read ahead (a forged one
    # would make the pull read shards that do not exist). When the rules and the registry are at hand without a
    # read, the log is read knowing them: a lone shard in this thread, without handing it to the pool.
    basis = kept_basis(basis_reader, gateway)
    early: dict[str, _ShardReader] = {}
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
    except _Regressed as exc:
        raise _regressed(gateway, exc.shard) from None
    checked = list(dict.fromkeys([*idle, *(reader.shard for reader in readers if reader.unverified)]))
    by_shard = {reader.shard: reader for reader in readers}
    # Each head is only compared with the position: a head at or past it needs no look for chunks past it.
    reaching = {shard: positions.get(shard.key, 0) for shard in checked}
    for head in deps.buffer.get_heads(checked, reaching=reaching).values() if checked else ():
        position = positions.get(head.shard.key, 0)
        if position < head.released_seq:
            raise _expired(gateway, head)
        reader = by_shard[head.shard]
        try:
            reader.check_against(head)
        except _Regressed:
            raise _regressed(gateway, head.shard) from None
        if position > head.seq or (reader.unverified and position > head.released_seq):
            # The cursor is ahead of the log, or the entry it stands on vanished without a release.
            raise _regressed(gateway, head.shard)
    collected, has_more = _collect(deps, readers, limit, rules, claims)
    new_positions, new_marks = dict(positions), dict(marks)
    for reader in readers:
        if reader.after_seq:
            new_positions[reader.shard.key] = reader.after_seq
        if reader.last_hlc is not None:
            new_marks[reader.shard.key] = reader.last_hlc
    return PullResult(tuple(collected), deps.clock.now(), has_more, encode_cursor(new_positions, new_marks))


class _Released(Exception):
    """A ``since`` position is behind a release of ``head``'s shard."""

    def __init__(self, head: ShardHead) -> None:
        super().__init__(head.shard.key)
        self.head = head


def _pull_since(
    deps: GatewayDeps,
    gateway: str,
    shards: list[ShardId],
    since: int,
    limit: int,
    rules: SyncRules | None,
    claims: Claims,
    client_id: str | None,
) -> PullResult:
    """A ``since`` page for the original client (:mod:`lakesync.gateway.since`): from the exact positions handed out
    with ``since``; for a client whose session does not know ``since`` (it restarted), from the positions it last
    confirmed with everything uncertain; for a client without a session, from the first entries committed after
    ``since`` (the re-read window before a recent ``since`` uncertain). A client whose position is behind a release
    is resynced from the latest checkpoint (:mod:`lakesync.gateway.resync`); without a session store, or without a
    checkpoint covering the release, it gets 410."""
    store = deps.since_sessions if client_id else None
    session = store.get(gateway, client_id) if store is not None and client_id else None
    handout = session.handout(since) if session is not None else None
    if store is not None and client_id:
        if handout is not None and handout.resync is not None:
            resume = _Resume(handout.resync, handout.positions, handout.uncertain or {})
            return _resync(deps, gateway, shards, since, limit, rules, claims, client_id, session, resume, handout)
        if handout is None and session is not None and session.resync is not None and session.confirmed is not None:
            # Restarted mid-resync: resume it where the client last confirmed it stood, with the log uncertain.
            heads = deps.buffer.get_heads(shards)
            resume = _Resume(session.resync, session.confirmed, {s.key: h.seq for s, h in heads.items()})
            confirmed = Handout(since, session.confirmed, None, session.resync)
            return _resync(deps, gateway, shards, since, limit, rules, claims, client_id, session, resume, confirmed)
    try:
        return _pull_since_log(deps, gateway, shards, since, limit, rules, claims, client_id, session, handout)
    except _Released as exc:
        if store is None or not client_id:
            raise _expired(gateway, exc.head) from None
        from lakesync.gateway.resync import covering_checkpoint  # rare: not loaded at INIT

        heads = deps.buffer.get_heads(shards)
        manifest = covering_checkpoint(deps, gateway, heads)
        if manifest is None:
            raise _expired(gateway, exc.head) from None
        if handout is not None:
            confirmed = handout
        elif session is not None and session.confirmed is not None:
            confirmed = Handout(since, session.confirmed)
        else:
            confirmed = Handout(since, {})  # nothing confirmed: a push before the next pull starts over
        # Log entries past the checkpoint the client may hold already go out in row form.
        if session is None or handout is None:
            uncertain = {s.key: h.seq for s, h in heads.items()}
        else:
            uncertain = _furthest(confirmed.positions, *_reach(session.handouts))
        resume = _Resume(ResyncMark(manifest.checkpoint_id), manifest.positions, uncertain)
        return _resync(deps, gateway, shards, since, limit, rules, claims, client_id, session, resume, confirmed)


@dataclass(frozen=True, slots=True)
class _Resume:
    """Where a resync resumes: the checkpoint mark, the log positions after it, and the log the client may hold."""

    mark: ResyncMark
    positions: Positions
    uncertain: Positions


def _reach(handouts: Sequence[Handout]) -> list[Positions]:
    return [p for h in handouts for p in (h.positions, h.uncertain or {})]


def _furthest(*maps: Positions) -> dict[str, int]:
    out: dict[str, int] = {}
    for positions in maps:
        for key, seq in positions.items():
            out[key] = max(out.get(key, 0), seq)
    return out


def _resync(
    deps: GatewayDeps,
    gateway: str,
    shards: list[ShardId],
    since: int,
    limit: int,
    rules: SyncRules | None,
    claims: Claims,
    client_id: str,
    session: SinceSession | None,
    resume: _Resume,
    confirmed: Handout,
) -> PullResult:
    """A resync page (:mod:`lakesync.gateway.resync`); ``confirmed`` is what the ``since`` the client sent stands
    for (it applied everything up to there)."""
    from lakesync.gateway.resync import covering_checkpoint, resync_page  # rare: not loaded at INIT

    store = deps.since_sessions
    assert store is not None
    known = set(session.pushed) | set(session.redeliver) if session is not None else set()
    page = resync_page(deps, gateway, resume.mark, limit, rules, claims, client_id, known)
    if page is None:
        # The checkpoint being served is gone (a newer one replaced it): start over from the latest.
        manifest = covering_checkpoint(deps, gateway, deps.buffer.get_heads(shards))
        if manifest is None:
            raise _expired_any(gateway)
        resume = _Resume(ResyncMark(manifest.checkpoint_id), manifest.positions, resume.uncertain)
        page = resync_page(deps, gateway, resume.mark, limit, rules, claims, client_id, known)
        if page is None:
            raise _expired_any(gateway)
    uncertain = resume.uncertain
    if page.next is None:
        # The resync row of a row the client pushed meanwhile (it pushes between pulls) sent the checkpoint's state,
        # older than its own write, and its echo in the log could not be a plain UPDATE (the row may be gone): the
        # log up to now goes out in row form.
        uncertain = _furthest(uncertain, {s.key: h.seq for s, h in deps.buffer.get_heads(shards).items()})
    still_uncertain = {k: v for k, v in uncertain.items() if v > resume.positions.get(k, 0)}
    if page.deltas:
        server_hlc = deps.clock.now()
        handed = Handout(server_hlc, dict(resume.positions), still_uncertain or None, page.next)
        _save_session(deps, store, gateway, client_id, handed, confirmed, (), resynced=True)
        cursor = None if page.next is not None else encode_cursor(resume.positions)
        return PullResult(page.deltas, server_hlc, True, cursor)
    # Nothing for this client in what was read: the original client keeps `since` after an empty page, so `since`
    # itself now stands for where the resync goes on.
    handed = Handout(since, dict(resume.positions), still_uncertain or None, page.next)
    _save_session(deps, store, gateway, client_id, handed, confirmed, (), resynced=True)
    if page.next is None:
        return _pull_since(deps, gateway, shards, since, limit, rules, claims, client_id)
    return PullResult((), since, True, None)


def _pull_since_log(
    deps: GatewayDeps,
    gateway: str,
    shards: list[ShardId],
    since: int,
    limit: int,
    rules: SyncRules | None,
    claims: Claims,
    client_id: str | None,
    session: SinceSession | None,
    handout: Handout | None,
) -> PullResult:
    """A ``since`` page from the log.

    Raises:
        _Released: the position is behind a release.
    """
    store = deps.since_sessions if client_id else None
    positions, uncertain, confirmed = _since_start(deps, shards, since, session, handout)
    readers = _since_readers(deps, shards, positions, _page_size(limit), at_position=handout is not None)
    redeliver = session.redeliver[: max(1, limit // 2)] if session is not None else ()
    stateless = store is None or not client_id
    deltas, has_more, last = _since_page(
        deps, gateway, readers, limit, rules, claims, client_id, uncertain, session, count_unsure=not stateless
    )
    if stateless and has_more:
        # No session to hold the position: the next `since` resumes after the last scanned entry. Entries of other
        # shards can carry the same commit HLC; if one is still unscanned, resume just before it (it comes again).
        assert last is not None
        resume = last.commit_hlc
        if any((nxt := r.peek()) is not None and nxt.commit_hlc == resume for r in readers):
            resume -= 1
        return PullResult(tuple(deltas), max(resume, since), True, None)
    new_positions = dict(positions)
    for reader in readers:
        if reader.after_seq:
            new_positions[reader.shard.key] = reader.after_seq
    if not deltas and new_positions == positions and not redeliver and session is not None:
        # Nothing to apply: the client keeps `since` (the original client does not move on an empty page).
        return PullResult((), since, has_more, encode_cursor(positions))
    server_hlc = deps.clock.now()
    if store is not None and client_id:
        still_uncertain = {k: v for k, v in uncertain.items() if v > new_positions.get(k, 0)}
        handed = Handout(server_hlc, new_positions, still_uncertain or None)
        _save_session(deps, store, gateway, client_id, handed, confirmed, redeliver)
    return PullResult(tuple(deltas), server_hlc, has_more, encode_cursor(new_positions))


def _since_start(
    deps: GatewayDeps, shards: list[ShardId], since: int, session: SinceSession | None, handout: Handout | None
) -> tuple[dict[str, int], dict[str, int], Handout]:
    """Where a ``since`` page starts: ``(positions, uncertain, confirmed)``.

    Raises:
        _Released: the position is behind a release.
    """
    if handout is not None:
        # Positions this server handed out, where pages ended: read and checked as a cursor's are (the heads only
        # for the shards that read nothing, or whose entry at the position is gone).
        return dict(handout.positions), dict(handout.uncertain or {}), handout
    heads = deps.buffer.get_heads(shards)
    if session is not None and session.confirmed is not None:
        positions, uncertain = dict(session.confirmed), {s.key: h.seq for s, h in heads.items()}
        confirmed = Handout(since, positions)
    else:
        _check_not_released(heads.values(), since)
        positions, uncertain = _positions_after(deps, shards, heads, since)
        if since > 0:
            # A position the server did not hand out (a checkpoint's serverHlc, an expired session): the client
            # may hold any row already, so everything up to the heads goes out in a form it applies whatever it
            # holds.
            uncertain = {s.key: h.seq for s, h in heads.items()}
        # A read by commit HLC cannot see a gap: a release racing it shows only in the marks, read again now.
        _check_not_released(deps.buffer.get_heads(shards).values(), since)
        confirmed = Handout(since, positions)
    for head in heads.values():
        if positions.get(head.shard.key, 0) < head.released_seq:
            raise _Released(head)
    return positions, uncertain, confirmed


def _check_not_released(heads: Iterable[ShardHead], since: int) -> None:
    """Raise :class:`_Released` for the first shard that released entries committed after ``since``."""
    for head in heads:
        if since < head.released_hlc:
            raise _Released(head)


def _since_readers(
    deps: GatewayDeps, shards: list[ShardId], positions: Mapping[str, int], page: int, *, at_position: bool
) -> list[_ShardReader]:
    """One reader per shard from its position, each checked against a release racing the read.

    Raises:
        _Released: a release passed a position.
    """
    readers = [_ShardReader(deps, s, page, after_seq=positions.get(s.key, 0), at_position=at_position) for s in shards]
    if len(readers) > 1:
        results_of([submit(reader.peek) for reader in readers])
    # A release between the check above and the read leaves a gap the read stops at: the marks tell (as for cursors).
    idle = [reader.shard for reader in readers if reader.peek() is None]
    checked = list(dict.fromkeys([*idle, *(reader.shard for reader in readers if reader.unverified)]))
    by_shard = {reader.shard: reader for reader in readers}
    reaching = {shard: positions.get(shard.key, 0) for shard in checked}
    for head in deps.buffer.get_heads(checked, reaching=reaching).values() if checked else ():
        if positions.get(head.shard.key, 0) < head.released_seq:
            raise _Released(head)
        by_shard[head.shard].check_against(head)
    return readers


def _positions_after(
    deps: GatewayDeps, shards: list[ShardId], heads: Mapping[ShardId, ShardHead], since: int
) -> tuple[dict[str, int], dict[str, int]]:
    """Per shard, the position just before the first entry committed after ``since``; when ``since`` is recent the
    read starts at the re-read window before it instead (a commit may have taken its HLC before ``since`` and landed
    after it), and the window's entries are uncertain (the client may hold them).

    Returns:
        ``(positions, uncertain)``: where to read from, and up to where entries may already be at the client.
    """
    window_ms = deps.settings.since_window_ms
    recent = (since >> 16) > deps.wall_ms() - window_ms
    start = max(0, since - (window_ms << 16)) if recent else since

    def before_first_after(shard: ShardId, hlc: int) -> int:
        head = heads.get(shard) or ShardHead(shard)
        for attempt in range(_UNSEEN_COMMIT_READS):
            found = deps.buffer.read_log_by_commit_hlc(shard, hlc, 1, images=False)
            if found:
                return found[0].seq - 1
            if head.last_commit_hlc <= hlc or head.seq <= head.released_seq:
                return head.seq
            # The head holds a commit after `hlc` that the log read did not show: a Query is not isolated from a
            # transaction still being applied (head updated, log item not yet visible). Starting at the head would
            # skip that commit, so read again.
            if attempt + 1 < _UNSEEN_COMMIT_READS:
                deps.sleep(0.005 * 2**attempt)
        raise StorageBusyError(
            f"the log of shard {shard.key!r} does not show commits its head records (through sequence {head.seq});"
            " retry the pull"
        )

    starts = {s: submit(before_first_after, s, start) for s in shards}
    ends = {s: submit(before_first_after, s, since) for s in shards} if recent else {}
    found = results_of([*starts.values(), *ends.values()])
    positions = {s.key: position for s, position in zip(starts, found[: len(starts)], strict=True)}
    uncertain = {s.key: position for s, position in zip(ends, found[len(starts) :], strict=True)}
    return positions, uncertain


def _since_page(
    deps: GatewayDeps,
    gateway: str,
    readers: list[_ShardReader],
    limit: int,
    rules: SyncRules | None,
    claims: Claims,
    client_id: str | None,
    uncertain: Mapping[str, int],
    session: SinceSession | None,
    *,
    count_unsure: bool = True,
) -> tuple[list[RowDelta], bool, LogEntry | None]:
    """The rows to redeliver in row form, then the log in commit order: certain entries as full rows with the op the
    client can apply, uncertain ones in row form; up to ``limit`` deltas, ``max_page_bytes`` or
    ``max_scan_per_pull`` scanned entries. With a session every delta carries HLC 0. Without one
    (``count_unsure`` false) the re-read window's entries do not count against ``limit``, so paging by ``serverHlc``
    always progresses. Returns the deltas, ``hasMore`` and the last entry scanned."""
    out: list[RowDelta] = []
    held: dict[RowKey, bool] = {}
    redeliver = session.redeliver[: max(1, limit // 2)] if session is not None else ()
    wrote = set(session.pushed) if session is not None else set()
    stamp = 0 if session is not None else None
    resynced = session is not None and session.resynced
    if redeliver:
        stored = deps.buffer.get_rows(gateway, list(redeliver))
        for key in redeliver:
            row = stored.get(key)
            state = row.state if row is not None else None
            version = None if state is None else (state.written or state.tombstone)
            values = visible_values(rules, claims, key[0], state.values() if state is not None else None)
            writer = version.client_id if version is not None else (client_id or "")
            out.extend(row_form(key[0], key[1], writer, values, held=True))
            held[key] = values is not None
    settings = deps.settings
    scanned = 0
    size = 0
    counted = len(out)
    last: LogEntry | None = None
    for _reader, entry in _merged(readers):
        scanned += 1
        size += entry.size
        last = entry
        delta = entry.delta
        key = (entry.shard.table, delta.row_id)
        after = visible_values(rules, claims, key[0], entry.after)
        unsure = entry.seq <= uncertain.get(entry.shard.key, 0)
        if key in held:
            had = held[key]  # what this page's deltas have left the client holding
        elif delta.client_id == client_id:
            had = True  # it holds what it wrote
        else:
            had = visible_values(rules, claims, key[0], entry.before) is not None
            # A row it wrote recently may be at the client whatever the server saw before this change; so may any
            # row after a resync (one deleted or moved out of its buckets while it was behind, never named to it).
            unsure = unsure or key in wrote or (resynced and not had)
        if unsure:
            replay = row_form(key[0], key[1], delta.client_id, after, held=had or after is not None)
            out.extend(replay)
            if count_unsure or entry.seq > uncertain.get(entry.shard.key, 0):
                counted += len(replay)
            sent = bool(replay)
        else:
            changed = full_row(delta, after, held=had, before=entry.before, hlc=stamp)
            if changed is not None:
                out.append(changed)
                counted += 1
            sent = changed is not None
        if sent:
            # Only a delta sent decides what the client holds. A change that sent nothing (a row gone or invisible
            # before and after it: a delete of a deleted row) leaves the client as it was, which the server may not
            # know: a row it wrote, or any row after a resync, may still be there, so the row's next change in this
            # page is judged as a first one (in row form) rather than as a plain INSERT of a row "not held".
            held[key] = after is not None
        if size >= settings.max_page_bytes or scanned >= settings.max_scan_per_pull:
            break
        # Without a session the next page resumes by commit HLC, so a page must not end inside one commit HLC.
        if counted >= limit and (
            count_unsure
            or not any((nxt := r.peek()) is not None and nxt.commit_hlc == entry.commit_hlc for r in readers)
        ):
            break
    return out, any(r.peek() is not None for r in readers), last


def _save_session(
    deps: GatewayDeps,
    store: SinceSessionStore,
    gateway: str,
    client_id: str,
    handed: Handout,
    confirmed: Handout,
    consumed: Sequence[RowKey],
    *,
    resynced: bool = False,
) -> None:
    """Record the handout and what the client confirmed (the positions and resync mark of the ``since`` it sent),
    and drop the rows just redelivered (re-read on a race). ``resynced`` marks the session as resynced for good."""
    expires_at = deps.wall_ms() // 1000 + SESSION_TTL_S
    done = set(consumed)
    for _ in range(5):
        current = store.get(gateway, client_id) or SinceSession()
        updated = replace(
            current.handed(handed),
            confirmed=dict(confirmed.positions),
            resync=confirmed.resync,
            redeliver=tuple(r for r in current.redeliver if r not in done),
            resynced=current.resynced or resynced,
        )
        try:
            store.put(gateway, client_id, updated, expires_at)
        except CommitConflict:
            continue
        return
    raise CommitConflictError(f"The sync session of client {client_id!r} is being changed concurrently; retry")


def _regressed(gateway: str, shard: ShardId) -> CursorExpiredError:
    return CursorExpiredError(
        f"The log of table {shard.table!r} no longer matches this cursor (the buffer was restored or recreated"
        f" behind it); load the checkpoint (GET /v1/sync/{gateway}/checkpoint) and pull from its cursor"
    )


def _expired_any(gateway: str) -> CursorExpiredError:
    return CursorExpiredError(
        f"The buffer was released past this pull position; load the checkpoint (GET /v1/sync/{gateway}/checkpoint)"
        " and pull from its cursor"
    )


def _expired(gateway: str, head: ShardHead) -> CursorExpiredError:
    return CursorExpiredError(
        f"The buffer of table {head.shard.table!r} was released past this pull position; load the checkpoint"
        f" (GET /v1/sync/{gateway}/checkpoint) and pull from its cursor"
    )


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
