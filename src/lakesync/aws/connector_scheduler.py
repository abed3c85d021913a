"""Connector schedules on EventBridge Scheduler: one schedule per connector, invoking the poll function.

Each schedule (in the deployment's schedule group) runs at ``rate(N minutes)`` -- EventBridge Scheduler's finest rate
is one minute, so an ``intervalMs`` under 60,000 polls once a minute -- and invokes the ``connector_poll`` function
with ``{"gateway", "connector"}`` through the role the stack gives schedules (``lambda:InvokeFunction`` on that
function only). Retries are off: the next tick is the retry, and a poll is idempotent.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import threading
from collections.abc import Callable
from typing import Any, Final

from botocore.exceptions import ClientError

from lakesync.aws.errors import error_code
from lakesync.core.errors import AdapterError

__all__ = ["EventBridgeConnectorScheduler", "rate_expression", "schedule_name", "scheduler_client"]

_NAME_RE: Final = re.compile(r"\A[0-9A-Za-z_.-]{1,64}\Z")


def scheduler_client(**kwargs: str) -> Any:
    """An EventBridge Scheduler client (``kwargs`` override the environment)."""
    import boto3

    from lakesync.aws.clients import CLIENT_CONFIG

    return boto3.client("scheduler", config=CLIENT_CONFIG, **kwargs)  # type: ignore[call-overload]


def schedule_name(gateway: str, name: str) -> str:
    """``{gateway}--{name}`` when that is a valid schedule name (≤ 64 of ``[0-9A-Za-z_.-]``), else ``c-`` and 40 hex
    characters of its SHA-256."""
    plain = f"{gateway}--{name}"
    if _NAME_RE.match(plain):
        return plain
    return "c-" + hashlib.sha256(f"{gateway}\0{name}".encode()).hexdigest()[:40]


def rate_expression(interval_ms: int) -> str:
    """The schedule expression of a poll interval, rounded up to whole minutes (at least one)."""
    minutes = max(1, math.ceil(interval_ms / 60_000))
    return "rate(1 minute)" if minutes == 1 else f"rate({minutes} minutes)"


class EventBridgeConnectorScheduler:
    """A :class:`~lakesync.ports.ConnectorScheduler` on EventBridge Scheduler.

    Args:
        client: Makes the ``scheduler`` client (on first use).
        group: The schedule group.
        target_arn: The ``connector_poll`` function's ARN.
        role_arn: The role schedules assume to invoke it.
    """

    def __init__(self, client: Callable[[], Any], *, group: str, target_arn: str, role_arn: str) -> None:
        self._factory = client
        self._client: Any = None
        self._lock = threading.Lock()
        self._group = group
        self._target = target_arn
        self._role = role_arn

    def _scheduler(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._factory()
            return self._client

    def schedule(self, gateway: str, name: str, interval_ms: int) -> None:
        request = {
            "Name": schedule_name(gateway, name),
            "GroupName": self._group,
            "ScheduleExpression": rate_expression(interval_ms),
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "State": "ENABLED",
            "Description": f"LakeSync connector {name} of gateway {gateway}"[:512],
            "Target": {
                "Arn": self._target,
                "RoleArn": self._role,
                "Input": json.dumps({"gateway": gateway, "connector": name}),
                "RetryPolicy": {"MaximumRetryAttempts": 0},
            },
        }
        client = self._scheduler()
        try:
            client.create_schedule(**request)
        except ClientError as exc:
            code = error_code(exc)
            if code != "ConflictException":
                raise AdapterError(f"EventBridge Scheduler refused the schedule of connector {name!r}: {code}") from exc
            try:
                client.update_schedule(**request)
            except ClientError as again:
                code = error_code(again)
                raise AdapterError(
                    f"EventBridge Scheduler refused the schedule of connector {name!r}: {code}"
                ) from again

    def unschedule(self, gateway: str, name: str) -> None:
        try:
            self._scheduler().delete_schedule(Name=schedule_name(gateway, name), GroupName=self._group)
        except ClientError as exc:
            code = error_code(exc)
            if code != "ResourceNotFoundException":
                raise AdapterError(f"EventBridge Scheduler could not delete the schedule of {name!r}: {code}") from exc
