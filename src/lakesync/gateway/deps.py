"""The gateway's dependencies and settings, passed explicitly to every service function."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakesync.core.hlc import HLC, system_clock
from lakesync.core.log import LOG_CHUNK_MAX_ENTRIES
from lakesync.gateway.tail_cache import TailCache

if TYPE_CHECKING:
    from lakesync.connectors.runtime import ConnectorRuntime
    from lakesync.core.action_policy import ActionPolicy
    from lakesync.core.actions import ActionHandler
    from lakesync.core.filters import MembershipSource
    from lakesync.gateway.limits import RateLimiter
    from lakesync.ports import (
        ActionStore,
        BufferStore,
        ConfigStore,
        ConnectorPositionStore,
        ConnectorScheduler,
        MembershipReader,
        ObjectStore,
        PullBasisReader,
        SinceSessionStore,
        SourceAdapter,
        SubscriptionStore,
    )

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    """Limits and policies of a gateway deployment.

    Attributes:
        gateway_ids: Gateways this deployment serves; requests for any other get 404.
        flush_threshold_bytes: Unflushed bytes per shard at which a flush is requested.
        backpressure_bytes: Unflushed bytes per shard at which pushes get 503 (default 2x the flush threshold).
        dedup_ttl_s: How long a deltaId is remembered for idempotent re-pushes.
        action_ttl_s: How long action results are cached by actionId and idempotency key.
        action_claim_ttl_s: How long an in-progress claim blocks a concurrent run of the same action.
        action_reserve_ms: An action of a batch after the first starts only while the invocation has more time left
            than this, so the answer goes out before the timeout; the actions not started are answered with the
            retryable ``ACTION_DEFERRED``.
        max_deltas_per_push: Larger pushes are rejected with 400.
        chunk_deltas: Most deltas per atomic commit (one log item; the push also keeps a chunk's estimated log bytes
            within an item). A deployment writing rows inside a transaction sets 48 (a transaction holds 100 items).
        max_row_bytes: Largest merged row (UTF-8 JSON of its values). A log item holds a delta and the row before
            and after it, so three of these stay under DynamoDB's 400 KB item limit.
        max_commit_bytes: Byte budget of one atomic commit, under DynamoDB's 4 MB per transaction; a chunk whose
            items would exceed it is split.
        since_window_ms: Re-read window for HLC ``since`` pulls (at-least-once for clients without a cursor); must
            exceed the longest commit attempt (bounded by the DynamoDB client's timeouts and retries).
        sub_shards: Hash sub-shards per table, for tables hotter than one DynamoDB partition.
        commit_attempts: Optimistic commit attempts before a push gives up with 503.
        max_scan_per_pull: Log entries one pull may scan before it returns early with ``hasMore``.
        max_page_bytes: Largest pull page (stored size of its entries), cut with ``hasMore`` true: a response must
            stay under Lambda's 6 MB even base64-encoded (protobuf through API Gateway), so 4 MiB leaves headroom.
    """

    gateway_ids: frozenset[str] = frozenset({"default"})
    flush_threshold_bytes: int = 4 * MIB
    backpressure_bytes: int | None = None
    dedup_ttl_s: int = 7 * 24 * 3600
    action_ttl_s: int = 24 * 3600
    action_claim_ttl_s: int = 120
    action_reserve_ms: int = 5_000
    max_deltas_per_push: int = 10_000
    chunk_deltas: int = LOG_CHUNK_MAX_ENTRIES
    max_row_bytes: int = 100_000
    max_commit_bytes: int = 3_500_000
    since_window_ms: int = 10_000
    sub_shards: Mapping[str, int] = field(default_factory=dict)
    commit_attempts: int = 60
    max_scan_per_pull: int = 50_000
    max_page_bytes: int = 4 * MIB

    @property
    def backpressure_limit(self) -> int:
        """Effective backpressure limit per shard."""
        return self.backpressure_bytes if self.backpressure_bytes is not None else 2 * self.flush_threshold_bytes


@dataclass(slots=True)
class GatewayDeps:
    """Everything the services need: stores, the server clock, handlers, sources and settings.

    ``objects`` is the bucket checkpoints are served from; ``None`` where checkpoints are not configured.
    ``since_sessions`` remembers, per ``since`` client, the positions behind each ``serverHlc`` it was handed
    (:mod:`lakesync.gateway.since`); ``None`` serves ``since`` pulls at least once, from commit HLCs.
    ``pull_basis`` reads a pull's sync rules and shard registry together; ``None`` reads them from ``config`` and
    ``buffer`` (two requests, sent at once).
    ``connectors`` opens each gateway's registered connectors (``source=`` pulls, action handlers, pollers; ``None``:
    only the static ``sources`` and ``action_handlers``, whose clients may run what ``action_policies`` allows by
    handler name: a handler without a policy is admin-only); ``positions`` stores their poll positions and
    ``connector_scheduler`` runs their pollers; ``connector_secret_prefix`` names the secrets registration creates.
    ``limiter`` counts each caller's requests against the per-caller rate limits (:mod:`lakesync.gateway.limits`);
    ``None``: no limits.
    """

    buffer: BufferStore
    config: ConfigStore
    actions: ActionStore
    settings: GatewaySettings = field(default_factory=GatewaySettings)
    clock: HLC = field(default_factory=HLC)
    wall_ms: Callable[[], int] = system_clock
    action_handlers: Mapping[str, ActionHandler] = field(default_factory=dict)
    action_policies: Mapping[str, ActionPolicy] = field(default_factory=dict)
    sources: Mapping[str, SourceAdapter] = field(default_factory=dict)
    sleep: Callable[[float], None] = time.sleep
    objects: ObjectStore | None = None
    since_sessions: SinceSessionStore | None = None
    pull_basis: PullBasisReader | None = None
    connectors: ConnectorRuntime | None = None
    positions: ConnectorPositionStore | None = None
    connector_scheduler: ConnectorScheduler | None = None
    connector_secret_prefix: str = "lakesync/connectors"
    destination_secret_prefix: str | None = None
    """Destinations' secrets must lie under ``{prefix}{gateway}/`` (``None``: the deployment names no prefix)."""
    limiter: RateLimiter | None = None
    subscriptions: SubscriptionStore | None = None
    """Each client's stream subscriptions (:mod:`lakesync.gateway.subscriptions`); ``None``: none are served."""
    memberships: MembershipReader | None = None
    """Reads membership tables for the streams and buckets that name one; ``None``: such streams are refused (422)
    and such bucket filters hold for no row."""
    tails: TailCache = field(default_factory=TailCache)
    """The log ranges a scope difference read, for its next pages (per process, like the deps)."""

    def membership_source(self, gateway: str) -> MembershipSource | None:
        """The membership source of ``gateway`` for one request (``None``: memberships are not read)."""
        return self.memberships.source(gateway) if self.memberships is not None else None
