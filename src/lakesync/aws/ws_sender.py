"""Sending to WebSocket sessions through API Gateway's management API (:class:`~lakesync.ports.ConnectionSender`).

``send`` is ``PostToConnection`` (``POST {callback}/@connections/{id}``), ``close`` is ``DeleteConnection``
(``DELETE`` on the same path). The callback URL is the stage's ``https://{api-id}.execute-api.{region}.amazonaws.com/
{stage}`` (locally, the front's management route). A session that is gone answers 410 (``GoneException``): ``send``
returns ``False`` and ``close`` does nothing. API Gateway throttles the API (429 ``LimitExceededException``): a send
or close is retried a few times with short, jittered back-off (botocore's own retries are off, so the bound is
this module's), then raises :class:`~lakesync.core.errors.RateLimitedError`; any other failure raises
:class:`~lakesync.core.errors.AdapterError` at once.

``PostToConnection`` cannot set a close code and data sent to a session goes out as one message (at most 128 KB,
frames of 32 KB): :mod:`lakesync.gateway.realtime` sizes broadcasts for it.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from botocore.exceptions import BotoCoreError, ClientError

from lakesync.core.errors import AdapterError, RateLimitedError

__all__ = ["ManagementApiSender", "management_api_client"]

SEND_ATTEMPTS: Final = 4
"""Attempts of one call while API Gateway throttles (then ``RateLimitedError``)."""
BACKOFF_S: Final = 0.05
"""First back-off; it doubles per attempt (with full jitter), so a throttled send gives up within about 0.35 s."""
_GONE: Final = frozenset({"GoneException"})
_THROTTLED: Final = frozenset({"LimitExceededException", "TooManyRequestsException", "ThrottlingException"})


def management_api_client(endpoint_url: str) -> Any:
    """A boto3 ``apigatewaymanagementapi`` client for one stage's callback URL (botocore retries off, short
    timeouts: the sender bounds its own retries)."""
    import boto3
    from botocore.config import Config

    config = Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=5, max_pool_connections=20)
    return boto3.client("apigatewaymanagementapi", endpoint_url=endpoint_url, config=config)


class ManagementApiSender:
    """:class:`~lakesync.ports.ConnectionSender` over ``apigatewaymanagementapi`` (see the module docstring).

    Args:
        endpoint_url: The stage's callback URL.
        client: A management API client to use (default: :func:`management_api_client`, made on first use).
        attempts: Attempts of a throttled call.
        sleep: How to wait between attempts (tests pass a recorder).
    """

    def __init__(
        self,
        endpoint_url: str,
        *,
        client: Any = None,
        attempts: int = SEND_ATTEMPTS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.endpoint_url = endpoint_url
        self._client = client
        self._attempts = attempts
        self._sleep = sleep
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        """The management API client, made on first use (a broadcast sends from several threads at once, and
        making a boto3 client is not thread-safe, so it is made under a lock; using it is)."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    self._client = management_api_client(self.endpoint_url)
        return self._client

    def use(self, client: Any) -> None:
        """Send through ``client`` from now on (an object with the management API client's calls, e.g. the
        embedded default's in-process one)."""
        with self._lock:
            self._client = client

    def send(self, connection_id: str, data: bytes) -> bool:
        """``PostToConnection``; ``False`` when the session is gone.

        Raises:
            RateLimitedError: still throttled after the retries. AdapterError: any other failure.
        """
        return self._call(
            "PostToConnection", lambda: self.client.post_to_connection(ConnectionId=connection_id, Data=data)
        )

    def close(self, connection_id: str) -> None:
        """``DeleteConnection``; a gone session is not an error.

        Raises:
            RateLimitedError: still throttled after the retries. AdapterError: any other failure.
        """
        self._call("DeleteConnection", lambda: self.client.delete_connection(ConnectionId=connection_id))

    def _call(self, what: str, call: Callable[[], Any]) -> bool:
        for attempt in range(1, self._attempts + 1):
            try:
                call()
                return True
            except ClientError as exc:
                error = exc.response.get("Error", {})
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
                code = error.get("Code", "Unknown")
                if code in _GONE or status == 410:
                    return False
                if code not in _THROTTLED and status != 429:
                    raise AdapterError(f"API Gateway {what} failed: {code} ({status})") from exc
                if attempt == self._attempts:
                    raise RateLimitedError(f"API Gateway {what} throttled {attempt} times") from exc
            except BotoCoreError as exc:
                raise AdapterError(f"API Gateway {what} failed: {type(exc).__name__}") from exc
            self._sleep(random.uniform(0, BACKOFF_S * 2 ** (attempt - 1)))
        raise AssertionError("unreachable")  # pragma: no cover
