"""Rebuilding a gateway's buffer from the lake (issue 44, item 1; lakesync.lake.restore_job over
lakesync.gateway.restore): pushes through the gateway on the moto server's DynamoDB, the flush on pyiceberg into a
sqlite-catalog lake, then a restore into empty tables. The restored row index equals the old one and the fold of
every delta pushed, for every table (random histories); after a restore of a buffer that lost unflushed deltas, the
report names them, an old cursor and a cursor-less pull get 410, an old ``since`` session is resynced from the
checkpoint the restore cut, and a client re-bootstrapped from it converges once the outboxes push again.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.config_store import DynamoDBConfigStore, DynamoDBPullBasisReader
from lakesync.aws.flush_store import DynamoConfig, FlushStore
from lakesync.aws.objects import S3ObjectStore
from lakesync.aws.since_sessions import DynamoDBSinceSessions
from lakesync.aws.table_setup import create_tables
from lakesync.aws.tables import TableNames
from lakesync.cli import main
from lakesync.core.checkpoint import load_manifest
from lakesync.core.delta import RowDelta, make_delta
from lakesync.core.errors import CursorExpiredError, GatewayRestoringError
from lakesync.core.hlc import encode
from lakesync.core.log import ShardId, StoredRow
from lakesync.core.merge import RowState, fold, merge
from lakesync.core.messages import SyncPush
from lakesync.core.restore import RestoreTargetNotEmptyError, UnflushedDataError
from lakesync.core.rules import Bucket, SyncRules
from lakesync.gateway.checkpoint import chunk_rows
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import InMemoryActionStore
from lakesync.gateway.pull import pull
from lakesync.gateway.push import push
from lakesync.lake.catalog import local_catalog
from lakesync.lake.flush import FlushConfig, run_flush
from lakesync.lake.iceberg_flush import IcebergDeltaLog
from lakesync.lake.restore_job import restore_buffer
from lakesync.lake.restore_reader import IcebergLakeReader
from tests.conftest import FAKE_AWS

Key = tuple[str, str]


class World:
    """A gateway on buffer tables (fresh unless ``names`` are given), its lake in ``lake_dir``, a checkpoint bucket."""

    def __init__(
        self,
        endpoint: str,
        lake_dir: Path,
        names: TableNames | None = None,
        objects: S3ObjectStore | None = None,
    ) -> None:
        self.client = boto3.client("dynamodb", endpoint_url=endpoint, **FAKE_AWS)
        suffix = uuid.uuid4().hex[:10]
        if objects is None:
            s3 = boto3.client("s3", endpoint_url=endpoint, **FAKE_AWS)
            s3.create_bucket(Bucket=f"ckpt-{suffix}")
            objects = S3ObjectStore(f"ckpt-{suffix}", s3)
        self.objects = objects
        if names is None:
            names = TableNames.with_prefix(f"r{suffix}")
            create_tables(self.client, names)
        self.names = names
        self.gw = f"gw-{suffix}"
        self.lake_dir = lake_dir
        self.catalog = local_catalog(lake_dir / "catalog.db", lake_dir / "warehouse")
        self.pushed: list[RowDelta] = []
        self.deps = self.gateway()

    def gateway(self) -> GatewayDeps:
        """A gateway over the tables, with nothing cached from an earlier one."""
        return GatewayDeps(
            buffer=DynamoDBBufferStore(self.client, self.names),
            config=DynamoDBConfigStore(self.client, self.names),
            actions=InMemoryActionStore(),
            settings=GatewaySettings(gateway_ids=frozenset({self.gw})),
            objects=self.objects,
            pull_basis=DynamoDBPullBasisReader(self.client, self.names),
            since_sessions=DynamoDBSinceSessions(self.client, self.names),
        )

    def push(self, client_id: str, deltas: list[RowDelta]) -> None:
        push(self.deps, self.gw, SyncPush(client_id, tuple(deltas)), client_id=client_id)
        self.pushed.extend(deltas)

    def flush(self) -> None:
        store = FlushStore(self.client, self.names)
        config = FlushConfig(DynamoConfig(self.names), gateways=(self.gw,))
        run_flush(IcebergDeltaLog(self.catalog, config, reader=store.read_records), config, store=store)

    def rows(self, names: TableNames, keys: set[Key]) -> dict[Key, StoredRow]:
        return DynamoDBBufferStore(self.client, names).get_rows(self.gw, sorted(keys))

    def restore(self, into: TableNames, **kwargs: Any) -> Any:
        lake = IcebergLakeReader(self.catalog)
        # No wait for serving processes to forget the old log: this gateway's are made anew (`gateway`) after it.
        kwargs.setdefault("settle_s", 0)
        (report,) = restore_buffer(self.client, into, lake, [self.gw], objects=self.objects, **kwargs)
        return report


def folded(deltas: list[RowDelta]) -> dict[Key, RowState | None]:
    keys = {(d.table, d.row_id) for d in deltas}
    return {k: fold(d for d in deltas if (d.table, d.row_id) == k) for k in keys}


def delta(client: str, table: str, row: str, op: str, columns: dict[str, Any], wall: int) -> RowDelta:
    return make_delta(op, table=table, row_id=row, client_id=client, hlc=encode(wall, 0), columns=columns)


_OPS = st.tuples(
    st.sampled_from(["a", "b"]),
    st.sampled_from(["todos", "notes"]),
    st.sampled_from(["r0", "r1", "r2"]),
    st.sampled_from(["INSERT", "UPDATE", "DELETE"]),
    st.dictionaries(st.sampled_from(["x", "y"]), st.integers(-3, 3), min_size=1),
    st.integers(0, 40),
)


@pytest.fixture(scope="module")
def shared(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[World, TableNames]:
    """Buffer tables, a lake and a bucket the examples share (each example is a gateway of its own), and tables to
    restore into."""
    world = World(moto_endpoint, tmp_path_factory.mktemp("lake"))
    into = TableNames.with_prefix(f"n{uuid.uuid4().hex[:10]}")
    create_tables(world.client, into)
    return world, into


# Few examples, and no shrinking: each example is a gateway, a flushed lake and a restore.
@settings(
    max_examples=3,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow],
)
@given(history=st.lists(_OPS, min_size=1, max_size=16), split=st.integers(0, 16))
def test_the_restored_row_index_equals_the_old_one_and_the_fold_of_the_lake(
    moto_endpoint: str, shared: tuple[World, TableNames], history: list[tuple[Any, ...]], split: int
) -> None:
    # Given a random history pushed through a new gateway and flushed in two runs (the lake holds other gateways)
    base, into = shared
    world = World(moto_endpoint, base.lake_dir, base.names, base.objects)
    wall = int(time.time() * 1000) - 60_000
    deltas = [delta(c, t, r, op, cols if op != "DELETE" else {}, wall + dt) for c, t, r, op, cols, dt in history]
    for i, d in enumerate(deltas):
        world.push(d.client_id, [d])
        if i + 1 == split:
            world.flush()
    world.flush()
    keys = set(folded(deltas))
    old = world.rows(world.names, keys)
    old_store = DynamoDBBufferStore(world.client, world.names)
    shards = old_store.list_shards(world.gw)
    old_heads = old_store.get_heads(shards)

    # When the buffer is restored from the lake into tables holding nothing of the gateway
    report = world.restore(into, old=world.names)

    # Then every row (state, version, recent dedup keys) is the old row index's, and its state the fold of the
    # deltas pushed; every shard is registered at its old position, flushed and released there
    restored = world.rows(into, keys)
    assert restored == old
    assert {k: r.state for k, r in restored.items()} == folded(deltas)
    store = DynamoDBBufferStore(world.client, into)
    assert store.list_shards(world.gw) == shards
    heads = store.get_heads(shards)
    for shard, head in heads.items():
        assert head.seq == head.flushed_seq == head.released_seq == old_heads[shard].seq
        assert head.deltas_total == old_heads[shard].deltas_total
        assert head.bytes_total == old_heads[shard].bytes_total
        assert head.released_hlc == head.last_commit_hlc == report.restore_hlc
    assert report.at_risk.known and report.at_risk.deltas == 0
    assert report.rows == len(keys)
    assert sum(t.deleted for t in report.tables.values()) == sum(1 for r in old.values() if not r.state.exists)


def replica_from_checkpoint(world: World) -> tuple[dict[Key, RowState], str]:
    manifest = load_manifest(world.objects.get, world.gw)
    assert manifest is not None
    replica: dict[Key, RowState] = {}
    for info in manifest.chunks:
        for row in chunk_rows(world.objects, info):
            for d in row:
                apply(replica, d)
    return replica, manifest.cursor


def apply(replica: dict[Key, RowState], d: RowDelta) -> None:
    key = (d.table, d.row_id)
    replica[key] = merge(replica.get(key), d).state


def pull_all(world: World, replica: dict[Key, RowState], cursor: str) -> str:
    while True:
        page = pull(world.deps, world.gw, limit=100, claims={"sub": "c"}, cursor=cursor)
        for d in page.deltas:
            apply(replica, d)
        assert page.cursor is not None
        cursor = page.cursor
        if not page.has_more:
            return cursor


def test_after_a_restore_old_positions_get_410_and_clients_converge_from_its_checkpoint(
    moto_endpoint: str, tmp_path: Path
) -> None:
    # Given rules, rows of two clients flushed, a cursor and a since session from before, then two deltas never
    # flushed
    world = World(moto_endpoint, tmp_path)
    rules = SyncRules(1, (Bucket("all", ("todos",)),))
    world.deps.config.put_sync_rules(world.gw, rules)
    wall = int(time.time() * 1000) - 60_000
    first = [delta("a", "todos", f"r{i}", "INSERT", {"x": i}, wall + i) for i in range(5)]
    world.push("a", first)
    world.push("b", [delta("b", "todos", "r1", "UPDATE", {"y": "b"}, wall + 10)])
    old_cursor = pull(world.deps, world.gw, limit=100, claims={"sub": "c"}).cursor
    session = pull(world.deps, world.gw, limit=100, claims={"sub": "s"}, since=0, client_id="s")
    world.flush()
    outbox = [
        delta("a", "todos", "r0", "UPDATE", {"x": 100}, wall + 20),
        delta("a", "todos", "r9", "INSERT", {"x": 9}, wall + 21),
    ]
    world.push("a", outbox)
    shard = ShardId(world.gw, "todos").key

    # When the buffer is restored over itself (read, dropped, created again)
    report = world.restore(world.names, replace=True, lose_unflushed=True)

    # Then the report names the two lost deltas, and the rules came back
    assert report.at_risk.known and report.at_risk.deltas == 2
    (risk,) = report.at_risk.shards
    assert (risk.shard, risk.first_seq, risk.last_seq) == (shard, 7, 8) and risk.oldest_commit_ms is not None
    assert report.config.kinds == {"sync rules": 1} and report.checkpoint_id is not None
    assert report.to_json()["atRisk"]["deltas"] == 2
    assert any("LOST: 2 deltas in 1 shards" in line for line in report.lines())
    world.deps = world.gateway()
    assert world.deps.config.get_sync_rules(world.gw) == rules
    # And the old cursor and a pull without one get 410; the old since session is resynced from the checkpoint
    with pytest.raises(CursorExpiredError):
        pull(world.deps, world.gw, limit=100, claims={"sub": "c"}, cursor=old_cursor)
    with pytest.raises(CursorExpiredError):
        pull(world.deps, world.gw, limit=100, claims={"sub": "c"})
    resync = pull(world.deps, world.gw, limit=100, claims={"sub": "s"}, since=session.server_hlc, client_id="s")
    assert {d.row_id for d in resync.deltas} == {f"r{i}" for i in range(5)}

    # When a client re-bootstraps from the checkpoint, and the outboxes push again (a flushed delta among them)
    replica, cursor = replica_from_checkpoint(world)
    cursor = pull_all(world, replica, cursor)
    seq_before = world.deps.buffer.get_heads([ShardId.parse(shard)])[ShardId.parse(shard)].seq
    world.push("a", first[:1])
    assert world.deps.buffer.get_heads([ShardId.parse(shard)])[ShardId.parse(shard)].seq == seq_before
    world.push("a", outbox)
    world.push("b", [delta("b", "todos", "r2", "UPDATE", {"y": "late"}, wall + 30)])
    pull_all(world, replica, cursor)

    # Then the replica, the server's row index and the fold of every delta pushed agree
    expected = folded(world.pushed)
    assert replica == expected
    assert {k: r.state for k, r in world.rows(world.names, set(expected)).items()} == expected
    # And the flush goes on from the restored position: the lake then holds the new entries too
    world.flush()
    head = world.deps.buffer.get_heads([ShardId.parse(shard)])[ShardId.parse(shard)]
    assert head.flushed_seq == head.seq == 9
    assert IcebergLakeReader(world.catalog).watermarks()[shard] == 9
    lake = folded([e.delta for e in IcebergLakeReader(world.catalog).entries(world.gw)])
    assert lake == {k: v for k, v in expected.items() if k[0] == "todos"}


def test_the_command_says_when_no_local_stack_ran_on_the_data_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["restore", "--data-dir", str(tmp_path), "--gw", "default"]) == 2
    assert "start `lakesync local" in capsys.readouterr().err


def test_the_command_restores_the_buffer_of_a_data_directory_over_itself(
    moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a data directory whose profile points at the moto server, its lake holding three flushed rows and its
    # buffer one more delta
    names = TableNames.with_prefix(f"l{uuid.uuid4().hex[:10]}")
    create_tables(boto3.client("dynamodb", endpoint_url=moto_endpoint, **FAKE_AWS), names)
    world = World(moto_endpoint, tmp_path / "lake", names)
    monkeypatch.setattr("lakesync.local.restore.TABLE_PREFIX", names.deltas.removesuffix("-deltas"))
    monkeypatch.setattr("lakesync.local.restore.CHECKPOINT_BUCKET", world.objects.bucket)
    (tmp_path / "aws-config").write_text(
        "[profile lakesync-local]\n"
        f"endpoint_url = {moto_endpoint}\nregion = {FAKE_AWS['region_name']}\n"
        f"aws_access_key_id = {FAKE_AWS['aws_access_key_id']}\n"
        f"aws_secret_access_key = {FAKE_AWS['aws_secret_access_key']}\n"
    )
    wall = int(time.time() * 1000) - 60_000
    flushed = [delta("a", "todos", f"r{i}", "INSERT", {"x": i}, wall + i) for i in range(3)]
    world.push("a", flushed)
    world.flush()
    world.push("a", [delta("a", "todos", "r0", "UPDATE", {"x": 9}, wall + 5)])
    command = ["restore", "--data-dir", str(tmp_path), "--gw", world.gw, "--json"]

    # When it is restored without --replace, it is refused: the tables hold the gateway
    assert main(command) == 1
    assert "--replace" in capsys.readouterr().err

    # When it is restored with --replace, it is refused too: the buffer holds a delta the lake does not
    assert main([*command, "--replace"]) == 1
    assert "--lose-unflushed" in capsys.readouterr().err

    # When that loss is accepted
    assert main([*command, "--replace", "--lose-unflushed"]) == 0

    # Then the report names the rows and the lost delta, and the row index is the lake's fold
    (report,) = json.loads(capsys.readouterr().out)
    assert (report["gateway"], report["rows"], report["atRisk"]["deltas"]) == (world.gw, 3, 1)
    keys = {("todos", f"r{i}") for i in range(3)}
    assert {k: r.state for k, r in world.rows(names, keys).items()} == folded(flushed)


def test_the_command_restores_a_deployed_stack_configured_as_its_flush_function(
    moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a lake of three rows, the old tables, and new empty tables named by the flush function's environment
    world = World(moto_endpoint, tmp_path / "lake")
    wall = int(time.time() * 1000) - 60_000
    flushed = [delta("a", "notes", f"n{i}", "INSERT", {"x": i}, wall + i) for i in range(3)]
    world.push("a", flushed)
    world.flush()
    new = f"d{uuid.uuid4().hex[:10]}"
    environment = {
        "LAKESYNC_TABLE_PREFIX": new,
        "LAKESYNC_GATEWAY_IDS": world.gw,
        "LAKESYNC_LAKE_CATALOG": "local",
        "LAKESYNC_LAKE_CATALOG_URI": str(tmp_path / "lake" / "catalog.db"),
        "LAKESYNC_LAKE_WAREHOUSE": str(tmp_path / "lake" / "warehouse"),
        "LAKESYNC_CHECKPOINT_BUCKET": world.objects.bucket,
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_REGION": FAKE_AWS["region_name"],
        "AWS_ACCESS_KEY_ID": FAKE_AWS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": FAKE_AWS["aws_secret_access_key"],
    }
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    old = world.names.deltas.removesuffix("-deltas")

    # When it is restored with --env, reading the old tables first
    assert main(["restore", "--env", "--gw", world.gw, "--old-table-prefix", old, "--json"]) == 0

    # Then the new tables hold the lake's fold, nothing was at risk, and the gateway's checkpoint is the restore's
    (report,) = json.loads(capsys.readouterr().out)
    assert (report["rows"], report["atRisk"]["known"], report["atRisk"]["deltas"]) == (3, True, 0)
    keys = {("notes", f"n{i}") for i in range(3)}
    assert {k: r.state for k, r in world.rows(TableNames.with_prefix(new), keys).items()} == folded(flushed)
    manifest = load_manifest(world.objects.get, world.gw)
    assert manifest is not None and manifest.checkpoint_id == report["checkpointId"]


def test_clearing_finds_the_buffer_tables_among_more_than_a_page_of_tables(dynamodb_client: Any) -> None:
    from lakesync.aws.buffer_restore import clear_tables
    from lakesync.lake.restore_job import registered_gateways

    # Given more tables than ListTables names in one page (100), then the buffer's tables, with an item in them
    others = [f"x{uuid.uuid4().hex[:8]}-{i:03}" for i in range(101)]
    for name in others:
        dynamodb_client.create_table(
            TableName=name,
            KeySchema=[{"AttributeName": "k", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "k", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    names = TableNames.with_prefix(f"t{uuid.uuid4().hex[:10]}")
    create_tables(dynamodb_client, names)
    try:
        dynamodb_client.put_item(TableName=names.config, Item={"gw": {"S": "g1"}, "sk": {"S": "shard#todos#0"}})
        # Then the config table is found and cleared, whichever page names it
        assert registered_gateways(dynamodb_client, names) == {"g1"}
        assert clear_tables(dynamodb_client, names) >= 1
        assert dynamodb_client.scan(TableName=names.config)["Items"] == []
    finally:
        for name in others:
            dynamodb_client.delete_table(TableName=name)


def test_while_a_restore_holds_the_gateway_pushes_and_pulls_are_refused_and_served_again_after(
    moto_endpoint: str, tmp_path: Path
) -> None:
    from lakesync.aws.buffer_restore import DynamoDBRestoreTarget

    # Given a gateway with a row, and a restore's mark on it
    world = World(moto_endpoint, tmp_path)
    wall = int(time.time() * 1000) - 60_000
    world.push("a", [delta("a", "todos", "r0", "INSERT", {"x": 0}, wall)])
    target = DynamoDBRestoreTarget(world.client, world.names)
    target.hold(world.gw, started_ms=wall)

    # Then a push, a cursor pull and a since pull are refused as retryable (503), and nothing was written
    late = [delta("a", "todos", "r1", "INSERT", {"x": 1}, wall + 1)]
    for call in (
        lambda: world.push("a", late),
        lambda: pull(world.deps, world.gw, limit=10, claims={"sub": "c"}),
        lambda: pull(world.deps, world.gw, limit=10, claims={"sub": "s"}, since=0, client_id="s"),
    ):
        with pytest.raises(GatewayRestoringError) as refused:
            call()
        assert (refused.value.status, refused.value.api_code) == (503, "BACKPRESSURE_ERROR")
    assert world.rows(world.names, {("todos", "r1")}) == {}
    # And a second restore is refused while the mark is there
    with pytest.raises(RestoreTargetNotEmptyError, match="another restore"):
        target.hold(world.gw, started_ms=wall + 5)

    # When the mark goes, both are served again
    target.release(world.gw)
    world.push("a", late)
    assert {d.row_id for d in pull(world.deps, world.gw, limit=10, claims={"sub": "c"}).deltas} == {"r0", "r1"}


def test_a_restore_refused_before_it_wrote_leaves_the_gateway_serving(moto_endpoint: str, tmp_path: Path) -> None:
    # Given a gateway whose buffer holds a delta the lake does not
    world = World(moto_endpoint, tmp_path)
    wall = int(time.time() * 1000) - 60_000
    world.push("a", [delta("a", "todos", "r0", "INSERT", {"x": 0}, wall)])
    world.flush()
    world.push("a", [delta("a", "todos", "r1", "INSERT", {"x": 1}, wall + 1)])

    # When a restore over the tables is refused (without --replace: they hold it; with it: it would lose a delta)
    with pytest.raises(RestoreTargetNotEmptyError):
        world.restore(world.names)
    with pytest.raises(UnflushedDataError):
        world.restore(world.names, replace=True)

    # Then the gateway serves as before: no mark is left behind, nothing was cleared
    world.push("a", [delta("a", "todos", "r2", "INSERT", {"x": 2}, wall + 2)])
    served = pull(world.deps, world.gw, limit=10, claims={"sub": "c"}).deltas
    assert [d.row_id for d in served] == ["r0", "r1", "r2"]


def test_a_process_that_served_the_old_log_serves_none_of_it_after_the_restore(
    moto_endpoint: str, tmp_path: Path
) -> None:
    from lakesync.lake.restore_job import SETTLE_S

    # Given a serving process (the world's gateway) that paged a client through entries never flushed, and so
    # remembers their chunk
    world = World(moto_endpoint, tmp_path)
    wall = int(time.time() * 1000) - 60_000
    world.push("a", [delta("a", "todos", f"r{i}", "INSERT", {"x": i}, wall + i) for i in range(3)])
    at_flush = pull(world.deps, world.gw, limit=100, claims={"sub": "c"}).cursor
    world.flush()
    world.push("a", [delta("a", "todos", "lost", "INSERT", {"x": 9}, wall + 5)])
    assert [d.row_id for d in pull(world.deps, world.gw, limit=100, claims={}, cursor=at_flush).deltas] == ["lost"]

    # When the buffer is restored under it (the lost entry with it), and a new commit takes the lost one's position
    world.restore(world.names, replace=True, lose_unflushed=True, settle_s=SETTLE_S)
    world.push("a", [delta("a", "todos", "new", "INSERT", {"x": 1}, wall + 6)])

    # Then the client's cursor from before gets 410 from that same process, not the entry the lake never had
    with pytest.raises(CursorExpiredError):
        pull(world.deps, world.gw, limit=100, claims={}, cursor=at_flush)
