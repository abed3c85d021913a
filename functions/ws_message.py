"""WebSocket ``$default`` (a two-way route): serve one client message and answer it through the route response.

The session is looked up by ``connectionId`` (unknown: closed). A text message is the session's base64 text; a
binary one (``isBase64Encoded``, never from API Gateway, which refuses a client's binary frames with 1003; the local
front may send one) its bytes. The frame is served by :func:`lakesync.gateway.realtime.handle_frame` and the reply
is the body of the answer, in the session's encoding: base64 text for a base64 session.

**Closing differs from the original.** A Lambda integration cannot close a WebSocket with a close code: where the
original closes with 1002/1003/1007/1008/1009, this handler calls ``DeleteConnection`` (API Gateway closes the
socket with 1000), forgets the session, logs the code and reason it would have sent, and
answers 200 with no body. Clients see a closed socket and reconnect as they would after a close code.

**Sizes.** API Gateway sends at most 128 KB in one message (frames of 32 KB), the route response too. Pulls over the
socket are therefore served in pages of ``realtime.SOCKET_PAGE_BYTES`` stored bytes (``hasMore`` says to pull
again); a reply still over the limit (one row larger than that) closes the session with a logged 1009 -- such a row
is pulled over HTTP. Client messages over 128 KB never arrive: API Gateway closes the socket with 1009 itself.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import get_deps, get_realtime, logger, metrics, one_at_a_time, tracer
from lakesync.aws import ws_events
from lakesync.gateway import realtime
from lakesync.gateway.realtime import CLOSE_POLICY_VIOLATION, SessionClose


@one_at_a_time
@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point: the reply as the route response, or a closed session and no body."""
    connection_id = event["requestContext"]["connectionId"]
    logger.append_keys(connection_id=connection_id)
    live = get_realtime()
    try:
        connection = live.connections.get_connection(connection_id)
        if connection is None:
            raise SessionClose(CLOSE_POLICY_VIOLATION, "Unknown session")
        logger.append_keys(gateway=connection.gateway, client_id=connection.client_id)
        metrics.add_metric(name="SocketMessages", unit=MetricUnit.Count, value=1)
        reply = realtime.serve_message(get_deps(), connection, ws_events.message_data(event))
        return ws_events.route_response(reply)
    except SessionClose as close:
        # A Lambda cannot send a close code: DeleteConnection closes the socket, and the session is forgotten.
        live.sender.close(connection_id)
        live.connections.remove_connection(connection_id)
        logger.info("session closed by the server", extra={"close_code": close.code, "close_reason": close.reason})
        metrics.add_metric(name="SessionsClosed", unit=MetricUnit.Count, value=1)
        return {"statusCode": 200}
