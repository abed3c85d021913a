"""Binary framing: WebSocket tags and the checkpoint stream.

WebSocket binary frames are one tag byte followed by a protobuf message::

    0x01 SyncPush (client → server)     0x02 SyncPull (client → server)
    0x03 broadcast SyncResponse (server → clients)
    0x04 ActionPush / 0x05 ActionResponse (defined, not served by the original)

LakeSync adds one tag of its own, outside the original's (:data:`FRAME_TAGS` is theirs, unchanged)::

    0x10 subscriptions: a request (client → server) or its answer (server → client), UTF-8 JSON

Responses to a push or pull are *untagged* SyncResponse bytes; a client tells a broadcast apart by its first byte
(an untagged SyncResponse starts with a field key, 0x0a/0x11/0x18, never 0x03). A frame needs a tag and at least one
payload byte, as in the original: an all-defaults message (empty payload) cannot be framed.

The checkpoint stream (``application/x-lakesync-checkpoint-stream``) is a sequence of frames
``uint32 big-endian length`` + SyncResponse bytes, with nothing before, between or after them.

Errors are :class:`~lakesync.core.errors.CodecError` with the original's messages (``Message too short``,
``Unknown message tag: 0x07``, ``Broadcast frame too short``, ``Expected broadcast tag 0x03, got 0x01``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator, Mapping
from typing import Final

from lakesync.core.canonical import JsonValue
from lakesync.core.errors import CodecError, ValidationError
from lakesync.core.messages import SyncResponse
from lakesync.wire.codec import decode_sync_response, encode_sync_response
from lakesync.wire.jsonapi import loads

TAG_SYNC_PUSH: Final = 0x01
TAG_SYNC_PULL: Final = 0x02
TAG_BROADCAST: Final = 0x03
TAG_ACTION_PUSH: Final = 0x04
TAG_ACTION_RESPONSE: Final = 0x05
FRAME_TAGS: Final[frozenset[int]] = frozenset(
    {TAG_SYNC_PUSH, TAG_SYNC_PULL, TAG_BROADCAST, TAG_ACTION_PUSH, TAG_ACTION_RESPONSE}
)

TAG_SUBSCRIPTIONS: Final = 0x10
"""LakeSync's subscription frame (docs/streams.md, "Over the WebSocket"): the tag, then a UTF-8 JSON object. Not one
of :data:`FRAME_TAGS`: :func:`decode_frame` refuses it as the original does."""

_LENGTH = struct.Struct(">I")
MAX_CHECKPOINT_FRAME: Final = 0xFFFFFFFF


def encode_frame(tag: int, payload: bytes) -> bytes:
    """A WebSocket binary frame: ``tag`` byte + ``payload``.

    Raises:
        ValidationError: if ``tag`` is not one of :data:`FRAME_TAGS`.
    """
    if tag not in FRAME_TAGS:
        raise ValidationError(f"Unknown message tag: {_hex(tag)}")
    return bytes((tag,)) + bytes(payload)


def decode_frame(data: bytes | bytearray | memoryview) -> tuple[int, bytes]:
    """Split a WebSocket binary frame into ``(tag, payload)``.

    Raises:
        CodecError: ``Message too short`` (fewer than 2 bytes) or ``Unknown message tag: 0x{hh}``.
    """
    if len(data) < 2:
        raise CodecError("Message too short")
    tag = data[0]
    if tag not in FRAME_TAGS:
        raise CodecError(f"Unknown message tag: {_hex(tag)}")
    return tag, bytes(data[1:])


def encode_broadcast(response: SyncResponse) -> bytes:
    """The broadcast frame ``0x03`` + SyncResponse.

    Raises:
        CodecError: ``Failed to encode SyncResponse``.
    """
    return bytes((TAG_BROADCAST,)) + encode_sync_response(response)


def decode_broadcast_frame(data: bytes | bytearray | memoryview) -> SyncResponse:
    """Parse a broadcast frame.

    Raises:
        CodecError: ``Broadcast frame too short``, ``Expected broadcast tag 0x03, got 0x{hh}`` or
            ``Failed to decode SyncResponse``.
    """
    if len(data) < 2:
        raise CodecError("Broadcast frame too short")
    if data[0] != TAG_BROADCAST:
        raise CodecError(f"Expected broadcast tag {_hex(TAG_BROADCAST)}, got {_hex(data[0])}")
    return decode_sync_response(bytes(data[1:]))


def encode_subscription_frame(doc: Mapping[str, object]) -> bytes:
    """The subscription frame ``0x10`` + ``doc`` as compact JSON (ASCII, so any string encodes)."""
    return bytes((TAG_SUBSCRIPTIONS,)) + json.dumps(doc, separators=(",", ":")).encode("ascii")


def decode_subscription_frame(data: bytes | bytearray | memoryview) -> dict[str, JsonValue]:
    """The JSON object of a subscription frame, parsed as strictly as an HTTP body.

    Raises:
        CodecError: ``Expected subscription tag 0x10, got 0x{hh}``, ``Invalid JSON body`` (not UTF-8 JSON), or
            ``A subscription frame holds a JSON object``.
    """
    if len(data) < 2 or data[0] != TAG_SUBSCRIPTIONS:
        got = _hex(data[0]) if len(data) else "nothing"
        raise CodecError(f"Expected subscription tag {_hex(TAG_SUBSCRIPTIONS)}, got {got}")
    doc = loads(bytes(data[1:]), revive_hlcs=False)
    if not isinstance(doc, dict):
        raise CodecError("A subscription frame holds a JSON object")
    return doc


def frame_checkpoint_chunk(payload: bytes) -> bytes:
    """One checkpoint stream frame: big-endian uint32 length + ``payload`` (SyncResponse bytes).

    Raises:
        ValidationError: if ``payload`` is 4 GiB or larger.
    """
    if len(payload) > MAX_CHECKPOINT_FRAME:
        raise ValidationError(f"Checkpoint frame of {len(payload)} bytes exceeds the uint32 length prefix")
    return _LENGTH.pack(len(payload)) + bytes(payload)


def frame_checkpoint(chunks: Iterable[bytes]) -> bytes:
    """A whole checkpoint stream from SyncResponse payloads, in order."""
    return b"".join(frame_checkpoint_chunk(chunk) for chunk in chunks)


def iter_checkpoint(data: bytes | bytearray | memoryview) -> Iterator[bytes]:
    """The SyncResponse payloads of a checkpoint stream, in order (lazily; an empty stream has none).

    Raises:
        CodecError: ``Truncated checkpoint stream: …`` when a length prefix or a payload is cut short; the frames
            before the damage have been yielded by then.
    """
    view = memoryview(data).cast("B")
    offset = 0
    while offset < len(view):
        if len(view) - offset < _LENGTH.size:
            raise CodecError(
                f"Truncated checkpoint stream: {len(view) - offset} byte(s) at offset {offset} "
                f"are too few for a {_LENGTH.size}-byte length prefix"
            )
        (length,) = _LENGTH.unpack_from(view, offset)
        start = offset + _LENGTH.size
        if len(view) - start < length:
            raise CodecError(
                f"Truncated checkpoint stream: frame at offset {offset} declares {length} bytes "
                f"but only {len(view) - start} remain"
            )
        yield bytes(view[start : start + length])
        offset = start + length


def iter_checkpoint_responses(data: bytes | bytearray | memoryview) -> Iterator[SyncResponse]:
    """The decoded SyncResponses of a checkpoint stream, in order.

    Raises:
        CodecError: on a truncated stream or an undecodable frame.
    """
    for payload in iter_checkpoint(data):
        yield decode_sync_response(payload)


def _hex(tag: int) -> str:
    return f"0x{tag:02x}"


__all__ = [
    "FRAME_TAGS",
    "MAX_CHECKPOINT_FRAME",
    "TAG_ACTION_PUSH",
    "TAG_ACTION_RESPONSE",
    "TAG_BROADCAST",
    "TAG_SUBSCRIPTIONS",
    "TAG_SYNC_PULL",
    "TAG_SYNC_PUSH",
    "decode_broadcast_frame",
    "decode_frame",
    "decode_subscription_frame",
    "encode_broadcast",
    "encode_frame",
    "encode_subscription_frame",
    "frame_checkpoint",
    "frame_checkpoint_chunk",
    "iter_checkpoint",
    "iter_checkpoint_responses",
]
