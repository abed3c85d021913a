"""The wire: protobuf codec, WebSocket and checkpoint framing, and the JSON conventions of the API.

Stable public API::

    encode(message, obj) -> bytes          decode(message, data) -> dict        (JSON API shape, any .proto message)
    encode_sync_push / decode_sync_push    encode_sync_pull / decode_sync_pull  (domain objects, hot path)
    encode_sync_response / decode_sync_response, encode_row_delta / decode_row_delta
    framing: encode_frame, decode_frame, encode_broadcast, decode_broadcast_frame, frame_checkpoint, iter_checkpoint
    jsonapi: string_to_bigint, revive, replace, dumps, loads, BigInt

Decoders raise only :class:`~lakesync.core.errors.CodecError` on bad input. The generated ``*_pb2`` code in
``lakesync.wire._pb`` is private: nothing outside this package imports it.
"""

from __future__ import annotations

from lakesync.wire import jsonapi
from lakesync.wire.codec import (
    MESSAGE_NAMES,
    decode,
    decode_row_delta,
    decode_sync_pull,
    decode_sync_push,
    decode_sync_response,
    encode,
    encode_row_delta,
    encode_sync_pull,
    encode_sync_push,
    encode_sync_response,
)
from lakesync.wire.framing import (
    FRAME_TAGS,
    TAG_ACTION_PUSH,
    TAG_ACTION_RESPONSE,
    TAG_BROADCAST,
    TAG_SYNC_PULL,
    TAG_SYNC_PUSH,
    decode_broadcast_frame,
    decode_frame,
    encode_broadcast,
    encode_frame,
    frame_checkpoint,
    frame_checkpoint_chunk,
    iter_checkpoint,
    iter_checkpoint_responses,
)

__all__ = [
    "FRAME_TAGS",
    "MESSAGE_NAMES",
    "TAG_ACTION_PUSH",
    "TAG_ACTION_RESPONSE",
    "TAG_BROADCAST",
    "TAG_SYNC_PULL",
    "TAG_SYNC_PUSH",
    "decode",
    "decode_broadcast_frame",
    "decode_frame",
    "decode_row_delta",
    "decode_sync_pull",
    "decode_sync_push",
    "decode_sync_response",
    "encode",
    "encode_broadcast",
    "encode_frame",
    "encode_row_delta",
    "encode_sync_pull",
    "encode_sync_push",
    "encode_sync_response",
    "frame_checkpoint",
    "frame_checkpoint_chunk",
    "iter_checkpoint",
    "iter_checkpoint_responses",
    "jsonapi",
]
