"""The incremental cursor of an API connector: a modification-time cursor with an overlap window and dedup.

Vendor APIs filter on a modification time (Jira's ``updated``, Salesforce's ``SystemModstamp``) at a coarser precision
than the values they return (JQL compares minutes), and their search indexes are eventually consistent (a record
written a moment ago may show up in a later search, with a modification time *behind* the cursor). So each query
re-reads from ``floor(cursor - overlap)`` and the connector skips what it already emitted:

* ``cursor`` is the greatest modification time emitted so far (UTC, ISO 8601 with milliseconds);
* ``recent`` maps the row ids emitted inside the overlap window to the modification time emitted. A row comes out
  again only with a *newer* modification time, so an overlap re-read emits nothing new and a stale search result (an
  older state than one already emitted) is never sent;
* ``resume`` holds the vendor's continuation (a Jira ``nextPageToken``, a Salesforce query locator) when a poll
  stopped at its row limit mid-query, so the next poll continues the same query instead of starting over.

``recent`` keeps at most :data:`MAX_RECENT` entries (the newest); beyond that, a re-read may emit a row again with the
same version -- the same deltaId, which the gateway answers as a duplicate. Dedup here saves pushes; the versions are
what make re-polls exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lakesync.connectors.http_api import ApiRequestError, ApiUnavailableError
from lakesync.core.canonical import JsonValue

__all__ = ["MAX_RECENT", "IncrementalState", "advancing", "format_utc", "parse_time", "vendor_time"]

MAX_RECENT = 5000
"""Row ids remembered inside the overlap window at most (bounds the stored position's size)."""


def parse_time(value: str) -> datetime:
    """A vendor timestamp (``2024-01-31T10:00:00.000+0000``, ``...Z``, ``...+11:00``) as an aware UTC datetime.

    Raises:
        ValueError: not an ISO 8601 date-time with an offset.
    """
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp without an offset: {value!r}")
    return parsed.astimezone(UTC)


def vendor_time(value: str, what: str, *, vendor: str) -> datetime:
    """:func:`parse_time` of a stamp in a vendor's answer, naming it when it does not parse.

    Raises:
        ApiRequestError: not an ISO 8601 date-time with an offset.
    """
    try:
        return parse_time(value)
    except ValueError:
        raise ApiRequestError(
            f"{vendor} returned {what} that is not a date-time with an offset: {value[:80]!r}", vendor=vendor
        ) from None


def advancing(marker: str, seen: set[str], name: str, what: str, *, vendor: str) -> str:
    """``marker`` (the vendor's ``name`` for it: a page token, a next-page URL), remembered in ``seen``: one already
    given for this query means the pagination does not advance.

    Raises:
        ApiUnavailableError: ``marker`` was given before.
    """
    if marker in seen:
        raise ApiUnavailableError(
            f"{vendor} {what} returned a {name} it had already given for this query (pagination does not advance)",
            vendor=vendor,
        )
    seen.add(marker)
    return marker


def format_utc(value: datetime) -> str:
    """``2024-01-31T10:00:00.000Z``: the one normalised form stored in positions and versions (sorts as text)."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def _floor(value: datetime, granularity: timedelta) -> datetime:
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    steps = (value - epoch) // granularity
    return epoch + steps * granularity


@dataclass
class IncrementalState:
    """One stream's cursor, its recently emitted rows, and a query to resume (see the module docstring)."""

    cursor: str | None = None
    recent: dict[str, str] = field(default_factory=dict)
    resume: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, obj: object) -> IncrementalState:
        """Read a stored state; anything malformed reads as the beginning (a full re-read is safe, only slower)."""
        if not isinstance(obj, Mapping):
            return cls()
        cursor = obj.get("cursor")
        recent = obj.get("recent")
        resume = obj.get("resume")
        state = cls(
            cursor if isinstance(cursor, str) else None,
            {str(k): v for k, v in recent.items() if isinstance(v, str)} if isinstance(recent, Mapping) else {},
            dict(resume) if isinstance(resume, Mapping) else None,
        )
        if state.cursor is not None:
            try:
                parse_time(state.cursor)
            except ValueError:
                return cls()
        return state

    def to_json(self) -> dict[str, JsonValue]:
        """The JSON stored in the position."""
        out: dict[str, JsonValue] = {"cursor": self.cursor, "recent": dict(sorted(self.recent.items()))}
        if self.resume is not None:
            out["resume"] = dict(self.resume)
        return out

    def query_start(self, overlap: timedelta, granularity: timedelta) -> datetime | None:
        """Where the next query starts: ``floor(cursor - overlap)`` at the vendor's filter precision (``None``: all)."""
        if self.cursor is None:
            return None
        return _floor(parse_time(self.cursor) - overlap, granularity)

    def accept(self, row_id: str, modified: datetime, *, not_after: datetime | None = None) -> bool:
        """Record a row seen by a query; whether to emit it (not emitted before at this or a newer time).

        The cursor moves to ``modified`` but never past ``not_after`` (now): a row dated in the future stays in
        ``recent`` (not emitted again) without hiding the rows changed until then.
        """
        stamp = format_utc(modified)
        previous = self.recent.get(row_id)
        if previous is not None and previous >= stamp:
            return False
        self.recent[row_id] = stamp
        cursor = stamp if not_after is None else min(stamp, format_utc(not_after))
        if self.cursor is None or cursor > self.cursor:
            self.cursor = cursor
        return True

    def prune(self, overlap: timedelta, granularity: timedelta) -> None:
        """Forget rows older than the next query's start; keep at most :data:`MAX_RECENT` (the newest)."""
        start = self.query_start(overlap, granularity)
        if start is None:
            return
        # A row exactly at the start is read again by the next query: keep it.
        threshold = format_utc(start - granularity)
        kept = {k: v for k, v in self.recent.items() if v >= threshold}
        if len(kept) > MAX_RECENT:
            kept = dict(sorted(kept.items(), key=lambda kv: (kv[1], kv[0]))[-MAX_RECENT:])
        self.recent = kept
