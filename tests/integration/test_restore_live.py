"""``lakesync local``'s buffer lost mid-traffic and rebuilt from its lake (issue 44, item 1): real HTTP, the moto
server, the flush function's pyiceberg flush, ``lakesync restore`` as a user runs it.

Our SDK's stores and the original client's model write and sync while the buffer is flushed, then its tables are
dropped under a store still pushing; ``lakesync restore`` rebuilds them from the lake while that store keeps
pushing (refused with 503 ``RESTORING`` until the gateway is rebuilt, so nothing lands in a half-built buffer). Then
the gateway serves exactly the fold of the lake; the writes the clients held and had not pushed reach it from their
outboxes; every client converges to the gateway's rows; and pushes and pulls go on.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.flush_store import FlushStore
from lakesync.aws.table_setup import drop_tables
from lakesync.aws.tables import TableNames
from lakesync.cli import main
from lakesync.client import LocalStore, OfflineError, connect
from lakesync.client.http import SyncClient
from lakesync.core.delta import RowDelta
from lakesync.core.hlc import system_clock
from lakesync.core.merge import fold
from lakesync.lake.catalog import local_catalog
from lakesync.lake.flush import FlushConfig, run_flush
from lakesync.lake.iceberg_flush import IcebergDeltaLog
from lakesync.lake.restore_reader import IcebergLakeReader
from lakesync.local.pipeline import lake_paths, stack_dynamo_config
from lakesync.local.runner import TABLE_PREFIX, LocalStack
from tests.factories import schema_doc
from tests.integration.test_original_client_http import HttpTransport
from tests.original_client import OriginalClient

pytestmark = pytest.mark.integration

GW = "default"
COLUMNS = {"title": "string", "done": "number"}
"""The columns every client writes (the original client's table has these and no other)."""
ROWS = [f"r{i}" for i in range(12)]
Rows = dict[str, dict[str, Any]]


def api(stack: LocalStack, name: str) -> SyncClient:
    return SyncClient(stack.url, GW, mint_token(name, GW, stack.secret), name)


def open_store(stack: LocalStack, path: Path, name: str) -> LocalStore:
    token = mint_token(name, GW, stack.secret)
    return connect(
        path, url=stack.url, gateway=GW, token=token, schemas=[schema_doc("todos", **COLUMNS)], realtime=False
    )


def visible(states: Iterable[tuple[str, Any]]) -> Rows:
    """Rows as a client's table shows them: live rows, null columns left out."""
    out: Rows = {}
    for row_id, state in states:
        values = None if state is None else state.values()
        if values is not None:
            out[row_id] = {k: v for k, v in values.items() if v is not None}
    return out


def present(store: LocalStore) -> Rows:
    """A store's rows without their null columns."""
    return {row: {k: v for k, v in values.items() if v is not None} for row, values in store.rows("todos").items()}


def folded(deltas: Iterable[RowDelta]) -> Rows:
    by_row: dict[str, list[RowDelta]] = {}
    for delta in deltas:
        by_row.setdefault(delta.row_id, []).append(delta)
    return visible((row_id, fold(row)) for row_id, row in by_row.items())


def gateway_rows(stack: LocalStack) -> Rows:
    """What a new client is served: the latest checkpoint, then the log after its cursor."""
    observer = api(stack, "observer")
    deltas, cursor = observer.checkpoint()
    more, _ = observer.pull_all(cursor)
    return folded([*deltas, *more])


def flush(stack: LocalStack) -> int:
    """The flush function's flush of the buffer into the data directory's lake; returns the deltas flushed."""
    dynamo = stack_dynamo_config(stack)
    store = FlushStore(dynamo.client(), dynamo.tables)
    config = FlushConfig(dynamo, gateways=(GW,))
    lake = IcebergDeltaLog(local_catalog(*lake_paths(stack.data_dir)), config, reader=store.read_records)
    return run_flush(lake, config, store=store).deltas


def lake_deltas(stack: LocalStack) -> list[RowDelta]:
    """Every delta in the lake's delta log."""
    reader = IcebergLakeReader(local_catalog(*lake_paths(stack.data_dir)))
    return [entry.delta for entry in reader.entries(GW)]


def index_rows(stack: LocalStack) -> Rows:
    """The gateway's row index, read from its table."""
    store = DynamoDBBufferStore(stack.dynamodb_client(), TableNames.with_prefix(TABLE_PREFIX))
    offline = [f"{who}{i}" for who in ("away", "orig") for i in range(6)]
    keys = [("todos", row) for row in [*ROWS, *offline, "after"]]
    return visible((key[1], row.state) for key, row in store.get_rows(GW, keys).items())


class Writer(threading.Thread):
    """A store writing a random todo and syncing, over and over, through whatever happens to the gateway; counts the
    answers it got."""

    def __init__(self, store: LocalStore, seed: int) -> None:
        super().__init__(daemon=True)
        self.store, self.rnd = store, random.Random(seed)
        self.halt = threading.Event()
        self.synced = self.refused = 0
        self.restoring = 0
        self.errors: list[BaseException] = []

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                write(self.store, self.rnd)
                self.store.sync()
                self.synced += 1
            except OfflineError as exc:
                self.refused += 1
                self.restoring += "RESTORING" in str(exc) or "restored from the lake" in str(exc)
                time.sleep(0.02)
            except BaseException as exc:  # surfaced by the test
                self.errors.append(exc)
                return
            time.sleep(0.01)


def write(store: LocalStore, rnd: random.Random) -> None:
    row = rnd.choice(ROWS)
    if store.get("todos", row) is None:
        store.insert("todos", row, {"title": f"t{rnd.randrange(1000)}", "done": 0})
    elif rnd.random() < 0.15:
        store.delete("todos", row)
    else:
        store.update("todos", row, rnd.choice([{"title": f"t{rnd.randrange(1000)}"}, {"done": rnd.randrange(1000)}]))


def original_write(client: OriginalClient, rnd: random.Random) -> None:
    row = rnd.choice(ROWS)
    if not client.holds("todos", row):
        client.insert("todos", row, {"title": f"o{rnd.randrange(1000)}"})
    else:
        client.update("todos", row, rnd.choice([{"title": f"o{rnd.randrange(1000)}"}, {"done": rnd.randrange(1000)}]))


def test_a_buffer_dropped_mid_traffic_is_rebuilt_from_the_lake_and_every_client_converges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rnd = random.Random(44)
    with LocalStack(tmp_path / "data", port=0, persist=False) as stack:
        busy = open_store(stack, tmp_path / "busy.db", "busy")
        away = open_store(stack, tmp_path / "away.db", "away")
        original = OriginalClient("orig", HttpTransport(api(stack, "orig")), {"todos": list(COLUMNS)}, system_clock)
        original.sync_once()

        # Given three clients writing and syncing, one of them all along on its own thread
        writer = Writer(busy, seed=1)
        writer.start()
        for _ in range(15):
            write(away, rnd)
            away.sync()
            original_write(original, rnd)
            original.sync_once()
        # and a flush into the lake while the writer pushes on
        assert flush(stack) > 0
        # and two clients that then write while they cannot reach the gateway (held in their outboxes), rows of
        # their own among them
        for i in range(6):
            write(away, rnd)
            original_write(original, rnd)
            away.insert("todos", f"away{i}", {"title": f"offline {i}", "done": i})
            original.insert("todos", f"orig{i}", {"title": f"offline {i}"})
        offline = {f"away{i}": {"title": f"offline {i}", "done": i} for i in range(6)}
        offline |= {f"orig{i}": {"title": f"offline {i}"} for i in range(6)}
        assert away.pending() > 6 and len(original.queue) > 6

        # When the buffer's tables are dropped under the writer, and it pushes into the void for a moment
        names = TableNames.with_prefix(TABLE_PREFIX)
        drop_tables(stack.dynamodb_client(), names)
        refused_before = writer.refused
        while writer.refused < refused_before + 3:
            time.sleep(0.05)

        # and the buffer is restored from the lake while the writer keeps pushing
        assert main(["restore", "--data-dir", str(stack.data_dir), "--gw", GW, "--json"]) == 0
        # (the handlers serving the writer in this process print their metric lines to stdout too)
        (report,) = next(json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("["))
        writer.halt.set()
        writer.join(30)
        assert writer.errors == []

        # Then the restore's checkpoint is exactly the lake's fold (what the writer got acknowledged since the flush
        # is lost: the tables went with it, so the report cannot count it), and the gateway's row index is that fold
        # with what the writer pushed once the restore ended
        observer = api(stack, "observer")
        lake = lake_deltas(stack)
        checkpoint, cursor = observer.checkpoint()
        assert folded(checkpoint) == folded(lake) and report["checkpointId"] and report["atRisk"]["deltas"] is None
        after, _ = observer.pull_all(cursor)
        assert index_rows(stack) == folded([*lake, *after])

        # When every client syncs again (the writer from where it was, the others pushing their outboxes)
        for _ in range(3):
            for store in (busy, away):
                store.sync()
            original.sync_once()
        # and pushes and pulls go on: a new write reaches the others
        busy.insert("todos", "after", {"title": "after the restore"})
        busy.sync()
        away.sync()
        for _ in range(2):
            original.sync_once()

        # Then everyone holds the gateway's rows, and the writes held offline are among them
        final = gateway_rows(stack)
        assert final["after"] == {"title": "after the restore"}
        assert {row: final[row] for row in offline} == offline
        assert present(busy) == present(away) == final
        assert original.rows("todos") == final and original.apply_failures == 0 and original.queue == []
        assert away.pending() == 0 and busy.pending() == 0 and final == index_rows(stack)
        busy.close()
        away.close()
