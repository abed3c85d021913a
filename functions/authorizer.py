"""The HTTP API's Lambda authorizer (payload 2.0, simple responses): bad tokens never reach the API functions.

API Gateway runs it before every ``/v1/sync/...`` and ``/v1/admin/...`` route, with the ``Authorization`` header as
the identity source. A request without the header is refused by API Gateway itself (401 ``{"message":
"Unauthorized"}``) with nothing invoked; for one with it, this function answers ``{"isAuthorized": bool}`` by
:func:`lakesync.edge.authorizer_admits` (the token verified by the same :func:`lakesync.auth.verify_token`, with the
same keys and lifetime as the API functions), and API Gateway refuses a ``false`` with 403
``{"message": "Forbidden"}``. The answer is cached by API Gateway per header value for the configured TTL (300 s by
default), so a client's requests cost one authorizer invocation per token and TTL, and a flood of one bad token one
invocation per TTL.

Nothing here reads a table: the function needs only the API settings' JWT keys.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions._runtime import jwt_secrets, logger, metrics, one_at_a_time
from lakesync import edge


@one_at_a_time
@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """The Lambda entry point: ``{"isAuthorized": bool}``."""
    headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
    metrics.add_metric(name="TokensChecked", unit=MetricUnit.Count, value=1)
    admitted = edge.authorizer_admits(headers.get("authorization"), jwt_secrets())
    if not admitted:
        logger.info("token refused", extra={"route": event.get("routeKey")})
        metrics.add_metric(name="TokensRefused", unit=MetricUnit.Count, value=1)
    return {"isAuthorized": admitted}
