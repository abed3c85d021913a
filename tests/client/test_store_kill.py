"""The store killed for real (a child process ends with ``os._exit`` inside a transaction: no Python clean-up, no
ROLLBACK, SQLite recovers the file when it is next opened) at the points where a crash could lose or repeat
something: the file reopened and synced holds exactly the gateway's rows, every write once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from lakesync.auth import mint_token
from lakesync.client import LocalStore
from lakesync.local.runner import LocalStack
from tests.client.conftest import admin, full_rows, gateway_rows, unique_table

pytestmark = pytest.mark.integration

Open = Callable[..., LocalStore]

CHILD = """
import os, sys
from lakesync.client import connect
from lakesync.client.pull import Puller
from lakesync.client.push import Pusher
from lakesync.client.writes import LocalWrites
from tests.factories import todo_schema

url, token, path, table, target = sys.argv[1:6]
owner_name, method = target.split(".")
owner = {"LocalWrites": LocalWrites, "Pusher": Pusher, "Puller": Puller}[owner_name]
real = getattr(owner, method)

def die_inside(self, *args, **kwargs):
    real(self, *args, **kwargs)
    os._exit(137)  # inside the caller's transaction, before its COMMIT

store = connect(path, url=url, gateway="default", token=token, schemas=[todo_schema(table)], realtime=False,
                pull_limit=4)
store.sync()  # catch up first, so the pages below are this table's
setattr(owner, method, die_inside)
store.insert_many(table, {f"mine{i}": {"title": f"m{i}", "tags": [i]} for i in range(6)})
store.update(table, "mine0", {"done": True})
store.sync()
sys.exit(0)
"""


@pytest.mark.parametrize("method", ["LocalWrites._insert_fresh", "Pusher._advance", "Puller.merge_remote"])
def test_a_store_killed_inside_a_transaction_reopens_and_converges(
    stack: LocalStack, open_store: Open, tmp_path: Path, method: str
) -> None:
    table = unique_table()
    writer = open_store("killw", table)
    writer.insert_many(table, {f"theirs{i}": {"title": f"t{i}", "priority": i} for i in range(10)})
    writer.sync()
    name = f"kill{method.split('.')[1]}"
    path = tmp_path / "killed.db"

    # Given a process killed inside a bulk insert, the transaction acknowledging a push, or a pull page's
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    args = [stack.url, mint_token(name, "default", stack.secret), str(path), table, method]
    child = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True, timeout=120)
    assert child.returncode == 137, child.stderr[-2000:]

    # When the file is reopened and syncs
    store = open_store(name, table, path=path)
    if method == "LocalWrites._insert_fresh":
        assert store.pending() == 0 and store.get(table, "mine0") is None  # the insert never happened
    report = store.sync()

    # Then it holds the gateway's rows, and the gateway holds each of its writes once
    assert store.pending() == 0
    assert store.rows(table) == full_rows(gateway_rows(stack, table))
    own = [d for d in admin(stack).pull_all()[0] if d.table == table and d.client_id == name]
    assert len(own) == len({d.delta_id for d in own})
    if method == "LocalWrites._insert_fresh":
        assert own == [] and len(store.rows(table)) == 10
    else:
        assert len(own) == 7 and store.get(table, "mine0") == {
            "title": "m0",
            "done": True,
            "priority": None,
            "tags": [0],
        }
    if method == "Pusher._advance":
        assert report.duplicates == 7  # the push had landed: its re-send is deduplicated
