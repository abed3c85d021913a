"""API Gateway WebSocket API events and route responses, read and shaped for :mod:`lakesync.gateway.realtime` (no I/O).

* :func:`gateway_of`: a ``$connect`` event's gateway: ``?gateway=`` (a WebSocket API has one URL and no path
  parameters), else the original's ``/v1/sync/{gw}/ws`` path when the event carries one (the local front's may).
* :func:`message_data`: a ``$default`` event's message: the text as sent (base64 sessions), or the bytes of a body
  marked ``isBase64Encoded`` (never from API Gateway, which refuses a client's binary frame with 1003).
* :func:`route_response`: a reply as the ``$default`` route response, within API Gateway's 128 KB message.
* :func:`refusal`: a refused upgrade as the non-2xx answer API Gateway turns into that HTTP status.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from lakesync.core.errors import LakeSyncError
from lakesync.gateway.realtime import (
    API_GATEWAY_MESSAGE_BYTES,
    CLOSE_INVALID_PAYLOAD,
    CLOSE_MESSAGE_TOO_BIG,
    SOCKET_PATH,
    SessionClose,
)

__all__ = ["gateway_of", "message_data", "refusal", "route_response"]


def gateway_of(event: Mapping[str, Any]) -> str | None:
    """The gateway an upgrade is for: ``?gateway=``, else the original's path if the event has one."""
    query = event.get("queryStringParameters") or {}
    if query.get("gateway"):
        return str(query["gateway"])
    context = event.get("requestContext") or {}
    for path in (event.get("rawPath"), event.get("path"), context.get("path")):
        match = SOCKET_PATH.match(path) if isinstance(path, str) else None
        if match:
            return match.group(1)
    return None


def message_data(event: Mapping[str, Any]) -> bytes | str:
    """The client's message in a ``$default`` event.

    Raises:
        SessionClose: 1007 for a body marked base64 that is not.
    """
    body = event.get("body") or ""
    if not event.get("isBase64Encoded"):
        return str(body)
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise SessionClose(CLOSE_INVALID_PAYLOAD, "Invalid message encoding") from None


def route_response(data: bytes | str) -> dict[str, Any]:
    """``data`` as the route response: text as it is, bytes base64-encoded.

    Raises:
        SessionClose: 1009 when it exceeds one API Gateway message (a row that large is pulled over HTTP).
    """
    if len(data) > API_GATEWAY_MESSAGE_BYTES:
        raise SessionClose(CLOSE_MESSAGE_TOO_BIG, "Reply too large for one message: pull over HTTP")
    if isinstance(data, str):
        return {"statusCode": 200, "body": data}
    return {"statusCode": 200, "body": base64.b64encode(data).decode("ascii"), "isBase64Encoded": True}


def refusal(exc: LakeSyncError) -> dict[str, Any]:
    """A refused upgrade: the error's status with ``{"error", "code"}`` (API Gateway does not pass the body on)."""
    return {
        "statusCode": exc.status,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps(exc.to_body(), separators=(",", ":")),
    }
