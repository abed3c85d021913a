"""The subscription service on the in-memory stores: a membership parameter checked against a membership source when
the deployment has one, the rules read afresh, and a deployment without a store."""

from __future__ import annotations

import pytest

from lakesync.core.errors import NotFoundError
from lakesync.core.filters import InMemoryMemberships
from lakesync.core.rules import parse_sync_rules
from lakesync.gateway import subscriptions as service
from lakesync.gateway.basis_cache import CachedPullBasis
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemoryMembershipReader,
    InMemorySubscriptions,
)
from lakesync.gateway.pull import StoresPullBasis

NOW = 1_700_000_000_000
MEMBER_OF = {"table": "memberships", "column": "project", "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}]}
STREAM = {
    "name": "member_tasks",
    "table": "tasks",
    "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
    "params": {"project": {"subscription": {"membership": MEMBER_OF}}},
}


def deps(memberships: InMemoryMemberships | None = None) -> GatewayDeps:
    made = GatewayDeps(
        InMemoryBufferStore(),
        InMemoryConfigStore(),
        InMemoryActionStore(),
        wall_ms=lambda: NOW,
        subscriptions=InMemorySubscriptions(),
        memberships=InMemoryMembershipReader(memberships) if memberships is not None else None,
    )
    made.config.put_sync_rules("gw", parse_sync_rules({"version": 1, "buckets": [], "streams": [STREAM]}))
    return made


def test_a_membership_parameter_is_checked_against_the_membership_source() -> None:
    rows = [{"user": "ann", "project": "7"}, {"user": "bob", "project": "8"}]
    d = deps(InMemoryMemberships({"memberships": rows}))
    held = service.subscribe(d, "gw", "ann", {"sub": "ann"}, {"stream": "member_tasks", "params": {"project": "7"}})
    assert held.to_json()["params"] == {"project": "7"}
    with pytest.raises(service.SubscriptionRefusedError) as refused:
        service.subscribe(d, "gw", "ann", {"sub": "ann"}, {"stream": "member_tasks", "params": {"project": "8"}})
    assert refused.value.status == 403 and refused.value.to_body()["refusal"] == "NOT_ALLOWED"
    assert [h.id for h in service.list_subscriptions(d, "gw", "ann")] == [held.id]


def test_without_a_membership_source_a_membership_stream_is_refused_422() -> None:
    with pytest.raises(service.SubscriptionRefusedError) as refused:
        service.subscribe(deps(), "gw", "ann", {"sub": "ann"}, {"stream": "member_tasks", "params": {"project": "7"}})
    assert refused.value.status == 422 and refused.value.to_body() == {
        "error": refused.value.message,
        "code": "VALIDATION_ERROR",
        "refusal": "MEMBERSHIP_UNSUPPORTED",
    }
    assert "memberships" in refused.value.message


def test_a_stream_saved_a_moment_ago_can_be_subscribed_to_at_once() -> None:
    # Given pulls served from a cached basis, cached before the stream was saved
    d = deps(InMemoryMemberships())
    d.pull_basis = CachedPullBasis(StoresPullBasis(d.config, d.buffer), 60)
    assert cached_stream(d, "notes") is None
    notes = {"name": "notes", "table": "notes", "params": {}, "filters": []}
    doc = {"version": 2, "buckets": [], "streams": [STREAM, notes]}
    d.config.put_sync_rules("gw", parse_sync_rules(doc))
    assert cached_stream(d, "notes") is None
    # Then a subscription to it is checked against the rules as stored
    assert service.subscribe(d, "gw", "ann", {"sub": "ann"}, {"stream": "notes"}).subscription.stream == "notes"


def cached_stream(d: GatewayDeps, name: str) -> object:
    assert d.pull_basis is not None
    rules = d.pull_basis.read_pull_basis("gw").rules
    assert rules is not None
    return rules.stream(name)


def test_a_deployment_without_a_store_serves_no_subscriptions() -> None:
    d = deps()
    d.subscriptions = None
    with pytest.raises(NotFoundError, match="serves no subscriptions"):
        service.list_subscriptions(d, "gw", "ann")
