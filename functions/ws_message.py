"""WebSocket ``$default`` (a two-way route): serve one client message and answer it through the route response.

The session is looked up by ``connectionId`` (unknown: closed). A text message is the session's base64 text; a
binary one (``isBase64Encoded``, never from API Gateway, which refuses a client's binary frames with 1003; the local
front may send one) its bytes. The frame is served by :func:`lakesync.gateway.realtime.handle_frame` and the reply
is the body of the answer, in the session's encoding: base64 text for a base64 session.

**Closing differs from the original.** A Lambda integration cannot close a WebSocket with a close code: where the
original closes with 1002/1003/1007/1008/1009, this handler calls ``DeleteConnection`` (API Gateway closes the
socket with 1000 and runs ``$disconnect``), forgets the session, logs the code and reason it would have sent, and
answers 200 with no body. Clients see a closed socket and reconnect as they would after a close code.

**Sizes.** API Gateway sends at most 128 KB in one message (frames of 32 KB), the route response too. Pulls over the
socket are therefore served in pages of ``realtime.SOCKET_PAGE_BYTES`` stored bytes (``hasMore`` says to pull
again); a reply still over the limit (one row larger than that) closes the session with a logged 1009 -- such a row
is pulled over HTTP. Client messages over 128 KB never arrive: API Gateway closes the socket with 1009 itself.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Final

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import get_deps, get_realtime, logger, metrics, one_at_a_time, tracer
from lakesync.gateway import realtime
from lakesync.gateway.realtime import (
    CLOSE_INVALID_PAYLOAD,
    CLOSE_MESSAGE_TOO_BIG,
    CLOSE_POLICY_VIOLATION,
    SessionClose,
)

MESSAGE_LIMIT_BYTES: Final = 128 * 1024
"""The largest message API Gateway sends to a client (and accepts from one)."""


def _message_data(event: dict[str, Any]) -> bytes | str:
    body = event.get("body") or ""
    if not event.get("isBase64Encoded"):
        return str(body)
    try:
        return base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise SessionClose(CLOSE_INVALID_PAYLOAD, "Invalid message encoding") from None


def _close(connection_id: str, close: SessionClose) -> dict[str, Any]:
    """Close the session the only way a Lambda can (``DeleteConnection``) and forget it."""
    live = get_realtime()
    live.sender.close(connection_id)
    live.connections.remove_connection(connection_id)
    logger.info("session closed by the server", extra={"close_code": close.code, "close_reason": close.reason})
    metrics.add_metric(name="SessionsClosed", unit=MetricUnit.Count, value=1)
    return {"statusCode": 200}


def _reply(data: bytes | str) -> dict[str, Any]:
    if len(data) > MESSAGE_LIMIT_BYTES:
        raise SessionClose(CLOSE_MESSAGE_TOO_BIG, "Reply too large for one message: pull over HTTP")
    if isinstance(data, str):
        return {"statusCode": 200, "body": data}
    return {"statusCode": 200, "body": base64.b64encode(data).decode("ascii"), "isBase64Encoded": True}


@one_at_a_time
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point: the reply as the route response, or a closed session and no body."""
    connection_id = event["requestContext"]["connectionId"]
    logger.append_keys(connection_id=connection_id)
    connection = get_realtime().connections.get_connection(connection_id)
    if connection is None:
        return _close(connection_id, SessionClose(CLOSE_POLICY_VIOLATION, "Unknown session"))
    logger.append_keys(gateway=connection.gateway, client_id=connection.client_id)
    metrics.add_metric(name="SocketMessages", unit=MetricUnit.Count, value=1)
    try:
        return _reply(realtime.serve_message(get_deps(), connection, _message_data(event)))
    except SessionClose as close:
        return _close(connection_id, close)
