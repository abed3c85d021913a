"""Rows written in batches on their chunk's turn (docs/design/row-writes-in-batches.md), on the moto server: a push's
rows go in ``BatchWriteItem``s; a writer that takes a stopped writer's turn declares its chunk in doubt, and the
stopped writer's batch, landing late, changes nothing anyone reads; once no late batch can land, the rows go back to
their main keys."""

from __future__ import annotations

import threading
from typing import Any

from lakesync.aws.action_store import DynamoDBActionStore
from lakesync.aws.buffer.row_doubts import BATCH_DEADLINE_MS, Doubt, decode_doubts, encode_doubts, until_ms
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.core.errors import StorageError
from lakesync.core.hlc import HLC, encode
from lakesync.core.log import Commit, row_key
from lakesync.core.merge import fold
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from tests.factories import update
from tests.integration.test_row_cache import GW, SHARD, _head, _push

START_MS = 1_800_000_000_000


class Clock:
    """The wall clock of the gateway (its HLC) and of the stores, moved by the test."""

    def __init__(self) -> None:
        self.now_ms = START_MS

    def __call__(self) -> int:
        return self.now_ms

    def hlc(self) -> int:
        """A client's HLC, 10 ms behind this clock."""
        return encode(self.now_ms - 10, 0)


class Recording:
    """A DynamoDB client that records its write calls (operation and table)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.writes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)
        if name not in {"put_item", "update_item", "batch_write_item", "transact_write_items", "delete_item"}:
            return method

        def record(**kwargs: Any) -> Any:
            tables = kwargs.get("RequestItems", {}).keys() if name == "batch_write_item" else [kwargs["TableName"]]
            self.writes.extend(f"{name}:{table}" for table in tables)
            return method(**kwargs)

        return record


class StopsInItsBatch(DynamoDBBufferStore):
    """A writer that stops as it sends its rows' batch: the batch is kept (as a request still in flight would be),
    the rows are not written and the head does not move."""

    held: list[list[dict[str, Any]]]

    def _batch_of_rows(self, items: list[dict[str, Any]], until: int) -> None:
        self.held.append(items)
        raise StorageError("stopped")


def _store(client: Any, names: Any, clock: Clock, cls: type[DynamoDBBufferStore] = DynamoDBBufferStore) -> Any:
    return cls(client, names, turn_wait_s=0.05, clock_ms=clock)


def _stops_in_its_batch(client: Any, names: Any, clock: Clock) -> StopsInItsBatch:
    stopped: StopsInItsBatch = _store(client, names, clock, StopsInItsBatch)
    stopped.held = []
    return stopped


def _deps(buffer: DynamoDBBufferStore, client: Any, names: Any, clock: Clock) -> GatewayDeps:
    return GatewayDeps(
        buffer,
        DynamoDBConfigStore(client, names),
        DynamoDBActionStore(client, names),
        GatewaySettings(chunk_deltas=48),  # pushes of a few chunks
        HLC(clock),
    )


def _doubt_records(client: Any, names: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = client.query(
        TableName=names.config,
        KeyConditionExpression="gw = :gw AND begins_with(sk, :p)",
        ExpressionAttributeValues={":gw": {"S": GW}, ":p": {"S": "#doubt#"}},
        ConsistentRead=True,
    )["Items"]
    return items


def test_a_push_writes_its_rows_in_batches_on_its_turn(dynamodb_client: Any, dynamodb_tables: Any) -> None:
    # Given a shard with a head
    client, names, clock = dynamodb_client, dynamodb_tables, Clock()
    recording = Recording(client)
    deps = _deps(_store(recording, names, clock), client, names, clock)  # type: ignore[arg-type]
    _push(deps, update("r0", hlc=clock.hlc(), v=0))
    recording.writes.clear()

    # When 60 rows are pushed (two chunks: 48 and 12)
    deltas = [update(f"r{i}", hlc=clock.hlc(), v=i) for i in range(1, 61)]
    _push(deps, *deltas)

    # Then each chunk is one put of its log item, its rows in batches of at most 25, and one head update: no put of
    # a row, no transaction
    assert sorted(recording.writes) == sorted(
        [f"put_item:{names.deltas}"] * 2 + [f"batch_write_item:{names.rows}"] * 3 + [f"update_item:{names.heads}"] * 2
    )
    # And the rows are the pushes', and the head says every row is written
    rows = deps.buffer.get_rows(GW, [("todos", f"r{i}") for i in range(61)])
    assert {key[1]: row.state.values() for key, row in rows.items()} == {f"r{i}": {"v": i} for i in range(61)}
    head = _head(client, names)
    assert head["seq"]["N"] == head["ra"]["N"] == "61" and "dq" not in head


def test_a_writer_past_its_deadline_writes_its_rows_by_conditional_puts(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    # Given a writer whose clock runs past the deadline of the chunks it commits (a stalled writer, as it resumes)
    client, names, clock = dynamodb_client, dynamodb_tables, Clock()
    recording = Recording(client)
    late_clock = Clock()
    late_clock.now_ms = clock.now_ms + BATCH_DEADLINE_MS + 1
    deps = _deps(_store(recording, names, late_clock), client, names, clock)  # type: ignore[arg-type]

    # When it pushes three rows
    _push(deps, *[update(f"r{i}", hlc=clock.hlc(), v=i) for i in range(3)])

    # Then it sends no batch: each row is a put, which never goes backwards
    assert f"batch_write_item:{names.rows}" not in recording.writes
    assert recording.writes.count(f"put_item:{names.rows}") == 3


def test_a_late_batch_of_a_stopped_writer_changes_nothing_anyone_reads(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    # Given a writer that committed a chunk and stopped while its rows' batch was on its way
    client, names, clock = dynamodb_client, dynamodb_tables, Clock()
    stopped = _stops_in_its_batch(client, names, clock)
    first = update("r1", hlc=clock.hlc(), title="a", n=1)
    _push(_deps(stopped, client, names, clock), first)
    assert len(stopped.held) == 1 and _head(client, names)["seq"]["N"] == "0"

    # When another writer pushes a change to the same row (it waits for the stopped writer, then takes its turn)
    clock.now_ms += 1000
    store = _store(client, names, clock)
    deps = _deps(store, client, names, clock)
    second = update("r1", hlc=clock.hlc(), done=True)
    result = _push(deps, second)

    # Then it merged against the row as the log has it, and declared the stopped writer's chunk in doubt until no
    # batch of that writer can land
    (entry,) = result.entries
    assert entry.before == {"title": "a", "n": 1} and entry.after == {"title": "a", "n": 1, "done": True}
    head = _head(client, names)
    assert head["seq"]["N"] == head["ra"]["N"] == "2"
    (doubt,) = decode_doubts(head["dq"]["S"])
    (stopped_entry,) = store.read_log(SHARD, 0, 1)
    assert (doubt.first, doubt.last, doubt.until_ms) == (1, 1, until_ms(stopped_entry.commit_hlc))

    # When the stopped writer's batch lands now, late (its row as chunk 1 left it, at the row's main key)
    client.batch_write_item(RequestItems={names.rows: [{"PutRequest": {"Item": item}} for item in stopped.held[0]]})

    # Then every read of the row still has both changes: a basis, get_rows, and the next push's merge
    expected = fold([first, second])
    assert store.read_commit_basis(SHARD, [("todos", "r1")]).rows[("todos", "r1")].state == expected
    fresh = _store(client, names, clock)
    (row,) = fresh.get_rows(GW, [("todos", "r1")]).values()
    assert (row.state, row.version) == (expected, 2)
    clock.now_ms += 1000
    third = update("r1", hlc=clock.hlc(), n=2)
    (entry,) = _push(_deps(fresh, client, names, clock), third).entries
    assert entry.before == {"title": "a", "n": 1, "done": True}

    # When no batch of the stopped writer can land any more, and a push to the shard takes its turn
    clock.now_ms = doubt.until_ms + 1
    _push(deps, update("r2", hlc=clock.hlc(), title="b"))

    # Then the row is back at its main key, as the log has it, and nothing is in doubt any more
    head = _head(client, names)
    assert "dq" not in head and head["seq"]["N"] == head["ra"]["N"] == "4"
    assert _doubt_records(client, names) == []
    main = client.get_item(TableName=names.rows, Key={"pk": {"S": row_key(GW, "todos", "r1")}}, ConsistentRead=True)[
        "Item"
    ]
    assert main["v"]["N"] == "3"
    (row,) = _store(client, names, clock).get_rows(GW, [("todos", "r1")]).values()
    assert row.state == fold([first, second, third])
    scanned = client.scan(TableName=names.rows, ConsistentRead=True)["Items"]
    assert sorted(item["pk"]["S"] for item in scanned) == sorted(
        [row_key(GW, "todos", "r1"), row_key(GW, "todos", "r2")]
    )


class StopsAfterThePut(DynamoDBBufferStore):
    """A writer that stops right after its put: the log has the chunk, its rows and the head never move."""

    def _apply_put(self, commit: Commit) -> None:
        return None


def test_a_turn_that_does_not_come_is_taken_over_in_doubt(dynamodb_client: Any, dynamodb_tables: Any) -> None:
    # Given a chunk whose writer stopped after its put, and a head moved over it without its rows (as the flush
    # settles a quiet shard's head: `seq` over the chunk, `ra` before it)
    client, names, clock = dynamodb_client, dynamodb_tables, Clock()
    first = update("r1", hlc=clock.hlc(), title="a")
    _push(_deps(_store(client, names, clock, StopsAfterThePut), client, names, clock), first)
    store = _store(client, names, clock)
    store.settle_heads([SHARD], committed_before_ms=clock.now_ms + 1)
    head = _head(client, names)
    assert (head["seq"]["N"], head["ra"]["N"]) == ("1", "0")

    # When another writer commits a change to the row (its basis folds the pending chunk from the log; its turn
    # never comes, since the stopped writer will not move `ra`)
    clock.now_ms += 1000
    second = update("r1", hlc=clock.hlc(), done=True)
    (entry,) = _push(_deps(store, client, names, clock), second).entries

    # Then it took the turn over: the stopped writer's chunk in doubt, both chunks' rows written, the head past both
    assert entry.seq == 2 and entry.before == {"title": "a"}
    head = _head(client, names)
    assert head["seq"]["N"] == head["ra"]["N"] == "2"
    assert [(d.first, d.last) for d in decode_doubts(head["dq"]["S"])] == [(1, 1)]
    (row,) = _store(client, names, clock).get_rows(GW, [("todos", "r1")]).values()
    assert (row.state, row.version) == (fold([first, second]), 2)


def test_a_take_over_that_finds_a_run_retired_meanwhile_leaves_the_head_to_the_turn_that_retired_it(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    # Given a chunk past the head (its writer stopped after its put, long ago: nothing of it can land any more), and a
    # head read listing a run in doubt whose record a turn has deleted since (it retired the run, and moved on)
    client, names, clock = dynamodb_client, dynamodb_tables, Clock()
    _push(
        _deps(_store(client, names, clock, StopsAfterThePut), client, names, clock),
        update("r1", hlc=clock.hlc(), title="a"),
    )
    clock.now_ms = until_ms(encode(clock.now_ms + 1000, 0))
    client.update_item(
        TableName=names.heads,
        Key={"shard": {"S": SHARD.key}},
        UpdateExpression="SET dq = :dq",
        ExpressionAttributeValues={":dq": {"S": encode_doubts([Doubt(1, 1, clock.now_ms + 60_000)])}},
    )

    # When another writer takes the turn over
    store = _store(client, names, clock)
    store._roll_forward(SHARD, wait=False)

    # Then it stops without an error, and leaves the head as it was (the next commit reads it afresh)
    head = _head(client, names)
    assert (head["seq"]["N"], head["ra"]["N"]) == ("0", "0")


def test_a_turn_behind_chunks_past_their_deadline_is_taken_over_without_waiting(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    # Given a stopped writer's chunk that the flush settled (`seq` over it, `ra` before it), committed a minute ago
    client, names, clock = dynamodb_client, dynamodb_tables, Clock()
    _push(
        _deps(_store(client, names, clock, StopsAfterThePut), client, names, clock),
        update("r1", hlc=clock.hlc(), title="a"),
    )
    clock.now_ms += 60_000
    patient = DynamoDBBufferStore(client, names, turn_wait_s=60.0, clock_ms=clock)
    patient.settle_heads([SHARD], committed_before_ms=clock.now_ms)
    reads: list[str] = []
    event, hook = "provide-client-params.dynamodb.GetItem", "test-turn-reads"
    client.meta.events.register(event, lambda params, **_: reads.append(params["TableName"]), unique_id=hook)

    # When a writer whose turn waits up to a minute commits after it
    try:
        (entry,) = _push(_deps(patient, client, names, clock), update("r1", hlc=clock.hlc(), done=True)).entries
    finally:
        client.meta.events.unregister(event, unique_id=hook)

    # Then it took the turn over at once (its writer sends no batch past its deadline): a few head reads, not a
    # minute of polling; the chunk is in doubt, as its writer's last batch may still land
    assert entry.before == {"title": "a"}
    assert reads.count(names.heads) <= 6, reads
    head = _head(client, names)
    assert head["seq"]["N"] == head["ra"]["N"] == "2"
    assert [(d.first, d.last) for d in decode_doubts(head["dq"]["S"])] == [(1, 1)]


class MeetsInBatchGets:
    """A DynamoDB client whose ``BatchGetItem`` waits until ``parties`` of them are in flight at once."""

    def __init__(self, client: Any, parties: int) -> None:
        self._client = client
        self.barrier = threading.Barrier(parties, timeout=10)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def batch_get_item(self, **kwargs: Any) -> Any:
        self.barrier.wait()
        return self._client.batch_get_item(**kwargs)


def test_a_basis_of_many_rows_is_read_in_requests_side_by_side(dynamodb_client: Any, dynamodb_tables: Any) -> None:
    # Given 250 rows
    client, names, clock = dynamodb_client, dynamodb_tables, Clock()
    deps = _deps(_store(client, names, clock), client, names, clock)
    _push(deps, *[update(f"r{i}", hlc=clock.hlc(), v=i) for i in range(250)])

    # When a chunk's basis holds all of them (three requests of at most 100 keys), read through a client whose
    # BatchGetItem answers only once three are in flight (one after another, the first would wait in vain)
    meeting = MeetsInBatchGets(client, 3)
    basis = _store(meeting, names, clock).read_commit_basis(SHARD, [("todos", f"r{i}") for i in range(250)])

    # Then every row is there, and the three requests met
    assert sorted(int(row.state.values()["v"]) for row in basis.rows.values()) == list(range(250))
    assert not meeting.barrier.broken


def test_a_stopped_writer_of_a_chunk_longer_than_a_run_is_taken_over_in_runs(
    dynamodb_client: Any, dynamodb_tables: Any
) -> None:
    # Given a writer that committed one chunk of 250 rows and stopped while its batches were on their way
    client, names, clock = dynamodb_client, dynamodb_tables, Clock()
    stopped = _stops_in_its_batch(client, names, clock)
    settings = GatewaySettings()
    config, actions = DynamoDBConfigStore(client, names), DynamoDBActionStore(client, names)
    firsts = [update(f"r{i}", hlc=clock.hlc(), n=i) for i in range(250)]
    _push(GatewayDeps(stopped, config, actions, settings, HLC(clock)), *firsts)
    assert sum(len(batch) for batch in stopped.held) == 250 and _head(client, names)["seq"]["N"] == "0"

    # When another writer changes rows of its first and its last run
    clock.now_ms += 1000
    store = _store(client, names, clock)
    deps = GatewayDeps(store, config, actions, settings, HLC(clock))
    seconds = [update("r7", hlc=clock.hlc(), done=True), update("r249", hlc=clock.hlc(), done=True)]
    _push(deps, *seconds)

    # Then the stopped writer's chunk is in doubt in runs of at most DOUBT_RUN_ENTRIES, each with its record
    head = _head(client, names)
    assert head["seq"]["N"] == head["ra"]["N"] == "252"
    doubts = decode_doubts(head["dq"]["S"])
    assert [(d.first, d.last) for d in doubts] == [(1, 100), (101, 200), (201, 250)]
    assert len(_doubt_records(client, names)) == 3

    # When the stopped writer's batches land now, late
    for batch in stopped.held:
        client.batch_write_item(RequestItems={names.rows: [{"PutRequest": {"Item": item}} for item in batch]})

    # Then every row reads as the log has it, the two changed ones with both changes
    expected = {("todos", f"r{i}"): fold([d]) for i, d in enumerate(firsts)}
    expected[("todos", "r7")] = fold([firsts[7], seconds[0]])
    expected[("todos", "r249")] = fold([firsts[249], seconds[1]])
    rows = _store(client, names, clock).get_rows(GW, list(expected))
    assert {key: row.state for key, row in rows.items()} == expected

    # When no batch can land any more, and a push takes its turn
    clock.now_ms = max(d.until_ms for d in doubts) + 1
    _push(deps, update("r0", hlc=clock.hlc(), n=-1))

    # Then every run is retired: nothing in doubt, no record, no alternate row, and the rows at their main keys
    head = _head(client, names)
    assert "dq" not in head and head["seq"]["N"] == head["ra"]["N"] == "253"
    assert _doubt_records(client, names) == []
    scanned = client.scan(TableName=names.rows, ConsistentRead=True)["Items"]
    assert sorted(item["pk"]["S"] for item in scanned) == sorted(row_key(GW, "todos", f"r{i}") for i in range(250))
    del expected[("todos", "r0")]
    rows = _store(client, names, clock).get_rows(GW, list(expected))
    assert {key: row.state for key, row in rows.items()} == expected
