"""The local-first store against the embedded default over real HTTP: offline edits converge cell for cell and equal
the gateway, column conflicts and deletes, crashes between ack and outbox removal and in the middle of a pull, token
refresh, offline → online with backoff, subscriptions, background sync and the real-time fallback to polling."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client import (
    Change,
    Conflict,
    LocalStore,
    LocalWriteError,
    OfflineError,
    RowExistsError,
    RowNotFoundError,
)
from lakesync.client.backoff import Backoff
from lakesync.client.http import ApiError
from lakesync.client.pull import Puller
from lakesync.client.push import Pusher
from lakesync.local.runner import LocalStack
from tests.client.conftest import full_rows, gateway_rows, unique_table
from tests.factories import todo_schema

pytestmark = pytest.mark.integration

Open = Callable[..., LocalStore]


def test_offline_edits_on_three_stores_converge_cell_for_cell_and_equal_the_gateway(
    stack: LocalStack, open_store: Open
) -> None:
    table = unique_table()
    alice, bob, carol = (open_store(name, table) for name in ("alice", "bob", "carol"))
    # Given a shared row, synced everywhere
    alice.insert(table, "shared", {"title": "plan", "done": False, "priority": 1})
    for store in (alice, bob, carol):
        store.sync()
    # When each edits offline: other columns of the shared row, own rows, one deletes what another edits
    alice.update(table, "shared", {"title": "plan v2"})
    bob.update(table, "shared", {"done": True})
    carol.update(table, "shared", {"priority": 3, "tags": ["x"]})
    alice.insert_many(table, {f"a{i}": {"title": f"a{i}", "tags": {"n": i}} for i in range(20)})
    bob.insert(table, "b1", {"title": "b1"})
    bob.delete(table, "b1")
    carol.insert(table, "c1", {"title": "c1", "priority": 0.5})
    for _ in range(2):
        for store in (alice, bob, carol):
            store.sync()
    # Then every store holds the same rows, equal to the gateway's, and no edit was lost
    expected = full_rows(gateway_rows(stack, table))
    assert alice.rows(table) == bob.rows(table) == carol.rows(table) == expected
    assert expected["shared"] == {"title": "plan v2", "done": True, "priority": 3, "tags": ["x"]}
    assert "b1" not in expected and len(expected) == 22
    assert all(store.pending() == 0 for store in (alice, bob, carol))


def test_a_losing_column_is_reported_and_replaced_by_the_winner(stack: LocalStack, open_store: Open) -> None:
    table = unique_table()
    seen: list[Conflict] = []
    late = open_store("late", table, on_conflict=seen.append)
    early = open_store("early", table)
    late.insert(table, "r", {"title": "base", "priority": 1})
    late.sync()
    early.sync()
    # Given the late client writes first (offline), then the early one writes the same column and syncs first
    late.update(table, "r", {"title": "late edit", "priority": 2})
    time.sleep(0.005)
    early.update(table, "r", {"title": "early wins"})
    early.sync()
    # When the late client syncs
    report = late.sync()
    # Then its losing column is reported with the winner, and replaced locally; its other column survives
    assert [(c.column, c.local_value, c.winner_client_id, c.winner_value) for c in report.conflicts] == [
        ("title", "late edit", "early", "early wins")
    ]
    assert seen == report.conflicts
    assert late.rows(table)["r"]["title"] == "early wins"
    assert late.rows(table)["r"]["priority"] == 2
    early.sync()
    assert early.rows(table) == late.rows(table) == full_rows(gateway_rows(stack, table))


def test_a_delete_is_not_undone_by_an_older_write_that_arrives_later(stack: LocalStack, open_store: Open) -> None:
    table = unique_table()
    writer, deleter, watcher = open_store("w", table), open_store("d", table), open_store("x", table)
    writer.insert(table, "r", {"title": "v1"})
    writer.sync()
    deleter.sync()
    # Given an edit made before a delete but pushed after it
    writer.update(table, "r", {"title": "old edit"})
    time.sleep(0.005)
    deleter.delete(table, "r")
    deleter.sync()
    report = writer.sync()
    watcher.sync()
    # Then the row stays deleted everywhere; the late edit is reported as lost to the delete
    assert [(c.column, c.deleted) for c in report.conflicts] == [("title", True)]
    for store in (writer, deleter, watcher):
        assert store.rows(table) == {}
        state = store.state(table, "r")
        assert state is not None and state.tombstone is not None and not state.exists
    assert gateway_rows(stack, table) == {}


def test_a_crash_between_the_ack_and_the_outbox_removal_loses_nothing_and_duplicates_nothing(
    stack: LocalStack, open_store: Open, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = unique_table()
    path = tmp_path / "crash.db"
    store = open_store("crash", table, path=path)
    store.insert_many(table, {f"r{i}": {"title": f"t{i}"} for i in range(5)})
    store.update(table, "r0", {"done": True})

    # Given the push succeeds at the gateway but the process dies before the outbox is cleared
    def die(*_args: Any) -> None:
        raise SystemExit("crash after the ack")

    monkeypatch.setattr(Pusher, "ack", die)
    with pytest.raises(SystemExit):
        store.sync()
    monkeypatch.undo()
    store.close()
    assert len(gateway_rows(stack, table)) == 5  # the push had landed

    # When the file is reopened and syncs
    again = open_store("crash", table, path=path)
    assert again.pending() == 6
    report = again.sync()

    # Then the re-sent deltas are acknowledged as duplicates: nothing lost, nothing applied twice
    assert (report.pushed, report.duplicates) == (6, 6)
    assert again.pending() == 0
    assert again.rows(table) == full_rows(gateway_rows(stack, table))
    log = [d for d in _all_deltas(stack) if d.table == table]
    assert len(log) == 6 and len({d.delta_id for d in log}) == 6


def test_a_restart_in_the_middle_of_a_pull_resumes_from_the_last_applied_page(
    stack: LocalStack, open_store: Open, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = unique_table()
    writer = open_store("pw", table)
    writer.insert_many(table, {f"r{i:02d}": {"title": f"t{i}", "priority": i} for i in range(25)})
    writer.sync()
    path = tmp_path / "reader.db"
    reader = open_store("pr", table, path=path, pull_limit=10)
    reader.sync()  # catch up with the module's log first, so the pages below are this table's
    for i in range(25):
        writer.update(table, f"r{i:02d}", {"done": True})
    writer.sync()

    # Given the process dies while applying the second page of three
    real = Puller.merge_remote
    pages = iter(range(100))

    def merge_then_die(self: Puller, deltas: Any) -> Any:
        if next(pages) == 1:
            raise SystemExit("crash mid-pull")
        return real(self, deltas)

    monkeypatch.setattr(Puller, "merge_remote", merge_then_die)
    with pytest.raises(SystemExit):
        reader.sync()
    monkeypatch.undo()
    reader.close()

    # Then the file holds exactly the first page with its cursor, and a restart completes the pull
    again = open_store("pr", table, path=path, pull_limit=10)
    done = [row_id for row_id, values in again.rows(table).items() if values["done"]]
    assert len(done) == 10
    report = again.sync()
    assert report.pulled == 15
    assert again.rows(table) == full_rows(gateway_rows(stack, table))
    assert all(values["done"] for values in again.rows(table).values())


def test_bad_input_is_refused_before_anything_is_written(open_store: Open) -> None:
    table = unique_table()
    store = open_store("bad", table)
    store.insert(table, "r", {"title": "ok"})
    with pytest.raises(LocalWriteError, match="Unknown table"):
        store.insert("nope", "r", {})
    with pytest.raises(LocalWriteError, match="boolean column"):
        store.insert_many(table, {"a": {"title": "fine"}, "b": {"done": "yes"}})
    with pytest.raises(RowExistsError):
        store.insert_many(table, {"c": {"title": "fine"}, "r": {"title": "again"}})
    with pytest.raises(RowNotFoundError):
        store.update(table, "missing", {"title": "x"})
    with pytest.raises(LocalWriteError, match="non-empty"):
        store.delete(table, "")
    assert store.rows(table) == {"r": {"title": "ok", "done": None, "priority": None, "tags": None}}
    assert store.pending() == 1
    with pytest.raises(Exception, match="not authorized"):
        store.query(f"DELETE FROM {table}")
    assert store.query(f"SELECT count(*) FROM {table}") == [(1,)]


def test_the_clock_never_goes_backwards_across_a_restart(open_store: Open, tmp_path: Path) -> None:
    table = unique_table()
    path = tmp_path / "clock.db"
    ahead = lambda: 4_000_000_000_000  # noqa: E731 - a physical clock far in the future
    store = open_store("clock", table, path=path, clock=ahead)
    store.insert(table, "r", {"title": "future"})
    first = store.state(table, "r")
    store.close()
    again = open_store("clock", table, path=path)  # the real (earlier) clock
    again.update(table, "r", {"title": "later"})
    second = again.state(table, "r")
    assert first is not None and second is not None
    assert second.columns["title"].hlc > first.columns["title"].hlc
    assert again.rows(table)["r"]["title"] == "later"


@pytest.mark.parametrize(
    "stale",
    [
        # expired: the function answers 401 AUTH_ERROR "JWT has expired"
        "expired",
        # signed with a key the gateway no longer accepts (an emergency rotation dropped it): API Gateway's
        # authorizer answers 403 {"message": "Forbidden"} before any function runs
        "dropped key",
    ],
)
def test_a_stale_token_is_refreshed_once_through_get_token(stack: LocalStack, open_store: Open, stale: str) -> None:
    table = unique_table()
    name = "refresh" if stale == "expired" else "rotated"
    first = (
        mint_token(name, "default", stack.secret, now_ms=0)
        if stale == "expired"
        else mint_token(name, "default", "k" * 32)
    )
    tokens = [first, mint_token(name, "default", stack.secret)]
    calls: list[int] = []

    def get_token() -> str:
        calls.append(1)
        return tokens[len(calls) - 1]

    store = open_store(name, table, get_token=get_token)
    store.insert(table, "r", {"title": "x"})
    report = store.sync()
    assert report.pushed == 1
    assert len(calls) == 2  # the first token, then one refresh after the refusal
    assert gateway_rows(stack, table) == {"r": {"title": "x"}}


def test_a_token_that_stays_refused_raises_instead_of_looping(stack: LocalStack, open_store: Open) -> None:
    expired = mint_token("stale", "default", stack.secret, now_ms=0)
    store = open_store("stale", unique_table(), get_token=lambda: expired)
    with pytest.raises(ApiError) as caught:
        store.sync()
    assert caught.value.status == 401


def test_offline_then_online_with_backoff_and_subscribers(stack: LocalStack, open_store: Open, tmp_path: Path) -> None:
    table = unique_table()
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    path = tmp_path / "flaky.db"
    token = mint_token("flaky", "default", stack.secret)
    offline = open_store("flaky", table, path=path, url=dead, token=token)
    offline.insert(table, "r", {"title": "written offline"})
    with pytest.raises(OfflineError):
        offline.sync()
    assert offline.online is False

    # Background sync against the dead address backs off (jittered, growing), never spinning
    offline.backoff = Backoff(initial=0.05, cap=0.2)
    offline.poll_interval = 0.01
    offline.start()
    time.sleep(0.6)
    offline.stop()
    assert 2 <= offline.backoff.failures <= 12
    assert offline.pending() == 1
    offline.close()

    # When it comes back online (same file, the gateway reachable), the write goes out and remote changes come in
    other = open_store("other", table)
    other.insert(table, "o", {"title": "from other"})
    other.sync()
    online = open_store("flaky", table, path=path, token=token, poll_interval=0.05, debounce=0.01)
    changes: list[Change] = []
    arrived = threading.Event()

    def on_change(change: Change) -> None:
        changes.append(change)
        if change.origin == "remote" and "o" in change.row_ids:
            arrived.set()

    unsubscribe = online.subscribe(table, on_change)
    online.start()
    assert arrived.wait(10)
    _wait_for(lambda: online.pending() == 0 and online.online)
    online.insert(table, "mid", {"title": "subscribed"})
    unsubscribe()
    online.insert(table, "late", {"title": "after"})
    online.stop()
    assert gateway_rows(stack, table).keys() >= {"r", "o"}
    assert [c.row_ids for c in changes if c.origin == "local"] == [frozenset({"mid"})]  # none after unsubscribe
    assert any(c.origin == "remote" and c.row_ids == frozenset({"o"}) for c in changes)


def test_background_sync_falls_back_to_polling_when_the_gateway_has_no_websocket(
    stack: LocalStack, open_store: Open
) -> None:
    table = unique_table()
    writer = open_store("pollw", table)
    # Given a real-time URL the gateway answers 404 for (a gateway without the channel)
    no_channel = stack.url.replace("http://", "ws://") + "/v1/sync/default/no-such-channel"
    reader = open_store("pollr", table, realtime=True, ws_url=no_channel, poll_interval=0.1, debounce=0.01)
    reader.start()
    listener = reader._background.listener
    assert listener is not None
    _wait_for(lambda: listener.unavailable)
    # When another client writes, the reader still gets it, by polling
    writer.insert(table, "r", {"title": "polled"})
    writer.sync()
    _wait_for(lambda: "r" in reader.rows(table))
    reader.stop()
    assert not listener.connected and listener.broadcasts == 0
    assert reader.rows(table)["r"]["title"] == "polled"


def test_a_broadcast_brings_a_change_without_waiting_for_the_poll(stack: LocalStack, open_store: Open) -> None:
    table = unique_table()
    writer = open_store("bcw", table)
    # Given a reader connected to the real-time channel, polling only once a minute
    reader = open_store("bcr", table, realtime=True, poll_interval=60, connected_poll_interval=60, debounce=0.01)
    changes: list[Change] = []
    reader.subscribe(table, changes.append)
    reader.start()
    listener = reader._background.listener
    assert listener is not None
    _wait_for(lambda: listener.connected)
    _wait_for(lambda: reader.online)  # the pull every (re)connect makes
    # When another client pushes, the broadcast delivers the row, and the pull it triggers moves the cursor
    cursor = reader.cursor
    # (The server may still be registering the connection when the first push lands; broadcasts are best effort,
    # so push again until one arrives. Correctness never depends on them: the poll would deliver all.)
    for attempt in range(5):
        writer.insert(table, f"r{attempt}", {"title": "pushed"})
        writer.sync()
        with contextlib.suppress(AssertionError):
            _wait_for(lambda: listener.broadcasts >= 1, timeout=2)
            break
    _wait_for(lambda: f"r{attempt}" in reader.rows(table), timeout=10)
    _wait_for(lambda: reader.cursor != cursor, timeout=10)
    reader.stop()
    assert listener.broadcasts >= 1
    assert reader.rows(table) == full_rows(gateway_rows(stack, table))
    assert any(c.origin == "remote" and f"r{attempt}" in c.row_ids for c in changes)


def test_a_delta_the_gateway_refuses_for_good_is_moved_out_of_the_outbox(stack: LocalStack, open_store: Open) -> None:
    # Given a local schema that has a column the gateway's schema for the table lacks
    from tests.client.conftest import admin

    table = unique_table()
    admin(stack).admin("POST", "schema", {"table": table, "columns": [{"name": "title", "type": "string"}]})
    store = open_store("rej", table)
    store.insert(table, "ok", {"title": "fine"})
    store.insert(table, "bad", {"tags": [1]})
    # When it syncs, the refused delta is reported and set aside; the others go through
    report = store.sync()
    assert [(r.row_id, r.status) for r in report.rejected] == [("bad", 422)]
    assert store.pending() == 0
    assert gateway_rows(stack, table) == {"ok": {"title": "fine"}}
    assert store.query("SELECT status FROM _lakesync_rejected") == [(422,)]


def test_a_write_that_would_grow_the_row_beyond_the_gateways_limit_is_refused_locally(
    stack: LocalStack, open_store: Open
) -> None:
    # Given a row of 60,000 characters, and a column that brings it to exactly the gateway's 100,000 bytes of values
    table = unique_table()
    store = open_store("grow", table)
    store.insert(table, "r", {"title": "x" * 60_000})
    store.update(table, "r", {"tags": "y" * 39_978})  # {"title":"x…","tags":"y…"}: 60,022 + 39,978 bytes
    assert store.sync().rejected == []

    # When a write of another column, small enough as a delta, would grow the merged row past it
    with pytest.raises(LocalWriteError, match="100,000"):
        store.update(table, "r", {"priority": 1})
    with pytest.raises(LocalWriteError, match="100,000"), store.batch() as batch:
        batch.insert(table, "other", {"title": "fine"})
        batch.update(table, "r", {"tags": "y" * 39_979})

    # (as the gateway refuses it)
    from lakesync.core.delta import make_delta
    from tests.client.conftest import admin

    hlc = int(time.time() * 1000) << 16
    with pytest.raises(ApiError) as refused:
        admin(stack).push(
            [make_delta("UPDATE", table=table, row_id="r", client_id="ops", hlc=hlc, columns={"priority": 1})]
        )
    assert refused.value.status == 422

    # Then nothing was written or queued, and the store and the gateway still agree
    assert store.pending() == 0 and store.get(table, "other") is None
    assert store.rows(table) == full_rows(gateway_rows(stack, table))
    assert len(str(store.get(table, "r"))) > 99_000


def test_an_integer_a_json_number_cannot_carry_exactly_is_refused_before_it_is_queued(
    stack: LocalStack, open_store: Open
) -> None:
    table = unique_table()
    store = open_store("ints", table)
    # Given integers beyond 2**53 - 1 (the wire rounds them to doubles: 2**53 + 1 would arrive as 2**53, 10**400
    # as null), in a number column and nested in a json column, through every write path
    for value in (2**53, -(2**53) - 1, 2**63, 10**400):
        with pytest.raises(LocalWriteError, match="integer beyond"):
            store.insert(table, "r", {"priority": value})
        with pytest.raises(LocalWriteError, match="integer beyond"):
            store.insert_many(table, {"a": {"title": "a"}, "b": {"tags": {"n": [value]}}})
    assert store.pending() == 0 and store.rows(table) == {}

    # When the largest exact ones are written and synced, they arrive as written
    store.insert_many(table, {"a": {"priority": 2**53 - 1}, "b": {"tags": [-(2**53) + 1]}})
    store.sync()
    assert store.rows(table) == full_rows(gateway_rows(stack, table))
    assert store.get(table, "a") == {"title": None, "done": None, "priority": 2**53 - 1, "tags": None}


def test_a_token_whose_subject_the_gateway_refuses_as_a_client_id_is_refused_at_connect(
    stack: LocalStack, open_store: Open, tmp_path: Path
) -> None:
    from lakesync.core.delta import make_delta
    from tests.client.conftest import admin

    table = unique_table()
    # Given subjects that are no clientId the gateway accepts on a delta (it refuses their every push)
    too_long, not_text = "x" * 300, "\ud800"
    hlc = int(time.time() * 1000) << 16
    with pytest.raises(ApiError) as refused:
        admin(stack).push([make_delta("INSERT", table=table, row_id="r", client_id=too_long, hlc=hlc)])
    assert refused.value.status == 400

    # When a store is opened with such a token (or clientId), it says so before a file is made
    for subject in (too_long, not_text):
        path = tmp_path / "never.db"
        with pytest.raises(ValueError, match="clientId"):
            open_store("unused", table, path=path, token=mint_token(subject, "default", stack.secret))
        with pytest.raises(ValueError, match="clientId"):
            open_store("unused", table, path=path, client_id=subject)
        assert not path.exists()


def _all_deltas(stack: LocalStack) -> list[Any]:
    from tests.client.conftest import admin

    deltas, _ = admin(stack).pull_all()
    return deltas


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def test_schema_is_json_or_object(open_store: Open) -> None:
    from lakesync.core.schema import parse_table_schema

    table = unique_table()
    store = open_store("typed", table)
    assert store.tables[table].columns == parse_table_schema(todo_schema(table)).column_names
