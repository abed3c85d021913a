"""What the API functions' wiring writes: the chunk layout the deployment marker allows under ``auto``, layout 1 where
the log keys are set (no marker is consulted then)."""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Any

import pytest

from lakesync.aws.function_settings import Settings
from lakesync.aws.tables import TableNames
from lakesync.aws.wiring import gateway_deps
from lakesync.core.delta import make_delta
from lakesync.core.hlc import encode
from lakesync.core.messages import SyncPush
from lakesync.gateway.push import push


@pytest.mark.parametrize(("log_keys", "layout"), [("auto", "2"), ("first", "["), ("last", "[")])
def test_the_wired_store_writes_the_layout_its_log_keys_allow(
    aws_env: None, dynamodb_client: Any, dynamodb_tables: TableNames, log_keys: str, layout: str
) -> None:
    # Given the API wiring on tables created here (their marker is open: no earlier release ran on them)
    settings = Settings(gateway_ids=frozenset({"gw"}), tables=dynamodb_tables, jwt_secrets=("x" * 32,))
    settings = replace(settings, log_keys=log_keys)  # type: ignore[arg-type]
    deps = gateway_deps(settings)
    now_ms = deps.clock.now() >> 16
    delta = make_delta("INSERT", table="todos", row_id="r1", client_id="c1", hlc=encode(now_ms, 0), columns={"a": 1})
    # When a push commits
    push(deps, "gw", SyncPush("c1", (delta,)), client_id="c1")
    # Then its chunk is in the layout the setting allows, and reads back
    (item,) = dynamodb_client.scan(TableName=dynamodb_tables.deltas)["Items"]
    assert zlib.decompress(item["z"]["B"])[:1].decode() == layout
    pulled = deps.buffer.read_log(deps.buffer.list_shards("gw")[0], 0, 10)
    assert [e.delta.row_id for e in pulled] == ["r1"]
