"""The Jira connector against a local Jira Cloud double: enhanced-search paging, the overlap window and dedup,
eventual consistency, deletions by two sweeps, throttling, authentication, positions across restarts, and actions."""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lakesync.connectors import jira, jira_issues
from lakesync.connectors.base import PollBatch
from lakesync.connectors.http_api import ApiAuthError, ApiRequestError, ApiThrottledError, RetryPolicy
from lakesync.core.actions import ActionContext, make_action
from lakesync.core.connectors import validate_connector_config
from lakesync.core.errors import ActionExecutionError, ActionNotSupportedError, AdapterError
from lakesync.core.hlc import HLC
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.memory import (
    InMemoryActionStore,
    InMemoryBufferStore,
    InMemoryConfigStore,
    InMemoryPositionStore,
)
from lakesync.gateway.poller import poll_connector
from tests.connectors.jira_server import JiraState, running

pytestmark = pytest.mark.integration

EMAIL = "bot@example.com"
TOKEN = "ATATT3xFfGF0-super-secret-token"
ZONE = "Australia/Sydney"


@pytest.fixture
def state() -> JiraState:
    return JiraState(email=EMAIL, api_token=TOKEN, time_zone=ZONE)


@pytest.fixture
def base_url(state: JiraState) -> Iterator[str]:
    with running(state) as url:
        yield url


class Harness:
    def __init__(self, state: JiraState, base_url: str) -> None:
        self.state = state
        self.base_url = base_url
        self.sleeps: list[float] = []

    def connector(self, token: str = TOKEN, **settings: Any) -> jira.JiraConnector:
        doc = {
            "name": "jira-eng",
            "type": "jira",
            "jira": {"domain": self.base_url, "email": EMAIL, "apiToken": "secret://jira#token", **settings},
            "ingest": {"intervalMs": 1000},
        }
        config = validate_connector_config(doc)
        connector = jira.create(config, {"apiToken": token})
        assert connector.ingest is connector.actions
        impl = connector.ingest
        assert isinstance(impl, jira.JiraConnector)
        # Deterministic time and no real waiting.
        impl.client.sleep = self.sleeps.append
        impl.client.jitter = lambda: 1.0
        impl.client.retry = RetryPolicy(max_attempts=4, base_delay=0.5, max_retry_after=60.0)
        impl._now = lambda: self.state.now
        impl._hlc = HLC(lambda: 1_700_000_000_000)
        return impl


@pytest.fixture
def h(state: JiraState, base_url: str) -> Harness:
    return Harness(state, base_url)


def drain(connector: jira.JiraConnector, position: dict[str, Any], limit: int = 1000) -> tuple[list[Any], Any]:
    rows: list[Any] = []
    for _ in range(50):
        batch: PollBatch = connector.poll(position, limit)
        rows.extend(batch.rows)
        # The poller stores the position as JSON: round-trip it the same way.
        position = json.loads(json.dumps(batch.position))
        if not batch.more:
            return rows, position
    raise AssertionError("poll never caught up")


def utc(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def test_jira_poll_pages_by_next_page_token_with_explicit_fields(h: Harness, state: JiraState) -> None:
    issues = []
    for n in range(7):
        issues.append(state.add_issue("ENG", f"issue {n}", description={"type": "doc", "version": 1, "content": []}))
        state.tick(10)
    state.add_issue("OPS", "other project")
    connector = h.connector(jql="project = ENG ORDER BY created DESC", pageSize=3, reconcileMinutes=0)

    first = connector.poll({}, 3)
    assert first.more
    assert [r.row_id for r in first.rows] == [i.id for i in issues[:3]]
    rows, _ = drain(connector, json.loads(json.dumps(first.position)), limit=3)
    all_rows = [*first.rows, *rows]

    assert [r.row_id for r in all_rows] == [i.id for i in issues]
    row = all_rows[0]
    assert row.table == "jira_issues"
    assert row.values is not None and row.values["key"] == "ENG-1" and row.values["summary"] == "issue 0"
    assert row.values["status"] == "To Do" and row.values["project_key"] == "ENG"
    assert row.version == utc(issues[0].history[0][0])
    assert row.origin["issueKey"] == "ENG-1"
    searches = state.searches()
    assert all("startAt" not in body and body["fields"] for body in searches)
    assert any("nextPageToken" in body for body in searches)
    # The configured scope keeps its filter but loses its ORDER BY: the connector orders by updated.
    assert all(body["jql"].startswith("(project = ENG) AND updated >= ") for body in searches)
    assert all(body["jql"].endswith("ORDER BY updated ASC, key ASC") for body in searches)
    assert not any(path == "/rest/api/3/search" for _, path, _ in state.requests)


def test_jira_incremental_cursor_overlaps_in_the_users_zone_and_dedups(h: Harness, state: JiraState) -> None:
    a = state.add_issue("ENG", "a")
    b = state.add_issue("ENG", "b")
    connector = h.connector(overlapMinutes=2, reconcileMinutes=0)
    rows, position = drain(connector, {})
    assert {r.row_id for r in rows} == {a.id, b.id}

    # Nothing changed: the overlap re-reads both issues and emits neither.
    before = len(state.searches())
    rows, position = drain(connector, position)
    assert rows == []
    assert len(state.searches()) == before + 1
    # 12:00:00 UTC is 23:00 in Sydney (AEDT, +11): the cursor minus 2 minutes, floored to the minute.
    assert 'updated >= "2025/03/01 22:58"' in state.searches()[-1]["jql"]

    state.tick(45)
    state.update_issue(b.id, summary="b, renamed")
    rows, position = drain(connector, position)
    assert [(r.row_id, r.values["summary"]) for r in rows] == [(b.id, "b, renamed")]
    assert rows[0].version == utc(state.now)


def test_jira_overlap_catches_an_issue_the_index_showed_late(h: Harness, state: JiraState) -> None:
    late = state.add_issue("ENG", "written first, indexed late")
    state.hidden.add(late.id)
    state.tick(30)
    early = state.add_issue("ENG", "written second, indexed at once")
    connector = h.connector(reconcileMinutes=0)

    rows, position = drain(connector, {})
    assert [r.row_id for r in rows] == [early.id]
    assert position["issues"]["cursor"] == utc(state.now)

    state.hidden.clear()
    rows, position = drain(connector, position)
    # Behind the cursor, inside the overlap: emitted once, never again.
    assert [r.row_id for r in rows] == [late.id]
    assert drain(connector, position)[0] == []


def test_jira_a_stale_search_result_never_regresses_a_row(h: Harness, state: JiraState) -> None:
    issue = state.add_issue("ENG", "v1")
    connector = h.connector(reconcileMinutes=0)
    _, position = drain(connector, {})
    state.tick(20)
    state.update_issue(issue.id, summary="v2")
    rows, position = drain(connector, position)
    assert [r.values["summary"] for r in rows] == ["v2"]

    # The index lags and serves the older state again: it is not emitted.
    state.search_lag_s = 15
    rows, position = drain(connector, position)
    assert rows == []


def test_jira_restarted_connector_resumes_from_the_stored_position_without_duplicates(
    h: Harness, state: JiraState
) -> None:
    issues = [state.add_issue("ENG", f"i{n}") for n in range(6)]
    first = h.connector(pageSize=2, reconcileMinutes=0)
    batch = first.poll({}, 2)
    stored = json.loads(json.dumps(batch.position))

    # A crash before the position was stored polls the same rows again: identical versions (same deltaIds).
    again = h.connector(pageSize=2, reconcileMinutes=0).poll({}, 2)
    assert [(r.row_id, r.version, r.values) for r in again.rows] == [
        (r.row_id, r.version, r.values) for r in batch.rows
    ]

    restarted = h.connector(pageSize=2, reconcileMinutes=0)
    rest, position = drain(restarted, stored, limit=2)
    seen = [(r.row_id, r.version) for r in [*batch.rows, *rest]]
    assert len(seen) == len(set(seen)) == 6
    assert {r for r, _ in seen} == {i.id for i in issues}
    assert drain(h.connector(reconcileMinutes=0), position)[0] == []


def test_jira_expired_page_token_restarts_the_query_from_the_cursor(h: Harness, state: JiraState) -> None:
    for n in range(5):
        state.add_issue("ENG", f"i{n}")
        state.tick(1)
    connector = h.connector(pageSize=2, reconcileMinutes=0)
    batch = connector.poll({}, 2)
    assert batch.more and batch.position["issues"]["resume"]
    state.expire_page_tokens()
    rows, _ = drain(connector, json.loads(json.dumps(batch.position)), limit=2)
    ids = [r.row_id for r in [*batch.rows, *rows]]
    assert len(ids) == len(set(ids)) == 5


def test_jira_deleted_issue_is_a_deletion_after_two_sweeps(h: Harness, state: JiraState) -> None:
    keep = state.add_issue("ENG", "keep")
    gone = state.add_issue("ENG", "gone")
    connector = h.connector(reconcileMinutes=60)
    rows, position = drain(connector, {})
    assert {r.row_id for r in rows} == {keep.id, gone.id}
    assert jira_issues.decode_ids(position["sweep"]["known"]) == {keep.id, gone.id}

    state.delete_issue(gone.id)
    state.tick(30 * 60)
    assert drain(connector, position)[0] == []  # sweep not due yet
    state.tick(31 * 60)
    rows, position = drain(connector, position)
    assert rows == []  # first miss: could be the index lagging
    assert position["sweep"]["missing"] == [gone.id]

    state.tick(61 * 60)
    before = position
    rows, position = drain(connector, before)
    assert [(r.row_id, r.values) for r in rows] == [(gone.id, None)]
    assert rows[0].version.startswith("deleted@")
    assert jira_issues.decode_ids(position["sweep"]["known"]) == {keep.id}
    # Re-polling the same position (a crash before it was stored) gives the same deletion version.
    again, _ = drain(connector, before)
    assert [(r.row_id, r.version) for r in again] == [(gone.id, rows[0].version)]
    # The id sweep asks for ids only (no fields) in pages of up to 5,000.
    sweeps = [b for b in state.searches() if "fields" not in b]
    assert sweeps and all(b["maxResults"] == 5000 for b in sweeps)


def test_jira_an_issue_missing_once_then_back_is_not_deleted(h: Harness, state: JiraState) -> None:
    issue = state.add_issue("ENG", "flaky in the index")
    connector = h.connector(reconcileMinutes=60)
    _, position = drain(connector, {})
    state.tick(61 * 60)
    state.hidden.add(issue.id)
    rows, position = drain(connector, position)
    assert rows == [] and position["sweep"]["missing"] == [issue.id]
    state.hidden.clear()
    state.tick(61 * 60)
    rows, position = drain(connector, position)
    assert rows == [] and position["sweep"]["missing"] == []


def test_jira_comments_sync_into_their_table(h: Harness, state: JiraState) -> None:
    connector = h.connector(includeComments=True, reconcileMinutes=0)
    issue = state.add_issue("ENG", "with comments")
    context = ActionContext()
    connector.execute(
        make_action("c", 1, "jira-eng", "add_comment", {"issueKey": issue.key, "body": "first\nline 2"}), context
    )
    rows, _ = drain(connector, {})
    comments = [r for r in rows if r.table == "jira_comments"]
    assert len(comments) == 1
    assert comments[0].values["body"] == "first\nline 2"
    assert comments[0].values["issue_key"] == issue.key


def test_jira_429_is_retried_after_retry_after(h: Harness, state: JiraState) -> None:
    state.add_issue("ENG", "x")
    connector = h.connector(reconcileMinutes=0, timeZone="UTC")
    state.throttle(2, retry_after="3")
    rows, _ = drain(connector, {})
    assert len(rows) == 1
    assert h.sleeps == [3.0, 3.0]


def test_jira_a_long_retry_after_fails_the_poll_as_throttled_without_sleeping(h: Harness, state: JiraState) -> None:
    connector = h.connector(reconcileMinutes=0, timeZone="UTC")
    state.throttle(1, retry_after="600")
    with pytest.raises(ApiThrottledError) as info:
        connector.poll({}, 10)
    assert info.value.retryable and info.value.retry_after == 600
    assert isinstance(info.value, AdapterError) and info.value.status == 502
    assert h.sleeps == []


def test_jira_5xx_is_retried_with_bounded_backoff(h: Harness, state: JiraState) -> None:
    state.add_issue("ENG", "x")
    connector = h.connector(reconcileMinutes=0, timeZone="UTC")
    state.fail(2, 503)
    assert len(drain(connector, {})[0]) == 1
    assert h.sleeps == [0.5, 1.0]
    state.fail(10, 502)
    with pytest.raises(AdapterError, match="HTTP 502"):
        connector.poll({}, 10)


def test_jira_bad_token_is_a_401_never_retried_and_never_logged(
    h: Harness, state: JiraState, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "ATATT-wrong-token-value"
    connector = h.connector(token=wrong, reconcileMinutes=0)
    before = len(state.requests)
    with pytest.raises(ApiAuthError) as info:
        connector.poll({}, 10)
    assert len(state.requests) == before + 1
    assert "401" in info.value.message
    for text in [info.value.message, str(info.value), caplog.text]:
        assert wrong not in text and TOKEN not in text


def test_jira_removed_search_endpoint_answers_410(h: Harness) -> None:
    connector = h.connector()
    with pytest.raises(ApiRequestError) as info:
        connector.client.request("POST", "/rest/api/3/search", json_body={"jql": "project = ENG"})
    assert info.value.http_status == 410


# -- actions ----------------------------------------------------------------------------------------------------------


def act(connector: jira.JiraConnector, action_type: str, params: dict[str, Any]) -> Any:
    return connector.execute(make_action("client-a", 7, "jira-eng", action_type, params), ActionContext())


def test_jira_actions_create_update_and_comment(h: Harness, state: JiraState) -> None:
    connector = h.connector()
    names = [d.action_type for d in connector.supported_actions]
    assert names == ["create_issue", "update_issue", "add_comment"]

    result = act(connector, "create_issue", {"projectKey": "ENG", "summary": "Sync is slow", "description": "a\nb"})
    key = result.data["key"]
    assert key == "ENG-1" and result.data["id"]
    assert result.server_hlc >> 16 == 1_700_000_000_000
    created = state.find(key)
    assert created is not None and created.current is not None
    assert created.current["description"]["type"] == "doc"
    assert jira_issues.adf_text(created.current["description"]) == "a\nb"

    updated = act(connector, "update_issue", {"issueKey": key, "summary": "Sync is fast", "labels": ["perf"]})
    assert updated.data == {"key": key, "updated": ["labels", "summary"]}
    assert state.find(key).current["summary"] == "Sync is fast"  # type: ignore[union-attr]

    comment = act(connector, "add_comment", {"issueKey": key, "body": "Looking into it"})
    assert comment.data["issueKey"] == key and comment.data["commentId"]
    assert jira_issues.adf_text(state.find(key).comments[0]["body"]) == "Looking into it"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("action_type", "params", "message"),
    [
        ("create_issue", {"projectKey": "ENG"}, "summary is required"),
        ("create_issue", {"projectKey": "NOPE", "summary": "x"}, "project: Specify a valid project ID or key"),
        ("update_issue", {"issueKey": "ENG-999", "summary": "x"}, "Issue does not exist"),
        ("add_comment", {"issueKey": "ENG-1"}, "body is required"),
    ],
)
def test_jira_action_refusals_are_permanent(
    h: Harness, state: JiraState, action_type: str, params: dict[str, Any], message: str
) -> None:
    state.add_issue("ENG", "exists")
    with pytest.raises(ActionExecutionError, match=message) as info:
        act(h.connector(), action_type, params)
    assert info.value.retryable is False


def test_jira_action_throttled_or_failing_is_retryable(h: Harness, state: JiraState) -> None:
    state.add_issue("ENG", "exists")
    connector = h.connector()
    state.throttle(10, retry_after="1")
    with pytest.raises(ActionExecutionError) as info:
        act(connector, "update_issue", {"issueKey": "ENG-1", "summary": "x"})
    assert info.value.retryable is True
    state._throttle.clear()
    state.fail(10, 503)
    with pytest.raises(ActionExecutionError) as info:
        act(connector, "update_issue", {"issueKey": "ENG-1", "summary": "x"})
    assert info.value.retryable is True


def test_jira_create_with_unknown_outcome_is_not_retried(h: Harness, state: JiraState) -> None:
    connector = h.connector()
    state.fail(1, 500)
    with pytest.raises(ActionExecutionError, match="may or may not have been applied") as info:
        act(connector, "create_issue", {"projectKey": "ENG", "summary": "x"})
    assert info.value.retryable is False
    assert sum(1 for m, p, _ in state.requests if (m, p) == ("POST", "/rest/api/3/issue")) == 1


def test_jira_unsupported_action(h: Harness) -> None:
    with pytest.raises(ActionNotSupportedError, match='"delete_issue" not supported by connector "jira-eng"'):
        act(h.connector(), "delete_issue", {"issueKey": "ENG-1"})


# -- pure pieces ------------------------------------------------------------------------------------------------------


def test_jira_id_set_encoding_round_trips() -> None:
    ids = {str(n) for n in range(10000, 60000, 3)} | {"1", "999999999"}
    text = jira_issues.encode_ids(ids)
    assert jira_issues.decode_ids(text) == ids
    assert len(text) < len(ids)  # well under a byte an id for dense ranges
    assert jira_issues.decode_ids("") == set()


def test_jira_base_url_and_settings() -> None:
    assert jira.base_url_for("acme") == "https://acme.atlassian.net"
    assert jira.base_url_for("acme.atlassian.net/") == "https://acme.atlassian.net"
    assert jira.base_url_for("http://127.0.0.1:8080") == "http://127.0.0.1:8080"
    doc = {"name": "j", "type": "jira", "jira": {"domain": "acme", "email": "e", "apiToken": "secret://x"}}
    with pytest.raises(Exception, match="resolved apiToken"):
        jira.create(validate_connector_config(doc), {})
    doc["jira"]["overlapMinutes"] = -1  # type: ignore[index]
    with pytest.raises(Exception, match="overlapMinutes must be an integer"):
        jira.create(validate_connector_config(doc), {"apiToken": "t0k3n"})
    assert jira.DESCRIPTOR.to_json()["type"] == "jira"
    assert jira.DESCRIPTOR.secret_fields == ("apiToken",)


def test_jira_time_zone_is_read_from_the_profile_once(h: Harness, state: JiraState) -> None:
    connector = h.connector(reconcileMinutes=0)
    drain(connector, {})
    drain(connector, {})
    assert sum(1 for _, p, _ in state.requests if p == "/rest/api/3/myself") == 1
    assert timedelta(0) == connector._zone_slack


# -- a misbehaving Jira ------------------------------------------------------------------------------------------------


def _first_page_token(state: JiraState, jql: str, salt: int = 0) -> str:
    """A valid page token of the double that points at the first page of ``jql`` again (``salt`` varies its text)."""
    payload = {"jql": jql, "offset": 0, "epoch": state.token_epoch, "salt": salt}
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()


def _stuck_token_hook(state: JiraState, stop_after: int, *, id_only: bool = False) -> Any:
    """A search that hands out the same ``nextPageToken`` (and so the same page) again and again.

    After ``stop_after`` searches it finally says ``isLast``, so a connector that does not notice still ends. With
    ``id_only`` only the id-only searches (the deletion sweep's) misbehave.
    """
    calls = {"n": 0}

    def hook(body: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
        if id_only and body.get("fields"):
            return out
        calls["n"] += 1
        if calls["n"] >= stop_after:
            return {**out, "isLast": True, "nextPageToken": None}
        return {**out, "nextPageToken": _first_page_token(state, body["jql"]), "isLast": False}

    return hook


def test_jira_a_page_token_that_never_advances_fails_the_poll_instead_of_looping(h: Harness, state: JiraState) -> None:
    for n in range(3):
        state.add_issue("ENG", f"i{n}")
    state.search_hook = _stuck_token_hook(state, stop_after=40)
    connector = h.connector(pageSize=2, reconcileMinutes=0)

    with pytest.raises(AdapterError, match="nextPageToken"):
        connector.poll({}, 1000)
    # Noticed on the second page, not after the server gave up.
    assert len(state.searches()) == 2


def test_jira_the_deletion_sweep_stops_on_a_page_token_that_never_advances(h: Harness, state: JiraState) -> None:
    state.add_issue("ENG", "a")
    connector = h.connector()
    _, position = drain(connector, {})
    state.tick(3600)
    state.search_hook = _stuck_token_hook(state, stop_after=40, id_only=True)
    before = len(state.searches())

    with pytest.raises(AdapterError, match="nextPageToken"):
        connector.poll(position, 1000)
    # One incremental search, then two id-only pages.
    assert [bool(b.get("fields")) for b in state.searches()[before:]] == [True, False, False]


def test_jira_the_deletion_sweep_stops_on_pages_that_bring_no_new_id(h: Harness, state: JiraState) -> None:
    state.add_issue("ENG", "a")
    connector = h.connector()
    _, position = drain(connector, {})
    state.tick(3600)
    calls = {"n": 0}

    def hook(body: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
        if body.get("fields"):
            return out
        calls["n"] += 1
        if calls["n"] >= 200:
            return {**out, "isLast": True, "nextPageToken": None}
        # The same ids under a fresh token every time.
        return {**out, "nextPageToken": _first_page_token(state, body["jql"], salt=calls["n"]), "isLast": False}

    state.search_hook = hook
    with pytest.raises(AdapterError, match="without a new issue id"):
        connector.poll(position, 1000)
    assert calls["n"] == 21


def test_jira_pages_of_issues_already_emitted_count_toward_the_poll_limit(h: Harness, state: JiraState) -> None:
    for n in range(4):
        state.add_issue("ENG", f"i{n}")
    connector = h.connector(pageSize=2, reconcileMinutes=0)
    _, position = drain(connector, {})

    # A broken index: every search answer is the first two issues again, with a fresh token each time.
    first_page: list[Any] = []
    calls = {"n": 0}

    def hook(body: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
        calls["n"] += 1
        if not first_page:
            first_page.extend(out["issues"])
        if calls["n"] >= 60:
            return {**out, "isLast": True, "nextPageToken": None}
        token = _first_page_token(state, body["jql"], salt=calls["n"])
        return {"issues": first_page, "nextPageToken": token, "isLast": False}

    state.search_hook = hook
    before = len(state.searches())
    batch = connector.poll(position, 10)
    # A poll reads about ``limit`` issues and keeps its place, whether or not they were new.
    assert batch.rows == []
    assert batch.more and batch.position["issues"]["resume"]
    assert len(state.searches()) - before == 5


def test_jira_an_issue_without_a_usable_id_is_a_clear_vendor_error(h: Harness, state: JiraState) -> None:
    state.add_issue("ENG", "a")
    connector = h.connector()

    for bad in (None, "", "ENG-1", "12x", "１２", True, 1.5):

        def hook(body: dict[str, Any], out: dict[str, Any], bad: Any = bad) -> dict[str, Any]:
            issues = [dict(i) for i in out["issues"]]
            for issue in issues:
                if bad is None:
                    issue.pop("id", None)
                else:
                    issue["id"] = bad
            return {**out, "issues": issues}

        state.search_hook = hook
        with pytest.raises(AdapterError, match="id"):
            connector.poll({}, 1000)


def test_jira_a_numeric_id_sent_as_a_number_is_read_as_its_digits(h: Harness, state: JiraState) -> None:
    issue = state.add_issue("ENG", "a")

    def hook(body: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
        return {**out, "issues": [{**i, "id": int(i["id"])} for i in out["issues"]]}

    state.search_hook = hook
    rows, position = drain(h.connector(), {})
    assert [r.row_id for r in rows] == [issue.id]
    assert jira_issues.decode_ids(position["sweep"]["known"]) == {issue.id}


def test_jira_an_unreadable_updated_is_a_clear_vendor_error(h: Harness, state: JiraState) -> None:
    state.add_issue("ENG", "a")
    connector = h.connector(reconcileMinutes=0)
    for bad in ("yesterday", "2025-03-01T12:00:00.000", "2025-13-45T99:00:00.000+0000"):

        def hook(body: dict[str, Any], out: dict[str, Any], bad: str = bad) -> dict[str, Any]:
            issues = [{**i, "fields": {**i["fields"], "updated": bad}} for i in out["issues"]]
            return {**out, "issues": issues}

        state.search_hook = hook
        with pytest.raises(AdapterError, match="updated"):
            connector.poll({}, 1000)


def test_jira_an_issue_updated_in_the_future_does_not_move_the_cursor_past_now(h: Harness, state: JiraState) -> None:
    state.add_issue("ENG", "imported with a date from the future", _updated=state.now + timedelta(days=365))
    connector = h.connector(reconcileMinutes=0)
    rows, position = drain(connector, {})
    assert len(rows) == 1
    assert position["issues"]["cursor"] <= utc(state.now)

    # Edits made after that poll are still found.
    state.tick(600)
    later = state.add_issue("ENG", "written later")
    rows, position = drain(connector, position)
    assert [r.row_id for r in rows] == [later.id]
    # The future-dated issue is not emitted again on every poll.
    state.tick(600)
    assert drain(connector, position)[0] == []


def _commented_issue(h: Harness, state: JiraState) -> jira.JiraConnector:
    connector = h.connector(includeComments=True, reconcileMinutes=0)
    issue = state.add_issue("ENG", "with comments")
    for n in range(2):
        action = make_action(f"c{n}", 1, "jira-eng", "add_comment", {"issueKey": issue.key, "body": f"c{n}"})
        connector.execute(action, ActionContext())
    return connector


def test_jira_comment_paging_that_ignores_start_at_fails_instead_of_looping(h: Harness, state: JiraState) -> None:
    connector = _commented_issue(h, state)
    served: list[int] = []
    first: list[Any] = []

    def hook(page: dict[str, Any]) -> dict[str, Any]:
        served.append(page["startAt"])
        if len(served) >= 50:  # so that a connector that does not notice still ends
            return {**page, "total": 0, "comments": []}
        first.extend([] if first else page["comments"])
        # The first page whatever startAt says, and a total that keeps the client asking.
        return {**page, "startAt": 0, "total": 10**9, "comments": first}

    state.comment_hook = hook
    with pytest.raises(AdapterError, match="comments"):
        connector.poll({}, 1000)
    assert len(served) == 2


def test_jira_comments_without_a_usable_id_are_a_clear_vendor_error(h: Harness, state: JiraState) -> None:
    connector = _commented_issue(h, state)
    state.comment_hook = lambda page: {
        **page,
        "comments": [{k: v for k, v in c.items() if k != "id"} for c in page["comments"]],
    }
    with pytest.raises(AdapterError, match="id"):
        connector.poll({}, 1000)


def _gateway() -> GatewayDeps:
    return GatewayDeps(
        buffer=InMemoryBufferStore(),
        config=InMemoryConfigStore(),
        actions=InMemoryActionStore(),
        positions=InMemoryPositionStore(),
    )


def test_jira_values_a_push_would_refuse_do_not_stop_the_connector(h: Harness, state: JiraState) -> None:
    # A summary ending in half an emoji (a lone surrogate in JSON) and a number field Jira wrote as NaN.
    issue = state.add_issue("ENG", "cut \ud83d", customfield_1=float("nan"))
    deps = _gateway()
    connector = h.connector(reconcileMinutes=0, fields=["customfield_1"])

    result = poll_connector(deps, "default", "jira-eng", connector, deps.positions)

    assert (result.status, result.rows, result.applied) == ("polled", 1, 1)
    row = deps.buffer.get_rows("default", [("jira_issues", issue.id)])[("jira_issues", issue.id)]
    assert row.state.columns["summary"].value == "cut \ufffd"
    assert row.state.columns["customfield_1"].value is None


def test_jira_fields_of_the_wrong_shape_are_read_as_best_they_can(h: Harness, state: JiraState) -> None:
    issue = state.add_issue("ENG", "odd shapes")

    def hook(body: dict[str, Any], out: dict[str, Any]) -> dict[str, Any]:
        odd = {"labels": 5, "description": {"type": "doc", "content": 7}, "status": "Done", "project": ["ENG"]}
        return {**out, "issues": [{**i, "fields": {**i["fields"], **odd}} for i in out["issues"]]}

    state.search_hook = hook
    rows, _ = drain(h.connector(reconcileMinutes=0), {})

    [row] = rows
    assert row.row_id == issue.id and row.values is not None
    assert row.values["labels"] == [] and row.values["description"] == ""
    assert row.values["status"] is None and row.values["project_key"] is None


class _CrashOnCommit(InMemoryPositionStore):
    """A position store whose next commit dies (the poller crashed after its pushes, before storing the position)."""

    crash = False

    def commit(self, gateway: str, name: str, token: str, version: int, position: Any) -> bool:
        if self.crash:
            self.crash = False
            raise RuntimeError("killed before the position was stored")
        return super().commit(gateway, name, token, version, position)


def test_jira_poll_killed_before_storing_its_position_loses_and_duplicates_nothing(
    h: Harness, state: JiraState
) -> None:
    deps = _gateway()
    wall = [1_750_000_000_000]
    deps.wall_ms = lambda: wall[0]
    positions = _CrashOnCommit()
    doomed = state.add_issue("ENG", "deleted later")
    kept = [state.add_issue("ENG", f"i{n}") for n in range(3)]
    connector = h.connector(reconcileMinutes=60)
    poll_connector(deps, "default", "jira-eng", connector, positions)
    state.tick(60)
    state.update_issue(kept[0].id, summary="renamed")
    state.delete_issue(doomed.id)
    state.tick(3600)
    poll_connector(deps, "default", "jira-eng", connector, positions)  # first sweep: suspect
    state.tick(3600)

    # The second sweep confirms the deletion; the poll dies after pushing it.
    positions.crash = True
    with pytest.raises(RuntimeError):
        poll_connector(deps, "default", "jira-eng", connector, positions)
    rows_after_crash = _live_rows(deps, [doomed.id, *(i.id for i in kept)])

    # The dead poller's lease holds off others until it expires.
    assert poll_connector(deps, "default", "jira-eng", connector, positions).status == "busy"
    wall[0] += 16 * 60 * 1000
    # Then the rerun re-reads the same position: the same deltas, all duplicates; then nothing more.
    rerun = poll_connector(deps, "default", "jira-eng", h.connector(reconcileMinutes=60), positions)
    assert (rerun.status, rerun.rows, rerun.deletes, rerun.applied) == ("polled", 1, 1, 0)
    assert _live_rows(deps, [doomed.id, *(i.id for i in kept)]) == rows_after_crash
    assert set(rows_after_crash) == {i.id for i in kept}
    assert rows_after_crash[kept[0].id] == "renamed"
    assert poll_connector(deps, "default", "jira-eng", connector, positions).rows == 0


def _live_rows(deps: GatewayDeps, ids: list[str]) -> dict[str, Any]:
    found = deps.buffer.get_rows("default", [("jira_issues", i) for i in ids])
    return {row_id: row.state.columns["summary"].value for (_, row_id), row in found.items() if row.state.exists}
