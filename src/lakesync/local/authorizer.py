"""API Gateway's route authorizer, as the local front runs it: the same Lambda authorizer (``functions.authorizer``)
before every route that needs a token, so the embedded default refuses bad tokens where AWS does.

What API Gateway does, and this does, for a request to a ``/v1/sync/...`` or ``/v1/admin/...`` route
(:data:`lakesync.edge.AUTHORIZED_PREFIXES`; unknown paths go to the handler, which answers 404 or 405):

* no ``Authorization`` header (the identity source): 401 ``{"message": "Unauthorized"}``, nothing invoked;
* otherwise the authorizer's answer for that header value, cached for ``ttl_s`` seconds: ``isAuthorized`` false is
  403 ``{"message": "Forbidden"}``; true lets the request through to the route's function.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Final

from lakesync.edge import AUTHORIZED_PREFIXES

DEFAULT_TTL_S: Final = 300.0
"""The deployed authorizer's default result cache TTL (``authorizerCacheSeconds``)."""
_MAX_CACHED: Final = 10_000

AuthorizerHandler = Callable[[dict[str, Any], Any], dict[str, Any]]


def _refusal(status: int, message: str) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"content-type": "application/json"},
        "body": json.dumps({"message": message}),
    }


class LocalAuthorizer:
    """Call ``handler`` (an HTTP API Lambda authorizer with simple responses) before the routes that need a token.

    Args:
        handler: The authorizer's ``lambda_handler``; ``functions.authorizer``'s when omitted.
        ttl_s: How long an answer is reused for the same ``Authorization`` value (0: never).
        clock: Monotonic seconds (injectable).
    """

    def __init__(
        self,
        handler: AuthorizerHandler | None = None,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._handler = handler
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, bool]] = {}
        self.invocations = 0

    def __call__(self, event: dict[str, Any]) -> dict[str, Any] | None:
        """The refusal for an HTTP API ``event``, or ``None`` to let it through."""
        if not str(event.get("rawPath") or "").startswith(AUTHORIZED_PREFIXES):
            return None
        headers = {str(k).lower(): str(v) for k, v in (event.get("headers") or {}).items()}
        identity = headers.get("authorization", "")
        if not identity:
            return _refusal(401, "Unauthorized")
        return None if self._admits(identity, event) else _refusal(403, "Forbidden")

    def _admits(self, identity: str, event: dict[str, Any]) -> bool:
        now = self._clock()
        with self._lock:
            cached = self._cache.get(identity)
        if cached is not None and cached[0] > now:
            return cached[1]
        answer = self._invoke({**event, "type": "REQUEST", "identitySource": [identity]})
        admitted = answer.get("isAuthorized") is True
        with self._lock:
            if len(self._cache) >= _MAX_CACHED:
                self._cache.clear()
            if self.ttl_s > 0:
                self._cache[identity] = (now + self.ttl_s, admitted)
        return admitted

    def _invoke(self, event: dict[str, Any]) -> dict[str, Any]:
        from lakesync.local.front import LambdaContext

        handler = self._handler
        if handler is None:
            from functions.authorizer import lambda_handler

            handler = lambda_handler
        self.invocations += 1
        context = LambdaContext(
            function_name="lakesync-authorizer",
            aws_request_id=str(uuid.uuid4()),
            invoked_function_arn="arn:aws:lambda:us-east-1:000000000000:function:lakesync-authorizer",
            memory_limit_in_mb=256,
            log_group_name="/aws/lambda/lakesync-authorizer",
            deadline_monotonic=time.monotonic() + 10.0,
        )
        return handler(event, context)
