"""How many DynamoDB requests a pull that finds nothing new sends, on the moto server, with the stores a deployment
runs (first keys, the one-Query pull basis, ``since`` sessions in the dedup table): a client polling an idle gateway
pays these on every poll (docs/cost.md, "A client with nothing new")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.config_store import DynamoDBConfigStore, DynamoDBPullBasisReader
from lakesync.aws.since_sessions import DynamoDBSinceSessions
from lakesync.core.delta import make_delta
from lakesync.core.hlc import HLC, encode
from lakesync.core.messages import SyncPush
from lakesync.gateway.basis_cache import CachedPullBasis
from lakesync.gateway.deps import GatewayDeps, GatewaySettings
from lakesync.gateway.memory import InMemoryActionStore
from lakesync.gateway.pull import PullResult, pull
from lakesync.gateway.push import push

NOW_MS = 1_700_000_000_000


class RecordingClient:
    """A DynamoDB client that counts its requests by operation."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.sent: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._client, name)
        if not callable(method) or name.startswith(("get_paginator", "get_waiter", "can_paginate", "meta")):
            return method

        def call(**kwargs: Any) -> Any:
            self.sent[name] += 1
            return method(**kwargs)

        return call


class Gateway:
    """The pull service over a new set of DynamoDB stores (a new container) on a recording client."""

    def __init__(self, client: Any, names: Any, gw: str, wall: list[int], *, basis_ttl_s: float = 0.0) -> None:
        self.client = RecordingClient(client)
        self.gw = gw
        basis = DynamoDBPullBasisReader(self.client, names)
        self.deps = GatewayDeps(
            buffer=DynamoDBBufferStore(self.client, names),
            config=DynamoDBConfigStore(self.client, names),
            actions=InMemoryActionStore(),
            settings=GatewaySettings(gateway_ids=frozenset({gw})),
            clock=HLC(lambda: wall[0]),
            wall_ms=lambda: wall[0],
            pull_basis=CachedPullBasis(basis, basis_ttl_s, clock=lambda: wall[0] / 1000) if basis_ttl_s else basis,
            since_sessions=DynamoDBSinceSessions(self.client, names),
        )

    def push(self, count: int, start: int) -> None:
        wall = self.deps.wall_ms()
        deltas = tuple(
            make_delta("INSERT", table="todos", row_id=f"r{i}", client_id="c1", hlc=encode(wall, i), columns={"v": i})
            for i in range(start, start + count)
        )
        push(self.deps, self.gw, SyncPush("c1", deltas), client_id="c1", trusted=True)

    def pull(self, **kwargs: Any) -> tuple[PullResult, Counter[str]]:
        self.client.sent.clear()
        page = pull(self.deps, self.gw, limit=100, claims={"sub": "orig"}, **kwargs)
        return page, Counter(self.client.sent)


@pytest.fixture
def gateway(module_dynamodb: Any, gw: str) -> tuple[Gateway, list[int]]:
    client, names = module_dynamodb
    wall = [NOW_MS]
    first = Gateway(client, names, gw, wall)
    for chunk in range(4):  # four pushes of ten: a first-keyed log of four chunks
        first.push(10, 10 * chunk)
    wall[0] += 60_000  # past the `since` re-read window: the first page is certain
    return Gateway(client, names, gw, wall), wall


def test_idle_cursor_polls_within_the_basis_ttl_send_the_log_query_and_the_head_read(
    module_dynamodb: Any, gw: str
) -> None:
    # Given a container that keeps the pull basis for a second (the deployed default), and a client caught up
    client, names = module_dynamodb
    wall = [NOW_MS]
    container = Gateway(client, names, gw, wall, basis_ttl_s=1.0)
    container.push(10, 0)
    first, sent = container.pull(cursor="")
    assert len(first.deltas) == 10 and sent["query"] == 2  # the basis read, and the log read

    # When it polls again within the second, and again after it
    wall[0] += 999
    again, within = container.pull(cursor=first.cursor)
    wall[0] += 1
    later, after = container.pull(cursor=first.cursor)

    # Then the poll within the second reads no basis (two requests), and the one after reads it again (three)
    assert again.deltas == () == later.deltas
    assert within == Counter({"query": 1, "batch_get_item": 1})
    assert after == Counter({"query": 2, "batch_get_item": 1})


def test_an_idle_cursor_pull_sends_the_basis_query_one_log_query_and_the_head_read(
    gateway: tuple[Gateway, list[int]],
) -> None:
    # Given a cursor client that pulled everything
    gw, _ = gateway
    first, _ = gw.pull(cursor="")
    assert len(first.deltas) == 40 and not first.has_more and first.cursor is not None

    # When it pulls again, nothing is delivered, in three requests: the rules and registry, the log after its
    # position, and the head that tells "caught up" from "released"
    again, sent = gw.pull(cursor=first.cursor)
    assert again.deltas == () and not again.has_more
    assert sent == Counter({"query": 2, "batch_get_item": 1})


def test_an_idle_since_pull_reads_its_session_and_checks_its_position_as_a_cursor_is(
    gateway: tuple[Gateway, list[int]],
) -> None:
    # Given an original client, with a session, that pulled everything
    gw, wall = gateway
    first, _ = gw.pull(since=0, client_id="orig")
    assert len(first.deltas) == 40 and not first.has_more

    # When it polls with the serverHlc it was handed, nothing is delivered, it keeps its since, and the pull sends
    # four requests: the rules and registry, its session, the log after its position, and the head
    wall[0] += 1000
    again, sent = gw.pull(since=first.server_hlc, client_id="orig")
    assert again.deltas == () and again.server_hlc == first.server_hlc
    assert sent == Counter({"query": 2, "get_item": 1, "batch_get_item": 1})

    # And after a push of ten, its next poll delivers them, and the one after is idle again
    gw.push(10, 40)
    page, _ = gw.pull(since=first.server_hlc, client_id="orig")
    assert sorted(int(d.row_id[1:]) for d in page.deltas) == list(range(40, 50))
    idle, sent = gw.pull(since=page.server_hlc, client_id="orig")
    assert idle.deltas == () and sent == Counter({"query": 2, "get_item": 1, "batch_get_item": 1})
