"""``lakesync local`` restarted after a poll died in its previous run (``kill -9`` mid-poll, simulated by the lease
such a poll leaves in the durable store): the new run drops that lease at start, says so, and its poll loop polls the
connector at once instead of answering ``busy`` until the lease expires; nothing is lost or applied twice."""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.connectors import registry
from lakesync.connectors.base import ChangedRow, Connector, PollBatch, Position
from lakesync.core.connectors import ConnectorConfig
from lakesync.local.runner import LocalStack
from tests.connector_types import descriptor

pytestmark = pytest.mark.integration

ROWS: dict[str, str] = {}


class Feed:
    """An in-memory append-only source: a poll returns the rows of ``ROWS`` after the ``n`` it has returned."""

    name = "feed"

    def poll(self, position: Position, limit: int) -> PollBatch:
        seen = int(str(position.get("n", 0)))
        rows = sorted(ROWS.items())[seen:]
        return PollBatch([ChangedRow("items", k, {"v": v}, v) for k, v in rows], {"n": seen + len(rows)})

    def close(self) -> None:
        pass


DESCRIPTOR = descriptor("feed-restart-test", "Feed (test)", "An in-memory append-only ingest source")


def open_feed(config: ConnectorConfig, secrets: Mapping[str, str]) -> Connector:
    return Connector(config.name, ingest=Feed())


@pytest.fixture
def feed_type() -> Iterator[None]:
    registry.register(DESCRIPTOR, open_feed)
    yield
    registry.unregister(DESCRIPTOR.type)


def _http(stack: LocalStack, method: str, path: str, body: Any = None) -> Any:
    token = mint_token("ops", "default", stack.secret, role="admin")
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    req = urllib.request.Request(stack.url + path, data=data, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _items(stack: LocalStack) -> dict[str, str]:
    page = _http(stack, "GET", "/v1/sync/default/pull?clientId=ops&since=0&limit=1000")
    rows = {d["rowId"]: d["columns"][0]["value"] for d in page["deltas"] if d["table"] == "items"}
    assert len([d for d in page["deltas"] if d["table"] == "items"]) == len(rows), "a row was applied twice"
    return rows


def _positions(stack: LocalStack) -> Any:
    from lakesync.aws.connector_positions import DynamoDBPositionStore
    from lakesync.aws.tables import TableNames
    from lakesync.local.runner import TABLE_PREFIX

    return DynamoDBPositionStore(stack.dynamodb_client(), TableNames.with_prefix(TABLE_PREFIX))


def _wait_for(check: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_restart_drops_the_lease_of_a_killed_poll_and_polls_at_once(
    feed_type: None, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ROWS.clear()
    ROWS["1"] = "a"
    config = {
        "name": "feed",
        "type": DESCRIPTOR.type,
        # Polled at start and then hourly: the restart's poll is the one this test waits for
        "ingest": {"intervalMs": 3_600_000, "tables": [{"table": "items", "query": "-", "strategy": {"type": "diff"}}]},
    }
    # Given a run that registered and polled the connector, then died in its next poll, leaving that poll's lease
    # (15 minutes, as an earlier release took it) in the durable store
    with LocalStack(tmp_path, port=0, materialise=False, fsync=False, connector_tick_s=0.1) as first:
        _http(first, "POST", "/v1/admin/connectors/default", config)
        _wait_for(lambda: _positions(first).read_position("default", "feed").version == 1, "the first poll ran")
        now = int(time.time() * 1000)
        assert _positions(first).acquire("default", "feed", 1, "killed-poll", now + 15 * 60_000, now)
        assert first.connector_poller is not None
        first.connector_poller.stop()
    # When rows change and lakesync local starts again on the same data directory
    ROWS["2"] = "b"
    with caplog.at_level(logging.WARNING, logger="lakesync.local.runner"):
        second = LocalStack(tmp_path, port=0, materialise=False, fsync=False, connector_tick_s=0.1).start()
    try:
        # Then it dropped the dead lease (and said so), and its loop polled the connector at once
        assert any("feed" in r.getMessage() and "dropped the lease" in r.getMessage() for r in caplog.records)
        _wait_for(lambda: _positions(second).read_position("default", "feed").version == 2, "the restart polled")
        assert _positions(second).read_position("default", "feed").lease is None
        assert _items(second) == {"1": "a", "2": "b"}
    finally:
        second.stop()
