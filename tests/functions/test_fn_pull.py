"""GET /v1/sync/{gw}/pull through functions.pull.lambda_handler: query parsing (the pull_params vectors, JS parseInt,
StringToBigInt, em-dash messages), the pull vectors, cursors, sync-rule filtering by token claims, protobuf answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import functions.admin as admin_fn
import functions.pull as pull_fn
import functions.push as push_fn
from functions._query import PullParams, js_parse_int, parse_pull_params
from lakesync.core.delta import make_delta
from lakesync.core.errors import ValidationError
from lakesync.core.hlc import MAX_HLC, encode
from lakesync.wire import decode_sync_response

VECTORS = json.loads((Path(__file__).parent.parent / "vectors" / "http_handlers.json").read_text(encoding="utf-8"))
PARAM_CASES = VECTORS["pull_params"]
PULL_CASES = VECTORS["pull"]
FIXED_MS = 1_700_000_000_000


def _query(params: dict[str, str | None]) -> dict[str, str]:
    return {k: v for k, v in params.items() if v is not None}


# -- parameters -----------------------------------------------------------------------------------------------------


def _starts_a_cursor(case: dict[str, Any]) -> bool:
    """Ours, not the original's: a pull with a clientId but neither since nor cursor starts a cursor stream."""
    params = case["params"]
    return bool(params.get("clientId")) and not params.get("since") and not params.get("cursor")


@pytest.mark.parametrize("case", PARAM_CASES, ids=[c["name"] for c in PARAM_CASES])
def test_pull_params_vector_parser(case):
    # Given the vector's query, When parsed
    query = _query(case["params"])
    expected = case["expected"]
    if _starts_a_cursor(case):
        # Then (our documented difference) it starts a cursor stream from the beginning instead of a 400
        params = parse_pull_params(query)
        assert (params.since, params.cursor) == (None, "")
    elif expected["ok"]:
        # Then the value is the vector's
        params = parse_pull_params(query)
        value = expected["value"]
        assert (params.client_id, str(params.since), params.limit) == (
            value["clientId"],
            value["sinceHlc"],
            value["maxDeltas"],
        )
        assert params.source is None
    else:
        # Or the error is the vector's
        with pytest.raises(ValidationError) as err:
            parse_pull_params(query)
        assert err.value.to_body() == expected["body"]


@pytest.mark.parametrize("case", PARAM_CASES, ids=[c["name"] for c in PARAM_CASES])
def test_pull_params_vector_through_handler(api, case):
    # Given the vector's query on the sample pull event, When handled
    reply = api.call(pull_fn, api.event("pull", query=_query(case["params"])))
    # Then invalid queries get the vector's status and body, valid ones a page (and one without since a cursor)
    expected = case["expected"]
    if expected["ok"] or _starts_a_cursor(case):
        assert reply.status == 200
        assert reply.json()["deltas"] == []
        assert "cursor" in reply.json()
    else:
        assert (reply.status, reply.json()) == (expected["status"], expected["body"])


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10abc", 10),
        ("1.9", 1),
        ("0x10", 0),
        ("  7", 7),
        ("\u00a0\ufeff8", 8),
        ("+3", 3),
        ("-0", 0),
        ("1e3", 1),
        ("00012", 12),
        ("9" * 40, 10**18),
        ("abc", None),
        ("", None),
        ("-", None),
        ("\u0085 5", None),
    ],
)
def test_js_parse_int_is_a_prefix_parse(text, value):
    assert js_parse_int(text) == value


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"since": " 42 ", "clientId": "c"}, PullParams("c", 42, 100)),
        ({"since": "-1", "clientId": "c"}, PullParams("c", 0, 100)),
        ({"since": str(2**80), "clientId": "c"}, PullParams("c", MAX_HLC, 100)),
        ({"since": "", "clientId": "c", "cursor": "abc"}, PullParams("c", None, 100, None, "abc")),
        ({"clientId": "c", "cursor": ""}, PullParams("c", None, 100, None, "")),
        ({"since": "5", "clientId": "c", "limit": "20000"}, PullParams("c", 5, 10_000)),
        ({"since": "5", "clientId": "c", "limit": ""}, PullParams("c", 5, 100)),
        ({"since": "5", "clientId": "c", "source": "pg", "cursor": ""}, PullParams("c", 5, 100, "pg", None)),
    ],
    ids=[
        "spaces",
        "negative-clamped",
        "huge-clamped",
        "cursor-without-since",
        "empty-cursor-starts-a-stream",
        "limit-clamped",
        "limit-empty",
        "source",
    ],
)
def test_pull_params_our_additions(query, expected):
    assert parse_pull_params(query) == expected


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ({"since": "0"}, "Missing required query params: since, clientId"),
        ({"since": "0", "clientId": ""}, "Missing required query params: since, clientId"),
        ({"since": "1e3", "clientId": "c"}, "Invalid 'since' parameter — must be a decimal integer"),
        ({"since": "-0x1", "clientId": "c"}, "Invalid 'since' parameter — must be a decimal integer"),
        ({"since": "1,2", "clientId": "c"}, "Invalid 'since' parameter — must be a decimal integer"),
        ({"since": "0", "clientId": "c", "limit": "0"}, "Invalid 'limit' parameter — must be a positive integer"),
        ({"clientId": "c", "cursor": "!!"}, "Invalid 'cursor' parameter"),
    ],
)
def test_pull_bad_query_is_400(api, query, error):
    reply = api.call(pull_fn, api.event("pull", query=query))
    assert (reply.status, reply.json()) == (400, {"error": error, "code": "VALIDATION_ERROR"})


# -- the pull vectors -----------------------------------------------------------------------------------------------


def _vector_setup(api):
    """The vectors' gateway: p1{user_id:u1} and p2{user_id:u2} pushed in one push by client "a", clock fixed."""
    api.fix_clock(FIXED_MS)
    deltas = [
        make_delta(
            "INSERT", table="todos", row_id="r1", client_id="a", hlc=encode(1_000_000, 0), columns={"user_id": "u1"}
        ),
        make_delta(
            "INSERT", table="todos", row_id="r2", client_id="a", hlc=encode(1_000_001, 0), columns={"user_id": "u2"}
        ),
    ]
    docs = [d.to_json() for d in deltas]
    docs[0]["deltaId"], docs[1]["deltaId"] = "p1", "p2"
    reply = api.call(push_fn, api.event("push_json", token=api.token("a"), body={"clientId": "a", "deltas": docs}))
    assert reply.status == 200
    return int(reply.json()["serverHlc"])


@pytest.mark.parametrize("case", PULL_CASES, ids=[c["name"] for c in PULL_CASES])
def test_pull_vector(api, case):
    # Given the vectors' gateway, its sync rules, and a token carrying the vector's claims
    pushed_hlc = _vector_setup(api)
    if case["sync_rules"] is not None:
        saved = api.call(admin_fn, api.event("admin_sync_rules_post", token=api.admin_token(), body=case["sync_rules"]))
        assert saved.status == 200
    sub = (case["claims"] or {}).get("sub", case["params"]["clientId"])
    # When pulling with the vector's params
    reply = api.call(pull_fn, api.event("pull", token=api.token(sub), query=_query(case["params"])))
    body = reply.json()
    expected = case["expected"]
    # Then status, deltas and hasMore are the vector's
    assert reply.status == expected["status"]
    if expected["status"] != 200:
        assert body == expected["body"]
        return
    assert body["deltas"] == expected["body"]["deltas"]
    assert body["hasMore"] == expected["body"]["hasMore"]
    # Ours: serverHlc is a fresh server timestamp after the push's (the original's counter quirk makes its value
    # differ), and a cursor is added.
    server_hlc = int(body["serverHlc"])
    assert server_hlc > pushed_hlc and server_hlc >> 16 == FIXED_MS
    assert isinstance(body["cursor"], str)


# -- our behaviour: cursors, rules, protobuf -----------------------------------------------------------------------


def _push_rows(api, *rows: tuple[str, str], writer: str = "client-a"):
    """``writer`` pushes the rows (``rowId``, owner); returns the receipts."""
    deltas = [
        make_delta(
            "UPDATE",
            table="todos",
            row_id=row,
            client_id=writer,
            hlc=encode(1_763_000_000_000 + i, 0),
            columns={"user_id": owner, "title": row},
        ).to_json()
        for i, (row, owner) in enumerate(rows)
    ]
    body = {"clientId": writer, "deltas": deltas}
    reply = api.call(push_fn, api.event("push_json", body=body, token=api.token(writer)))
    assert reply.status == 200
    return reply.json()["receipts"]


def test_pull_sample_event_returns_pushed_deltas(api):
    # Given the sample push committed
    api.call(push_fn, api.event("push_json"))
    # When the sample pull is handled
    reply = api.call(pull_fn, api.event("pull"))
    body = reply.json()
    # Then the delta comes back with hasMore false and a cursor
    assert reply.status == 200
    assert [d["deltaId"] for d in body["deltas"]] == [
        json.loads(api.event("push_json")["body"])["deltas"][0]["deltaId"]
    ]
    assert body["hasMore"] is False and body["cursor"]


def test_pull_cursor_sample_event_resumes_after_the_cursor(api):
    # Given two commits on the shard the sample cursor names (it stands after the first)
    _push_rows(api, ("row-1", "client-a"))
    _push_rows(api, ("row-2", "client-a"))
    # When the sample cursor pull is handled
    reply = api.call(pull_fn, api.event("pull_cursor"))
    # Then only the second commit is returned
    assert reply.status == 200
    assert [d["rowId"] for d in reply.json()["deltas"]] == ["row-2"]


def test_pull_pages_with_cursor_deliver_everything_once(api):
    # Given five rows
    _push_rows(api, *[(f"r{i}", "client-a") for i in range(5)])
    seen: list[str] = []
    cursor = ""
    # When paging two at a time by cursor, starting from an empty cursor
    for _ in range(5):
        body = api.call(
            pull_fn, api.event("pull", query={"clientId": "client-a", "limit": "2", "cursor": cursor})
        ).json()
        seen += [d["rowId"] for d in body["deltas"]]
        cursor = body["cursor"]
        if not body["hasMore"]:
            break
    # Then every row arrives exactly once
    assert sorted(seen) == [f"r{i}" for i in range(5)]


def test_pull_filters_by_the_token_claims(api):
    # Given rules scoping todos to their owner, and rows of two owners
    rules = json.loads(api.event("admin_sync_rules_post")["body"])
    assert api.call(admin_fn, api.event("admin_sync_rules_post", token=api.admin_token())).status == 200
    _push_rows(api, ("mine", "client-a"))
    _push_rows(api, ("theirs", "client-b"), writer="client-b")
    assert rules["buckets"][0]["filters"][0]["value"] == "jwt:sub"
    # (client-a may not write a row outside its bucket: rejected, and the row stays client-b's)
    [receipt] = _push_rows(api, ("theirs", "client-a"))
    assert receipt["rejected"] is True and receipt["code"] == "OUT_OF_SCOPE" and receipt["row"] is None
    # When each owner pulls
    pages = {
        sub: api.call(pull_fn, api.event("pull", token=api.token(sub))).json()["deltas"]
        for sub in ("client-a", "client-b")
    }
    rows = {sub: [d["rowId"] for d in deltas if d["op"] != "DELETE"] for sub, deltas in pages.items()}
    # Then each sees only their rows
    assert rows == {"client-a": ["mine"], "client-b": ["theirs"]}
    # And client-a, which wrote "theirs" (so may hold it), is told to delete it: it is outside its bucket
    assert [(d["op"], d["rowId"]) for d in pages["client-a"] if d["op"] == "DELETE"] == [("DELETE", "theirs")]


def test_pull_protobuf_answer_carries_the_cursor_in_a_header(api):
    _push_rows(api, ("row-1", "client-a"))
    reply = api.call(pull_fn, api.event("pull", headers={"accept": "application/x-protobuf"}))
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "application/x-protobuf"
    response = decode_sync_response(reply.body)
    assert [d.row_id for d in response.deltas] == ["row-1"]
    assert reply.headers[pull_fn.CURSOR_HEADER]


def test_pull_cursor_of_another_gateway_is_400(api):
    cursor = json.loads(json.dumps(api.event("pull_cursor")["queryStringParameters"]))["cursor"]
    token = api.token(gw="other")
    reply = api.call(pull_fn, api.event("pull_cursor", token=token, gateway="other"))
    assert cursor and (reply.status, reply.json()["code"]) == (400, "VALIDATION_ERROR")
    assert reply.json()["error"] == "The cursor belongs to another gateway"


def test_pull_pages_by_since_make_progress(api):
    # Given five rows committed together
    _push_rows(api, *[(f"r{i}", "client-a") for i in range(5)])
    seen: list[str] = []
    since = "0"
    # When the original client pages two at a time with since := serverHlc
    for _ in range(5):
        body = api.call(pull_fn, api.event("pull", query={"clientId": "client-a", "limit": "2", "since": since})).json()
        seen += [d["rowId"] for d in body["deltas"]]
        since = body["serverHlc"]
        if not body["hasMore"]:
            break
    # Then every row arrives (at least once)
    assert set(seen) == {f"r{i}" for i in range(5)}


@pytest.mark.parametrize("length", [257, 2100])
def test_pull_by_since_as_a_client_whose_id_no_push_accepts_is_served_without_a_session(api, length):
    # Given rows, and a token whose sub is longer than any clientId a push accepts (256 bytes): such a client's
    # since session would be keyed by it (on DynamoDB over the 2,048-byte key limit from ~2,030 bytes on)
    _push_rows(api, *[(f"r{i}", "client-a") for i in range(5)])
    sub = "s" * length
    token = api.token(sub)
    before = api.items()
    seen: list[str] = []
    since = "0"
    # When it pages by since as itself
    for _ in range(5):
        reply = api.call(pull_fn, api.event("pull", token=token, query={"clientId": sub, "limit": "2", "since": since}))
        assert reply.status == 200, reply.body
        seen += [d["rowId"] for d in reply.json()["deltas"]]
        since = reply.json()["serverHlc"]
        if not reply.json()["hasMore"]:
            break
    # Then every row arrives (at least once, as for any since pull) and no session was stored for it
    assert set(seen) == {f"r{i}" for i in range(5)}
    assert api.items() == before


def test_pull_json_is_exactly_the_rendering_of_the_pushed_deltas_for_tricky_values(api):
    # Given deltas whose values exercise JSON.stringify's corners: floats, big and negative numbers, escapes,
    # non-BMP characters, nested objects in insertion order, and sync rules that use no images
    from lakesync.core.canonical import js_stringify

    values = [
        {"f": 1.0, "g": 0.1, "h": 1e21, "i": 1e-7, "j": -0.0, "k": 2**53 + 1},
        {"s": 'quote " back \\ nl \n tab \t \u0001 \u2028 😀 é'},
        {"nested": {"z": [1, {"b": None, "a": True}], "a": "x"}},
    ]
    deltas = [
        make_delta(
            "UPDATE",
            table="todos",
            row_id=f"r{i}",
            client_id="client-a",
            hlc=encode(1_763_000_000_000 + i, 0),
            columns=v,
        )
        for i, v in enumerate(values)
    ]
    pushed = api.call(
        push_fn, api.event("push_json", body={"clientId": "client-a", "deltas": [d.to_json() for d in deltas]})
    )
    assert pushed.status == 200
    # (the push answers with the same rendering of the effective deltas)
    assert all(js_stringify(delta.to_json()) in pushed.body.decode("utf-8") for delta in deltas)

    # When they are pulled as JSON (the stored wire text is sent as it is)
    reply = api.call(pull_fn, api.event("pull", query={"clientId": "client-a", "since": "0", "limit": "10"}))

    # Then the body's deltas are byte for byte what rendering the deltas again gives (JSON.stringify's numbers)
    assert reply.status == 200
    body = reply.body.decode("utf-8")
    assert all(js_stringify(delta.to_json()) in body for delta in deltas)
    assert reply.json()["deltas"] == [json.loads(js_stringify(d.to_json())) for d in deltas]


def test_pull_json_pages_fit_the_lambda_response_limit_as_the_runtime_escapes_them(api):
    # Given 40 rows of 45,000 "é" each (90 KB stored apiece, 3.6 MB in all): the Lambda runtime (Python 3.11)
    # serialises a response with non-ASCII escaped, 6 bytes per "é"
    rows = [
        make_delta(
            "INSERT",
            table="todos",
            row_id=f"wide-{i:02d}",
            client_id="client-a",
            hlc=encode(1_763_000_000_000 + i, 0),
            columns={"title": "é" * 45_000},
        ).to_json()
        for i in range(40)
    ]
    for start in range(0, len(rows), 8):
        body = {"clientId": "client-a", "deltas": rows[start : start + 8]}
        assert api.call(push_fn, api.event("push_json", body=body)).status == 200
    # When they are pulled as JSON by cursor
    seen: list[str] = []
    cursor = ""
    for _ in range(40):
        reply = api.call(pull_fn, api.event("pull", query={"clientId": "client-a", "limit": "1000", "cursor": cursor}))
        # Then every response, as the runtime would send it, is within Lambda's 6 MB response limit
        assert len(json.dumps(reply.raw)) < 6_291_556
        page = reply.json()
        seen += [d["rowId"] for d in page["deltas"]]
        cursor = page["cursor"]
        if not page["hasMore"]:
            break
    # And every row arrives exactly once
    assert sorted(seen) == [f"wide-{i:02d}" for i in range(40)]
