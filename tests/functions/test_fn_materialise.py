"""The materialise function (functions/materialise.py) on the moto server: jobs published by the real producer from
a buffer filled by the real push service, applied to real destinations (SQLite files and a throwaway PostgreSQL).

Focus: rows equal the per-column LWW fold of the buffer; a poison message fails alone and reaches the DLQ after 5
receives while the rest of its batch succeeds; a missing or corrupt payload writes nothing; a payload S3 will not
serve fails its message alone; a destination that is down does not stop the others and catches up on redelivery; a
consumer that crashed mid-batch and is redelivered the batch ends where one clean delivery ends.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from functions import materialise as handler
from lakesync import sql
from lakesync.aws.action_store import DynamoDBActionStore
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.flush_store import FlushStore
from lakesync.aws.publish import ClaimCheckSink, publish_flushed
from lakesync.aws.settings.variables import CLAIM_CHECK_BUCKET, TABLE_VARS
from lakesync.core.delta import make_delta
from lakesync.core.destinations import parse_destination
from lakesync.core.hlc import HLC
from lakesync.core.merge import fold
from lakesync.core.messages import SyncPush
from lakesync.core.schema import TableSchema, parse_table_schema
from lakesync.gateway import admin
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.push import push
from lakesync.local.front import LambdaContext
from lakesync.local.materialiser import LocalMaterialiser, sqs_event
from tests.factories import schema_doc
from tests.sql.servers import Server, postgres_server  # noqa: F401 (fixture)

GATEWAY = "default"
SCHEMA = schema_doc("todos", title="string", n="number", done="boolean")


@pytest.fixture
def env(aws_env: None, monkeypatch: pytest.MonkeyPatch, dynamodb_tables: Any, claim_check: Any) -> Any:
    from functions._runtime import reset_runtime
    from lakesync import egress

    for kind, var in TABLE_VARS.items():
        monkeypatch.setenv(var, getattr(dynamodb_tables, kind))
    monkeypatch.setenv(CLAIM_CHECK_BUCKET, claim_check.bucket)
    # The test PostgreSQL listens on loopback: this test deployment allows it, as `lakesync local` does (the default
    # refusal is tested in tests/security/test_ssrf.py).
    monkeypatch.setenv("LAKESYNC_ALLOWED_NETWORKS", "127.0.0.0/8,::1/128")
    policy = egress.current()
    reset_runtime()
    yield
    reset_runtime()
    egress.configure(policy)


@pytest.fixture
def deps(dynamodb_client: Any, dynamodb_tables: Any) -> GatewayDeps:
    deps = GatewayDeps(
        buffer=DynamoDBBufferStore(dynamodb_client, dynamodb_tables),
        config=DynamoDBConfigStore(dynamodb_client, dynamodb_tables),
        actions=DynamoDBActionStore(dynamodb_client, dynamodb_tables),
        settings=GatewaySettings(gateway_ids=frozenset({GATEWAY})),
        clock=HLC(),
    )
    admin.save_schema(deps, GATEWAY, SCHEMA)
    return deps


@pytest.fixture
def schema() -> TableSchema:
    return parse_table_schema(SCHEMA)


def history(deps: GatewayDeps, count: int, *, start: int = 0, clients: tuple[str, ...] = ("a", "b", "c")) -> None:
    """Concurrent-looking edits by several clients: sparse updates of different columns, deletes, re-inserts."""
    clock = HLC()
    for client in clients:
        deltas = []
        for i in range(start, start + count):
            row = f"r{(i * 7 + len(client)) % 11}"
            hlc = clock.now()
            if i % 9 == 8:
                deltas.append(make_delta("DELETE", table="todos", row_id=row, client_id=client, hlc=hlc))
                continue
            cols: dict[str, Any] = {"title": f"{client}{i}"} if i % 3 else {"n": i, "done": i % 2 == 0}
            op = "INSERT" if i % 4 == 0 else "UPDATE"
            deltas.append(make_delta(op, table="todos", row_id=row, client_id=client, hlc=hlc, columns=cols))
        push(deps, GATEWAY, SyncPush(client, tuple(deltas)), client_id=client)


def expected_rows(deps: GatewayDeps, schema: TableSchema) -> dict[str, dict[str, Any]]:
    """The fold of every logged delta, projected onto the schema's columns (missing columns are NULL)."""
    by_row: dict[str, list[Any]] = {}
    for shard in deps.buffer.list_shards(GATEWAY):
        for entry in deps.buffer.read_log(shard, 0, 1_000_000):
            by_row.setdefault(entry.delta.row_id, []).append(entry.delta)
    out = {}
    for row_id, deltas in by_row.items():
        state = fold(deltas)
        values = None if state is None else state.values()
        if values is not None:
            out[row_id] = {c: values.get(c) for c in schema.column_names}
    return out


def publish(deps: GatewayDeps, claim_check: Any, dynamodb_client: Any, dynamodb_tables: Any, size: int = 10) -> Any:
    store = FlushStore(dynamodb_client, dynamodb_tables)
    shards = deps.buffer.list_shards(GATEWAY)
    heads = deps.buffer.get_heads(shards)
    publish_flushed(
        store,
        ClaimCheckSink(claim_check.publish_config()),
        heads,
        {s.key: h.seq for s, h in heads.items()},
        run_id="run",
        bucket=claim_check.bucket,
        range_size=size,
    )
    return claim_check.receive_all()


def add_destination(deps: GatewayDeps, name: str, url: str) -> None:
    kind = url.split(":", 1)[0].replace("postgresql", "postgres")
    deps.config.add_destination(GATEWAY, parse_destination({"name": name, "type": kind, "url": url}))


def invoke(messages: list[dict[str, Any]]) -> set[str]:
    """Run the handler on one batch; the message ids it reported as failed."""
    event = sqs_event(messages, "arn:aws:sqs:us-east-1:123456789012:materialise", "us-east-1")
    context = LambdaContext(
        function_name="materialise", aws_request_id="r", invoked_function_arn="arn", memory_limit_in_mb=1
    )
    response = handler.lambda_handler(event, context)
    return {f["itemIdentifier"] for f in response["batchItemFailures"]}


def rows_at(url: str, schema: TableSchema) -> dict[str, dict[str, Any]]:
    destination = sql.connect(url, name="check")
    try:
        return destination.rows(schema)
    finally:
        destination.close()


def sqlite_url(tmp_path: Path, name: str) -> str:
    return f"sqlite:///{tmp_path / name}"


def test_jobs_materialise_to_the_fold_in_every_destination(
    env: None,
    deps: GatewayDeps,
    schema: TableSchema,
    claim_check: Any,
    dynamodb_client: Any,
    dynamodb_tables: Any,
    tmp_path: Path,
    postgres_server: Server,  # noqa: F811
) -> None:
    # Given a SQLite and a PostgreSQL destination and a multi-client history, published in small jobs
    lite, pg = sqlite_url(tmp_path, "a.db"), postgres_server.url()
    add_destination(deps, "lite", lite)
    add_destination(deps, "pg", pg)
    history(deps, 40)
    messages = publish(deps, claim_check, dynamodb_client, dynamodb_tables)
    assert len(messages) > 3

    # When the function gets the jobs in reverse order, in batches of 4, one batch twice
    batches = [messages[::-1][i : i + 4] for i in range(0, len(messages), 4)]
    for batch in [*batches, batches[0]]:
        assert invoke(batch) == set()

    # Then both destinations hold exactly the fold of the buffer
    expected = expected_rows(deps, schema)
    assert rows_at(lite, schema) == expected
    assert rows_at(pg, schema) == expected


def test_a_poison_message_fails_alone_and_reaches_the_dlq_after_five_receives(
    env: None,
    deps: GatewayDeps,
    schema: TableSchema,
    claim_check: Any,
    dynamodb_client: Any,
    dynamodb_tables: Any,
    tmp_path: Path,
) -> None:
    # Given good jobs and a message that is not a job, on the real (moto) queue with its redrive policy
    url = sqlite_url(tmp_path, "a.db")
    add_destination(deps, "lite", url)
    history(deps, 20)
    messages = publish(deps, claim_check, dynamodb_client, dynamodb_tables)
    for message in messages:
        claim_check.sqs.send_message(QueueUrl=claim_check.queue_url, MessageBody=message["Body"])
    claim_check.sqs.send_message(QueueUrl=claim_check.queue_url, MessageBody='{"v": 1, "oops": true}')

    # When the local event source mapping polls until the queue is empty (failed messages retried at once)
    poller = LocalMaterialiser(claim_check.sqs, claim_check.queue_url, handler.lambda_handler, retry_visibility_s=0)
    receives = 0
    while poller.pending() and receives < 30:
        poller.poll_once(wait_s=0)
        receives += 1

    # Then the good jobs were applied, and the poison message sits in the DLQ after its 5 receives
    assert rows_at(url, schema) == expected_rows(deps, schema)
    dead = claim_check.receive_all(claim_check.dead_letter_url)
    assert [m["Body"] for m in dead] == ['{"v": 1, "oops": true}']
    assert poller.pending() == 0


@pytest.mark.parametrize("damage", ["missing", "corrupt", "other_range"])
def test_a_missing_or_corrupt_payload_fails_its_message_and_writes_nothing(
    env: None,
    deps: GatewayDeps,
    schema: TableSchema,
    claim_check: Any,
    dynamodb_client: Any,
    dynamodb_tables: Any,
    tmp_path: Path,
    damage: str,
) -> None:
    # Given one job whose payload is damaged
    url = sqlite_url(tmp_path, "a.db")
    add_destination(deps, "lite", url)
    history(deps, 5, clients=("a",))
    messages = publish(deps, claim_check, dynamodb_client, dynamodb_tables, size=1000)
    assert len(messages) == 1
    job = json.loads(messages[0]["Body"])
    bucket, key = job["payload"]["bucket"], job["payload"]["key"]
    if damage == "missing":
        claim_check.s3.delete_object(Bucket=bucket, Key=key)
    elif damage == "corrupt":
        data = bytearray(claim_check.s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        data[len(data) // 2] ^= 0xFF
        claim_check.s3.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    else:  # a well-formed payload of another range under this key: the checksum no longer matches
        messages[0]["Body"] = json.dumps({**job, "range": [job["range"][0] + 1, job["range"][1] + 1]})

    # When the function gets it
    failed = invoke(messages)

    # Then the message failed and the destination holds nothing
    assert failed == {messages[0]["MessageId"]}
    assert rows_at(url, schema) == {}


def test_a_payload_s3_will_not_serve_fails_its_message_alone(
    env: None,
    deps: GatewayDeps,
    schema: TableSchema,
    claim_check: Any,
    dynamodb_client: Any,
    dynamodb_tables: Any,
    tmp_path: Path,
) -> None:
    # Given a batch of jobs, one of whose payloads was archived to Glacier (S3 answers InvalidObjectState, not 404)
    url = sqlite_url(tmp_path, "a.db")
    add_destination(deps, "lite", url)
    history(deps, 12)
    messages = publish(deps, claim_check, dynamodb_client, dynamodb_tables, size=6)
    assert len(messages) >= 3
    cold = messages[1]
    bucket, key = claim_check.bucket, _payload_key(cold)
    original = claim_check.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    claim_check.s3.put_object(Bucket=bucket, Key=key, Body=original, StorageClass="GLACIER")

    # When the function gets the batch
    failed = invoke(messages)

    # Then only that job's message is reported failed (the others are not redelivered with it)
    assert failed == {cold["MessageId"]}
    # And once the payload is readable again, its redelivery completes the fold
    claim_check.s3.put_object(Bucket=bucket, Key=key, Body=original)
    assert invoke([cold]) == set()
    assert rows_at(url, schema) == expected_rows(deps, schema)


def _payload_key(message: dict[str, Any]) -> str:
    return str(json.loads(message["Body"])["payload"]["key"])


def test_a_destination_that_is_down_does_not_stop_the_others_and_catches_up(
    env: None,
    deps: GatewayDeps,
    schema: TableSchema,
    claim_check: Any,
    dynamodb_client: Any,
    dynamodb_tables: Any,
    tmp_path: Path,
    postgres_server: Server,  # noqa: F811
) -> None:
    # Given a healthy SQLite destination and a PostgreSQL destination whose database does not exist yet
    lite = sqlite_url(tmp_path, "a.db")
    missing_db = f"later_{tmp_path.name[-8:].lower().replace('-', '_')}"
    pg = f"postgresql://{postgres_server.user}@{postgres_server.host}:{postgres_server.port}/{missing_db}"
    add_destination(deps, "lite", lite)
    add_destination(deps, "pg", pg)
    history(deps, 15)
    messages = publish(deps, claim_check, dynamodb_client, dynamodb_tables)

    # When the function gets the jobs
    failed = invoke(messages)

    # Then every job failed (for pg), but SQLite holds the fold
    assert failed == {m["MessageId"] for m in messages}
    expected = expected_rows(deps, schema)
    assert rows_at(lite, schema) == expected

    # When the database comes up and the jobs are redelivered
    postgres_server.create_database(missing_db)
    assert invoke(messages) == set()

    # Then PostgreSQL caught up, and SQLite did not change
    assert rows_at(pg, schema) == expected
    assert rows_at(lite, schema) == expected


def test_a_consumer_crash_mid_batch_then_redelivery_ends_as_one_clean_delivery(
    env: None,
    deps: GatewayDeps,
    schema: TableSchema,
    claim_check: Any,
    dynamodb_client: Any,
    dynamodb_tables: Any,
    tmp_path: Path,
) -> None:
    # Given jobs for two destinations
    crashed, clean = sqlite_url(tmp_path, "crashed.db"), sqlite_url(tmp_path, "clean.db")
    add_destination(deps, "crashed", crashed)
    history(deps, 30)
    messages = publish(deps, claim_check, dynamodb_client, dynamodb_tables, size=7)

    # When the consumer processed part of the batch and died before answering (nothing acknowledged) ...
    invoke(messages[: len(messages) // 2])
    # ... and SQS redelivers the whole batch
    assert invoke(messages) == set()

    # Then the destination equals one that got the batch once, and the fold
    deps.config.remove_destination(GATEWAY, "crashed")
    add_destination(deps, "clean", clean)
    from functions._runtime import reset_runtime

    reset_runtime()
    assert invoke(messages) == set()
    assert rows_at(crashed, schema) == rows_at(clean, schema) == expected_rows(deps, schema)


def test_a_job_for_a_table_without_schema_is_acknowledged_and_skipped(
    env: None, deps: GatewayDeps, claim_check: Any, dynamodb_client: Any, dynamodb_tables: Any, tmp_path: Path
) -> None:
    url = sqlite_url(tmp_path, "a.db")
    add_destination(deps, "lite", url)
    clock = HLC()
    delta = make_delta("INSERT", table="notes", row_id="n1", client_id="a", hlc=clock.now(), columns={"x": 1})
    push(deps, GATEWAY, SyncPush("a", (delta,)), client_id="a")
    messages = publish(deps, claim_check, dynamodb_client, dynamodb_tables)
    assert invoke(messages) == set()
    path = Path(url.removeprefix("sqlite:///"))
    if path.exists():
        with sqlite3.connect(path) as db:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "notes" not in tables
