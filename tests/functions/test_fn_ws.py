"""The WebSocket functions on AWS: ``ws_connect`` ($connect), ``ws_message`` ($default) and
``ws_broadcast`` (the deltas table's stream), with the tables on the moto server, the management API played by
``tests/management_api.py`` (moto does not serve it) and the stream read from moto as Lambda's poller reads it.

One environment per module (tables, the fake management API, the functions' variables); each test starts with no
sessions and the stream drained.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.parser.models import (
    APIGatewayWebSocketConnectEventModel,
    APIGatewayWebSocketMessageEventModel,
    DynamoDBStreamModel,
)

from functions import ws_broadcast, ws_connect, ws_message
from lakesync.auth import mint_token
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.log_stream import decode_stream_records
from lakesync.aws.settings.variables import CONNECTIONS_TABLE, TABLE_VARS, WS_CALLBACK_URL
from lakesync.aws.table_setup import create_tables
from lakesync.aws.tables import TableNames, connections_table_name
from lakesync.core.messages import SyncPull, SyncPush, SyncResponse
from lakesync.core.realtime import Connection, Encoding
from lakesync.core.rules import parse_sync_rules
from lakesync.local.front import LambdaContext
from lakesync.wire.codec import decode_sync_push, decode_sync_response, encode_sync_pull, encode_sync_push
from lakesync.wire.framing import decode_broadcast_frame
from tests.ddb_stream import FAKE, Stream
from tests.integration.test_local_memberships import RULES as MEMBERSHIP_RULES
from tests.management_api import ManagementApi, management_api

EVENTS = Path(__file__).resolve().parent.parent.parent / "events"
SECRET = "functions-ws-test-secret-0123456789"
RULES = {"version": 1, "buckets": [{"name": "team", "tables": ["todos"], "filters": [
    {"column": "team", "op": "eq", "value": "jwt:team"}]}]}  # fmt: skip


@dataclass
class Env:
    """The module's deployment: tables, stream, fake management API."""

    client: Any
    names: TableNames
    connections: str
    stream: Stream
    api: ManagementApi


@pytest.fixture(scope="module")
def env(moto_endpoint: str) -> Iterator[Env]:
    from functions._runtime import reset_runtime

    with pytest.MonkeyPatch.context() as mp, management_api() as api:
        for key in list(os.environ):
            if key.startswith(("LAKESYNC_", "AWS_")):
                mp.delenv(key)
        for key, value in {
            "AWS_ENDPOINT_URL": moto_endpoint,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "POWERTOOLS_TRACE_DISABLED": "true",
        }.items():
            mp.setenv(key, value)
        client = boto3.client("dynamodb", endpoint_url=moto_endpoint, **FAKE)
        prefix = f"ws{uuid.uuid4().hex[:10]}"
        names = TableNames.with_prefix(prefix)
        connections = connections_table_name(prefix)
        create_tables(client, names, connections=connections)
        # As CDK configures them: every table by name, the sessions table, the stage's callback URL
        for kind, var in TABLE_VARS.items():
            mp.setenv(var, getattr(names, kind))
        mp.setenv(CONNECTIONS_TABLE, connections)
        mp.setenv(WS_CALLBACK_URL, api.url)
        mp.setenv("LAKESYNC_JWT_SECRET", SECRET)
        mp.setenv("LAKESYNC_GATEWAY_IDS", "default,other")
        config = DynamoDBConfigStore(client, names)
        config.put_sync_rules("default", parse_sync_rules(RULES))
        reset_runtime()
        yield Env(client, names, connections, Stream(moto_endpoint, client, names.deltas), api)
        reset_runtime()


@pytest.fixture(autouse=True)
def fresh(env: Env) -> Env:
    """No sessions, a clean management API, the stream drained."""
    items = env.client.scan(TableName=env.connections)["Items"]
    for item in items:
        env.client.delete_item(TableName=env.connections, Key={"id": item["id"]})
    env.api.reset()
    env.stream.read()
    return env


def invoke(module: ModuleType, event: dict[str, Any]) -> dict[str, Any]:
    context = LambdaContext(
        function_name=f"lakesync-{module.__name__.rsplit('.', 1)[-1]}",
        aws_request_id="c0ffee00-0000-4000-8000-000000000000",
        invoked_function_arn="arn:aws:lambda:eu-west-1:123456789012:function:lakesync",
        memory_limit_in_mb=512,
    )
    result: dict[str, Any] = module.lambda_handler(copy.deepcopy(event), context)
    return result


def sample(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8"))
    return event


def token(sub: str, *, gw: str = "default", **claims: Any) -> str:
    return mint_token(sub, gw, SECRET, claims=claims or None)


def connect_event(
    *,
    auth: str | None = None,
    query: dict[str, str] | None = None,
    connection_id: str | None = None,
) -> dict[str, Any]:
    event = sample("ws_connect")
    if auth is None:
        del event["headers"]["Authorization"]
    else:
        event["headers"]["Authorization"] = auth
    if query is not None:
        event["queryStringParameters"] = query
    event["requestContext"]["connectionId"] = connection_id or f"{uuid.uuid4().hex[:14]}="
    return event


def connect(env: Env, sub: str, *, gw: str = "default", encoding: str = "base64", **claims: Any) -> str:
    """Open a session of ``sub`` (API Gateway's side too); returns its connection id."""
    event = connect_event(auth=f"Bearer {token(sub, gw=gw, **claims)}", query={"gateway": gw, "encoding": encoding})
    assert invoke(ws_connect, event) == {"statusCode": 200}
    connection_id: str = event["requestContext"]["connectionId"]
    env.api.connect(connection_id)
    return connection_id


def message(connection_id: str, data: bytes | str) -> dict[str, Any]:
    event = sample("ws_message")
    event["requestContext"]["connectionId"] = connection_id
    if isinstance(data, bytes):
        event["body"], event["isBase64Encoded"] = base64.b64encode(data).decode(), True
    else:
        event["body"] = data
    return invoke(ws_message, event)


def text(frame: bytes) -> str:
    return base64.b64encode(frame).decode("ascii")


def push_frame(
    client: str, rows: list[tuple[str, dict[str, Any]]], *, as_client: str | None = None, table: str = "todos"
) -> bytes:
    hlc = int(time.time() * 1000) << 16
    deltas = [
        {
            "op": "INSERT",
            "table": table,
            "rowId": row,
            "clientId": as_client or client,
            "columns": [{"column": k, "value": v} for k, v in cols.items()],
            "hlc": str(hlc + i),
            "deltaId": uuid.uuid4().hex,
        }
        for i, (row, cols) in enumerate(rows)
    ]
    return b"\x01" + encode_sync_push(SyncPush.from_json({"clientId": as_client or client, "deltas": deltas}))


def reply(result: dict[str, Any]) -> SyncResponse:
    assert result["statusCode"] == 200 and "isBase64Encoded" not in result  # a text frame for a base64 session
    return decode_sync_response(base64.b64decode(result["body"]))


def received(env: Env, connection_id: str, *, binary: bool = False) -> list[SyncResponse]:
    frames = env.api.sent(connection_id)
    return [decode_broadcast_frame(f if binary else base64.b64decode(f)) for f in frames]


def session_of(connection_id: str) -> Connection | None:
    from functions._runtime import get_realtime

    return get_realtime().connections.get_connection(connection_id)


# -- the sample events ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("ws_connect", APIGatewayWebSocketConnectEventModel),
        ("ws_message", APIGatewayWebSocketMessageEventModel),
        ("ws_broadcast_stream", DynamoDBStreamModel),
    ],
)
def test_sample_events_are_what_api_gateway_and_lambda_send(name: str, model: Any) -> None:
    model.model_validate(sample(name))


# -- $connect ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "auth", "query", "status", "code"),
    [
        ("missing token", None, {"gateway": "default"}, 401, "AUTH_ERROR"),
        ("bad token", "Bearer not.a.jwt", {"gateway": "default"}, 401, "AUTH_ERROR"),
        ("bad token in the query", None, {"gateway": "default", "token": "x.y.z"}, 401, "AUTH_ERROR"),
        ("token for another gateway", "other", {"gateway": "default"}, 403, "FORBIDDEN"),
        ("unknown gateway", "nope", {"gateway": "nope"}, 404, "NOT_FOUND"),
        ("no gateway", "default", {}, 404, "NOT_FOUND"),
        ("bad encoding", "default", {"gateway": "default", "encoding": "hex"}, 400, "VALIDATION_ERROR"),
    ],
)
def test_refused_upgrades_answer_the_status_and_record_no_session(
    env: Env, case: str, auth: str | None, query: dict[str, str], status: int, code: str
) -> None:
    # Given an upgrade with a bad or missing credential, gateway or encoding
    if auth in ("default", "other", "nope"):
        auth = f"Bearer {token('alice', gw=auth)}"
    event = connect_event(auth=auth, query=query)
    # When $connect runs
    result = invoke(ws_connect, event)
    # Then it answers the status API Gateway refuses the upgrade with, and the error body the HTTP API sends
    assert result["statusCode"] == status, case
    assert json.loads(result["body"])["code"] == code
    assert session_of(event["requestContext"]["connectionId"]) is None


@pytest.mark.parametrize("where", ["header", "query"])
def test_a_token_in_the_header_or_the_query_opens_a_session(env: Env, where: str) -> None:
    bearer = token("alice", team="red")
    query = {"gateway": "default", "encoding": "base64"}
    if where == "query":
        query["token"] = bearer
    event = connect_event(auth=f"Bearer {bearer}" if where == "header" else None, query=query)
    assert invoke(ws_connect, event) == {"statusCode": 200}
    session = session_of(event["requestContext"]["connectionId"])
    assert session is not None
    assert (session.gateway, session.client_id, session.encoding) == ("default", "alice", Encoding.BASE64)
    assert session.claims["team"] == "red"
    assert session.expires_at <= int(time.time()) + 3600


def test_the_originals_path_names_the_gateway_when_the_event_carries_it(env: Env) -> None:
    event = connect_event(auth=f"Bearer {token('alice', gw='other')}", query={})
    event["path"] = "/v1/sync/other/ws"
    assert invoke(ws_connect, event) == {"statusCode": 200}
    session = session_of(event["requestContext"]["connectionId"])
    assert session is not None and session.gateway == "other" and session.encoding is Encoding.BINARY


# -- $default ------------------------------------------------------------------------------------------------------


def test_push_and_pull_over_the_socket(env: Env) -> None:
    # Given alice's and bob's sessions
    alice, bob = connect(env, "alice", team="red"), connect(env, "bob", team="red")
    row = f"r-{uuid.uuid4().hex[:8]}"
    # When alice pushes a row over her socket
    ack = reply(message(alice, text(push_frame("alice", [(row, {"title": "milk", "team": "red"})]))))
    # Then the answer is the untagged push ack as base64 text: no deltas, the server's HLC
    assert ack.deltas == () and ack.server_hlc > 0 and not ack.has_more
    # And bob's pull over his socket returns the committed row
    page = reply(message(bob, text(b"\x02" + encode_sync_pull(SyncPull("bob", 0, 1000)))))
    assert row in {d.row_id for d in page.deltas}
    assert page.server_hlc >= ack.server_hlc
    # And nothing was closed
    assert env.api.closed == []


def test_the_sample_message_is_served(env: Env) -> None:
    connection_id = connect(env, "client-a")
    event = sample("ws_message")
    event["requestContext"]["connectionId"] = connection_id
    assert invoke(ws_message, event)["statusCode"] == 200


@pytest.mark.parametrize(
    ("case", "data", "code"),
    [
        ("short frame", text(b"\x01"), 1002),
        ("unknown tag", text(b"\x07\x00"), 1002),
        ("not base64", "!!not base64!!", 1007),
        ("binary frame to a text session", b"\x02\x00", 1003),
        ("undecodable push", text(b"\x01\xff\xff\xff"), 1008),
        ("push as another client", text(push_frame("alice", [("r", {"title": "x"})], as_client="mallory")), 1008),
    ],
)
def test_bad_frames_close_the_session_by_delete_connection(
    env: Env, caplog: pytest.LogCaptureFixture, case: str, data: bytes | str, code: int
) -> None:
    # Given an open session
    connection_id = connect(env, "alice")
    caplog.clear()
    # When it sends a frame the original closes the socket for
    result = message(connection_id, data)
    # Then API Gateway is asked to close it (no close code can be sent), it is forgotten, and the answer has no body
    assert result == {"statusCode": 200}, case
    assert env.api.closed == [connection_id]
    assert session_of(connection_id) is None
    # And the log names the close code the original would have sent
    assert [getattr(r, "close_code", None) for r in caplog.records if hasattr(r, "close_code")] == [code]


def test_an_expired_session_is_closed_on_its_next_message(env: Env) -> None:
    from functions._runtime import get_realtime

    connection_id = connect(env, "alice")
    session = session_of(connection_id)
    assert session is not None
    get_realtime().connections.put_connection(
        Connection(**{**{f: getattr(session, f) for f in Connection.__dataclass_fields__}, "expires_at": 1})
    )
    assert message(connection_id, text(b"\x02" + encode_sync_pull(SyncPull("alice", 0, 10)))) == {"statusCode": 200}
    assert env.api.closed == [connection_id] and session_of(connection_id) is None


def test_a_message_of_an_unknown_session_closes_it(env: Env) -> None:
    env.api.connect("stray=")
    assert message("stray=", text(b"\x02\x00")) == {"statusCode": 200}
    assert env.api.closed == ["stray="]


# -- the broadcaster -----------------------------------------------------------------------------------------------


def test_a_push_reaches_every_other_session_its_rules_let_see_it(env: Env) -> None:
    # Given sessions: alice (the pusher), bob (team red, text), frank (team red, binary), carol (team blue),
    # dave (API Gateway no longer knows it), erin (expired)
    alice = connect(env, "alice", team="red")
    bob = connect(env, "bob", team="red")
    frank = connect(env, "frank", team="red", encoding="binary")
    carol = connect(env, "carol", team="blue")
    dave = connect(env, "dave", team="red")
    env.api.sessions.pop(dave)
    erin = connect(env, "erin", team="red")
    session = session_of(erin)
    assert session is not None
    from functions._runtime import get_realtime

    get_realtime().connections.put_connection(
        Connection(**{**{f: getattr(session, f) for f in Connection.__dataclass_fields__}, "expires_at": 1})
    )
    # And alice pushes a red row over her socket
    row = f"r-{uuid.uuid4().hex[:8]}"
    reply(message(alice, text(push_frame("alice", [(row, {"title": "milk", "team": "red"})]))))
    # When the stream's records reach the broadcaster
    result = invoke(ws_broadcast, env.stream.event())
    # Then no record failed
    assert result == {"batchItemFailures": []}
    # And bob got the change as a base64 text broadcast frame, frank as binary, alice (the pusher) and carol nothing
    (got,) = received(env, bob)
    assert [d.row_id for d in got.deltas] == [row] and got.deltas[0].client_id == "alice" and not got.has_more
    assert received(env, frank, binary=True) == [got]
    assert env.api.sent(alice) == [] and env.api.sent(carol) == []
    # And the gone session is forgotten, the expired one closed and forgotten
    assert session_of(dave) is None
    assert env.api.closed == [erin] and session_of(erin) is None
    assert session_of(bob) is not None


def test_a_change_too_large_for_a_message_becomes_a_pull_notice(env: Env) -> None:
    # Given bob's session and a push of a small row and one over API Gateway's 32 KB frame
    alice, bob = connect(env, "alice", team="red"), connect(env, "bob", team="red")
    small, large = f"s-{uuid.uuid4().hex[:8]}", f"l-{uuid.uuid4().hex[:8]}"
    rows = [(small, {"title": "x", "team": "red"}), (large, {"title": "y" * 40_000, "team": "red"})]
    reply(message(alice, text(push_frame("alice", rows))))
    # When the broadcaster runs
    assert invoke(ws_broadcast, env.stream.event()) == {"batchItemFailures": []}
    # Then bob gets the small row, then a notice with no deltas and hasMore (pull now); every message fits
    frames = env.api.sent(bob)
    assert all(len(f) <= 32 * 1024 for f in frames)
    got = received(env, bob)
    assert [[d.row_id for d in r.deltas] for r in got] == [[small], []]
    assert got[-1].has_more


def test_a_failed_gateways_records_are_reported_and_the_others_are_not(env: Env) -> None:
    # Given a session on each gateway, the other gateway's throttled by API Gateway past the sender's retries
    alice, bob = connect(env, "alice", team="red"), connect(env, "bob", team="red")
    gus = connect(env, "gus", gw="other")
    hal = connect(env, "hal", gw="other")
    env.api.throttle(hal, 100)
    # And pushes to both gateways
    reply(message(alice, text(push_frame("alice", [(f"d-{uuid.uuid4().hex[:8]}", {"team": "red"})]))))
    reply(message(gus, text(push_frame("gus", [(f"o-{uuid.uuid4().hex[:8]}", {"title": "o"})]))))
    event = env.stream.event()
    by_gateway = {r["dynamodb"]["NewImage"]["shard"]["S"].split("#")[0]: r for r in event["Records"]}
    # And a damaged chunk record
    damaged = copy.deepcopy(by_gateway["default"])
    damaged["dynamodb"]["NewImage"]["z"] = {"B": "AAAA"}
    damaged["dynamodb"]["SequenceNumber"] = "9" + damaged["dynamodb"]["SequenceNumber"]
    event["Records"].append(damaged)
    # When the broadcaster runs
    result = invoke(ws_broadcast, event)
    # Then exactly the other gateway's record and the damaged one are reported for a retry
    failed = {f["itemIdentifier"] for f in result["batchItemFailures"]}
    assert failed == {by_gateway["other"]["dynamodb"]["SequenceNumber"], damaged["dynamodb"]["SequenceNumber"]}
    # And the default gateway's broadcast went out
    assert len(received(env, bob)) == 1


def test_the_sample_stream_event_decodes_and_broadcasts(env: Env) -> None:
    event = sample("ws_broadcast_stream")
    (entry,) = decode_stream_records(event["Records"])["default"]
    assert entry.delta.row_id == "t1"
    bob = connect(env, "bob", team="red")
    assert invoke(ws_broadcast, event) == {"batchItemFailures": []}
    assert env.api.sent(bob) == []  # the row's team is unset: bob's rules do not let him see it


# -- the broadcaster reads membership tables -------------------------------------------------------------------------


@pytest.fixture
def members_gateway(env: Env) -> Iterator[str]:
    """The ``other`` gateway under rules reading ``tasks`` by project membership (the ``memberships`` rows whose
    ``user`` is the caller's ``sub``), without rules again afterwards."""
    DynamoDBConfigStore(env.client, env.names).put_sync_rules("other", parse_sync_rules(MEMBERSHIP_RULES))
    yield "other"
    env.client.delete_item(TableName=env.names.config, Key={"gw": {"S": "other"}, "sk": {"S": "rules"}})


def write(gw: str, table: str, rows: list[tuple[str, dict[str, Any]]]) -> None:
    """An admin's push of ``rows`` of ``table`` to ``gw`` (trusted, as over HTTP: admin-only tables too)."""
    from functions._runtime import get_deps
    from lakesync.gateway.push import push

    frame = push_frame("ops", rows, table=table)
    result = push(get_deps(), gw, decode_sync_push(frame[1:]), client_id="ops", trusted=True)
    assert result.accepted == len(rows), result.receipts


def broadcast(env: Env) -> None:
    """The stream's new records through the broadcaster, none failing."""
    assert invoke(ws_broadcast, env.stream.event()) == {"batchItemFailures": []}


def test_a_membership_brings_its_projects_rows_live_and_its_change_a_pull_notice(
    env: Env, members_gateway: str
) -> None:
    # Given ann and bob on a gateway whose tasks are read by project membership, ann a member of p1, bob of p2
    ann, bob = connect(env, "ann", gw=members_gateway), connect(env, "bob", gw=members_gateway)
    write(
        members_gateway,
        "memberships",
        [("ann-p1", {"user": "ann", "project": "p1"}), ("bob-p2", {"user": "bob", "project": "p2"})],
    )
    broadcast(env)
    seen = {ann: len(received(env, ann)), bob: len(received(env, bob))}
    # When an admin writes a task of each project
    write(members_gateway, "tasks", [("t-p1", {"project_id": "p1"}), ("t-p2", {"project_id": "p2"})])
    broadcast(env)
    # Then each hears its project's task live, not the other's
    (to_ann,) = received(env, ann)[seen[ann] :]
    (to_bob,) = received(env, bob)[seen[bob] :]
    assert [d.row_id for d in to_ann.deltas] == ["t-p1"] and not to_ann.has_more
    assert [d.row_id for d in to_bob.deltas] == ["t-p2"] and not to_bob.has_more
    # When the admin makes ann a member of p2 too
    write(members_gateway, "memberships", [("ann-p2", {"user": "ann", "project": "p2"})])
    broadcast(env)
    # Then ann's socket gets a pull-now notice (no deltas, hasMore), and bob's, whose scope did not move, nothing
    (notice,) = received(env, ann)[seen[ann] + 1 :]
    assert notice.deltas == () and notice.has_more
    assert len(received(env, bob)) == seen[bob] + 1


class _Calls:
    """The AWS calls made through boto3's default session while registered: ``(service, operation, params)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def __call__(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.service_model.service_name, model.name, params))

    def reads_of(self, env: Env) -> set[str]:
        """What of the membership tables' sources the calls read: ``heads``, ``deltas`` (tables), ``s3``."""
        tables = {env.names.heads: "heads", env.names.deltas: "deltas"}
        named = {n for _, _, p in self.calls for n in (p.get("TableName"), *p.get("RequestItems", {}))}
        return {tables[n] for n in named if n in tables} | {service for service, _, _ in self.calls if service == "s3"}


@pytest.fixture
def calls() -> Iterator[_Calls]:
    """Every AWS call of the functions' clients (made again, so that they carry the hook) while the test runs."""
    from functions._runtime import reset_runtime

    recorder = _Calls()
    events = boto3._get_default_session().events
    events.register("provide-client-params", recorder, unique_id="fn-ws-calls")
    reset_runtime()
    yield recorder
    events.unregister("provide-client-params", unique_id="fn-ws-calls")
    reset_runtime()


def test_a_broadcast_under_rules_without_memberships_reads_no_membership_source(
    env: Env, members_gateway: str, calls: _Calls
) -> None:
    # Given a session on the gateway without membership rules and one on the gateway with them
    alice, bob = connect(env, "alice", team="red"), connect(env, "bob", team="red")
    ann = connect(env, "ann", gw=members_gateway)
    # When a row is written on the gateway without membership rules and broadcast
    reply(message(alice, text(push_frame("alice", [(f"r-{uuid.uuid4().hex[:8]}", {"team": "red"})]))))
    calls.calls.clear()
    broadcast(env)
    # Then it reached bob, and the broadcast read no head, no log and no checkpoint
    assert len(received(env, bob)) == 1
    assert calls.reads_of(env) == set()
    # When someone else's membership row and a task are written on the gateway with membership rules and broadcast
    # (the membership table's head moves, whatever an earlier test left in this process's membership view)
    write(members_gateway, "memberships", [(f"m-{uuid.uuid4().hex[:8]}", {"user": "zed", "project": "p1"})])
    write(members_gateway, "tasks", [(f"t-{uuid.uuid4().hex[:8]}", {"project_id": "p9"})])
    calls.calls.clear()
    broadcast(env)
    # Then that broadcast read the membership table's heads and log (ann is a member of nothing: she hears nothing)
    assert calls.reads_of(env) == {"heads", "deltas"}
    assert received(env, ann) == []
