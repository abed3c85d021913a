"""The flush's producer side of materialisation (lakesync.aws.publish) on the moto server: DynamoDB buffer filled by
the real push service, payloads to moto S3, messages to moto SQS.

Focus: every committed entry is published in exactly one range per run and the ranges of all runs cover each
shard's log with no gap; payloads decode (checksum checked) to exactly the buffer's entries; only gateways with a
destination are published (others just move their position); a crash after some messages were sent, or a failing
sink, leaves the rest for the next run, which sends what is missing; failures are counted for the alarm.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from lakesync.aws.action_store import DynamoDBActionStore
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.flush_store import FlushStore
from lakesync.aws.publish import ClaimCheckSink, plan_publish, publish_flushed
from lakesync.core.delta import make_delta
from lakesync.core.destinations import parse_destination
from lakesync.core.hlc import HLC
from lakesync.core.log import ShardHead, ShardId
from lakesync.core.materialise import MaterialiseJob, decode_payload
from lakesync.core.messages import SyncPush
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.push import push

GATEWAYS = ("gw1", "gw2")


@pytest.fixture
def deps(dynamodb_client: Any, dynamodb_tables: Any) -> GatewayDeps:
    return GatewayDeps(
        buffer=DynamoDBBufferStore(dynamodb_client, dynamodb_tables),
        config=DynamoDBConfigStore(dynamodb_client, dynamodb_tables),
        actions=DynamoDBActionStore(dynamodb_client, dynamodb_tables),
        settings=GatewaySettings(gateway_ids=frozenset(GATEWAYS), sub_shards={"todos": 2}),
        clock=HLC(),
    )


@pytest.fixture
def store(dynamodb_client: Any, dynamodb_tables: Any) -> FlushStore:
    return FlushStore(dynamodb_client, dynamodb_tables)


def fill(deps: GatewayDeps, gateway: str, count: int, table: str = "todos", start: int = 0) -> None:
    clock = HLC()
    deltas = []
    for i in range(start, start + count):
        row = f"r{i % 13}"
        if i % 7 == 6:
            deltas.append(make_delta("DELETE", table=table, row_id=row, client_id="c1", hlc=clock.now()))
        else:
            cols = {"title": f"t{i}", "n": i} if i % 2 else {"title": f"t{i}"}
            deltas.append(make_delta("UPDATE", table=table, row_id=row, client_id="c1", hlc=clock.now(), columns=cols))
    push(deps, gateway, SyncPush("c1", tuple(deltas)), client_id="c1")


def heads(deps: GatewayDeps, gateways: tuple[str, ...] = GATEWAYS) -> dict[ShardId, ShardHead]:
    return deps.buffer.get_heads([s for g in gateways for s in deps.buffer.list_shards(g)])


def committed(deps: GatewayDeps) -> dict[str, int]:
    """Watermarks as if the flush committed everything in the buffer."""
    return {s.key: h.seq for s, h in heads(deps).items()}


def jobs(claim_check: Any) -> list[MaterialiseJob]:
    return [MaterialiseJob.from_message(m["Body"]) for m in claim_check.receive_all()]


def payload_of(claim_check: Any, job: MaterialiseJob) -> list[Any]:
    data = claim_check.s3.get_object(Bucket=job.bucket, Key=job.key)["Body"].read()
    return decode_payload(job, data)


def log_deltas(deps: GatewayDeps, shard: ShardId, lo: int, hi: int) -> list[Any]:
    return [e.delta for e in deps.buffer.read_log(shard, lo, hi - lo)]


def add_destination(deps: GatewayDeps, gateway: str) -> None:
    deps.config.add_destination(gateway, parse_destination({"name": "db", "type": "sqlite", "url": "sqlite:///x.db"}))


def covered(found: list[MaterialiseJob]) -> dict[str, list[int]]:
    """Per shard, every sequence number published (with repeats)."""
    out: dict[str, list[int]] = {}
    for job in found:
        out.setdefault(job.shard, []).extend(range(job.lo + 1, job.hi + 1))
    return {k: sorted(v) for k, v in out.items()}


def test_plan_publish_cuts_from_the_published_position_or_the_release_mark() -> None:
    a, b, c = ShardId("g", "a"), ShardId("g", "b"), ShardId("g", "c")
    plan = plan_publish(
        {
            a: ShardHead(a, seq=25, published_seq=10),
            b: ShardHead(b, seq=9, released_seq=4),
            c: ShardHead(c, seq=3, published_seq=3),
        },
        {a.key: 25, b.key: 9, c.key: 3},
        range_size=10,
    )
    assert [(r.lo, r.hi) for r in plan[a]] == [(10, 20), (20, 25)]
    assert [(r.lo, r.hi) for r in plan[b]] == [(4, 9)]
    assert plan[c] == []


def test_publishes_every_committed_entry_of_gateways_with_destinations_once(
    deps: GatewayDeps, store: FlushStore, claim_check: Any
) -> None:
    # Given two gateways with entries, only gw1 with a destination
    fill(deps, "gw1", 60)
    fill(deps, "gw1", 9, table="notes")
    fill(deps, "gw2", 20)
    add_destination(deps, "gw1")
    before = heads(deps)

    # When the entries are published in ranges of 16
    report = publish_flushed(
        store,
        ClaimCheckSink(claim_check.publish_config()),
        before,
        committed(deps),
        run_id="run1",
        bucket=claim_check.bucket,
        range_size=16,
    )

    # Then gw1's shards are covered exactly once, in ranges of at most 16, and gw2 sent nothing
    found = jobs(claim_check)
    gw1 = {s.key: h.seq for s, h in before.items() if s.gateway == "gw1"}
    assert covered(found) == {k: list(range(1, seq + 1)) for k, seq in gw1.items()}
    assert all(j.hi - j.lo <= 16 and j.run_id == "run1" and j.gateway == "gw1" for j in found)
    assert report.jobs == len(found) and report.deltas == sum(gw1.values()) and report.failed == 0
    # And each payload is the log's entries of its range, and counts its rows
    for job in found:
        shard = ShardId.parse(job.shard)
        deltas = payload_of(claim_check, job)
        assert deltas == log_deltas(deps, shard, job.lo, job.hi)
        assert job.rows == len({d.row_id for d in deltas})
        assert job.table == shard.table
    # And every head's published position is its committed watermark, gw2's moved without publishing
    assert {s.key: h.published_seq for s, h in heads(deps).items()} == committed(deps)
    assert report.skipped_shards == len([s for s in before if s.gateway == "gw2"])

    # When more is pushed and published again
    fill(deps, "gw1", 10, start=60)
    publish_flushed(
        store,
        ClaimCheckSink(claim_check.publish_config()),
        heads(deps),
        committed(deps),
        run_id="run2",
        bucket=claim_check.bucket,
        range_size=16,
    )
    # Then only the new entries go out, starting where the last run stopped
    again = jobs(claim_check)
    assert {j.run_id for j in again} == {"run2"}
    for key, seqs in covered(again).items():
        assert seqs == list(range(gw1[key] + 1, committed(deps)[key] + 1))

    # And a run with nothing new sends nothing
    report = publish_flushed(
        store, ClaimCheckSink(claim_check.publish_config()), heads(deps), committed(deps), run_id="r3", bucket="b"
    )
    assert report.jobs == 0 and jobs(claim_check) == []


def test_publishes_only_what_the_lake_committed(deps: GatewayDeps, store: FlushStore, claim_check: Any) -> None:
    # Given entries of which the delta log holds only the first 10 of a shard
    fill(deps, "gw1", 30)
    shard = next(s for s in heads(deps, ("gw1",)) if heads(deps)[s].seq > 10)
    marks = {**committed(deps), shard.key: 10}
    # When published
    publish_flushed(
        store,
        ClaimCheckSink(claim_check.publish_config()),
        heads(deps),
        marks,
        run_id="r",
        bucket=claim_check.bucket,
        publish_all=True,
    )
    # Then nothing beyond the watermark was published
    assert covered(jobs(claim_check))[shard.key] == list(range(1, 11))
    assert heads(deps)[shard].published_seq == 10


class CrashAfterFirst(Exception):
    pass


def test_a_crash_after_some_messages_leaves_the_rest_for_the_next_run(
    deps: GatewayDeps, store: FlushStore, claim_check: Any
) -> None:
    # Given entries, all published in small ranges, for a gateway with a destination
    add_destination(deps, "gw1")
    fill(deps, "gw1", 50)
    fill(deps, "gw1", 20, table="notes")
    expected = {s.key: list(range(1, h.seq + 1)) for s, h in heads(deps).items()}
    sink = ClaimCheckSink(claim_check.publish_config())

    def crash() -> None:
        raise CrashAfterFirst

    # When the run crashes right after its first message went out
    with pytest.raises(CrashAfterFirst):
        publish_flushed(
            store,
            sink,
            heads(deps),
            committed(deps),
            run_id="a",
            bucket=claim_check.bucket,
            range_size=8,
            threads=1,
            after_first_send=crash,
        )
    # Then no position moved
    assert {h.published_seq for h in heads(deps).values()} == {None}
    first = jobs(claim_check)
    assert len(first) >= 1

    # When the next run publishes
    publish_flushed(store, sink, heads(deps), committed(deps), run_id="b", bucket=claim_check.bucket, range_size=8)
    # Then every entry was published; the only repeats are the ranges the crashed run had sent (same key and bytes)
    second = jobs(claim_check)
    assert {k: sorted(set(v)) for k, v in covered(first + second).items()} == expected
    assert {(j.key, j.sha256) for j in first} <= {(j.key, j.sha256) for j in second}


class FlakySink:
    """A real sink whose payload writes fail for the ranges of one shard."""

    def __init__(self, inner: ClaimCheckSink, failing_shard: str) -> None:
        self.inner = inner
        self.failing = failing_shard
        self.reported: list[int] = []

    def put_payload(self, key: str, data: bytes) -> None:
        if f"/{self.failing}/" in key:
            raise OSError("S3 unavailable")
        self.inner.put_payload(key, data)

    def send(self, job: MaterialiseJob) -> None:
        self.inner.send(job)

    def report_failures(self, count: int) -> None:
        self.reported.append(count)


def test_a_failing_publish_never_raises_is_counted_and_is_retried_by_the_next_run(
    deps: GatewayDeps, store: FlushStore, claim_check: Any
) -> None:
    # Given two tables of a gateway with a destination, and payload writes failing for one
    add_destination(deps, "gw1")
    fill(deps, "gw1", 12)
    fill(deps, "gw1", 12, table="notes")
    sink = FlakySink(ClaimCheckSink(claim_check.publish_config()), "notes")
    expected = {s.key: list(range(1, h.seq + 1)) for s, h in heads(deps).items()}

    # When published
    report = publish_flushed(
        store, sink, heads(deps), committed(deps), run_id="a", bucket=claim_check.bucket, sleep=lambda _: None
    )
    # Then the run returned, reported the failed range for the alarm, and published the healthy table
    assert report.failed == 1 and sink.reported == [1]
    first = jobs(claim_check)
    assert {j.table for j in first} == {"todos"}
    notes = next(s for s in heads(deps) if s.table == "notes")
    assert heads(deps)[notes].published_seq is None

    # When the next run has a healthy sink
    publish_flushed(
        store, ClaimCheckSink(claim_check.publish_config()), heads(deps), committed(deps), run_id="b", bucket="x"
    )
    # Then the missing range went out and nothing else
    second = jobs(claim_check)
    assert {j.table for j in second} == {"notes"}
    assert covered(first + second) == expected
    assert json.loads(json.dumps(second[0].to_json()))["run"] == "b"
