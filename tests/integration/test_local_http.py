"""End to end over real HTTP against the embedded default (moto server + the real handlers behind the local front):
sync between clients, protobuf bodies, sync rules, and bad input that must get the documented 4xx, never a 5xx."""

from __future__ import annotations

import gzip
import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client.http import ApiError, SyncClient
from lakesync.core import merge as lww
from lakesync.core.delta import RowDelta
from lakesync.core.hlc import HLC
from lakesync.local.runner import LocalStack
from lakesync.wire import decode, encode
from tests.factories import delete, insert, update

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalStack(Path(tmp_path_factory.mktemp("local")), port=0, persist=False) as running:
        yield running


def client(stack: LocalStack, sub: str, *, role: str = "client", gw: str = "default", **claims: str) -> SyncClient:
    return SyncClient(stack.url, "default", mint_token(sub, gw, stack.secret, role=role, claims=claims), sub)


def raw(stack: LocalStack, method: str, path: str, *, body: bytes | None = None, headers: dict[str, str] | None = None):
    req = urllib.request.Request(stack.url + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def fold(deltas: list[RowDelta]) -> dict[str, dict[str, Any] | None]:
    states: dict[str, lww.RowState] = {}
    for d in deltas:
        states[d.row_id] = lww.merge(states.get(d.row_id), d).state
    return {k: v.values() for k, v in states.items()}


def test_health_answers_without_a_token(stack: LocalStack) -> None:
    status, headers, body = raw(stack, "GET", "/health")
    assert status == 200
    assert json.loads(body) == {"status": "ok"}
    assert {k.lower(): v for k, v in headers.items()}["x-content-type-options"] == "nosniff"


def test_concurrent_column_edits_from_two_clients_both_reach_a_third(stack: LocalStack) -> None:
    # Given a row created by alice and two clients editing different columns at the same moment
    alice, bob, carol = client(stack, "alice"), client(stack, "bob"), client(stack, "carol")
    ha, hb = HLC(), HLC()
    alice.push([insert("n1", hlc=ha.now(), table="notes", client="alice", a=0)])
    edits = [
        (alice, update("n1", hlc=ha.now(), table="notes", client="alice", a=1)),
        (bob, update("n1", hlc=hb.now(), table="notes", client="bob", b=2)),
    ]
    threads = [threading.Thread(target=c.push, args=([d],)) for c, d in edits]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # When a third client pulls everything with its cursor
    deltas, cursor = carol.pull_all()

    # Then it has both edits, and pulling again from the cursor returns nothing new
    assert fold(deltas)["n1"] == {"a": 1, "b": 2}
    again = carol.pull(cursor=cursor)
    assert again["deltas"] == [] and again["hasMore"] is False


def test_protobuf_push_and_pull_round_trip(stack: LocalStack) -> None:
    sync = client(stack, "proto")
    delta = insert("p1", hlc=HLC().now(), table="pb", client="proto", x=[1, "y"])
    body = encode("SyncPush", {"clientId": "proto", "deltas": [delta.to_json()], "lastSeenHlc": "0"})
    headers = {"Authorization": f"Bearer {sync.token}", "Content-Type": "application/x-protobuf"}

    status, _, answer = raw(stack, "POST", "/v1/sync/default/push", body=body, headers=headers)
    assert status == 200
    assert decode("SyncResponse", answer)["deltas"] == [delta.to_json()]

    status, resp_headers, answer = raw(
        stack,
        "GET",
        "/v1/sync/default/pull?clientId=proto&cursor=",
        headers={"Authorization": f"Bearer {sync.token}", "Accept": "application/x-protobuf"},
    )
    assert status == 200
    pulled = decode("SyncResponse", answer)["deltas"]
    assert delta.to_json() in pulled
    assert {k.lower() for k in resp_headers} >= {"x-lakesync-cursor"}


def test_sync_rules_deliver_rows_and_their_deletes_only_to_matching_clients(stack: LocalStack) -> None:
    admin = client(stack, "ops", role="admin")
    admin.admin(
        "POST",
        "sync-rules",
        {
            "version": 1,
            "buckets": [
                {"name": "own", "tables": ["tasks"], "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}]}
            ],
        },
    )
    try:
        ann, ben = client(stack, "ann"), client(stack, "ben")
        clock = HLC()
        ann.push([insert("k1", hlc=clock.now(), table="tasks", client="ann", owner="ann")])
        ann.push([delete("k1", hlc=clock.now(), table="tasks", client="ann")])

        ann_deltas, _ = ann.pull_all()
        ben_deltas, _ = ben.pull_all()

        assert [d.op.value for d in ann_deltas if d.table == "tasks"] == ["INSERT", "DELETE"]
        assert [d for d in ben_deltas if d.table == "tasks"] == []
    finally:
        admin.admin("POST", "sync-rules", {"version": 1, "buckets": []})


def _delta_json(client_id: str, **overrides: Any) -> dict[str, Any]:
    return {**insert("r", hlc=HLC().now(), table="bad", client=client_id, v=1).to_json(), **overrides}


@pytest.mark.parametrize(
    ("name", "body", "token_kind", "status", "code"),
    [
        ("malformed json", b"{not json", "own", 400, "VALIDATION_ERROR"),
        ("wrong types", json.dumps({"clientId": "eve", "deltas": "x"}).encode(), "own", 400, "VALIDATION_ERROR"),
        (
            "bad hlc type",
            json.dumps({"clientId": "eve", "deltas": [_delta_json("eve", hlc=5)]}).encode(),
            "own",
            400,
            "VALIDATION_ERROR",
        ),
        (
            "invalid table",
            json.dumps({"clientId": "eve", "deltas": [_delta_json("eve", table="1x")]}).encode(),
            "own",
            422,
            "SCHEMA_ERROR",
        ),
        ("spoofed body clientId", json.dumps({"clientId": "mallory", "deltas": []}).encode(), "own", 403, "FORBIDDEN"),
        (
            "spoofed delta clientId",
            json.dumps({"clientId": "eve", "deltas": [_delta_json("mallory")]}).encode(),
            "own",
            403,
            "FORBIDDEN",
        ),
        # API Gateway's own answer (no Authorization header), then its authorizer's (a token it refuses): their bodies
        # are {"message"}; an expired token reaches the function, whose 401 makes clients refresh it
        ("no token", b"{}", "none", 401, "Unauthorized"),
        ("expired token", b"{}", "expired", 401, "AUTH_ERROR"),
        ("foreign secret", b"{}", "foreign", 403, "Forbidden"),
        ("other gateway's token", b"{}", "other-gw", 403, "FORBIDDEN"),
        (
            "too many deltas",
            json.dumps({"clientId": "eve", "deltas": [{}] * 10_001}).encode(),
            "own",
            400,
            "VALIDATION_ERROR",
        ),
        ("oversized body", b"x" * (1024 * 1024 + 1), "own", 413, "VALIDATION_ERROR"),
    ],
)
def test_bad_push_gets_the_documented_4xx_and_writes_nothing(
    stack: LocalStack, name: str, body: bytes, token_kind: str, status: int, code: str
) -> None:
    tokens = {
        "own": mint_token("eve", "default", stack.secret),
        "expired": mint_token("eve", "default", stack.secret, now_ms=1_000_000_000_000),
        "foreign": mint_token("eve", "default", "another-secret-of-enough-length"),
        "other-gw": mint_token("eve", "elsewhere", stack.secret),
    }
    headers = {"Content-Type": "application/json"}
    if token_kind in tokens:
        headers["Authorization"] = f"Bearer {tokens[token_kind]}"
    before = client(stack, "ops", role="admin").admin("GET", "metrics")["committed"]

    got, _, answer = raw(stack, "POST", "/v1/sync/default/push", body=body, headers=headers)

    doc = json.loads(answer)
    assert (got, doc.get("code", doc.get("message"))) == (status, code), name
    assert client(stack, "ops", role="admin").admin("GET", "metrics")["committed"] == before


def test_unknown_route_and_unknown_gateway_are_404(stack: LocalStack) -> None:
    token = mint_token("eve", "nowhere", stack.secret)
    status, _, body = raw(stack, "GET", "/v1/nothing/here")
    assert (status, json.loads(body)["code"]) == (404, "NOT_FOUND")
    status, _, body = raw(
        stack, "GET", "/v1/sync/nowhere/pull?clientId=eve&since=0", headers={"Authorization": f"Bearer {token}"}
    )
    assert (status, json.loads(body)["code"]) == (404, "NOT_FOUND")


def test_admin_routes_refuse_client_tokens(stack: LocalStack) -> None:
    with pytest.raises(ApiError) as err:
        client(stack, "eve").admin("GET", "metrics")
    assert (err.value.status, err.value.body["code"]) == (403, "FORBIDDEN")


@pytest.mark.parametrize("accept", ["application/json", "application/x-protobuf"])
def test_large_answers_are_gzipped_only_for_clients_that_accept_gzip(stack: LocalStack, accept: str) -> None:
    # Given a page of pull output well over a kilobyte
    sync = client(stack, "zipper")
    hlc = HLC()
    pushed = [insert(f"z{i}", hlc=hlc.now(), table="zipped", client="zipper", t="x" * 60) for i in range(40)]
    sync.push(pushed)
    path = "/v1/sync/default/pull?clientId=zipper&cursor=&limit=1000"
    auth = {"Authorization": f"Bearer {sync.token}", "Accept": accept}

    # When it is pulled without, then with, Accept-Encoding: gzip
    status, plain_headers, plain = raw(stack, "GET", path, headers=auth)
    status_gz, gz_headers, packed = raw(stack, "GET", path, headers={**auth, "Accept-Encoding": "gzip, br;q=0.5"})
    refused = raw(stack, "GET", path, headers={**auth, "Accept-Encoding": "gzip;q=0, identity"})

    # Then only the second answer is compressed, smaller, and the same bytes once decompressed
    assert status == status_gz == refused[0] == 200
    plain_headers = {k.lower(): v for k, v in plain_headers.items()}
    gz_headers = {k.lower(): v for k, v in gz_headers.items()}
    assert "content-encoding" not in plain_headers and "content-encoding" not in {k.lower() for k in refused[1]}
    assert gz_headers["content-encoding"] == "gzip" and gz_headers["vary"] == "Accept-Encoding"
    assert len(packed) < len(plain) / 3
    pages = [gzip.decompress(packed), plain, refused[2]]
    if accept == "application/json":
        decoded = [json.loads(page) for page in pages]
    else:
        decoded = [decode("SyncResponse", page) for page in pages]
    assert decoded[0]["deltas"] == decoded[1]["deltas"] == decoded[2]["deltas"]  # serverHlc differs: it is "now"
    assert {d["rowId"] for d in decoded[0]["deltas"]} >= {f"z{i}" for i in range(40)}
    # And the SDK's client asks for gzip and reads the same page
    assert sync.pull(cursor="")["deltas"] == json.loads(raw(stack, "GET", path, headers=auth_json(sync))[2])["deltas"]


def auth_json(sync: SyncClient) -> dict[str, str]:
    return {"Authorization": f"Bearer {sync.token}"}


def test_small_answers_are_never_gzipped(stack: LocalStack) -> None:
    status, headers, body = raw(stack, "GET", "/health", headers={"Accept-Encoding": "gzip"})
    assert status == 200 and json.loads(body) == {"status": "ok"}
    assert "content-encoding" not in {k.lower() for k in headers}
