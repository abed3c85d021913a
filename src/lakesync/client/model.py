"""What the local store reports: its errors, the changes it announces and the outcome of a sync cycle."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from lakesync.core.canonical import JsonValue
from lakesync.core.errors import LakeSyncError

Origin = Literal["local", "remote"]


class OfflineError(LakeSyncError):
    """The gateway could not be reached, or answered that it is unavailable (5xx, 429); sync again later."""

    code = "OFFLINE"


class SyncStateError(LakeSyncError):
    """The file belongs to another client or gateway, or the gateway answered something the store cannot follow."""

    code = "SYNC_STATE"


@dataclass(frozen=True, slots=True)
class Change:
    """Rows of one table that changed, and whether the change came from this store (``local``) or a pull or
    broadcast (``remote``)."""

    table: str
    row_ids: frozenset[str]
    origin: Origin


@dataclass(frozen=True, slots=True)
class Conflict:
    """A local column write that lost at the gateway to another version, and the value that replaced it.

    Attributes:
        table: The table.
        row_id: The row.
        column: The column.
        local_value: What this store wrote.
        local_hlc: The HLC of that write.
        winner_hlc: The winning version's HLC.
        winner_client_id: The winning version's client.
        winner_value: The winning value as the local store now holds it; ``None`` also when the row was deleted or
            the winner is not visible to this client.
        deleted: The write lost to a delete of the row.
    """

    table: str
    row_id: str
    column: str
    local_value: JsonValue
    local_hlc: int
    winner_hlc: int
    winner_client_id: str
    winner_value: JsonValue = None
    deleted: bool = False


@dataclass(frozen=True, slots=True)
class Rejected:
    """A local delta the gateway refused for good (moved out of the outbox into ``_lakesync_rejected``): a push it
    failed (``status`` 400, 413, 422), or a write the gateway's write rules forbid (403, with the rule's ``code``;
    the local row was rolled back to the gateway's state)."""

    delta_id: str
    table: str
    row_id: str
    status: int
    error: str
    code: str = ""


SubscriptionState = Literal["pending", "active", "refused", "removing"]
"""Where a stream subscription stands: ``pending`` (recorded, not yet acknowledged by the gateway), ``active``
(acknowledged), ``refused`` (the gateway refused it: see ``refusal``), ``removing`` (unsubscribed, the gateway not yet
told)."""


@dataclass(frozen=True, slots=True)
class StreamSubscription:
    """A stream subscription as the store records it (:meth:`LocalStore.subscribe_stream`).

    Attributes:
        stream: The stream's name in the sync rules.
        params: The parameters the subscription supplies.
        ttl: The lifetime asked, in seconds (``None``: the stream's default); the store renews an active
            subscription before it runs out for as long as it keeps it.
        state: See :data:`SubscriptionState`.
        id: The gateway's id of the subscription (derived from the stream and parameters).
        expires_at: When the gateway's subscription runs out (epoch milliseconds, as the gateway answered; ``None``
            until acknowledged).
        refusal: The gateway's stable refusal code (``UNKNOWN_STREAM``, ``NOT_ALLOWED``, ``TOO_MANY_SUBSCRIPTIONS``...,
            or the API ``code`` of a refusal without one) when ``refused``.
        reason: The gateway's message with the refusal.
    """

    stream: str
    params: Mapping[str, str]
    ttl: int | None
    state: SubscriptionState
    id: str
    expires_at: int | None = None
    refusal: str | None = None
    reason: str | None = None


@dataclass
class SyncReport:
    """What one :meth:`LocalStore.sync` did.

    Attributes:
        pushed: Local deltas the gateway acknowledged (accepted, duplicates included).
        duplicates: Of those, deltas it already had (a re-send after a crash).
        pulled: Remote deltas received (checkpoint rows not included), own echoes included.
        changed: Rows whose state changed through the pull, by table.
        checkpoint_rows: Rows loaded from a checkpoint (a first sync or a re-bootstrap).
        rebootstrapped: The cursor had expired and the checkpoint was loaded again.
        conflicts: Local column writes that lost.
        rejected: Local deltas the gateway refused for good.
        refused_subscriptions: Stream subscriptions the gateway refused in this cycle.
        cursor: The cursor after the cycle.
        server_hlc: The gateway's clock at the last answer.
    """

    pushed: int = 0
    duplicates: int = 0
    pulled: int = 0
    changed: dict[str, set[str]] = field(default_factory=dict)
    checkpoint_rows: int = 0
    rebootstrapped: bool = False
    conflicts: list[Conflict] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    refused_subscriptions: list[StreamSubscription] = field(default_factory=list)
    cursor: str | None = None
    server_hlc: int = 0
