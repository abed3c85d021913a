"""Membership filters over real HTTP against ``lakesync local`` (issue 43, item 3): the gateway reads the membership
table as of the latest commit, so a client may subscribe to a membership-checked stream once its membership row is
written and is refused once it is deleted, and a bucket filtered by membership serves exactly its projects' rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lakesync.auth import mint_token
from lakesync.client.http import ApiError, SyncClient
from lakesync.core.hlc import HLC
from lakesync.local.runner import LocalStack
from tests.factories import delete, insert

pytestmark = pytest.mark.integration

MEMBER_OF = {"table": "memberships", "column": "project", "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}]}
RULES = {
    "version": 1,
    "tables": {"memberships": {"adminOnly": True}},
    "buckets": [
        {
            "name": "mine",
            "tables": ["tasks"],
            "filters": [{"column": "project_id", "op": "in", "membership": MEMBER_OF}],
        }
    ],
    "streams": [
        {
            "name": "member_notes",
            "table": "notes",
            "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
            "params": {"project": {"subscription": {"membership": MEMBER_OF}}},
        }
    ],
}
SUBSCRIPTIONS = "/v1/sync/default/subscriptions"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalStack(Path(tmp_path_factory.mktemp("local-members")), port=0, persist=False) as running:
        admin = SyncClient(running.url, "default", mint_token("ops", "default", running.secret, role="admin"), "ops")
        admin.request("POST", "/v1/admin/sync-rules/default", body=RULES)
        yield running


def client(stack: LocalStack, sub: str, *, admin: bool = False) -> SyncClient:
    token = (
        mint_token(sub, "default", stack.secret, role="admin") if admin else mint_token(sub, "default", stack.secret)
    )
    return SyncClient(stack.url, "default", token, sub)


def subscribe(http: SyncClient, project: str) -> int:
    try:
        http.request("POST", SUBSCRIPTIONS, body={"stream": "member_notes", "params": {"project": project}})
    except ApiError as exc:
        assert exc.body["refusal"] == "NOT_ALLOWED"
        return exc.status
    return 201


def test_a_membership_row_allows_a_subscription_until_it_is_deleted(stack: LocalStack) -> None:
    admin, ann = client(stack, "ops", admin=True), client(stack, "ann")
    clock = HLC()
    # No membership row: refused
    assert subscribe(ann, "p7") == 403
    # An admin writes ann's membership of p7: the next subscribe is allowed (read as of the latest commit)
    admin.push([insert("ann-p7", hlc=clock.now(), table="memberships", client="ops", user="ann", project="p7")])
    assert subscribe(ann, "p7") == 201
    # Another user's membership does not allow ann
    admin.push([insert("bea-p8", hlc=clock.now(), table="memberships", client="ops", user="bea", project="p8")])
    assert subscribe(ann, "p8") == 403
    # The row deleted: refused again
    admin.push([delete("ann-p7", hlc=clock.now(), table="memberships", client="ops")])
    assert subscribe(ann, "p7") == 403


def test_a_bucket_filtered_by_membership_serves_exactly_the_rows_of_its_projects(stack: LocalStack) -> None:
    admin, cal = client(stack, "ops", admin=True), client(stack, "cal")
    clock = HLC()
    members = (("cal", "q1"), ("cal", "q2"), ("dan", "q3"))
    admin.push(
        [insert(f"{u}-{p}", hlc=clock.now(), table="memberships", client="ops", user=u, project=p) for u, p in members]
    )
    tasks = [(p, i) for p in ("q1", "q2", "q3") for i in range(3)]
    admin.push([insert(f"t{p}{i}", hlc=clock.now(), table="tasks", client="ops", project_id=p) for p, i in tasks])
    pulled, _ = cal.pull_all()
    assert sorted(d.row_id for d in pulled) == ["tq10", "tq11", "tq12", "tq20", "tq21", "tq22"]
    assert {d.table for d in pulled} == {"tasks"}  # the membership table itself is admin-only
