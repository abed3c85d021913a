"""Composite: route tables to adapters (a table → adapter map with a default).

:class:`CompositeDestination` is a :class:`~lakesync.ports.Destination`: ``apply`` and ``rows`` go to the
destination of the schema's table (``schema.table``, the destination table name), or to the default. A table with
no route and no default is refused (:class:`~lakesync.core.errors.DestinationError`, not retryable): silently
dropping a table's rows would be worse. It is a :class:`~lakesync.adapters.state.StateReader` when the routed
destinations are.

:class:`CompositeSource` is a :class:`~lakesync.ports.SourceAdapter`: the deltas of a table come from the source it
is routed to (the default serves every table without a route; without a default such tables are not served), and
``query_deltas_since`` merges them in HLC order. Ties are broken by ``(table, row_id, client_id, delta_id)``, so the
order never depends on which source answered first. It asks each source for ``limit`` deltas (more pages when a
source's first page is mostly other tables' deltas), so the first ``limit`` of the merge are the first ``limit`` of
the union: a source that returned a full page holds nothing older than what it returned. A page never ends inside
one HLC when it can avoid it (deltas of one HLC from two sources are a tie, and ``since_hlc`` cannot express a
position inside an HLC): the tie moves to the next page, unless one HLC alone has more than ``limit`` deltas.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

from lakesync.adapters.state import StatePage, StateReader
from lakesync.core.delta import RowDelta
from lakesync.core.errors import DestinationError
from lakesync.core.merge import RowState
from lakesync.core.schema import TableSchema
from lakesync.ports import ApplyStats, Destination, SourceAdapter

__all__ = ["CompositeDestination", "CompositeSource"]


def _distinct(items: Sequence[Any]) -> list[Any]:
    """``items`` without repeats (by identity), in first-seen order."""
    seen: set[int] = set()
    out = []
    for item in items:
        if id(item) not in seen:
            seen.add(id(item))
            out.append(item)
    return out


class CompositeDestination:
    """Routes each table to one destination.

    Args:
        name: The composite's name.
        routes: Destination table name (``schema.table``) → destination.
        default: Takes every table without a route; ``None`` refuses them.
    """

    def __init__(self, name: str, routes: Mapping[str, Destination], default: Destination | None = None) -> None:
        self.name = name
        self.routes = dict(routes)
        self.default = default

    def __repr__(self) -> str:
        routes = {table: dest.name for table, dest in sorted(self.routes.items())}
        return f"CompositeDestination({self.name!r}, {routes}, default={getattr(self.default, 'name', None)!r})"

    @property
    def destinations(self) -> list[Destination]:
        """Every distinct destination (routed ones in table order, then the default)."""
        routed = [self.routes[t] for t in sorted(self.routes)]
        return _distinct([*routed, *([self.default] if self.default is not None else [])])

    def route(self, schema: TableSchema) -> Destination:
        """The destination of ``schema.table``.

        Raises:
            DestinationError: not retryable: the table has no route and there is no default.
        """
        dest = self.routes.get(schema.table, self.default)
        if dest is None:
            raise DestinationError(
                f"destination {self.name}: no route for table {schema.table!r} and no default", retryable=False
            )
        return dest

    def apply(self, schema: TableSchema, deltas: Sequence[RowDelta]) -> ApplyStats:
        """Apply to the table's destination (its stats, its atomicity)."""
        return self.route(schema).apply(schema, deltas)

    def rows(self, schema: TableSchema) -> dict[str, dict[str, Any]]:
        """The rows of the table's destination."""
        return self.route(schema).rows(schema)

    def close(self) -> None:
        """Close every distinct destination once."""
        for dest in self.destinations:
            dest.close()

    def states(self, schema: TableSchema, *, after: str | None = None, limit: int = 500) -> StatePage:
        """The routed destination's states (it must be a :class:`StateReader`)."""
        return self._reader(schema).states(schema, after=after, limit=limit)

    def states_of(self, schema: TableSchema, row_ids: Sequence[str]) -> dict[str, RowState]:
        """The routed destination's states of ``row_ids``."""
        return self._reader(schema).states_of(schema, row_ids)

    def _reader(self, schema: TableSchema) -> StateReader:
        dest = self.route(schema)
        if not isinstance(dest, StateReader):
            raise DestinationError(f"destination {dest.name}: its row states cannot be read", retryable=False)
        return dest


def _order(delta: RowDelta) -> tuple[int, str, str, str, str]:
    return delta.hlc, delta.table, delta.row_id, delta.client_id, delta.delta_id


class CompositeSource:
    """Serves each table's deltas from the source it is routed to, merged in HLC order.

    Args:
        name: The composite's name (the ``?source=`` name it is registered under).
        routes: Delta table name → source.
        default: Serves every table without a route; ``None`` serves none of them.
    """

    def __init__(self, name: str, routes: Mapping[str, SourceAdapter], default: SourceAdapter | None = None) -> None:
        self.name = name
        self.routes = dict(routes)
        self.default = default

    def __repr__(self) -> str:
        routes = {table: src.name for table, src in sorted(self.routes.items())}
        return f"CompositeSource({self.name!r}, {routes}, default={getattr(self.default, 'name', None)!r})"

    def serves(self, source: SourceAdapter, table: str) -> bool:
        """Whether ``table``'s deltas are taken from ``source``."""
        return self.routes.get(table, self.default) is source

    def query_deltas_since(self, since_hlc: int, limit: int) -> list[RowDelta]:
        """The first ``limit`` deltas with ``hlc > since_hlc`` over the routed sources, in HLC order."""
        if limit <= 0:
            return []
        routed = [self.routes[t] for t in sorted(self.routes)]
        sources = _distinct([*routed, *([self.default] if self.default is not None else [])])
        pages = [sorted(self._routed_page(source, since_hlc, limit), key=_order) for source in sources]
        merged = list(heapq.merge(*pages, key=_order))
        if len(merged) <= limit:
            return merged
        page = merged[:limit]
        cut = merged[limit].hlc
        if page[-1].hlc == cut:
            # The page would end inside one HLC: a caller continuing from ``since = page[-1].hlc`` would skip the
            # rest of it. Leave that HLC for the next page, unless it fills the whole page.
            whole = [d for d in page if d.hlc != cut]
            if whole:
                return whole
        return page

    def _routed_page(self, source: SourceAdapter, since_hlc: int, limit: int) -> list[RowDelta]:
        """At least ``limit`` of the source's deltas for its routed tables, or all of them."""
        out: list[RowDelta] = []
        cursor = since_hlc
        while True:
            batch = source.query_deltas_since(cursor, limit)
            out.extend(d for d in batch if d.hlc > since_hlc and self.serves(source, d.table))
            if len(batch) < limit or len(out) >= limit:
                return out
            last = max(d.hlc for d in batch)
            if last <= cursor:  # a source that does not advance: stop rather than loop
                return out
            cursor = last
