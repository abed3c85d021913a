"""Framing: WebSocket tag frames and broadcast frames with the original's error messages (reference §11.2), and the
length-prefixed checkpoint stream (§11.3) with clear errors on truncation."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakesync import wire
from lakesync.core.delta import make_delta
from lakesync.core.errors import CodecError, ValidationError
from lakesync.core.messages import SyncResponse
from lakesync.wire import framing

VECTORS = Path(__file__).parent.parent / "vectors"
PROTO = json.loads((VECTORS / "proto_wire.json").read_text(encoding="utf-8"))
ACK = next(c for c in PROTO["cases"] if c["message"] == "SyncResponse")
FRAMED_PUSH = next(c for c in PROTO["cases"] if c["message"].startswith("framed:"))


def _response(n: int, server_hlc: int = 7) -> SyncResponse:
    deltas = tuple(
        make_delta("UPDATE", table="t", row_id=f"r{i}", client_id="c", hlc=100 + i, columns={"v": i}) for i in range(n)
    )
    return SyncResponse(deltas, server_hlc)


def test_tag_constants_match_the_protocol():
    assert (framing.TAG_SYNC_PUSH, framing.TAG_SYNC_PULL, framing.TAG_BROADCAST) == (1, 2, 3)
    assert (framing.TAG_ACTION_PUSH, framing.TAG_ACTION_RESPONSE) == (4, 5)
    assert wire.FRAME_TAGS == {1, 2, 3, 4, 5}


def test_decode_frame_splits_the_vector_push_frame():
    tag, payload = framing.decode_frame(bytes.fromhex(FRAMED_PUSH["hex"]))
    assert tag == framing.TAG_SYNC_PUSH
    assert wire.decode_sync_push(payload).to_json() == FRAMED_PUSH["input"]


@pytest.mark.parametrize("tag", sorted(framing.FRAME_TAGS))
def test_encode_then_decode_frame_round_trips_every_tag(tag):
    assert framing.decode_frame(framing.encode_frame(tag, b"\x0a\x01c")) == (tag, b"\x0a\x01c")


@pytest.mark.parametrize("data", [b"", b"\x01"], ids=["empty", "tag only"])
def test_decode_frame_shorter_than_two_bytes_is_too_short(data):
    with pytest.raises(CodecError) as info:
        framing.decode_frame(data)
    assert info.value.message == "Message too short"


@pytest.mark.parametrize(("tag", "text"), [(0x00, "0x00"), (0x06, "0x06"), (0x0A, "0x0a"), (0xFF, "0xff")])
def test_decode_frame_unknown_tag_names_it_in_two_lowercase_hex_digits(tag, text):
    with pytest.raises(CodecError) as info:
        framing.decode_frame(bytes((tag, 0)))
    assert info.value.message == f"Unknown message tag: {text}"


def test_encode_frame_refuses_undefined_tags():
    with pytest.raises(ValidationError, match="Unknown message tag: 0x09"):
        framing.encode_frame(9, b"x")


def test_broadcast_frame_round_trips_and_starts_with_0x03():
    response = _response(3)
    frame = framing.encode_broadcast(response)
    assert frame[0] == framing.TAG_BROADCAST
    assert frame[1:] == wire.encode_sync_response(response)
    assert framing.decode_broadcast_frame(frame) == response


def test_broadcast_of_the_ack_vector_is_the_tag_plus_the_vector_bytes():
    response = wire.decode_sync_response(bytes.fromhex(ACK["hex"]))
    assert framing.encode_broadcast(response).hex() == "03" + ACK["hex"]


def test_untagged_sync_responses_never_start_with_the_broadcast_tag():
    for response in (_response(0), _response(1), _response(2, server_hlc=0), SyncResponse((), 5, True)):
        data = wire.encode_sync_response(response)
        assert data[:1] != bytes((framing.TAG_BROADCAST,))


def test_decode_broadcast_frame_wrong_tag_names_both_tags():
    frame = framing.encode_frame(framing.TAG_SYNC_PUSH, bytes.fromhex(ACK["hex"]))
    with pytest.raises(CodecError) as info:
        framing.decode_broadcast_frame(frame)
    assert info.value.message == "Expected broadcast tag 0x03, got 0x01"


@pytest.mark.parametrize("data", [b"", b"\x03"], ids=["empty", "tag only"])
def test_decode_broadcast_frame_too_short(data):
    with pytest.raises(CodecError) as info:
        framing.decode_broadcast_frame(data)
    assert info.value.message == "Broadcast frame too short"


def test_decode_broadcast_frame_with_corrupt_payload_fails_to_decode_sync_response():
    with pytest.raises(CodecError) as info:
        framing.decode_broadcast_frame(b"\x03\x0a\x05ab")
    assert info.value.message == "Failed to decode SyncResponse"


# -- checkpoint stream ----------------------------------------------------------------------------------------------


def test_checkpoint_stream_is_big_endian_length_prefixed_sync_responses():
    chunks = [wire.encode_sync_response(_response(n)) for n in (2, 0, 5)]
    stream = framing.frame_checkpoint(chunks)
    offset = 0
    for chunk in chunks:
        (length,) = struct.unpack(">I", stream[offset : offset + 4])
        assert length == len(chunk)
        assert stream[offset + 4 : offset + 4 + length] == chunk
        offset += 4 + length
    assert offset == len(stream)
    assert list(framing.iter_checkpoint(stream)) == chunks
    assert list(framing.iter_checkpoint_responses(stream)) == [_response(n) for n in (2, 0, 5)]


def test_checkpoint_stream_empty_has_no_frames_and_empty_frames_are_defaults():
    assert list(framing.iter_checkpoint(b"")) == []
    assert list(framing.iter_checkpoint_responses(framing.frame_checkpoint([b""]))) == [SyncResponse((), 0)]


def test_checkpoint_truncated_length_prefix_is_a_clear_codec_error_after_good_frames():
    good = framing.frame_checkpoint_chunk(wire.encode_sync_response(_response(1)))
    frames = framing.iter_checkpoint(good + b"\x00\x00")
    assert next(frames) == good[4:]
    with pytest.raises(CodecError) as info:
        next(frames)
    assert info.value.message.startswith("Truncated checkpoint stream:")
    assert f"offset {len(good)}" in info.value.message
    assert "length prefix" in info.value.message


def test_checkpoint_truncated_payload_says_how_many_bytes_were_declared_and_left():
    chunk = wire.encode_sync_response(_response(2))
    stream = framing.frame_checkpoint_chunk(chunk)[:-3]
    with pytest.raises(CodecError) as info:
        list(framing.iter_checkpoint(stream))
    assert info.value.message == (
        f"Truncated checkpoint stream: frame at offset 0 declares {len(chunk)} bytes but only {len(chunk) - 3} remain"
    )


def test_checkpoint_undecodable_frame_fails_as_sync_response():
    stream = framing.frame_checkpoint([b"\x0a\x05ab"])
    with pytest.raises(CodecError, match="Failed to decode SyncResponse"):
        list(framing.iter_checkpoint_responses(stream))


@given(st.lists(st.binary(max_size=64), max_size=8))
def test_checkpoint_framing_round_trips_any_payloads(chunks):
    stream = framing.frame_checkpoint(chunks)
    assert len(stream) == sum(4 + len(c) for c in chunks)
    assert list(framing.iter_checkpoint(memoryview(stream))) == chunks


@given(st.binary(max_size=64))
def test_fuzz_checkpoint_reader_yields_frames_or_raises_codec_error(data):
    try:
        frames = list(framing.iter_checkpoint(data))
    except CodecError as exc:
        assert exc.message.startswith("Truncated checkpoint stream:")
    else:
        assert framing.frame_checkpoint(frames) == data


@given(st.binary(max_size=16))
def test_fuzz_frame_decoders_raise_only_codec_error(data):
    for decoder in (framing.decode_frame, framing.decode_broadcast_frame):
        try:
            decoder(data)
        except CodecError:
            pass
