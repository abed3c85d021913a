"""The embedded default: the local stand-ins for what AWS runs.

* :mod:`lakesync.local.events` — API Gateway HTTP API payload 2.0 events and responses (pure, stdlib only).
* :mod:`lakesync.local.front` — :class:`LocalFront`, real HTTP in front of a Lambda handler.
* :mod:`lakesync.local.moto` — :class:`MotoServer`, moto in server mode as the local AWS.

Importing this package does not import moto: :class:`MotoServer` and :class:`AwsEndpoint` load it on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lakesync.local.events import http_event, response_to_http
from lakesync.local.front import LambdaContext, LocalFront

if TYPE_CHECKING:
    from lakesync.local.moto import AwsEndpoint, MotoServer

__all__ = ["AwsEndpoint", "LambdaContext", "LocalFront", "MotoServer", "http_event", "response_to_http"]


def __getattr__(name: str) -> Any:
    if name in ("AwsEndpoint", "MotoServer"):
        from lakesync.local import moto

        return getattr(moto, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
