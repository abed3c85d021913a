"""``since`` pulls of the original client (:mod:`lakesync.gateway.since` says what they guarantee and how): a page
from the exact positions its session holds, from the positions it last confirmed, or from the first entries
committed after ``since``; and the resync from the latest checkpoint of a client behind a release
(:mod:`lakesync.gateway.resync`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from lakesync.core.delta import RowDelta
from lakesync.core.errors import CommitConflictError, StorageBusyError
from lakesync.core.log import CommitConflict, LogEntry, ShardHead, ShardId
from lakesync.core.rules import Claims, SyncRules
from lakesync.core.since import SESSION_TTL_S, Handout, Positions, ResyncMark, RowKey, SinceSession
from lakesync.gateway.cursor import encode_cursor
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.log_pages import (
    PullResult,
    ShardReader,
    expired_any_error,
    expired_error,
    merged,
    page_size,
)
from lakesync.gateway.since import full_row, row_form, visible_values
from lakesync.io_pool import results_of, submit
from lakesync.ports import SinceSessionStore

__all__ = ["SinceRequest", "pull_since"]

_UNSEEN_COMMIT_READS: Final = 8
"""Reads by commit HLC (5 ms doubling between them: about 0.6 s in all) while the head records a commit after the
position that the log does not show yet."""


@dataclass(frozen=True, slots=True)
class SinceRequest:
    """One ``since`` pull: the gateway's shards and rules as read for it, and who asks.

    Attributes:
        deps: Stores, clock and settings.
        gateway: The gateway id.
        shards: The gateway's registered shards.
        since: The ``serverHlc`` the client sent.
        limit: Most deltas to return.
        rules: The gateway's sync rules.
        claims: The caller's claims, for the rules.
        client_id: The client whose session is used (``None``: served without one).
    """

    deps: GatewayDeps
    gateway: str
    shards: list[ShardId]
    since: int
    limit: int
    rules: SyncRules | None
    claims: Claims
    client_id: str | None

    def parts(self) -> tuple[GatewayDeps, str, list[ShardId], int, int, SyncRules | None, Claims]:
        """Everything but the client id, in the order the steps use."""
        return self.deps, self.gateway, self.shards, self.since, self.limit, self.rules, self.claims


class _Released(Exception):
    """A ``since`` position is behind a release of ``head``'s shard."""

    def __init__(self, head: ShardHead) -> None:
        super().__init__(head.shard.key)
        self.head = head


def pull_since(request: SinceRequest) -> PullResult:
    """A ``since`` page for the original client (:mod:`lakesync.gateway.since`): from the exact positions handed out
    with ``since``; for a client whose session does not know ``since`` (it restarted), from the positions it last
    confirmed with everything uncertain; for a client without a session, from the first entries committed after
    ``since`` (the re-read window before a recent ``since`` uncertain). A client whose position is behind a release
    is resynced from the latest checkpoint (:mod:`lakesync.gateway.resync`); without a session store, or without a
    checkpoint covering the release, it gets 410."""
    deps, gateway, shards, since, client_id = (
        request.deps,
        request.gateway,
        request.shards,
        request.since,
        request.client_id,
    )
    store = deps.since_sessions if client_id else None
    session = store.get(gateway, client_id) if store is not None and client_id else None
    handout = session.handout(since) if session is not None else None
    if store is not None and client_id:
        if handout is not None and handout.resync is not None:
            resume = _Resume(handout.resync, handout.positions, handout.uncertain or {})
            return _resync(request, client_id, session, resume, handout)
        if handout is None and session is not None and session.resync is not None and session.confirmed is not None:
            # Restarted mid-resync: resume it where the client last confirmed it stood, with the log uncertain.
            heads = deps.buffer.get_heads(shards)
            resume = _Resume(session.resync, session.confirmed, {s.key: h.seq for s, h in heads.items()})
            confirmed = Handout(since, session.confirmed, None, session.resync)
            return _resync(request, client_id, session, resume, confirmed)
    try:
        return _pull_since_log(request, session, handout)
    except _Released as exc:
        if store is None or not client_id:
            raise expired_error(gateway, exc.head) from None
        from lakesync.gateway.resync import covering_checkpoint  # rare: not loaded at INIT

        heads = deps.buffer.get_heads(shards)
        manifest = covering_checkpoint(deps, gateway, heads)
        if manifest is None:
            raise expired_error(gateway, exc.head) from None
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
        return _resync(request, client_id, session, resume, confirmed)


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
    request: SinceRequest,
    client_id: str,
    session: SinceSession | None,
    resume: _Resume,
    confirmed: Handout,
) -> PullResult:
    """A resync page (:mod:`lakesync.gateway.resync`); ``confirmed`` is what the ``since`` the client sent stands
    for (it applied everything up to there)."""
    deps, gateway, shards, since, limit, rules, claims = request.parts()
    from lakesync.gateway.resync import covering_checkpoint, resync_page  # rare: not loaded at INIT

    store = deps.since_sessions
    assert store is not None
    known = set(session.pushed) | set(session.redeliver) if session is not None else set()
    page = resync_page(deps, gateway, resume.mark, limit, rules, claims, client_id, known)
    if page is None:
        # The checkpoint being served is gone (a newer one replaced it): start over from the latest.
        manifest = covering_checkpoint(deps, gateway, deps.buffer.get_heads(shards))
        if manifest is None:
            raise expired_any_error(gateway)
        resume = _Resume(ResyncMark(manifest.checkpoint_id), manifest.positions, resume.uncertain)
        page = resync_page(deps, gateway, resume.mark, limit, rules, claims, client_id, known)
        if page is None:
            raise expired_any_error(gateway)
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
        return pull_since(request)
    return PullResult((), since, True, None)


def _pull_since_log(
    request: SinceRequest,
    session: SinceSession | None,
    handout: Handout | None,
) -> PullResult:
    """A ``since`` page from the log.

    Raises:
        _Released: the position is behind a release.
    """
    deps, gateway, shards, since, limit, rules, claims = request.parts()
    client_id = request.client_id
    store = deps.since_sessions if client_id else None
    positions, uncertain, confirmed = _since_start(deps, shards, since, session, handout)
    readers = _since_readers(deps, shards, positions, page_size(limit), at_position=handout is not None)
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
) -> list[ShardReader]:
    """One reader per shard from its position, each checked against a release racing the read.

    Raises:
        _Released: a release passed a position.
    """
    readers = [ShardReader(deps, s, page, after_seq=positions.get(s.key, 0), at_position=at_position) for s in shards]
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
    readers: list[ShardReader],
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
    for _reader, entry in merged(readers):
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
