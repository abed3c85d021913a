"""Stream subscriptions over the WebSocket: the subscription frame ``0x10`` (docs/streams.md, "Over the WebSocket").

A request is the tag ``0x10`` and a JSON object naming what to do, with the HTTP route's body or path parameter::

    {"op": "subscribe", "ref"?, "body": {"stream", "params"?, "ttlSeconds"?}}    POST   .../subscriptions
    {"op": "unsubscribe", "ref"?, "id"}                                          DELETE .../subscriptions/{id}
    {"op": "list", "ref"?}                                                       GET    .../subscriptions

It is served by the HTTP routes' own service functions (:mod:`lakesync.gateway.subscriptions`), as the session's
client with the session's claims, and answered on the socket with ``0x10`` and ``{"op", "ref"?, "status", "body"?}``:
the HTTP status and body the route would answer (no ``body`` where the route answers 204), refusals included. ``ref``
(a string the client chooses, at most :data:`MAX_REF_CHARS` characters) comes back as it was sent, so a client with
several requests in flight matches each answer to its request: on AWS each message is served by its own invocation,
and answers may arrive out of order.

A frame that is not such a request (not UTF-8 JSON of an object, an unknown ``op`` or field, a ``ref`` or ``id``
that is not a string) is a message that does not decode: :class:`~lakesync.core.errors.CodecError`, which the
socket answers as it answers any undecodable frame (the session closes with 1008).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from lakesync.core.canonical import JsonValue
from lakesync.core.errors import CodecError, LakeSyncError
from lakesync.core.realtime import Connection
from lakesync.core.redact import redact
from lakesync.gateway import subscriptions as service
from lakesync.gateway.deps import GatewayDeps
from lakesync.wire.framing import decode_subscription_frame, encode_subscription_frame

__all__ = ["MAX_REF_CHARS", "OPS", "serve_subscription_frame"]

MAX_REF_CHARS: Final = 64
"""The longest ``ref`` a request may carry."""
_FIELDS: Final[Mapping[str, frozenset[str]]] = {
    "subscribe": frozenset({"op", "ref", "body"}),
    "unsubscribe": frozenset({"op", "ref", "id"}),
    "list": frozenset({"op", "ref"}),
}
OPS: Final = tuple(_FIELDS)
"""What a subscription frame may ask."""


def serve_subscription_frame(deps: GatewayDeps, connection: Connection, frame: bytes) -> bytes:
    """The answer frame to the subscription request ``frame`` of ``connection``'s client.

    Raises:
        CodecError: the frame is not a subscription request.
        LakeSyncError: an unexpected failure (500), which the HTTP route would not answer with its message either.
    """
    doc = decode_subscription_frame(frame)
    op, ref = _envelope(doc)
    answer: dict[str, Any] = {"op": op} if ref is None else {"op": op, "ref": ref}
    try:
        status, body = _serve(deps, connection, op, doc)
    except LakeSyncError as exc:
        if exc.status == 500 and exc.api_code == "INTERNAL_ERROR":
            raise
        status, body = exc.status, exc.to_body()
        body["error"] = redact(str(body["error"]))
    answer["status"] = status
    if body is not None:
        answer["body"] = body
    return encode_subscription_frame(answer)


def _envelope(doc: Mapping[str, JsonValue]) -> tuple[str, str | None]:
    op = doc.get("op")
    if not isinstance(op, str) or op not in _FIELDS:
        raise CodecError(f'A subscription frame\'s "op" is one of {", ".join(OPS)}')
    unknown = sorted(set(doc) - _FIELDS[op])
    if unknown:
        raise CodecError(f'Unknown field "{unknown[0][:64]}" in a subscription frame ({op})')
    ref = doc.get("ref")
    if ref is not None and (not isinstance(ref, str) or len(ref) > MAX_REF_CHARS):
        raise CodecError(f'A subscription frame\'s "ref" is a string of at most {MAX_REF_CHARS} characters')
    if op == "unsubscribe" and not isinstance(doc.get("id"), str):
        raise CodecError('An unsubscribe frame\'s "id" is a string')
    return op, ref


def _serve(deps: GatewayDeps, connection: Connection, op: str, doc: Mapping[str, JsonValue]) -> tuple[int, Any]:
    """The status and body the HTTP route would answer."""
    gateway, client = connection.gateway, connection.client_id
    if op == "subscribe":
        held = service.subscribe(deps, gateway, client, connection.claims, doc.get("body"))
        return 201, held.to_json()
    if op == "unsubscribe":
        service.unsubscribe(deps, gateway, client, str(doc["id"]))
        return 204, None
    return 200, {"subscriptions": [h.to_json() for h in service.list_subscriptions(deps, gateway, client)]}
