"""What the API functions' wiring writes: each chunk's log item keyed by its first sequence, its text in layout 2."""

from __future__ import annotations

import zlib
from typing import Any

from lakesync.aws.buffer.log_chunks import FIRST_KEYED
from lakesync.aws.settings.api import Settings
from lakesync.aws.tables import TableNames
from lakesync.aws.wiring import gateway_deps
from lakesync.core.delta import make_delta
from lakesync.core.hlc import encode
from lakesync.core.messages import SyncPush
from lakesync.gateway.push import push


def test_the_wired_store_writes_first_keyed_chunks_in_layout_2(
    aws_env: None, dynamodb_client: Any, dynamodb_tables: TableNames
) -> None:
    # Given the API wiring
    settings = Settings(gateway_ids=frozenset({"gw"}), tables=dynamodb_tables, jwt_secrets=("x" * 32,))
    deps = gateway_deps(settings)
    now_ms = deps.clock.now() >> 16
    delta = make_delta("INSERT", table="todos", row_id="r1", client_id="c1", hlc=encode(now_ms, 0), columns={"a": 1})
    # When a push commits
    push(deps, "gw", SyncPush("c1", (delta,)), client_id="c1")
    # Then its chunk is keyed by its first sequence, its text in layout 2, and reads back
    (item,) = dynamodb_client.scan(TableName=dynamodb_tables.deltas)["Items"]
    assert int(item["seq"]["N"]) == FIRST_KEYED + 1
    assert zlib.decompress(item["z"]["B"])[:1].decode() == "2"
    pulled = deps.buffer.read_log(deps.buffer.list_shards("gw")[0], 0, 10)
    assert [e.delta.row_id for e in pulled] == ["r1"]
