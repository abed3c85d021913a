"""Composite: tables routed to destinations on three real databases, and sources merged in HLC order (also through
the gateway's ``?source=`` pull and the materialise consumer)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from lakesync.adapters import CompositeDestination, CompositeSource, FanOutDestination, SqlStateDestination
from lakesync.aws.destinations import ConfiguredDestinations
from lakesync.core.delta import RowDelta
from lakesync.core.errors import DestinationError
from lakesync.core.hlc import HLC
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.materialise import MaterialiseDeps, materialise_job
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemoryObjectStore,
)
from lakesync.gateway.pull import pull
from tests.adapters.conftest import H, ins, job_message, schema_of, upd

pytestmark = pytest.mark.integration

Open = Callable[[str, str], SqlStateDestination]


def test_tables_go_to_their_routed_destination_and_the_rest_to_the_default(open_state: Open) -> None:
    pg, maria, lite = open_state("postgres", "routes"), open_state("mariadb", "routes"), open_state("sqlite", "routes")
    composite = CompositeDestination("c", {"orders": pg, "people": maria}, default=lite)
    orders, people, notes = schema_of("orders"), schema_of("people"), schema_of("notes")
    composite.apply(orders, [ins("orders", "o1", H(1), title="order")])
    composite.apply(people, [ins("people", "p1", H(1), title="ann")])
    composite.apply(notes, [ins("notes", "n1", H(1), title="note"), upd("notes", "n1", H(2), n=2)])

    # Each table lives only where it is routed.
    assert pg.rows(orders) == {"o1": {"title": "order", "done": None, "n": None}}
    assert maria.rows(people) == {"p1": {"title": "ann", "done": None, "n": None}}
    assert lite.rows(notes) == {"n1": {"title": "note", "done": None, "n": 2.0}}
    assert lite.rows(orders) == {} and lite.rows(people) == {} and pg.rows(notes) == {}
    # Reads go to the same place as writes.
    assert composite.rows(people) == maria.rows(people)
    assert [s.row_id for s in composite.states(orders).states] == ["o1"]
    assert composite.destinations == [pg, maria, lite]


def test_a_table_without_route_or_default_is_refused_and_nothing_is_written(open_state: Open) -> None:
    lite = open_state("sqlite", "strict")
    composite = CompositeDestination("c", {"orders": lite})
    with pytest.raises(DestinationError) as err:
        composite.apply(schema_of("notes"), [ins("notes", "n1", H(1), title="x")])
    assert err.value.retryable is False and "no route for table 'notes'" in err.value.message
    assert lite.rows(schema_of("notes")) == {}


class ListSource:
    def __init__(self, name: str, deltas: list[RowDelta]) -> None:
        self.name = name
        self.deltas = sorted(deltas, key=lambda d: d.hlc)
        self.calls: list[tuple[int, int]] = []

    def query_deltas_since(self, since_hlc: int, limit: int) -> list[RowDelta]:
        self.calls.append((since_hlc, limit))
        return [d for d in self.deltas if d.hlc > since_hlc][:limit]


def _deltas(table: str, hlcs: list[int], client: str = "c") -> list[RowDelta]:
    return [upd(table, f"{table}-{h}", H(h), client, v=h) for h in hlcs]


def test_composite_source_merges_routed_sources_in_hlc_order_with_deterministic_ties() -> None:
    crm = ListSource("crm", _deltas("contacts", [1, 3, 5, 7]) + _deltas("deals", [2, 4]))  # deals routed elsewhere
    erp = ListSource("erp", _deltas("deals", [2, 6, 8]) + _deltas("invoices", [3, 9]))
    composite = CompositeSource("all", {"contacts": crm, "deals": erp}, default=erp)

    got = composite.query_deltas_since(0, 100)
    assert [(d.table, d.hlc >> 16) for d in got] == [
        ("contacts", 1),
        ("deals", 2),  # erp's, not crm's: deals are routed to erp
        ("contacts", 3),
        ("invoices", 3),  # an HLC tie: ordered by table, whoever answered first
        ("contacts", 5),
        ("deals", 6),
        ("contacts", 7),
        ("deals", 8),
        ("invoices", 9),
    ]
    # Pages of any size, followed by HLC, give the same sequence (a page never ends inside the tie at HLC 3; a tie
    # larger than a page cannot be paged through: ``since_hlc`` cannot point inside one HLC).
    for limit in (2, 3, 4, 5):
        paged, since = [], 0
        while page := composite.query_deltas_since(since, limit):
            assert len(page) <= limit
            paged.extend(page)
            since = page[-1].hlc
        assert paged == got
    # A page that would end inside the tie stops before it.
    assert [d.hlc >> 16 for d in composite.query_deltas_since(H(1), 2)] == [2]
    # Sources answering in another order change nothing.
    flipped = CompositeSource("all", {"deals": erp, "contacts": crm}, default=erp)
    assert flipped.query_deltas_since(0, 100) == got


def test_composite_source_pages_past_other_tables_deltas() -> None:
    # The first 50 deltas of the source are of a table routed elsewhere: the composite still finds 3 routed ones.
    noisy = ListSource("noisy", _deltas("other", list(range(1, 51))) + _deltas("wanted", [60, 61, 62]))
    composite = CompositeSource("c", {"wanted": noisy})
    got = composite.query_deltas_since(0, 3)
    assert [d.hlc >> 16 for d in got] == [60, 61, 62]
    assert len(noisy.calls) > 1


def test_composite_source_serves_a_gateway_source_pull_with_sync_rules_and_has_more() -> None:
    crm = ListSource("crm", _deltas("contacts", [1, 3, 5]))
    erp = ListSource("erp", _deltas("deals", [2, 4, 6]))
    deps = GatewayDeps(
        buffer=InMemoryBufferStore(),
        config=InMemoryConfigStore(),
        actions=InMemoryActionStore(),
        settings=GatewaySettings(),
        clock=HLC(lambda: 1_700_000_000_000),
        wall_ms=lambda: 1_700_000_000_000,
        sleep=lambda _: None,
    )
    deps.sources = {"both": CompositeSource("both", {"contacts": crm, "deals": erp})}
    first = pull(deps, "default", limit=4, claims={}, source="both")
    assert [d.hlc >> 16 for d in first.deltas] == [1, 2, 3, 4] and first.has_more
    rest = pull(deps, "default", limit=4, claims={}, source="both", since=first.deltas[-1].hlc)
    assert [d.hlc >> 16 for d in rest.deltas] == [5, 6] and not rest.has_more


def test_the_materialise_consumer_writes_through_a_composite_of_a_fanout(open_state: Open) -> None:
    pg, maria, lite = open_state("postgres", "mat"), open_state("mariadb", "mat"), open_state("sqlite", "mat")
    # todos: PostgreSQL, mirrored best effort to SQLite; everything else: MariaDB.
    composed = CompositeDestination("composed", {"todos": FanOutDestination("todos", pg, [lite])}, default=maria)
    config, objects = InMemoryConfigStore(), InMemoryObjectStore()
    todos, notes = schema_of("todos"), schema_of("notes")
    config.put_schema("gw", todos, 1, 0)
    config.put_schema("gw", notes, 1, 0)
    deps = MaterialiseDeps(objects, "claims", config, ConfiguredDestinations(config, extra=[composed]))

    rng = random.Random(7)
    todo_deltas = [upd("todos", f"r{rng.randrange(5)}", H(i), "c", title=f"t{i}") for i in range(1, 40)]
    outcome = materialise_job(deps, job_message(objects, "todos", todo_deltas, 0))
    materialise_job(deps, job_message(objects, "notes", [ins("notes", "n", H(1), title="note")], 0))
    # A redelivery changes nothing anywhere.
    materialise_job(deps, job_message(objects, "todos", todo_deltas, 0))

    assert outcome.applied["composed/todos"].stats.deltas == len(todo_deltas)
    from lakesync.core.merge import fold

    expected: dict[str, Any] = {}
    for row in {d.row_id for d in todo_deltas}:
        state = fold(d for d in todo_deltas if d.row_id == row)
        assert state is not None
        expected[row] = {"title": state.values()["title"], "done": None, "n": None}  # type: ignore[index]
    assert pg.rows(todos) == expected and lite.rows(todos) == expected
    assert maria.rows(notes) == {"n": {"title": "note", "done": None, "n": None}}
    assert maria.rows(todos) == {} and pg.rows(notes) == {}
