"""Admin services (lakesync.gateway.admin) on the in-memory adapters: sync-rules validation and storage, schema
save / safe evolution / versions (including a lost race re-checked against the winner), flush requests, buffer
metrics whose figures add up to the shard heads, and materialisation destinations (register, list, unregister; 400,
409 and 404 without storing anything or echoing a credential)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from lakesync.core.delta import make_delta
from lakesync.core.errors import (
    AlreadyExistsError,
    CommitConflictError,
    NotFoundError,
    SchemaDefinitionError,
    SyncRuleError,
    ValidationError,
)
from lakesync.core.hlc import HLC, encode
from lakesync.core.log import Commit, CommitConflict
from lakesync.core.messages import SyncPush
from lakesync.core.schema import TableSchema
from lakesync.gateway import admin
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import InMemoryActionStore, InMemoryBufferStore, InMemoryConfigStore
from lakesync.gateway.push import push
from tests.factories import T0, schema_doc

GW = "default"

RULES = {
    "version": 1,
    "buckets": [
        {"name": "mine", "tables": ["todos"], "filters": [{"column": "user_id", "op": "eq", "value": "jwt:sub"}]},
        {"name": "public", "tables": [], "filters": []},
    ],
}


def _deps(config: Any = None, **settings: Any) -> GatewayDeps:
    return GatewayDeps(
        buffer=InMemoryBufferStore(),
        config=config if config is not None else InMemoryConfigStore(),
        actions=InMemoryActionStore(),
        settings=GatewaySettings(**settings),
        clock=HLC(lambda: T0),
        wall_ms=lambda: T0,
    )


# -- sync rules --------------------------------------------------------------------------------------------------


def test_admin_sync_rules_are_validated_stored_and_read_back() -> None:
    deps = _deps()
    assert admin.get_sync_rules(deps, GW) == {"version": 1, "buckets": []}

    assert admin.save_sync_rules(deps, GW, RULES) == {"saved": True}

    assert admin.get_sync_rules(deps, GW) == RULES
    assert admin.get_sync_rules(deps, "other") == {"version": 1, "buckets": []}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "Sync rules version must be a positive integer"),
        ({"version": 0, "buckets": []}, "Sync rules version must be a positive integer"),
        ({"version": 1}, "Sync rules buckets must be an array"),
        (
            {
                "version": 1,
                "buckets": [{"name": "a", "tables": [], "filters": [{"column": "x", "op": "like", "value": "1"}]}],
            },
            'Bucket "a" filter at index 0 op must be one of: eq, in, neq, gt, lt, gte, lte',
        ),
        ({"version": 1, "buckets": [{"name": "a", "tables": [], "filters": []}] * 2}, 'Duplicate bucket name: "a"'),
    ],
    ids=["not_object", "version_zero", "no_buckets", "bad_op", "duplicate_bucket"],
)
def test_admin_invalid_sync_rules_are_refused_and_the_stored_rules_kept(document: object, message: str) -> None:
    deps = _deps()
    admin.save_sync_rules(deps, GW, RULES)
    with pytest.raises(SyncRuleError) as err:
        admin.save_sync_rules(deps, GW, document)
    assert err.value.message == message
    assert err.value.status == 400
    assert admin.get_sync_rules(deps, GW) == RULES


# -- schemas -----------------------------------------------------------------------------------------------------


def test_admin_schema_save_and_safe_evolution_bump_the_version_only_on_change() -> None:
    deps = _deps()
    v1 = schema_doc(title="string")
    v2 = schema_doc(done="boolean", title="string")  # adds a column and reorders

    assert admin.save_schema(deps, GW, v1) == {"saved": True, "table": "todos", "version": 1}
    assert admin.save_schema(deps, GW, v1) == {"saved": True, "table": "todos", "version": 1}
    assert admin.save_schema(deps, GW, v2) == {"saved": True, "table": "todos", "version": 2}
    assert admin.save_schema(deps, GW, schema_doc("notes", n="number"))["version"] == 1

    assert admin.list_schemas(deps, GW) == {
        "schemas": [
            {"version": 1, "schema": schema_doc("notes", n="number")},
            {"version": 2, "schema": v2},
        ]
    }


@pytest.mark.parametrize(
    ("proposed", "message"),
    [
        (schema_doc(title="string"), 'Cannot remove column "done" — only adding nullable columns is supported'),
        (
            schema_doc(title="number", done="boolean"),
            'Cannot change type of column "title" from "string" to "number"',
        ),
    ],
    ids=["remove_column", "change_type"],
)
def test_admin_unsafe_schema_evolution_is_refused_and_the_version_kept(proposed: dict[str, Any], message: str) -> None:
    deps = _deps()
    admin.save_schema(deps, GW, schema_doc(title="string", done="boolean"))
    with pytest.raises(SchemaDefinitionError) as err:
        admin.save_schema(deps, GW, proposed)
    assert err.value.message == message
    assert err.value.status == 400
    assert admin.list_schemas(deps, GW)["schemas"] == [
        {"version": 1, "schema": schema_doc(title="string", done="boolean")}
    ]


def test_admin_invalid_schema_document_is_refused() -> None:
    deps = _deps()
    with pytest.raises(SchemaDefinitionError, match="Missing required fields"):
        admin.save_schema(deps, GW, {"table": "todos"})
    assert admin.list_schemas(deps, GW) == {"schemas": []}


@pytest.mark.parametrize(
    "document",
    [
        {"table": "_lakesync_provenance", "columns": [{"name": "who", "type": "string"}]},
        {"table": "audit", "sourceTable": "_LAKESYNC_provenance", "columns": [{"name": "who", "type": "string"}]},
    ],
)
def test_admin_the_engines_own_tables_cannot_be_given_a_schema(document: dict[str, Any]) -> None:
    deps = _deps()
    with pytest.raises(SchemaDefinitionError, match="engine's own"):
        admin.save_schema(deps, GW, document)
    assert admin.list_schemas(deps, GW) == {"schemas": []}


class RacingConfig(InMemoryConfigStore):
    """A config store where a rival saves a schema right before each of our first ``times`` writes."""

    def __init__(self, rival_schemas: list[TableSchema], times: int) -> None:
        super().__init__()
        self.rival_schemas = rival_schemas
        self.times = times
        self.attempts = 0

    def put_schema(self, gateway: str, schema: TableSchema, version: int, expected_version: int) -> None:
        self.attempts += 1
        if self.attempts <= self.times:
            rival = self.rival_schemas[(self.attempts - 1) % len(self.rival_schemas)]
            current = self.get_schemas(gateway).get(rival.table)
            current_version = current[1] if current else 0
            super().put_schema(gateway, rival, current_version + 1, current_version)
        super().put_schema(gateway, schema, version, expected_version)


def test_admin_schema_save_that_loses_a_race_is_rechecked_against_the_winner() -> None:
    # Given a rival that adds column "b" just before our save, which adds "c" to the original (a)
    rival = TableSchema.from_json(schema_doc(a="string", b="string"))
    config = RacingConfig([rival], times=1)
    deps = _deps(config)
    config.times = 0
    admin.save_schema(deps, GW, schema_doc(a="string"))
    config.times, config.attempts = 1, 0

    # Then our save is re-checked against the winner and refused, since it would remove "b"
    with pytest.raises(SchemaDefinitionError, match='Cannot remove column "b"'):
        admin.save_schema(deps, GW, schema_doc(a="string", c="string"))
    assert config.get_schemas(GW)["todos"] == (rival, 2)

    # And a save that keeps the winner's columns succeeds on top of it after losing one race
    rival2 = TableSchema.from_json(schema_doc(a="string", b="string", x="json"))
    config.rival_schemas, config.times, config.attempts = [rival2], 1, 0
    result = admin.save_schema(deps, GW, schema_doc(a="string", b="string", x="json", c="number"))
    assert result == {"saved": True, "table": "todos", "version": 4}
    assert config.attempts == 2


def test_admin_schema_save_losing_every_race_is_a_commit_conflict() -> None:
    rivals = [
        TableSchema.from_json(schema_doc(a="string", **{f"r{j}": "string" for j in range(i + 1)})) for i in range(10)
    ]
    config = RacingConfig(rivals, times=100)
    deps = _deps(config)
    with pytest.raises(CommitConflictError) as err:
        admin.save_schema(deps, GW, schema_doc(a="string", **{f"r{j}": "string" for j in range(10)}, z="json"))
    assert err.value.status == 503
    assert config.attempts == 5


def test_admin_stored_schema_is_enforced_on_push() -> None:
    deps = _deps()
    admin.save_schema(deps, GW, schema_doc(title="string"))
    delta = make_delta("INSERT", table="todos", row_id="r", client_id="c", hlc=encode(T0, 0), columns={"x": 1})
    from lakesync.core.errors import SchemaError

    with pytest.raises(SchemaError, match="Schema version 1 does not include this column"):
        push(deps, GW, SyncPush("c", (delta,)), client_id="c")


# -- flush requests and metrics ----------------------------------------------------------------------------------


def test_admin_flush_request_is_recorded_for_the_flush_job() -> None:
    deps = _deps()
    first = admin.request_flush(deps, GW, requested_by="ops@example.com")
    second = admin.request_flush(deps, GW, requested_by="cron")

    assert first["flushed"] is True and first["requestId"] != second["requestId"]
    assert deps.config.list_flush_requests(GW) == [
        {"id": first["requestId"], "reason": "admin", "requestedBy": "ops@example.com", "atMs": T0},
        {"id": second["requestId"], "reason": "admin", "requestedBy": "cron", "atMs": T0},
    ]
    assert deps.config.list_flush_requests("other") == []


def test_admin_metrics_figures_add_up_to_the_shard_heads() -> None:
    # Given pushes to a sub-sharded table and a plain one, and part of one shard flushed
    deps = _deps(sub_shards={"todos": 3}, flush_threshold_bytes=100_000, backpressure_bytes=150_000)
    deltas = [
        make_delta("INSERT", table=table, row_id=f"{table}-{i}", client_id="c", hlc=encode(T0, i), columns={"v": i})
        for table in ("todos", "notes")
        for i in range(12)
    ]
    push(deps, GW, SyncPush("c", tuple(deltas)), client_id="c")
    buffer = deps.buffer
    shards = buffer.list_shards(GW)
    notes = next(s for s in shards if s.table == "notes")
    head = buffer.get_heads([notes])[notes]
    flushed = buffer.read_log(notes, 0, 5)
    buffer.commit(
        Commit(
            notes,
            head.seq,
            replace(head, flushed_seq=5, flushed_bytes=sum(e.size for e in flushed), flushed_deltas=5),
            (),
            (),
        )
    )
    admin.request_flush(deps, GW, requested_by="ops")

    # When metrics are read
    m = admin.metrics(deps, GW)

    # Then the figures add up, per table and in total
    logs = {s: buffer.read_log(s, 0, 1000) for s in shards}
    by_table = {t["table"]: t for t in m["tables"]}
    assert list(by_table) == ["notes", "todos"]
    assert by_table["todos"]["shards"] == len([s for s in shards if s.table == "todos"]) > 1
    assert by_table["notes"] == {
        "table": "notes",
        "shards": 1,
        "committed": 12,
        "unflushedDeltas": 7,
        "unflushedBytes": sum(e.size for e in logs[notes][5:]),
        "flushedDeltas": 5,
    }
    assert by_table["todos"]["committed"] == by_table["todos"]["unflushedDeltas"] == 12
    assert by_table["todos"]["unflushedBytes"] == sum(
        e.size for s, log in logs.items() if s.table == "todos" for e in log
    )
    assert m["committed"] == 24
    assert m["logSize"] == 19
    assert m["byteSize"] == by_table["notes"]["unflushedBytes"] + by_table["todos"]["unflushedBytes"]
    assert m["pendingFlushRequests"] == 1
    assert (m["flushThresholdBytes"], m["backpressureLimitBytes"]) == (100_000, 150_000)


def test_admin_metrics_of_an_empty_gateway_are_zero() -> None:
    m = admin.metrics(_deps(), GW)
    assert (m["logSize"], m["byteSize"], m["committed"], m["tables"], m["pendingFlushRequests"]) == (0, 0, 0, [], 0)


def test_admin_rejected_commit_leaves_metrics_unchanged() -> None:
    deps = _deps()
    delta = make_delta("INSERT", table="todos", row_id="r", client_id="c", hlc=encode(T0, 0), columns={"v": 1})
    push(deps, GW, SyncPush("c", (delta,)), client_id="c")
    before = admin.metrics(deps, GW)
    shard = deps.buffer.list_shards(GW)[0]
    head = deps.buffer.get_heads([shard])[shard]
    with pytest.raises(CommitConflict):
        deps.buffer.commit(Commit(shard, head.seq - 1, replace(head, seq=head.seq + 1), (), ()))
    assert admin.metrics(deps, GW) == before


# -- materialisation destinations --------------------------------------------------------------------------------

ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:lakesync/analytics-AbCdEf"
PG = {"name": "analytics", "type": "postgres", "secretArn": ARN, "url": "postgresql://db.internal:5432/app"}
LITE = {"name": "local", "type": "sqlite", "url": "sqlite:///data/app.db", "tables": ["todos"]}


def test_admin_destinations_are_registered_listed_by_name_and_unregistered() -> None:
    deps = _deps()
    assert admin.list_destinations(deps, GW) == {"destinations": []}

    assert admin.register_destination(deps, GW, PG) == {"registered": True, "name": "analytics"}
    assert admin.register_destination(deps, GW, LITE) == {"registered": True, "name": "local"}
    assert admin.list_destinations(deps, GW) == {"destinations": [PG, LITE]}
    assert admin.list_destinations(deps, "other") == {"destinations": []}

    assert admin.unregister_destination(deps, GW, "analytics") == {"unregistered": True, "name": "analytics"}
    assert admin.list_destinations(deps, GW) == {"destinations": [LITE]}


def test_admin_destination_name_taken_is_409_and_the_first_kept() -> None:
    deps = _deps()
    admin.register_destination(deps, GW, PG)
    with pytest.raises(AlreadyExistsError) as err:
        admin.register_destination(deps, GW, {**LITE, "name": "analytics"})
    assert err.value.to_body() == {"error": 'Destination "analytics" already exists', "code": "VALIDATION_ERROR"}
    assert err.value.status == 409
    assert admin.list_destinations(deps, GW) == {"destinations": [PG]}


@pytest.mark.parametrize(
    "document",
    [
        None,
        {"name": "x", "type": "postgres"},
        {**PG, "url": "postgresql://app:hunter2-pw@db.internal/app"},
        {**PG, "url": "postgresql://db.internal/app?password=hunter2-pw"},
        {**PG, "password": "hunter2-pw"},
        {**PG, "tables": []},
    ],
    ids=["null", "no_secret", "url_password", "query_password", "unknown_field", "empty_tables"],
)
def test_admin_invalid_destination_is_400_and_not_stored(document: object) -> None:
    deps = _deps()
    with pytest.raises(ValidationError) as err:
        admin.register_destination(deps, GW, document)
    assert err.value.status == 400 and err.value.api_code == "VALIDATION_ERROR"
    assert "hunter2" not in err.value.message
    assert admin.list_destinations(deps, GW) == {"destinations": []}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("analytics", 'Destination "analytics" not found'),
        ("a%20b", 'Destination "a%20b" not found'),
        ("x" * 200, 'Destination "' + "x" * 64 + '..." not found'),
    ],
    ids=["unknown", "invalid", "huge"],
)
def test_admin_unregistering_an_unknown_destination_is_404(name: str, message: str) -> None:
    deps = _deps()
    admin.register_destination(deps, "other", PG)
    with pytest.raises(NotFoundError) as err:
        admin.unregister_destination(deps, GW, name)
    assert (err.value.status, err.value.message) == (404, message)
    assert admin.list_destinations(deps, "other") == {"destinations": [PG]}


def test_admin_destination_with_an_invalid_name_never_reaches_the_store() -> None:
    class Recording(InMemoryConfigStore):
        def __init__(self) -> None:
            super().__init__()
            self.removed: list[str] = []

        def remove_destination(self, gateway: str, name: str) -> bool:
            self.removed.append(name)
            return super().remove_destination(gateway, name)

    config = Recording()
    with pytest.raises(NotFoundError):
        admin.unregister_destination(_deps(config), GW, "../rules")
    assert config.removed == []
