"""Database connectors against real PostgreSQL and MariaDB servers (started by the suite): cursor and diff polling of
inserts, updates and deletes through the push service; a crash mid-poll then a resume (nothing lost, nothing applied
twice); two pollers racing on one connector (one proceeds, one is busy; a poller that outlived its lease stores
nothing); ``source=`` pulls filtered by sync rules; registration with bad input (400/409, nothing stored), an
unreachable source (502, nothing stored) and plaintext credentials moved into the secret store; provenance rows
keyed by deltaId reaching pull."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import pytest

from lakesync.connectors.base import PollBatch, Position
from lakesync.core.delta import DeltaOp, RowDelta, apply_delta
from lakesync.core.errors import AdapterError, AlreadyExistsError, BackpressureError, NotFoundError, ValidationError
from lakesync.core.rules import parse_sync_rules
from lakesync.gateway import connectors as admin
from lakesync.gateway import pull as pull_service
from lakesync.gateway import push as push_service
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.poller import PROVENANCE_TABLE, poll_connector, poll_registered
from tests.connector_types import pull_all
from tests.sql_connectors.conftest import GW, Source

T0 = dt.datetime(2025, 1, 1, 12, 0, 0)


def _pull_all(deps: GatewayDeps) -> list[RowDelta]:
    return pull_all(deps, GW)


def _state(deltas: list[RowDelta], table: str) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for d in deltas:
        if d.table != table:
            continue
        after = apply_delta(rows.get(d.row_id), d)
        if after is None:
            rows.pop(d.row_id, None)
        else:
            rows[d.row_id] = after
    return rows


def _config(source: Source, strategy: Mapping[str, Any], name: str = "crm", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": source.kind,
        source.kind: {"connectionString": source.url},
        "ingest": {
            "intervalMs": 1000,
            "tables": [
                {
                    "table": "customers",
                    "query": "SELECT id, name, tier, updated_at FROM customers",
                    "rowIdColumn": "id",
                    "strategy": dict(strategy),
                }
            ],
        },
        **extra,
    }


def _make_table(source: Source, n: int) -> None:
    source.run(
        f"CREATE TABLE customers (id INT PRIMARY KEY, name VARCHAR(64), tier VARCHAR(16), updated_at {source.ts_type})"
    )
    for i in range(1, n + 1):
        source.run("INSERT INTO customers VALUES (%s, %s, %s, %s)", i, f"c{i}", "free", T0 + dt.timedelta(seconds=i))


CURSOR = {"type": "cursor", "cursorColumn": "updated_at", "lookbackMs": 5000}
DIFF = {"type": "diff"}


def test_cursor_poll_brings_inserts_and_updates_once(source: Source, deps: GatewayDeps) -> None:
    # Given a registered cursor connector over 3 rows
    _make_table(source, 3)
    admin.register_connector(deps, GW, _config(source, CURSOR))
    # When it polls, a row is updated (cursor moves) and one inserted, and it polls twice more
    first = poll_registered(deps, GW, "crm")
    source.run("UPDATE customers SET tier = %s, updated_at = %s WHERE id = 2", "pro", T0 + dt.timedelta(seconds=10))
    source.run("INSERT INTO customers VALUES (4, 'c4', 'free', %s)", T0 + dt.timedelta(seconds=11))
    second = poll_registered(deps, GW, "crm")
    third = poll_registered(deps, GW, "crm")
    # Then the first poll brought 3 rows, the second the 2 changes only (the look-back window's unchanged rows are
    # skipped), the third nothing; the gateway holds the source's rows
    assert (first.rows, second.rows, third.rows) == (3, 2, 0)
    assert (first.applied, second.applied, third.applied) == (3, 2, 0)
    deltas = _pull_all(deps)
    state = _state(deltas, "customers")
    assert set(state) == {"1", "2", "3", "4"}
    assert state["2"]["tier"] == "pro" and state["4"]["name"] == "c4"
    assert state["1"]["updated_at"] == "2025-01-01T12:00:01"
    assert {d.client_id for d in deltas if d.table == "customers"} == {"ingest:crm"}
    # And every data delta has its provenance row keyed by its deltaId, naming the connector and the cursor
    provenance = _state(deltas, PROVENANCE_TABLE)
    data = [d for d in deltas if d.table == "customers"]
    assert len(data) == 5 and {d.delta_id for d in data} <= set(provenance)
    record = provenance[data[0].delta_id]
    assert record["kind"] == "ingest" and record["connector"] == "crm" and record["table"] == "customers"
    assert record["origin"] == {"cursor": {"$datetime": "2025-01-01T12:00:01"}}


def test_cursor_poll_does_not_see_deletes_but_diff_does(source: Source, deps: GatewayDeps) -> None:
    # Given a cursor connector and a diff connector over the same table
    _make_table(source, 3)
    # (no look-back: a change inside the look-back window is seen even without a cursor move)
    admin.register_connector(deps, GW, _config(source, {**CURSOR, "lookbackMs": 0}, name="cur"))
    diff_config = _config(source, DIFF, name="dif")
    diff_config["ingest"]["tables"][0]["table"] = "customers_diff"
    admin.register_connector(deps, GW, diff_config)
    poll_registered(deps, GW, "cur")
    first = poll_registered(deps, GW, "dif")
    # When a row is deleted, one updated without touching the cursor column, and both poll again
    source.run("DELETE FROM customers WHERE id = 1")
    source.run("UPDATE customers SET name = 'renamed' WHERE id = 3")
    cur = poll_registered(deps, GW, "cur")
    dif = poll_registered(deps, GW, "dif")
    again = poll_registered(deps, GW, "dif")
    # Then the cursor connector sees neither; the diff connector sees the delete and the update, once
    assert (first.rows, cur.rows, dif.rows, dif.deletes, again.rows) == (3, 0, 2, 1, 0)
    deltas = _pull_all(deps)
    cursor_state = _state(deltas, "customers")
    assert set(cursor_state) == {"1", "2", "3"} and cursor_state["3"]["name"] == "c3"
    diffed = _state(deltas, "customers_diff")
    assert set(diffed) == {"2", "3"} and diffed["3"]["name"] == "renamed"
    deletes = [d for d in deltas if d.table == "customers_diff" and d.op is DeltaOp.DELETE]
    assert [d.row_id for d in deletes] == ["1"]


def test_cursor_poll_pages_and_keeps_rows_sharing_a_cursor_value_together(source: Source, deps: GatewayDeps) -> None:
    # Given 7 rows, three of which share one cursor value, polled 2 rows at a time
    _make_table(source, 7)
    source.run("UPDATE customers SET updated_at = %s WHERE id IN (3, 4, 5)", T0 + dt.timedelta(seconds=3))
    admin.register_connector(deps, GW, _config(source, CURSOR))
    connector = deps.connectors.connector(GW, "crm")  # type: ignore[union-attr]
    assert connector is not None and connector.ingest is not None
    assert deps.positions is not None
    # When it polls with limit 2 until the source has no more
    result = poll_connector(deps, GW, "crm", connector.ingest, deps.positions, limit=2, max_rounds=20)
    # Then every row arrived once, over several rounds
    assert result.rows == 7 and result.applied == 7 and result.rounds >= 4
    assert set(_state(_pull_all(deps), "customers")) == {str(i) for i in range(1, 8)}


class _CrashingPush:
    """Makes the n-th push of the poller raise, as a process dying mid-poll would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail_at: int) -> None:
        self.calls = 0
        real = push_service.push

        def push(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.calls == fail_at:
                raise BackpressureError("simulated crash mid-poll")
            return real(*args, **kwargs)

        monkeypatch.setattr("lakesync.gateway.poller.push_service.push", push)


def test_crash_mid_poll_then_resume_loses_and_duplicates_nothing(
    source: Source, deps: GatewayDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a diff connector over 10 rows whose pushes carry 2 rows each (4 deltas with provenance)
    _make_table(source, 10)
    admin.register_connector(deps, GW, _config(source, DIFF))
    deps.settings = type(deps.settings)(max_deltas_per_push=4)
    crash = _CrashingPush(monkeypatch, fail_at=3)
    # When the poll dies on its third push (two pushes, 4 rows, committed)
    with pytest.raises(BackpressureError):
        poll_registered(deps, GW, "crm")
    assert deps.positions is not None and deps.positions.read_position(GW, "crm").version == 0
    half = _state(_pull_all(deps), "customers")
    # And a row changes before the poll runs again
    source.run("UPDATE customers SET tier = 'pro' WHERE id = 1")
    resumed = poll_registered(deps, GW, "crm")
    # Then the resumed poll re-sent the committed rows as duplicates (1 of them changed), and the gateway holds every
    # row exactly once in the source's state; the log has one entry per applied change
    assert len(half) == 4 and crash.calls > 3
    assert resumed.rows == 10 and resumed.applied == 10 - 4 + 1
    deltas = _pull_all(deps)
    state = _state(deltas, "customers")
    assert set(state) == {str(i) for i in range(1, 11)} and state["1"]["tier"] == "pro"
    assert len([d for d in deltas if d.table == "customers"]) == 11
    assert deps.positions.read_position(GW, "crm").version == 1


def test_two_pollers_racing_on_one_connector(source: Source, deps: GatewayDeps) -> None:
    # Given a connector and a source that starts a second poller while the first is reading
    _make_table(source, 3)
    admin.register_connector(deps, GW, _config(source, CURSOR))
    connector = deps.connectors.connector(GW, "crm")  # type: ignore[union-attr]
    assert connector is not None and connector.ingest is not None and deps.positions is not None
    ingest, positions = connector.ingest, deps.positions
    inner: list[Any] = []

    class Racing:
        name = "crm"

        def poll(self, position: Position, limit: int) -> PollBatch:
            if not inner:
                inner.append(poll_connector(deps, GW, "crm", ingest, positions))
            return ingest.poll(position, limit)

        def close(self) -> None:
            pass

    # When the first poller runs
    outer = poll_connector(deps, GW, "crm", Racing(), positions)
    # Then the second found the connector busy and did nothing; the first advanced the position once
    assert inner[0].status == "busy" and inner[0].rows == 0
    assert outer.status == "polled" and outer.rows == 3
    assert positions.read_position(GW, "crm").version == 1
    assert len([d for d in _pull_all(deps) if d.table == "customers"]) == 3


def test_a_poller_that_outlives_its_lease_stores_nothing(source: Source, deps: GatewayDeps) -> None:
    # Given a poller whose lease has expired while it reads (lease 0 ms), and a second poller taking over meanwhile
    _make_table(source, 2)
    admin.register_connector(deps, GW, _config(source, CURSOR))
    connector = deps.connectors.connector(GW, "crm")  # type: ignore[union-attr]
    assert connector is not None and connector.ingest is not None and deps.positions is not None
    ingest, positions = connector.ingest, deps.positions
    taken: list[Any] = []

    class Slow:
        name = "crm"

        def poll(self, position: Position, limit: int) -> PollBatch:
            taken.append(poll_connector(deps, GW, "crm", ingest, positions))
            return ingest.poll(position, limit)

        def close(self) -> None:
            pass

    slow = poll_connector(deps, GW, "crm", Slow(), positions, lease_ms=0)
    # Then the second poller advanced the position and the slow one stored nothing (its deltas were duplicates)
    assert taken[0].status == "polled" and slow.status == "superseded" and slow.applied == 0
    assert positions.read_position(GW, "crm").version == 1


def test_source_pull_serves_rows_filtered_by_sync_rules(source: Source, deps: GatewayDeps) -> None:
    # Given a registered connector, and rules that give a client only the "pro" customers
    _make_table(source, 4)
    source.run("UPDATE customers SET tier = 'pro' WHERE id IN (2, 4)")
    admin.register_connector(deps, GW, _config(source, CURSOR))
    rules = {
        "version": 1,
        "buckets": [{"name": "pro", "tables": [], "filters": [{"column": "tier", "op": "eq", "value": "pro"}]}],
    }
    deps.config.put_sync_rules(GW, parse_sync_rules(rules))
    # When the client pulls source=crm from the start, then after the second row's HLC
    page = pull_service.pull(deps, GW, limit=100, claims={}, since=0, source="crm")
    later = pull_service.pull(deps, GW, limit=100, claims={}, since=page.deltas[0].hlc, source="crm")
    # Then it gets the pro rows as INSERT deltas ordered by the cursor column, and only the later one after since
    assert [(d.row_id, d.op) for d in page.deltas] == [("2", DeltaOp.INSERT), ("4", DeltaOp.INSERT)]
    assert page.deltas[0].values()["name"] == "c2" and not page.has_more
    assert [d.row_id for d in later.deltas] == ["4"]
    # And an unknown source is 404
    with pytest.raises(NotFoundError):
        pull_service.pull(deps, GW, limit=100, claims={}, since=0, source="nope")


def test_registration_moves_the_credential_into_the_secret_store(source: Source, deps: GatewayDeps) -> None:
    _make_table(source, 1)
    assert admin.register_connector(deps, GW, _config(source, CURSOR)) == {"registered": True, "name": "crm"}
    stored = deps.config.get_connector(GW, "crm")
    assert stored is not None
    reference = stored.document[source.kind]["connectionString"]
    assert reference == f"secret://lakesync/connectors/{GW}/crm/connectionString"
    assert deps.connectors is not None and deps.connectors.secrets.get_secret(reference[9:]) == source.url
    assert admin.list_connectors(deps, GW) == [
        {"name": "crm", "type": source.kind, "hasIngest": True, "isPolling": True}
    ]
    assert deps.connector_scheduler.schedules == {(GW, "crm"): 1000}  # type: ignore[union-attr]
    # When it is unregistered, its schedule, position and secret go with it
    poll_registered(deps, GW, "crm")
    assert admin.unregister_connector(deps, GW, "crm") == {"unregistered": True, "name": "crm"}
    assert deps.config.list_connectors(GW) == [] and deps.connector_scheduler.schedules == {}  # type: ignore[union-attr]
    assert deps.positions is not None and deps.positions.read_position(GW, "crm").version == 0
    with pytest.raises(AdapterError):
        deps.connectors.secrets.get_secret(reference[9:])
    with pytest.raises(NotFoundError, match='Connector "crm" not found'):
        admin.unregister_connector(deps, GW, "crm")


@pytest.mark.parametrize(
    ("mutate", "error", "message"),
    [
        (lambda c: c.pop("name"), ValidationError, "Connector name must be a non-empty string"),
        (lambda c: c[c["type"]].clear(), ValidationError, "connector requires a non-empty connectionString"),
        (
            lambda c: c["ingest"]["tables"][0]["strategy"].pop("cursorColumn"),
            ValidationError,
            "Ingest table at index 0 cursor strategy requires a non-empty cursorColumn",
        ),
        (lambda c: c["ingest"].update(intervalMs=0), ValidationError, "Ingest intervalMs must be a positive number"),
        (lambda c: c.update(name="a/b"), ValidationError, "Connector name must be 1-64 characters"),
        (
            lambda c: c["ingest"]["tables"][0].update(rowIdColumn="nope"),
            ValidationError,
            "no rowIdColumn column 'nope'",
        ),
        (lambda c: c["ingest"]["tables"][0].update(query="SELECT * FROM missing_table"), AdapterError, "failed"),
    ],
)
def test_bad_registration_stores_nothing(
    source: Source, deps: GatewayDeps, mutate: Any, error: type, message: str
) -> None:
    _make_table(source, 1)
    config = _config(source, CURSOR)
    mutate(config)
    with pytest.raises(error, match=message):
        admin.register_connector(deps, GW, config)
    assert deps.config.list_connectors(GW) == []
    assert deps.connectors is not None and deps.connectors.secrets.secrets == {}  # type: ignore[attr-defined]
    assert deps.connector_scheduler.schedules == {}  # type: ignore[union-attr]


def test_duplicate_name_is_409_and_unreachable_source_is_502(source: Source, deps: GatewayDeps) -> None:
    _make_table(source, 1)
    admin.register_connector(deps, GW, _config(source, CURSOR))
    with pytest.raises(AlreadyExistsError, match='Connector "crm" already exists') as info:
        admin.register_connector(deps, GW, _config(source, DIFF))
    assert info.value.status == 409
    # An unreachable server (a closed port) is 502 naming the connector, and holds no password
    dead = _config(source, CURSOR, name="dead")
    scheme = "postgresql" if source.kind == "postgres" else "mysql"
    dead[source.kind]["connectionString"] = f"{scheme}://u:hunter2@127.0.0.1:1/db"
    with pytest.raises(AdapterError) as unreachable:
        admin.register_connector(deps, GW, dead)
    assert unreachable.value.status == 502 and 'Connector "dead"' in unreachable.value.message
    assert "hunter2" not in unreachable.value.message
    assert [c.name for c in deps.config.list_connectors(GW)] == ["crm"]
    assert len(deps.connectors.secrets.secrets) == 1  # type: ignore[union-attr]


@pytest.mark.parametrize("source", ["postgres"], indirect=True)
def test_non_finite_numerics_are_polled_as_text_not_a_crash(source: Source, deps: GatewayDeps) -> None:
    # Given PostgreSQL numeric and double columns holding NaN and ±Infinity next to ordinary values
    source.run("CREATE TABLE m (id INT PRIMARY KEY, amount NUMERIC, f DOUBLE PRECISION, updated_at TIMESTAMP(3))")
    source.run("INSERT INTO m VALUES (1, 'NaN', 'NaN', %s)", T0)
    source.run("INSERT INTO m VALUES (2, 'Infinity', '-Infinity', %s)", T0)
    source.run("INSERT INTO m VALUES (3, '-Infinity', 2.5, %s)", T0)
    source.run("INSERT INTO m VALUES (4, 1.5, 2.5, %s)", T0)
    config = {
        "name": "crm",
        "type": "postgres",
        "postgres": {"connectionString": source.url},
        "ingest": {
            "intervalMs": 1000,
            "tables": [{"table": "m", "query": "SELECT * FROM m", "rowIdColumn": "id", "strategy": CURSOR}],
        },
    }
    admin.register_connector(deps, GW, config)
    # When it polls
    result = poll_registered(deps, GW, "crm")
    # Then every row arrives; the non-finite values as the same text as a non-finite double
    assert (result.rows, result.applied) == (4, 4)
    state = _state(_pull_all(deps), "m")
    assert {k: (v["amount"], v["f"]) for k, v in state.items()} == {
        "1": ("nan", "nan"),
        "2": ("inf", "-inf"),
        "3": ("-inf", 2.5),
        "4": (1.5, 2.5),
    }


def test_cursor_rows_without_a_cursor_value_do_not_stall_the_first_poll(source: Source, deps: GatewayDeps) -> None:
    # Given more rows without a cursor value than one poll reads (MariaDB sorts NULLs first, PostgreSQL last)
    _make_table(source, 0)
    for i in range(1, 4):
        source.run("INSERT INTO customers VALUES (%s, %s, 'free', NULL)", i, f"legacy{i}")
    for i in range(4, 6):
        source.run("INSERT INTO customers VALUES (%s, %s, 'free', %s)", i, f"c{i}", T0 + dt.timedelta(seconds=i))
    admin.register_connector(deps, GW, _config(source, CURSOR))
    connector = deps.connectors.connector(GW, "crm") if deps.connectors else None
    assert connector is not None and connector.ingest is not None
    # When it polls two rows at a time
    result = poll_connector(deps, GW, "crm", connector.ingest, deps.positions, limit=2, max_rounds=5)
    # Then the rows with a cursor value arrive (those without one can never be ordered after a cursor: skipped)
    assert set(_state(_pull_all(deps), "customers")) == {"4", "5"}
    assert result.rows == 2
