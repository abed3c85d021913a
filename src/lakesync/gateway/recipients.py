"""Who receives a committed change: the broadcaster's index of sessions by scope (issue 43, item 6).

Sessions are grouped by their claims (sessions with equal claims see the same rows), and each group's scope is
resolved once (:func:`lakesync.core.scope.resolve_scope`) and kept in a :class:`~lakesync.core.scope.ScopeIndex`.
For a change, the index names the groups whose scope may cover the row before or after it; each of those is then
judged by the pull's own rule (:func:`lakesync.gateway.log_pages.entry_visible`), once per group, so the broadcast
never delivers what a pull would not, and the work grows with the groups a change may concern and the sessions it
reaches, not with every connected session.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from lakesync.core.log import LogEntry
from lakesync.core.realtime import Connection
from lakesync.core.rules import SyncRules
from lakesync.core.scope import ScopeIndex, resolve_scope
from lakesync.gateway.log_pages import entry_visible

__all__ = ["RecipientIndex", "claims_key"]


def claims_key(connection: Connection) -> str:
    """The key of a session's claims: sessions with equal keys see the same rows."""
    claims = {k: list(v) if isinstance(v, tuple | list) else v for k, v in connection.claims.items()}
    return json.dumps(claims, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


class RecipientIndex:
    """The sessions of one gateway under ``rules``, indexed by scope (see the module docstring).

    Args:
        rules: The gateway's sync rules (``None``: none, every row is visible).
        connections: The sessions to index.
    """

    def __init__(self, rules: SyncRules | None, connections: Iterable[Connection] = ()) -> None:
        self.rules = rules
        self._index = ScopeIndex()
        self._groups: dict[str, dict[str, Connection]] = {}
        self._group_of: dict[str, str] = {}
        for connection in connections:
            self.add(connection)

    def add(self, connection: Connection) -> None:
        """Index ``connection`` (replacing it if indexed)."""
        self.remove(connection.connection_id)
        key = claims_key(connection)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = {}
            self._index.put(key, resolve_scope(self.rules, connection.claims))
        group[connection.connection_id] = connection
        self._group_of[connection.connection_id] = key

    def remove(self, connection_id: str) -> None:
        """Forget a session (nothing when it is not indexed)."""
        key = self._group_of.pop(connection_id, None)
        if key is None:
            return
        group = self._groups[key]
        group.pop(connection_id, None)
        if not group:
            del self._groups[key]
            self._index.remove(key)

    def __len__(self) -> int:
        return len(self._group_of)

    def recipients(self, entry: LogEntry) -> list[Connection]:
        """The sessions ``entry`` reaches: visible to them by the pull's rule, and not their own change."""
        found: list[Connection] = []
        author = entry.delta.client_id
        for key in self._index.candidates(entry.shard.table, entry.before, entry.after):
            group = self._groups[key]
            if entry_visible(entry, self.rules, next(iter(group.values())).claims):
                found.extend(c for c in group.values() if c.client_id != author)
        return found

    def deliveries(self, entries: Sequence[LogEntry]) -> dict[str, tuple[Connection, list[LogEntry]]]:
        """Connection id -> the session and the entries it receives, in order, for each session that receives any."""
        out: dict[str, tuple[Connection, list[LogEntry]]] = {}
        for entry in entries:
            for connection in self.recipients(entry):
                held = out.get(connection.connection_id)
                if held is None:
                    out[connection.connection_id] = (connection, [entry])
                else:
                    held[1].append(entry)
        return out
