"""Stream subscriptions of the local store against a fake gateway (a real HTTP server keeping subscriptions as the
gateway's routes do): recorded locally first, sent by the sync cycle when online, durable across restarts, refusals
surfaced, unsubscribe at every stage, renewal before the TTL runs out on a controllable clock."""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client import LocalStore, OfflineError, StreamSubscription, connect
from lakesync.client.aio import AsyncLocalStore
from lakesync.core.delta import DeltaOp, make_delta
from lakesync.core.merge import RowState
from lakesync.core.streams import Subscription
from lakesync.gateway.subscriptions import subscription_id
from tests.factories import T0, todo_schema

pytestmark = pytest.mark.integration

START_MS = 1_800_000_000_000
DEFAULT_TTL = 600


@dataclass
class Clock:
    """A wall clock the test moves."""

    now: int = START_MS

    def __call__(self) -> int:
        return self.now


@dataclass
class FakeGateway:
    """The gateway's subscription routes over one client's subscriptions, an empty pull and no checkpoint.

    ``refuse`` maps a stream to ``(status, body)``; ``down`` answers everything 503; ``lose_answer`` drops the
    connection after storing a subscribe (its answer lost); ``no_expiry`` answers without ``expiresAt``;
    ``pull_pages`` are the deltas of the next pulls; ``on_post`` runs while a subscribe is being served.
    """

    clock: Clock
    held: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    refuse: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    down: bool = False
    lose_answer: bool = False
    no_expiry: bool = False
    pull_pages: list[list[dict[str, Any]]] = field(default_factory=list)
    on_post: Callable[[], None] | None = None

    def serve(self, method: str, path: str, body: Any) -> tuple[int, Any] | None:
        """The answer (status, JSON) to one request; ``None`` drops the connection."""
        self.requests.append((method, path, body))
        if self.down:
            return 503, {"error": "busy", "code": "STORAGE_BUSY"}
        route = path.split("?")[0].split("/")[4:]
        if route == ["pull"]:
            deltas = self.pull_pages.pop(0) if self.pull_pages else []
            return 200, {"deltas": deltas, "serverHlc": "0", "hasMore": False, "cursor": "c1"}
        if route == ["checkpoint"]:
            return 404, {"error": "none", "code": "NOT_FOUND"}
        if route == ["subscriptions"] and method == "POST":
            return self._subscribe(body)
        if route == ["subscriptions"] and method == "GET":
            return 200, {"subscriptions": sorted(self.held.values(), key=lambda s: s["id"])}
        if route[:1] == ["subscriptions"] and method == "DELETE" and len(route) == 2:
            if self.held.pop(route[1], None) is None:
                return 404, {"error": "no", "code": "NOT_FOUND", "refusal": "UNKNOWN_SUBSCRIPTION"}
            return 204, None
        return 404, {"error": "no route", "code": "NOT_FOUND"}

    def _subscribe(self, body: dict[str, Any]) -> tuple[int, Any] | None:
        if self.on_post is not None:
            self.on_post()
        if body["stream"] in self.refuse:
            return self.refuse[body["stream"]]
        subscription = Subscription.of(body["stream"], body.get("params", {}))
        held = {
            "id": subscription_id(subscription),
            **subscription.to_json(),
            "expiresAt": self.clock() + 1000 * body.get("ttlSeconds", DEFAULT_TTL),
        }
        if self.no_expiry:
            del held["expiresAt"]
        self.held[held["id"]] = held
        return None if self.lose_answer else (201, held)

    def posts(self) -> list[Any]:
        """The bodies of the subscribe requests, in order."""
        return [body for method, path, body in self.requests if method == "POST" and path.endswith("/subscriptions")]

    def deletes(self) -> list[str]:
        """The ids deleted, in order."""
        return [path.rsplit("/", 1)[1] for method, path, _ in self.requests if method == "DELETE"]


def _handler(fake: FakeGateway) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            answer = fake.serve(self.command, self.path, json.loads(raw) if raw else None)
            if answer is None:
                self.close_connection = True
                return
            status, doc = answer
            data = b"" if doc is None else json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            if data:
                self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve

    return Handler


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fake(clock: Clock) -> Iterator[tuple[FakeGateway, str]]:
    gateway = FakeGateway(clock)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(gateway))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield gateway, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


_names = itertools.count()


@pytest.fixture
def open_store(tmp_path: Path, clock: Clock) -> Iterator[Callable[..., LocalStore]]:
    """``open_store(url, path=...)`` → a store of client ``c``; all closed at the end."""
    opened: list[LocalStore] = []

    def make(url: str, **options: Any) -> LocalStore:
        options.setdefault("clock", clock)
        store = connect(
            options.pop("path", tmp_path / f"s{next(_names)}.db"),
            url=url,
            gateway="default",
            token=mint_token("c", "default", "s" * 32),
            schemas=[todo_schema("todos")],
            realtime=False,
            timeout=5.0,
            **options,
        )
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()


def dead_url() -> str:
    """A URL nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def states(store: LocalStore) -> list[tuple[str, dict[str, str], str]]:
    return [(s.stream, dict(s.params), s.state) for s in store.subscriptions()]


def subscribed_unheard(gateway: FakeGateway, store: LocalStore) -> LocalStore:
    """``store`` subscribed to project_tasks 1, sent to ``gateway``, which stored it but whose answer was lost."""
    store.subscribe_stream("project_tasks", {"project": "1"})
    gateway.lose_answer = True
    with pytest.raises(OfflineError):
        store.sync()
    return store


def active_for_60s(
    gateway: FakeGateway, url: str, open_store: Callable[..., LocalStore]
) -> tuple[FakeGateway, LocalStore]:
    """A store on ``gateway`` whose subscription to project_tasks 1 for 60 s is active."""
    store = open_store(url)
    store.subscribe_stream("project_tasks", {"project": "1"}, ttl=60)
    store.sync()
    return gateway, store


def test_subscribed_offline_sent_once_online_after_a_restart(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore], tmp_path: Path, clock: Clock
) -> None:
    gateway, url = fake
    path = tmp_path / "app.db"
    # Given a store that cannot reach its gateway
    offline = open_store(dead_url(), path=path)
    held = offline.subscribe_stream("project_tasks", {"project": "42"}, ttl=300)

    # Then the subscription is recorded at once, pending, and a sync leaves it so
    gateway_id = subscription_id(Subscription.of("project_tasks", {"project": "42"}))
    assert held == StreamSubscription("project_tasks", {"project": "42"}, 300, "pending", gateway_id)
    with pytest.raises(OfflineError):
        offline.sync()
    assert states(offline) == [("project_tasks", {"project": "42"}, "pending")]
    offline.close()

    # When the app restarts online
    online = open_store(url, path=path)
    assert states(online) == [("project_tasks", {"project": "42"}, "pending")]
    report = online.sync()

    # Then the subscription is sent once, with its ttl, and active with the gateway's id and expiry
    assert report.refused_subscriptions == []
    assert gateway.posts() == [{"stream": "project_tasks", "params": {"project": "42"}, "ttlSeconds": 300}]
    [active] = online.subscriptions()
    assert active.state == "active" and active.id in gateway.held
    assert active.expires_at == clock.now + 300_000 == gateway.held[active.id]["expiresAt"]
    # And a later cycle sends nothing more before renewal is due
    online.sync()
    assert len(gateway.posts()) == 1


def test_a_subscribe_whose_answer_was_lost_is_sent_again_after_a_restart(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore], tmp_path: Path
) -> None:
    gateway, url = fake
    store = subscribed_unheard(gateway, open_store(url, path=tmp_path / "app.db"))
    assert states(store) == [("project_tasks", {"project": "1"}, "pending")]
    store.close()

    gateway.lose_answer = False
    again = open_store(url, path=tmp_path / "app.db")
    again.sync()
    # The same subscription sent twice (without ttl: the stream's default), held once by the gateway
    assert gateway.posts() == [{"stream": "project_tasks", "params": {"project": "1"}}] * 2
    assert [s.id for s in again.subscriptions()] == list(gateway.held)
    assert states(again) == [("project_tasks", {"project": "1"}, "active")]


def test_refusals_are_surfaced_and_not_sent_again(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore]
) -> None:
    gateway, url = fake
    gateway.refuse["nope"] = (404, {"error": 'No stream "nope"', "code": "NOT_FOUND", "refusal": "UNKNOWN_STREAM"})
    gateway.refuse["secret"] = (403, {"error": "Not yours", "code": "FORBIDDEN", "refusal": "NOT_ALLOWED"})
    gateway.refuse["odd"] = (400, {"error": "bad body", "code": "VALIDATION_ERROR"})
    store = open_store(url)
    store.subscribe_stream("nope")
    store.subscribe_stream("secret", {"project": "9"})
    store.subscribe_stream("odd")
    store.subscribe_stream("project_tasks", {"project": "1"})

    report = store.sync()

    refused = {s.stream: (s.state, s.refusal, s.reason) for s in report.refused_subscriptions}
    assert refused == {
        "nope": ("refused", "UNKNOWN_STREAM", 'No stream "nope"'),
        "secret": ("refused", "NOT_ALLOWED", "Not yours"),
        "odd": ("refused", "VALIDATION_ERROR", "bad body"),
    }
    assert {s.stream: (s.state, s.refusal) for s in store.subscriptions()} == {
        "nope": ("refused", "UNKNOWN_STREAM"),
        "odd": ("refused", "VALIDATION_ERROR"),
        "project_tasks": ("active", None),
        "secret": ("refused", "NOT_ALLOWED"),
    }
    # A refused subscription is not sent again; unsubscribing drops it without asking the gateway
    store.sync()
    assert len(gateway.posts()) == 4
    assert store.unsubscribe("nope") is True
    store.sync()
    assert gateway.deletes() == []
    assert [s.stream for s in store.subscriptions()] == ["odd", "project_tasks", "secret"]
    # Subscribing again sends it again
    gateway.refuse.pop("odd")
    store.subscribe_stream("odd")
    assert store.sync().refused_subscriptions == []
    assert {s.stream: s.state for s in store.subscriptions()}["odd"] == "active"


def test_a_renewal_refused_turns_the_subscription_refused(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore], clock: Clock
) -> None:
    gateway, store = active_for_60s(*fake, open_store)
    gateway.refuse["project_tasks"] = (404, {"error": "gone", "code": "NOT_FOUND", "refusal": "UNKNOWN_STREAM"})
    clock.now += 59_000
    [refused] = store.sync().refused_subscriptions
    assert (refused.state, refused.refusal, refused.expires_at) == ("refused", "UNKNOWN_STREAM", None)


def test_unsubscribe_while_pending_never_sent_asks_nothing(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore]
) -> None:
    gateway, url = fake
    store = open_store(url)
    store.subscribe_stream("project_tasks", {"project": "1"})
    assert store.unsubscribe("project_tasks", {"project": "1"}) is True
    assert store.subscriptions() == []
    store.sync()
    assert gateway.posts() == [] and gateway.deletes() == []
    assert store.unsubscribe("project_tasks", {"project": "1"}) is False


def test_unsubscribe_while_pending_but_sent_deletes_it_at_the_gateway(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore], tmp_path: Path
) -> None:
    gateway, url = fake
    store = subscribed_unheard(gateway, open_store(url, path=tmp_path / "app.db"))
    assert list(gateway.held)  # the gateway stored it; the store never heard
    assert store.unsubscribe("project_tasks", {"project": "1"}) is True
    assert states(store) == [("project_tasks", {"project": "1"}, "removing")]
    store.close()

    # After a restart the removal is still due, and the gateway is told
    again = open_store(url, path=tmp_path / "app.db")
    again.sync()
    assert gateway.held == {} and again.subscriptions() == []
    assert len(gateway.deletes()) == 1 and len(gateway.posts()) == 1


def test_unsubscribe_active_deletes_it_and_a_gateway_that_forgot_it_is_fine(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore]
) -> None:
    gateway, url = fake
    store = open_store(url)
    one = store.subscribe_stream("project_tasks", {"project": "1"})
    store.subscribe_stream("project_tasks", {"project": "2"})
    store.sync()
    assert store.unsubscribe(one) is True
    gateway.held.pop(store.subscriptions()[1].id)  # run out at the gateway
    assert store.unsubscribe("project_tasks", {"project": "2"}) is True
    gateway.down = True
    with pytest.raises(OfflineError):
        store.sync()
    assert [s.state for s in store.subscriptions()] == ["removing", "removing"]
    gateway.down = False
    store.sync()
    assert store.subscriptions() == [] and gateway.held == {}
    two = subscription_id(Subscription.of("project_tasks", {"project": "2"}))
    deletes = gateway.deletes()  # the first tried while down (the cycle stops there), then both
    assert len(deletes) == 3 and sorted(deletes[1:]) == sorted([one.id, two])


def test_unsubscribed_while_its_subscribe_is_in_flight_is_deleted_next(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore]
) -> None:
    gateway, url = fake
    store = open_store(url)
    store.subscribe_stream("project_tasks", {"project": "1"})
    gateway.on_post = lambda: store.unsubscribe("project_tasks", {"project": "1"})
    store.sync()
    gateway.on_post = None
    # The answer does not bring it back: it stays removing (with the gateway's id), deleted at the next cycle
    assert list(gateway.held) == [s.id for s in store.subscriptions()]
    assert states(store) == [("project_tasks", {"project": "1"}, "removing")]
    store.sync()
    assert gateway.held == {} and store.subscriptions() == []
    assert len(gateway.posts()) == 1 and len(gateway.deletes()) == 1


def test_an_active_subscription_is_renewed_before_it_runs_out(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore], clock: Clock
) -> None:
    gateway, store = active_for_60s(*fake, open_store)
    [first] = store.subscriptions()
    assert first.expires_at == START_MS + 60_000

    # Before two thirds of its lifetime: nothing sent
    clock.now += 39_000
    store.sync()
    assert len(gateway.posts()) == 1
    assert store._streams.renewal_in() == pytest.approx(1.0)

    # Past them, before it runs out: renewed, its expiry moved on
    clock.now += 1_000
    store.sync()
    assert len(gateway.posts()) == 2
    [renewed] = store.subscriptions()
    assert renewed.state == "active" and renewed.expires_at == clock.now + 60_000
    assert store._streams.renewal_in() == pytest.approx(40.0)

    # Subscribing again with another ttl sends it again with that ttl
    store.subscribe_stream("project_tasks", {"project": "1"}, ttl=120)
    store.sync()
    assert gateway.posts()[-1]["ttlSeconds"] == 120 and len(gateway.posts()) == 3
    # The same ttl again: nothing to send
    store.subscribe_stream("project_tasks", {"project": "1"}, ttl=120)
    store.sync()
    assert len(gateway.posts()) == 3


def test_a_subscription_the_gateway_gave_no_expiry_is_not_renewed(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore], clock: Clock
) -> None:
    gateway, url = fake
    gateway.no_expiry = True
    store = open_store(url)
    store.subscribe_stream("project_tasks", {"project": "1"})
    store.sync()
    clock.now += 10 * 365 * 86_400_000
    store.sync()
    assert len(gateway.posts()) == 1 and store._streams.renewal_in() is None
    assert [(s.state, s.expires_at) for s in store.subscriptions()] == [("active", None)]


def test_a_row_leaving_the_scope_is_dropped_and_can_enter_again(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore]
) -> None:
    gateway, url = fake
    store = open_store(url)
    entering = make_delta(DeltaOp.INSERT, table="todos", row_id="t1", client_id="bob", hlc=T0, columns={"title": "a"})
    gateway.pull_pages.append([entering.to_json()])
    store.sync()
    assert store.rows("todos") == {"t1": {"title": "a", "done": None, "priority": None, "tags": None}}
    held = store.state("todos", "t1")

    # A DELETE at HLC 0 under another client's id is an ordinary delete, below every version: the row stays
    other = make_delta(DeltaOp.DELETE, table="todos", row_id="t1", client_id="bob", hlc=0)
    gateway.pull_pages.append([other.to_json()])
    store.sync()
    assert set(store.rows("todos")) == {"t1"}
    # Under the store's own id it says the row left the scope: dropped, no tombstone kept
    leaving = make_delta(DeltaOp.DELETE, table="todos", row_id="t1", client_id="c", hlc=0)
    gateway.pull_pages.append([leaving.to_json()])
    assert store.sync().changed == {"todos": {"t1"}}
    assert store.rows("todos") == {} and store.state("todos", "t1") == RowState("todos", "t1")
    gateway.pull_pages.append([leaving.to_json()])  # again: nothing held, nothing changes
    assert store.sync().changed == {}

    # Entering again, its real versions apply
    gateway.pull_pages.append([entering.to_json()])
    store.sync()
    assert store.state("todos", "t1") == held


def test_the_background_thread_renews_in_time_however_long_its_poll_interval(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore]
) -> None:
    gateway, url = fake
    store = open_store(url, clock=lambda: time.time_ns() // 1_000_000, poll_interval=60.0, debounce=0.0)
    store.subscribe_stream("project_tasks", {"project": "1"}, ttl=3)
    store.start()
    deadline = time.monotonic() + 10
    while len(gateway.posts()) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    store.stop()
    assert len(gateway.posts()) >= 3  # the first subscribe, then a renewal every 2 s
    assert [s.state for s in store.subscriptions()] == ["active"]


@pytest.mark.parametrize(
    ("name", "params", "ttl"),
    [("", None, None), ("s", {"p": 7}, None), ("s", {"p": ""}, None), ("s", None, 0), ("s", None, True)],
)
def test_bad_requests_raise_before_anything_is_recorded(
    fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore], name: str, params: Any, ttl: Any
) -> None:
    store = open_store(fake[1])
    with pytest.raises(ValueError):
        store.subscribe_stream(name, params, ttl=ttl)
    assert store.subscriptions() == []


def test_the_asyncio_face_forwards(fake: tuple[FakeGateway, str], open_store: Callable[..., LocalStore]) -> None:
    store = AsyncLocalStore(open_store(fake[1]))

    async def run() -> None:
        held = await store.subscribe_stream("project_tasks", {"project": "1"}, ttl=30)
        await store.sync()
        assert [s.state for s in await store.subscriptions()] == ["active"]
        assert await store.unsubscribe(held) is True
        await store.sync()
        assert await store.subscriptions() == []

    asyncio.run(run())
