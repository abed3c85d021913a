"""Sync messages (SyncPush, SyncPull, SyncResponse): the wire JSON shape both ways, and from_json type checks that
name the bad field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync.core.delta import make_delta
from lakesync.core.errors import ValidationError
from lakesync.core.messages import MAX_UINT32, SyncPull, SyncPush, SyncResponse

VECTORS = Path(__file__).parent.parent / "vectors"
PROTO_CASES = json.loads((VECTORS / "proto_wire.json").read_text(encoding="utf-8"))["cases"]
PUSH_JSON = next(c for c in PROTO_CASES if c["message"].startswith("framed:"))["input"]
PULL_JSON = next(c for c in PROTO_CASES if c["message"] == "SyncPull")["input"]
ACK_JSON = next(c for c in PROTO_CASES if c["message"] == "SyncResponse")["input"]


def test_sync_push_from_json_of_the_vector_round_trips():
    push = SyncPush.from_json(PUSH_JSON)
    assert push.client_id == "client-xyz"
    assert [d.op.value for d in push.deltas] == ["INSERT", "UPDATE", "DELETE"]
    assert push.last_seen_hlc == int(PUSH_JSON["lastSeenHlc"])
    assert push.to_json() == PUSH_JSON


def test_sync_pull_from_json_of_the_vector_round_trips():
    pull = SyncPull.from_json(PULL_JSON)
    assert pull == SyncPull(client_id="c", since_hlc=0, max_deltas=MAX_UINT32)
    assert pull.to_json() == PULL_JSON


def test_sync_response_from_json_of_the_vector_round_trips():
    response = SyncResponse.from_json(ACK_JSON)
    assert response == SyncResponse(deltas=(), server_hlc=int(ACK_JSON["serverHlc"]), has_more=False)
    assert response.to_json() == ACK_JSON


def test_optional_fields_take_their_defaults():
    assert SyncPush.from_json({"clientId": "c", "deltas": []}).last_seen_hlc == 0
    assert SyncResponse.from_json({"deltas": [], "serverHlc": "3"}).has_more is False


def test_messages_are_frozen_value_objects():
    push = SyncPush("c", ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        push.client_id = "d"  # type: ignore[misc]
    assert push == SyncPush("c", (), 0)
    assert hash(SyncPull("c", 1, 2)) == hash(SyncPull("c", 1, 2))


def _bad_delta() -> dict[str, Any]:
    delta = dict(PUSH_JSON["deltas"][1])
    delta["hlc"] = 5
    return delta


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        ([], "SyncPush must be a JSON object"),
        ({"deltas": []}, "clientId must be a non-empty string"),
        ({"clientId": "", "deltas": []}, "clientId must be a non-empty string"),
        ({"clientId": 5, "deltas": []}, "clientId must be a non-empty string"),
        ({"clientId": "c"}, "deltas must be an array"),
        ({"clientId": "c", "deltas": {}}, "deltas must be an array"),
        ({"clientId": "c", "deltas": [PUSH_JSON["deltas"][0], _bad_delta()]}, "deltas[1].hlc "),
        ({"clientId": "c", "deltas": [{"op": "MERGE"}]}, "deltas[0].op"),
        ({"clientId": "c", "deltas": [], "lastSeenHlc": 5}, "lastSeenHlc "),
        ({"clientId": "c", "deltas": [], "lastSeenHlc": "x"}, "lastSeenHlc "),
    ],
)
def test_sync_push_from_json_names_the_bad_field(obj, fragment):
    with pytest.raises(ValidationError) as info:
        SyncPush.from_json(obj)
    assert info.value.message.startswith(fragment)


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        ("x", "SyncPull must be a JSON object"),
        ({"sinceHlc": "0", "maxDeltas": 1}, "clientId "),
        ({"clientId": "c", "maxDeltas": 1}, "sinceHlc "),
        ({"clientId": "c", "sinceHlc": "-1", "maxDeltas": 1}, "sinceHlc "),
        ({"clientId": "c", "sinceHlc": "0"}, "maxDeltas "),
        ({"clientId": "c", "sinceHlc": "0", "maxDeltas": True}, "maxDeltas "),
        ({"clientId": "c", "sinceHlc": "0", "maxDeltas": 1.5}, "maxDeltas "),
        ({"clientId": "c", "sinceHlc": "0", "maxDeltas": -1}, "maxDeltas "),
        ({"clientId": "c", "sinceHlc": "0", "maxDeltas": MAX_UINT32 + 1}, "maxDeltas "),
    ],
)
def test_sync_pull_from_json_names_the_bad_field(obj, fragment):
    with pytest.raises(ValidationError) as info:
        SyncPull.from_json(obj)
    assert info.value.message.startswith(fragment)


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        (None, "SyncResponse must be a JSON object"),
        ({"serverHlc": "1"}, "deltas "),
        ({"deltas": []}, "serverHlc "),
        ({"deltas": [], "serverHlc": 1}, "serverHlc "),
        ({"deltas": [], "serverHlc": "1", "hasMore": "false"}, "hasMore "),
        ({"deltas": [None], "serverHlc": "1"}, "deltas[0] must be an object"),
    ],
)
def test_sync_response_from_json_names_the_bad_field(obj, fragment):
    with pytest.raises(ValidationError) as info:
        SyncResponse.from_json(obj)
    assert info.value.message.startswith(fragment)


hlcs = st.integers(min_value=0, max_value=2**64 - 1)
ids = st.text(min_size=1, max_size=8)
deltas = st.builds(
    lambda op, row, client, hlc, value: make_delta(
        op, table="todos", row_id=row, client_id=client, hlc=hlc, columns={"title": value}
    ),
    st.sampled_from(["INSERT", "UPDATE", "DELETE"]),
    ids,
    ids,
    hlcs,
    st.none() | st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=10),
)


@given(ids, st.lists(deltas, max_size=4).map(tuple), hlcs)
def test_sync_push_json_round_trip(client_id, delta_tuple, last_seen):
    push = SyncPush(client_id, delta_tuple, last_seen)
    assert SyncPush.from_json(json.loads(json.dumps(push.to_json()))) == push


@given(st.lists(deltas, max_size=4).map(tuple), hlcs, st.booleans())
def test_sync_response_json_round_trip(delta_tuple, server_hlc, has_more):
    response = SyncResponse(delta_tuple, server_hlc, has_more)
    assert SyncResponse.from_json(json.loads(json.dumps(response.to_json()))) == response


@given(ids, hlcs, st.integers(min_value=0, max_value=MAX_UINT32))
def test_sync_pull_json_round_trip(client_id, since, max_deltas):
    pull = SyncPull(client_id, since, max_deltas)
    assert SyncPull.from_json(pull.to_json()) == pull
