"""The local demo: real HTTP clients against the embedded default, showing column-level LWW and sync rules."""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from lakesync.auth import mint_token
from lakesync.client.http import SyncClient
from lakesync.core import merge as lww
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.hlc import HLC
from lakesync.local.runner import LocalStack

TODOS_SCHEMA = {
    "table": "todos",
    "columns": [
        {"name": "title", "type": "string"},
        {"name": "done", "type": "boolean"},
        {"name": "team", "type": "string"},
        {"name": "prio", "type": "number"},
    ],
}
RULES = {
    "version": 1,
    "buckets": [
        {"name": "team", "tables": ["todos"], "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}]}
    ],
}


class DemoClient:
    """A client with its own HLC and a local replica folded with the same per-column LWW as the server."""

    def __init__(self, stack: LocalStack, name: str, team: str, role: str = "client") -> None:
        token = mint_token(name, "default", stack.secret, role=role, claims={"team": team})
        self.api = SyncClient(stack.url, "default", token, name)
        self.name = name
        self.clock = HLC()
        self.rows: dict[tuple[str, str], lww.RowState] = {}
        self.cursor: str | None = None

    def write(self, op: str, row_id: str, columns: dict[str, object] | None = None) -> RowDelta:
        return make_delta(
            op, table="todos", row_id=row_id, client_id=self.name, hlc=self.clock.now(), columns=columns or {}
        )

    def push(self, *deltas: RowDelta) -> dict[str, object]:
        response: dict[str, object] = self.api.push(deltas)
        for delta in deltas:
            self._apply(delta)
        return response

    def bootstrap(self) -> int:
        """Initial sync from the checkpoint, then the cursor it names; returns the checkpoint's delta count."""
        deltas, self.cursor = self.api.checkpoint()
        for delta in deltas:
            self._apply(delta)
        return len(deltas)

    def sync(self) -> list[RowDelta]:
        deltas, self.cursor = self.api.pull_all(self.cursor)
        for delta in deltas:
            self._apply(delta)
        return deltas

    def _apply(self, delta: RowDelta) -> None:
        key = (delta.table, delta.row_id)
        self.rows[key] = lww.merge(self.rows.get(key), delta).state

    def table(self) -> dict[str, dict[str, object]]:
        out = {}
        for (_, row_id), state in sorted(self.rows.items()):
            values = state.values()
            if values is not None:
                out[row_id] = values
        return out


class SocketWatcher:
    """A client's real-time socket (base64 text frames, as on AWS): records each broadcast delta and when it came."""

    def __init__(self, stack: LocalStack, name: str, team: str) -> None:
        from websockets.sync.client import connect

        token = mint_token(name, "default", stack.secret, claims={"team": team})
        url = stack.url.replace("http://", "ws://") + "/v1/sync/default/ws?encoding=base64"
        self.received: list[tuple[float, RowDelta]] = []
        self._arrived = threading.Condition()
        self._exit = contextlib.ExitStack()
        self._ws = self._exit.enter_context(connect(url, additional_headers={"Authorization": f"Bearer {token}"}))
        self._thread = threading.Thread(target=self._run, name=f"socket-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import base64

        from websockets.exceptions import ConnectionClosed

        from lakesync.wire.framing import decode_broadcast_frame

        while True:
            try:
                message = self._ws.recv()
            except ConnectionClosed:
                return
            frame = base64.b64decode(message) if isinstance(message, str) else message
            with self._arrived:
                self.received.extend((time.perf_counter(), d) for d in decode_broadcast_frame(frame).deltas)
                self._arrived.notify_all()

    def wait_for(self, count: int, timeout_s: float = 5.0) -> list[tuple[float, RowDelta]]:
        """The first ``count`` deltas received (fewer if the time runs out)."""
        with self._arrived:
            self._arrived.wait_for(lambda: len(self.received) >= count, timeout_s)
            return list(self.received[:count])

    def close(self) -> None:
        self._exit.close()
        self._thread.join()


def _show(say: Callable[[str], None], who: str, rows: dict[str, dict[str, object]]) -> None:
    say(f"  {who:<6} sees {len(rows)} row(s)")
    for row_id, values in rows.items():
        say(f"           {row_id}: {values}")


def _receipts(say: Callable[[str], None], who: str, response: dict[str, object]) -> None:
    receipts = response.get("receipts")
    assert isinstance(receipts, Iterable)
    for receipt in receipts:
        for col in receipt["columns"]:
            verdict = "applied" if col["applied"] else f"lost to {col['winnerClientId']}@{col['winnerHlc']}"
            say(f"  {who:<6} {col['column']:<8} {verdict}")


def run(
    data_dir: Path | None = None, say: Callable[[str], None] = print, *, lake: bool = True
) -> dict[str, dict[str, dict[str, object]]]:
    """Run the demo end to end over HTTP, then through the lake unless ``lake`` is false.

    Returns each client's final table (with the lake: also ``erin``, synced from the checkpoint, and ``replay``, a
    client that pulled every delta).
    """
    with tempfile.TemporaryDirectory(prefix="lakesync-demo-") as tmp:
        directory = data_dir or Path(tmp)
        started = time.perf_counter()
        with LocalStack(directory, port=0, persist=False) as stack:
            say(f"LakeSync local: API {stack.url}, AWS (moto) {stack.aws_endpoint}")
            admin = DemoClient(stack, "admin", "none", role="admin")
            admin.api.admin("POST", "sync-rules", RULES)
            admin.api.admin("POST", "schema", TODOS_SCHEMA)
            say(
                "1. admin stored sync rules (each client sees the todos of its own team, jwt:team) and the todos schema"
            )

            alice, bob = DemoClient(stack, "alice", "red"), DemoClient(stack, "bob", "red")
            dave = DemoClient(stack, "dave", "blue")
            stale_title = bob.write("UPDATE", "t1", {"title": "Buy oat milk"})
            alice.push(alice.write("INSERT", "t1", {"title": "Buy milk", "done": False, "team": "red", "prio": 1}))
            alice.push(alice.write("INSERT", "t2", {"title": "Call mum", "done": False, "team": "red", "prio": 2}))
            dave.push(dave.write("INSERT", "b1", {"title": "Blue task", "done": False, "team": "blue", "prio": 1}))
            bob.sync()
            say("2. alice created t1, t2 (team red); dave created b1 (team blue); bob synced")

            say("3. alice and bob edit different columns of t1 at the same moment:")
            # The sockets open once earlier commits have been broadcast, so they show the two edits alone.
            if stack.broadcaster is None or not stack.broadcaster.drain():
                raise RuntimeError("the local broadcaster did not catch up with the deltas table's stream")
            carol_socket, dave_socket = SocketWatcher(stack, "carol", "red"), SocketWatcher(stack, "dave", "blue")
            responses: dict[str, dict[str, object]] = {}
            acked: dict[str, float] = {}
            edits = {
                "alice": (alice, alice.write("UPDATE", "t1", {"title": "Buy milk and eggs"})),
                "bob": (bob, bob.write("UPDATE", "t1", {"done": True, "prio": 3})),
            }

            def push(name: str, client: DemoClient, delta: RowDelta) -> None:
                responses[name] = client.push(delta)
                acked[name] = time.perf_counter()

            threads = [threading.Thread(target=push, args=(n, c, d)) for n, (c, d) in edits.items()]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            for name in ("alice", "bob"):
                _receipts(say, name, responses[name])
            live = _realtime(say, carol_socket, dave_socket, acked)

            say("4. bob's offline edit of t1.title (written before alice's) arrives late and loses:")
            _receipts(say, "bob", bob.push(stale_title))

            alice.push(alice.write("DELETE", "t2"))
            say("5. alice deleted t2")

            carol = DemoClient(stack, "carol", "red")
            for client in (alice, bob, carol, dave):
                client.sync()
            say("6. everyone pulled through the sync rules (carol is a new red client, dave is blue):")
            tables = {c.name: c.table() for c in (alice, bob, carol, dave)}
            for name, rows in tables.items():
                _show(say, name, rows)
            agree = tables["alice"] == tables["bob"] == tables["carol"]
            say(f"   red clients agree: {agree}; both concurrent edits survived: {tables['carol'].get('t1')}")
            tables["carol_socket"] = live
            if lake:
                tables.update(_lake_half(stack, directory, alice, say))
            say(f"done in {time.perf_counter() - started:.1f}s")
            return tables


def _realtime(
    say: Callable[[str], None], carol: SocketWatcher, dave: SocketWatcher, acked: dict[str, float]
) -> dict[str, dict[str, object]]:
    """Show what the two sockets received of step 3; returns carol's received columns by row."""
    arrived = carol.wait_for(2)
    dave_got = dave.wait_for(1, timeout_s=0.5)
    carol.close()
    dave.close()
    say("   real time: carol's socket (team red) received both edits of t1 as they were committed:")
    columns: dict[str, dict[str, object]] = {}
    for at, delta in arrived:
        after = (at - acked[delta.client_id]) * 1000
        values = {c.column: c.value for c in delta.columns}
        columns.setdefault(delta.row_id, {}).update(values)
        say(f"     {delta.client_id:<6} {delta.row_id} {values}  ({after:+.0f} ms after the push was acknowledged)")
    say(f"   dave's socket (team blue) received {len(dave_got)} delta(s): t1 is not in his bucket")
    return columns


def _lake_half(
    stack: LocalStack,
    data_dir: Path,
    alice: DemoClient,
    say: Callable[[str], None],
) -> dict[str, dict[str, dict[str, object]]]:
    from lakesync.local.pipeline import lake_session, run_pipeline
    from lakesync.spark.query import run_query, snapshots

    say("7. the lake: flush the buffer to Iceberg, compact to current state, cut a checkpoint (local Spark)")
    spark = lake_session(data_dir)
    run_pipeline(stack, spark, say=say)
    first = snapshots(spark, "state_todos").rows[-1][0]

    alice.push(alice.write("UPDATE", "t1", {"title": "Buy milk, eggs and bread"}))
    say("8. alice edited t1 again; erin, a new red client, syncs from the checkpoint and then its cursor:")
    erin = DemoClient(stack, "erin", "red")
    from_checkpoint = erin.bootstrap()
    tail = erin.sync()
    replay = DemoClient(stack, "replay", "red")
    replay.sync()
    say(f"   erin loaded {from_checkpoint} delta(s) from the checkpoint and {len(tail)} from the cursor")
    say(f"   erin == a client that replayed every delta: {erin.table() == replay.table()}")

    run_pipeline(stack, spark, say=say)
    query = "SELECT _row_key, get_json_object(_values, '$.title') AS title FROM state_todos WHERE _exists ORDER BY 1"
    before = run_query(spark, query.replace("FROM state_todos", f"FROM state_todos VERSION AS OF {first}"))
    after = run_query(spark, query)
    say(f"9. lakesync query over the lake: as of snapshot {first}: {list(before.rows)}")
    say(f"   and now: {list(after.rows)}")
    materialised = _materialised(stack, say)
    return {
        "erin": erin.table(),
        "replay": replay.table(),
        "lake_before": dict(before.rows),
        "lake_now": dict(after.rows),
        "materialised": materialised,
    }


def _materialised(stack: LocalStack, say: Callable[[str], None]) -> dict[str, dict[str, object]]:
    """Wait for the materialiser to apply the published jobs, then read the rows with plain SQL."""
    import sqlite3

    assert stack.materialiser is not None
    stack.materialiser.drain(timeout_s=60)
    path = stack.materialise_target.removeprefix("sqlite:///")
    query = "SELECT row_id, title, done, team, prio FROM todos WHERE deleted_at IS NULL ORDER BY row_id"
    say(f"10. the flushes were materialised into {path} (SQLite); plain SQL: {query}")
    with sqlite3.connect(path) as db:
        rows = db.execute(query).fetchall()
    out: dict[str, dict[str, object]] = {}
    for row_id, title, done, team, prio in rows:
        say(f"   {row_id} | {title} | done={bool(done)} | {team} | prio={prio:g}")
        out[row_id] = {"title": title, "done": bool(done), "team": team, "prio": prio}
    return out
