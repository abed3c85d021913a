"""Python clients of the LakeSync API: the local-first store (:func:`connect`) and the HTTP client
(:mod:`lakesync.client.http`).

``lakesync.client.connect(path, url=..., gateway=..., token=..., schemas=[...])`` opens a SQLite file that the app
reads and writes at once and that syncs with the gateway (:mod:`lakesync.client.store`); asyncio apps use
:mod:`lakesync.client.aio`. The names below load on first use, so importing :mod:`lakesync.client.http` stays as
light as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakesync.client.backoff import Backoff
    from lakesync.client.model import (
        Change,
        Conflict,
        OfflineError,
        Rejected,
        StreamSubscription,
        SubscriptionState,
        SyncReport,
        SyncStateError,
    )
    from lakesync.client.store import LocalStore, connect
    from lakesync.client.tables import LocalWriteError, RowExistsError, RowNotFoundError

_EXPORTS = {
    "Backoff": "lakesync.client.backoff",
    "Change": "lakesync.client.model",
    "Conflict": "lakesync.client.model",
    "LocalStore": "lakesync.client.store",
    "OfflineError": "lakesync.client.model",
    "Rejected": "lakesync.client.model",
    "StreamSubscription": "lakesync.client.model",
    "SubscriptionState": "lakesync.client.model",
    "SyncReport": "lakesync.client.model",
    "SyncStateError": "lakesync.client.model",
    "connect": "lakesync.client.store",
    "LocalWriteError": "lakesync.client.tables",
    "RowExistsError": "lakesync.client.tables",
    "RowNotFoundError": "lakesync.client.tables",
}

__all__ = [
    "Backoff",
    "Change",
    "Conflict",
    "LocalStore",
    "LocalWriteError",
    "OfflineError",
    "Rejected",
    "RowExistsError",
    "RowNotFoundError",
    "StreamSubscription",
    "SubscriptionState",
    "SyncReport",
    "SyncStateError",
    "connect",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lakesync.client' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
