"""``LAKESYNC_LOG_KEYS=auto`` on the moto server: writers start first keys only a grace after the deployment's marker
was first seen (every function and job updated by then), all agree on when, the marker is read rarely, and a store
set to auto commits last keys before and first keys after."""

from __future__ import annotations

import threading
import zlib
from typing import Any

import pytest

from lakesync.aws.dynamodb import DynamoDBBufferStore, create_tables
from lakesync.aws.log_chunks import FIRST_KEYED
from lakesync.aws.log_keys import MARKER_GATEWAY, MARKER_SK, FirstKeysGate, remove_marker, write_marker
from lakesync.aws.tables import TableNames
from tests.contract.test_commit_by_put import _keys
from tests.contract.test_row_cache import SHARD, _delta, _deps, _push

GRACE_MS = 60_000


class Clock:
    def __init__(self, ms: int = 1_800_000_000_000) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


class CountingClient:
    """The client, with its Query and PutItem requests counted."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.queries = 0
        self.puts = 0

    def query(self, **kwargs: Any) -> Any:
        self.queries += 1
        return self._client.query(**kwargs)

    def put_item(self, **kwargs: Any) -> Any:
        self.puts += 1
        return self._client.put_item(**kwargs)


def _marker(client: Any, names: TableNames) -> dict[str, Any] | None:
    key = {"gw": {"S": MARKER_GATEWAY}, "sk": {"S": MARKER_SK}}
    item: dict[str, Any] | None = client.get_item(TableName=names.config, Key=key, ConsistentRead=True).get("Item")
    return item


def test_tables_created_here_carry_an_open_marker(dynamodb_client: Any, dynamodb_tables: TableNames) -> None:
    # Given tables just created (no earlier release ever wrote to them)
    # Then the marker is there, seen and without grace: auto writes first keys at once
    marker = _marker(dynamodb_client, dynamodb_tables)
    assert marker is not None and marker["grace_ms"] == {"N": "0"} and marker["seen"] == {"N": "0"}
    assert FirstKeysGate(dynamodb_client, dynamodb_tables.config)()
    # And creating them again (they exist) leaves a marker alone
    write_marker(dynamodb_client, dynamodb_tables.config, GRACE_MS)
    create_tables(dynamodb_client, dynamodb_tables)
    assert "seen" not in (_marker(dynamodb_client, dynamodb_tables) or {"seen": 1})


def test_first_keys_start_one_grace_after_the_marker_is_first_seen(
    dynamodb_client: Any, dynamodb_tables: TableNames
) -> None:
    # Given a deployment without the marker (functions of an earlier release may still run)
    names = dynamodb_tables
    remove_marker(dynamodb_client, names.config)
    clock = Clock()
    client = CountingClient(dynamodb_client)
    gate = FirstKeysGate(client, names.config, now_ms=clock, recheck_ms=10_000)  # type: ignore[arg-type]
    # Then first keys stay off, and the marker is read again only after the recheck interval
    assert not gate() and client.queries == 1
    clock.ms += 9_999
    assert not gate() and client.queries == 1
    # When the deploy writes the marker
    write_marker(dynamodb_client, names.config, GRACE_MS)
    clock.ms += 1
    # Then the next read stamps it with the time it saw it, and first keys wait out the grace from there
    assert not gate() and client.queries == 2 and client.puts == 1
    seen = clock.ms
    assert (_marker(dynamodb_client, names) or {})["seen"] == {"N": str(seen)}
    clock.ms = seen + GRACE_MS - 1
    assert not gate() and client.queries == 2  # the stamp is known: no more reads
    clock.ms = seen + GRACE_MS
    assert gate() and client.queries == 3  # one read to confirm the marker is still there with that stamp
    # And once on, they stay on without reading anything, whatever happens to the marker
    remove_marker(dynamodb_client, names.config)
    clock.ms += 10**9
    assert gate() and client.queries == 3 and client.puts == 1


def test_a_marker_taken_back_within_the_grace_keeps_first_keys_off(
    dynamodb_client: Any, dynamodb_tables: TableNames
) -> None:
    # Given a writer that saw (and stamped) a fresh marker
    names = dynamodb_tables
    write_marker(dynamodb_client, names.config, GRACE_MS)
    clock = Clock()
    gate = FirstKeysGate(dynamodb_client, names.config, now_ms=clock, recheck_ms=10_000)
    assert not gate()
    # When the deploy rolls back (the marker deleted) before the grace is over
    remove_marker(dynamodb_client, names.config)
    # Then the end of the grace does not turn first keys on
    clock.ms += GRACE_MS
    assert not gate()
    clock.ms += 10 * GRACE_MS
    assert not gate()
    # And a later deploy's marker starts a grace of its own, from when this process next reads it
    write_marker(dynamodb_client, names.config, GRACE_MS)
    clock.ms += 10_000
    assert not gate()
    seen = int((_marker(dynamodb_client, names) or {})["seen"]["N"])
    assert seen == clock.ms
    clock.ms = seen + GRACE_MS - 1
    assert not gate()
    clock.ms += 1
    assert gate()


def test_writers_seeing_the_marker_at_once_agree_on_one_stamp(
    dynamodb_client: Any, dynamodb_tables: TableNames
) -> None:
    # Given a fresh marker and eight processes that see it at different times, all at once
    names = dynamodb_tables
    write_marker(dynamodb_client, names.config, GRACE_MS)
    base = 1_800_000_000_000
    gates = [FirstKeysGate(dynamodb_client, names.config, now_ms=Clock(base + i * 1000)) for i in range(8)]
    barrier = threading.Barrier(len(gates))
    results: list[bool] = []

    def see(gate: FirstKeysGate) -> None:
        barrier.wait()
        results.append(gate())

    threads = [threading.Thread(target=see, args=(g,)) for g in gates]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Then one stamp won, and every process counts the grace from it
    stamp = int((_marker(dynamodb_client, names) or {})["seen"]["N"])
    assert base <= stamp <= base + 7000 and results == [False] * 8
    late = [FirstKeysGate(dynamodb_client, names.config, now_ms=Clock(stamp + GRACE_MS)) for _ in range(2)]
    early = FirstKeysGate(dynamodb_client, names.config, now_ms=Clock(stamp + GRACE_MS - 1))
    assert all(g() for g in late) and not early()


@pytest.mark.parametrize("broken", ["grace_ms", "table"])
def test_a_marker_that_cannot_be_read_keeps_first_keys_off(
    dynamodb_client: Any, dynamodb_tables: TableNames, broken: str
) -> None:
    # Given a marker without its grace, or a config table that does not exist
    names = dynamodb_tables
    table = names.config
    if broken == "grace_ms":
        item = {"gw": {"S": MARKER_GATEWAY}, "sk": {"S": MARKER_SK}, "seen": {"N": "0"}}
        dynamodb_client.put_item(TableName=table, Item=item)
    else:
        table = f"{table}-missing"
    # Then the gate answers "not yet" (last keys are always safe) rather than failing the push
    assert not FirstKeysGate(dynamodb_client, table)()


def test_a_store_set_to_auto_commits_last_keys_until_the_gate_opens(
    dynamodb_client: Any, dynamodb_tables: TableNames
) -> None:
    # Given a store set to auto on a deployment whose marker has just been written
    client, names = dynamodb_client, dynamodb_tables
    write_marker(client, names.config, GRACE_MS)
    clock = Clock()
    store = DynamoDBBufferStore(client, names, first_keyed=FirstKeysGate(client, names.config, now_ms=clock))
    deps = _deps(store, client, names)
    # When it commits before the grace is over
    _push(deps, _delta("r1", 1, title="a"), _delta("r2", 2, title="b"))
    # Then the chunk is last-keyed (a transaction)
    assert _keys(client, names) == [2]
    # And once the grace is over, the next commit starts first keys, and every writer keeps them for the shard
    clock.ms += GRACE_MS
    _push(deps, _delta("r3", 3, title="c"))
    assert _keys(client, names) == [2, FIRST_KEYED + 3]
    last_keyed = DynamoDBBufferStore(client, names, first_keyed=False)
    _push(_deps(last_keyed, client, names), _delta("r4", 4, title="d"))
    assert _keys(client, names) == [2, FIRST_KEYED + 3, FIRST_KEYED + 4]


def _layouts(client: Any, names: TableNames) -> list[str]:
    """The layout of each stored chunk's text, in key order (its first character: ``[`` for layout 1)."""
    items = client.scan(TableName=names.deltas)["Items"]
    return [zlib.decompress(item["z"]["B"])[:1].decode() for item in sorted(items, key=lambda i: int(i["seq"]["N"]))]


def test_a_store_set_to_auto_writes_layout_2_only_once_the_gate_is_open(
    dynamodb_client: Any, dynamodb_tables: TableNames
) -> None:
    # Given a store set to auto on a deployment whose marker (of a release that reads layout 2) has just been written
    client, names = dynamodb_client, dynamodb_tables
    write_marker(client, names.config, GRACE_MS)
    clock = Clock()
    gate = FirstKeysGate(client, names.config, now_ms=clock)
    store = DynamoDBBufferStore(client, names, first_keyed=gate, log_format=gate.log_format)
    deps = _deps(store, client, names)
    # When it commits before the grace is over, then after
    _push(deps, _delta("r1", 1, title="a"))
    clock.ms += GRACE_MS
    _push(deps, _delta("r2", 2, title="b"))
    # Then the first chunk is in layout 1 (a reader of an earlier release may still run), the next in layout 2
    assert _layouts(client, names) == ["[", "2"]
    # And both read back
    assert [e.delta.row_id for e in store.read_log(SHARD, 0, 10)] == ["r1", "r2"]


@pytest.mark.parametrize("marker_format", [None, 1, 2, 7])
def test_the_layout_is_the_markers_and_at_most_this_codes(
    dynamodb_client: Any, dynamodb_tables: TableNames, marker_format: int | None
) -> None:
    # Given an open marker written by a release before layout 2 (no `lf`), or saying some layout
    client, names = dynamodb_client, dynamodb_tables
    item = {"gw": {"S": MARKER_GATEWAY}, "sk": {"S": MARKER_SK}, "grace_ms": {"N": "0"}}
    if marker_format is not None:
        item["lf"] = {"N": str(marker_format)}
    client.put_item(TableName=names.config, Item=item)
    gate = FirstKeysGate(client, names.config)
    # Then, once stamped and open, writers use the marker's layout, never one this code does not write
    assert gate()
    assert gate.log_format() == min(marker_format or 1, 2)
    # And the stamp kept the layout for every other process
    stamped = _marker(client, names)
    assert stamped is not None and "seen" in stamped
    assert FirstKeysGate(client, names.config).log_format() == min(marker_format or 1, 2)


def test_a_gate_not_open_says_layout_1(dynamodb_client: Any, dynamodb_tables: TableNames) -> None:
    write_marker(dynamodb_client, dynamodb_tables.config, GRACE_MS)
    gate = FirstKeysGate(dynamodb_client, dynamodb_tables.config, now_ms=Clock())
    assert gate.log_format() == 1
