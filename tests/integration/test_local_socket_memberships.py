"""Membership filters on a real WebSocket against ``lakesync local`` (issue 43, item 3 on the socket): the broadcaster
reads the membership tables as the pull does, so a client whose bucket reads ``tasks`` by project membership hears its
projects' tasks live and no other's; when an admin makes it a member of another project, its socket gets a pull-now
notice (a broadcast frame with no deltas and ``hasMore``), and its cursor pull then serves that project's rows."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.sync.client import ClientConnection, connect

from lakesync.auth import mint_token
from lakesync.client.http import SyncClient
from lakesync.core.delta import RowDelta
from lakesync.core.hlc import HLC
from lakesync.core.messages import SyncResponse
from lakesync.local.runner import LocalStack
from lakesync.wire.framing import TAG_BROADCAST, decode_broadcast_frame
from tests.factories import insert
from tests.integration.test_local_memberships import RULES

pytestmark = pytest.mark.integration

GW = "default"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with LocalStack(Path(tmp_path_factory.mktemp("socket-members")), port=0, persist=False) as running:
        admin = SyncClient(running.url, GW, mint_token("ops", GW, running.secret, role="admin"), "ops")
        admin.admin("POST", "sync-rules", RULES)
        yield running


class _Admin:
    """An admin writing over HTTP (admin-only tables too)."""

    def __init__(self, stack: LocalStack) -> None:
        self.api = SyncClient(stack.url, GW, mint_token("ops", GW, stack.secret, role="admin"), "ops")
        self.clock = HLC()

    def member(self, user: str, project: str) -> None:
        """``user`` becomes a member of ``project``."""
        self._push(
            insert(
                f"{user}-{project}", hlc=self.clock.now(), table="memberships", client="ops", user=user, project=project
            )
        )

    def task(self, row_id: str, project: str) -> None:
        """A task of ``project``."""
        self._push(insert(row_id, hlc=self.clock.now(), table="tasks", client="ops", project_id=project))

    def _push(self, row: RowDelta) -> None:
        (receipt,) = self.api.push([row])["receipts"]
        assert not receipt.get("rejected"), receipt


def _socket(stack: LocalStack, who: str) -> ClientConnection:
    url = stack.url.replace("http://", "ws://") + f"/v1/sync/{GW}/ws?encoding=base64"
    return connect(url, additional_headers={"Authorization": f"Bearer {mint_token(who, GW, stack.secret)}"})


def _frame(ws: ClientConnection, timeout: float = 5.0) -> SyncResponse | None:
    """The next broadcast frame, or ``None`` when none comes within ``timeout``."""
    try:
        message = ws.recv(timeout=timeout)
    except TimeoutError:
        return None
    frame = base64.b64decode(message) if isinstance(message, str) else message
    assert frame[0] == TAG_BROADCAST
    return decode_broadcast_frame(frame)


def test_a_member_hears_its_projects_tasks_and_a_new_membership_asks_a_pull_that_serves_it(stack: LocalStack) -> None:
    admin = _Admin(stack)
    cal = SyncClient(stack.url, GW, mint_token("cal", GW, stack.secret), "cal")
    # Given cal is a member of project p1, and has pulled (its cursor knows its scope)
    admin.member("cal", "p1")
    _, cursor = cal.pull_all()
    with _socket(stack, "cal") as ws:
        # When an admin writes a task of p1 and one of p2
        admin.task("cal-task-p1", "p1")
        admin.task("cal-task-p2", "p2")
        # Then cal's socket hears the p1 task live, and not the p2 task
        heard = _frame(ws)
        assert heard is not None and [d.row_id for d in heard.deltas] == ["cal-task-p1"]
        assert _frame(ws, 1.0) is None
        # And its cursor pull serves the same
        pulled, cursor = cal.pull_all(cursor)
        assert [d.row_id for d in pulled] == ["cal-task-p1"]
        # When the admin makes cal a member of p2
        admin.member("cal", "p2")
        # Then cal's socket gets a pull-now notice: a broadcast frame with no deltas and hasMore
        notice = _frame(ws)
        assert notice is not None and notice.deltas == () and notice.has_more
        assert _frame(ws, 0.5) is None
        # And its cursor pull then serves p2's task, entering its scope
        pulled, _ = cal.pull_all(cursor)
        assert [d.row_id for d in pulled] == ["cal-task-p2"]
