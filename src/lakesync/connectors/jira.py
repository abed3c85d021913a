"""The Jira Cloud connector: issues (and optionally comments) polled into tables, and actions on issues.

**Polling** uses the enhanced search, ``POST /rest/api/3/search/jql`` (the old ``/rest/api/3/search`` answers 410
Gone): paged by ``nextPageToken`` (there is no ``startAt`` and no ``total``), with ``fields`` listed explicitly (without
them the search returns issue ids only). The query is the configured scope (``jira.jql``, e.g. ``project = ENG``)
and ``updated >= "<cursor - overlap>" ORDER BY updated ASC, key ASC``.

* JQL compares date-times at **minute** precision, in the **time zone of the API user's profile**: the connector
  reads it once from ``GET /rest/api/3/myself`` (``jira.timeZone`` overrides) and writes the cursor in that zone,
  floored to the minute, minus ``overlapMinutes`` (default 2).
* The search index is eventually consistent (an issue written a moment ago may be missing, then appear with an
  ``updated`` behind the cursor): the overlap re-reads that window, and
  :class:`~lakesync.connectors.api_cursor.IncrementalState` skips issues already emitted at the same or a newer
  ``updated``. A row's ``version`` is its ``updated`` (UTC, ms), so a re-poll yields identical deltas.
* A poll stops after about ``limit`` rows at a page boundary and keeps the ``nextPageToken`` in the position; the
  next poll continues that query (a rejected or expired token restarts it from the cursor).

**Deleted issues.** Jira's REST API has no feed of deleted issues (the ``jira:issue_deleted`` webhook needs a public
endpoint, and the audit log does not record issue deletions for API users). So the connector **reconciles ids**:
every ``reconcileMinutes`` (default 60; 0 turns it off) a poll that has caught up lists every issue id in the scope
(an id-only search, up to 5,000 ids a page) and compares it with the ids it has synced, which the position keeps
(compressed, ~2-3 bytes an id). An id missing from **two consecutive** sweeps becomes a deletion: one miss could be
the search's eventual consistency, two sweeps an interval apart cannot. An issue moved out of the scope (another
project, a changed ``jql``) leaves the table the same way. Deleted comments are not detected (a comment row stays
until its issue's row is deleted; the comment rows themselves are not deleted).

**Actions**: ``create_issue`` (``POST /rest/api/3/issue``), ``update_issue`` (``PUT /rest/api/3/issue/{key}``) and
``add_comment`` (``POST /rest/api/3/issue/{key}/comment``); text becomes Atlassian Document Format. A 4xx from Jira is
a permanent failure (``retryable: false``, Jira's messages included), throttling and 5xx are retryable, and a create
whose outcome is unknown (the connection broke after sending it) is reported as not retryable, since sending it again
could create the issue twice.

Authentication is HTTP basic with the account's e-mail and API token (``jira.apiToken``, a secret); API tokens do not
expire by time, so a 401 is a configuration error, never retried.

This module is the connector (settings, client, polling, the sweep, action dispatch and registration); Jira's issues
and comments as rows, the JQL and the position's id sets are :mod:`lakesync.connectors.jira_issues`, and the actions'
requests :mod:`lakesync.connectors.jira_actions`.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lakesync.connectors.api_cursor import IncrementalState, advancing, format_utc, parse_time, vendor_time
from lakesync.connectors.api_settings import API_INGEST_SCHEMA, SettingsReader, client_options
from lakesync.connectors.base import ChangedRow, Connector, ConnectorTypeDescriptor, PollBatch, Position
from lakesync.connectors.http_api import (
    ApiError,
    ApiOutcomeUnknownError,
    ApiRequestError,
    ApiUnavailableError,
    HttpApiClient,
    HttpResponse,
    Redactor,
    RetryPolicy,
    Transport,
    VendorRules,
)
from lakesync.connectors.jira_actions import ACTIONS, RUNNERS
from lakesync.connectors.jira_issues import (
    COMMENTS_TABLE,
    EPOCH_JQL,
    ISSUE_FIELDS,
    ISSUES_TABLE,
    comment_values,
    decode_ids,
    encode_ids,
    issue_id,
    issue_values,
    jql_time,
    numeric_id,
    scoped,
    strip_order_by,
)
from lakesync.core.actions import Action, ActionContext, ActionDescriptor, ActionResult
from lakesync.core.canonical import JsonValue
from lakesync.core.connectors import ConnectorConfig
from lakesync.core.errors import ActionExecutionError, ActionNotSupportedError, ValidationError
from lakesync.core.hlc import HLC

__all__ = ["DESCRIPTOR", "JiraConnector", "JiraSettings", "base_url_for", "create"]

logger = logging.getLogger(__name__)

SEARCH_PATH = "/rest/api/3/search/jql"
_MINUTE = timedelta(minutes=1)
_MAX_PAGE = 100
_ID_PAGE = 5000
_MAX_IDLE_PAGES = 20


# -- settings -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JiraSettings:
    """The ``jira`` settings object of a connector config, secrets resolved."""

    base_url: str
    email: str
    api_token: str = field(repr=False)
    jql: str = ""
    include_comments: bool = False
    extra_fields: tuple[str, ...] = ()
    overlap_minutes: int = 2
    reconcile_minutes: int = 60
    time_zone: str | None = None
    page_size: int = 100

    @classmethod
    def from_config(cls, config: ConnectorConfig, secrets: Mapping[str, str]) -> JiraSettings:
        """Read the settings; ``secrets`` holds the resolved ``apiToken``.

        Raises:
            ValidationError: a setting of the wrong type.
            ForbiddenTargetError: the domain is not an https URL of an allowed host (400).
        """
        read = SettingsReader.of("Jira", config, secrets)
        token = read.required_secret("apiToken")
        return cls(
            base_url=read.checked_url(base_url_for(read.text("domain", required=True)), what="domain"),
            email=read.text("email", required=True),
            api_token=token,
            jql=strip_order_by(read.text("jql")),
            include_comments=read.flag("includeComments", False),
            extra_fields=tuple(_field_ids(read.settings)),
            overlap_minutes=read.integer("overlapMinutes", 2, minimum=0),
            reconcile_minutes=read.integer("reconcileMinutes", 60, minimum=0),
            time_zone=read.text("timeZone") or None,
            page_size=read.integer("pageSize", 100, minimum=1, maximum=_MAX_PAGE),
        )


def base_url_for(domain: str) -> str:
    """``acme`` → ``https://acme.atlassian.net``; a host or a URL is used as given."""
    domain = domain.strip().rstrip("/")
    if "://" in domain:
        return domain
    if "." in domain:
        return "https://" + domain
    return f"https://{domain}.atlassian.net"


def _field_ids(s: Mapping[str, Any]) -> list[str]:
    value = s.get("fields", [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValidationError("Jira connector fields must be an array of field ids")
    return list(value)


# -- vendor rules -----------------------------------------------------------------------------------------------------


class JiraRules(VendorRules):
    """Jira Cloud: 429 with ``Retry-After``; errors as ``{"errorMessages": [...], "errors": {field: message}}``."""

    name = "Jira"

    def error_detail(self, response: HttpResponse) -> tuple[str | None, str]:
        """Jira's error messages and field errors, joined."""
        doc = response.json()
        if not isinstance(doc, Mapping):
            return None, ""
        parts: list[str] = [m for m in doc.get("errorMessages") or [] if isinstance(m, str)]
        errors = doc.get("errors")
        if isinstance(errors, Mapping):
            parts.extend(f"{k}: {v}" for k, v in errors.items() if isinstance(v, str))
        if not parts and isinstance(doc.get("message"), str):
            parts.append(doc["message"])
        return None, "; ".join(parts)


class BasicAuth:
    """E-mail and API token, as HTTP basic auth. Tokens do not expire by time: nothing to refresh."""

    def __init__(self, email: str, token: str) -> None:
        raw = f"{email}:{token}".encode()
        self._header = "Basic " + base64.b64encode(raw).decode("ascii")

    def headers(self) -> Mapping[str, str]:
        """The ``Authorization`` header."""
        return {"Authorization": self._header}

    def refresh(self) -> bool:
        """Nothing to renew."""
        return False


# -- the connector ----------------------------------------------------------------------------------------------------


class JiraConnector:
    """Polls issues (the ingest source) and executes actions (the action handler) for one configured connector."""

    def __init__(
        self,
        name: str,
        settings: JiraSettings,
        *,
        transport: Transport | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] | None = None,
        now: Callable[[], datetime] | None = None,
        hlc: HLC | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._name = name
        self.settings = settings
        self._now = now or (lambda: datetime.now(UTC))
        self._hlc = hlc or HLC()
        auth = BasicAuth(settings.email, settings.api_token)
        self.client = HttpApiClient(
            settings.base_url,
            rules=JiraRules(),
            auth=auth,
            redactor=Redactor([settings.api_token, auth.headers()["Authorization"]]),
            **client_options(transport=transport, retry=retry, sleep=sleep, timeout=timeout),
        )
        self._zone: tzinfo | None = None
        self._zone_slack = timedelta(0)

    # -- IngestSource -----------------------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The connector's name."""
        return self._name

    def close(self) -> None:
        """Nothing is held open between requests."""

    def poll(self, position: Position, limit: int) -> PollBatch:
        """Issues changed since ``position`` (and comments), then deletions found by a due reconciliation.

        Raises:
            AdapterError: Jira refused or could not be reached (nothing is stored; the poll is retried later).
        """
        limit = max(1, limit)
        state = IncrementalState.from_json(position.get("issues"))
        sweep = dict(position.get("sweep") or {}) if isinstance(position.get("sweep"), Mapping) else {}
        track = self.settings.reconcile_minutes > 0
        known = decode_ids(str(sweep.get("known", ""))) if track else set()
        rows: list[ChangedRow] = []
        more = self._read_changes(state, rows, known, limit)
        overlap = timedelta(minutes=self.settings.overlap_minutes) + self._zone_slack
        state.prune(overlap, _MINUTE)
        if track and not more and self._sweep_due(sweep):
            rows.extend(self._sweep(sweep, known))
        new_position: dict[str, JsonValue] = {"v": 1, "issues": state.to_json()}
        if track:
            sweep["known"] = encode_ids(known)
            new_position["sweep"] = sweep
        return PollBatch(rows, new_position, more)

    def _read_changes(self, state: IncrementalState, rows: list[ChangedRow], known: set[str], limit: int) -> bool:
        resume = state.resume
        if resume is not None and isinstance(resume.get("jql"), str) and isinstance(resume.get("token"), str):
            jql, token = resume["jql"], resume["token"]
        else:
            jql, token = self._incremental_jql(state), None
        state.resume = None
        # Issues read, whether emitted or not (empty pages count in full): bounds the requests of one poll.
        read = 0
        tokens = {token} if token is not None else set()
        fields = [*ISSUE_FIELDS, *(f for f in self.settings.extra_fields if f not in ISSUE_FIELDS)]
        while True:
            body: dict[str, JsonValue] = {"jql": jql, "fields": list(fields), "maxResults": self.settings.page_size}
            if token is not None:
                body["nextPageToken"] = token
            try:
                page = self.client.request("POST", SEARCH_PATH, json_body=body, idempotent=True).json()
            except ApiRequestError:
                if token is None or resume is None:
                    raise
                # The stored page token expired or the query changed: restart from the cursor (dedup keeps it exact).
                logger.info("jira %s: stored page token refused; restarting the query from the cursor", self._name)
                resume = None
                jql, token = self._incremental_jql(state), None
                tokens.clear()
                continue
            if not isinstance(page, Mapping):
                raise ApiRequestError("Jira search returned a body that is not a JSON object", vendor="Jira")
            issues = [i for i in page.get("issues") or [] if isinstance(i, Mapping)]
            for issue in issues:
                issue_rows = self._issue_rows(issue, state)
                if issue_rows:
                    known.add(issue_rows[0].row_id)
                    rows.extend(issue_rows)
            read += len(issues) or self.settings.page_size
            next_token = page.get("nextPageToken")
            if not isinstance(next_token, str) or not next_token or page.get("isLast") is True:
                return False
            token = advancing(next_token, tokens, "nextPageToken", "search", vendor="Jira")
            if read >= limit:
                state.resume = {"jql": jql, "token": token}
                return True

    def _incremental_jql(self, state: IncrementalState) -> str:
        zone = self._time_zone()
        overlap = timedelta(minutes=self.settings.overlap_minutes) + self._zone_slack
        start = state.query_start(overlap, _MINUTE)
        bound = f"updated >= {jql_time(start, zone)}" if start is not None else f"updated >= {EPOCH_JQL}"
        return scoped(self.settings.jql, f"{bound} ORDER BY updated ASC, key ASC")

    def _time_zone(self) -> tzinfo:
        if self._zone is not None:
            return self._zone
        name = self.settings.time_zone
        if not name:
            me = self.client.get_json("/rest/api/3/myself")
            name = me.get("timeZone") if isinstance(me, Mapping) else None
        try:
            self._zone = ZoneInfo(name) if isinstance(name, str) and name else UTC
        except (ZoneInfoNotFoundError, ValueError):
            # Without the zone database the minute the JQL means is unknown: read 14 h more (any UTC offset).
            logger.warning("jira %s: time zone %r unknown here; widening the overlap by 14 hours", self._name, name)
            self._zone, self._zone_slack = UTC, timedelta(hours=14)
        return self._zone

    def _issue_rows(self, issue: Mapping[str, Any], state: IncrementalState) -> list[ChangedRow]:
        fields = issue.get("fields")
        if not isinstance(fields, Mapping) or not isinstance(fields.get("updated"), str):
            raise ApiRequestError("Jira search returned an issue without fields.updated", vendor="Jira")
        row_id = issue_id(issue)
        updated = vendor_time(fields["updated"], f"an issue {row_id} whose fields.updated", vendor="Jira")
        # An ``updated`` in the future (an import, a skewed clock) must not move the cursor past issues still to come.
        if not state.accept(row_id, updated, not_after=self._now()):
            return []
        version = format_utc(updated)
        origin: dict[str, JsonValue] = {
            "source": "jira",
            "site": self.settings.base_url,
            "issueKey": issue.get("key"),
            "updated": fields["updated"],
        }
        values = issue_values(issue, fields, self.settings.extra_fields)
        rows = [ChangedRow(ISSUES_TABLE, row_id, values, version, origin)]
        if self.settings.include_comments:
            rows.extend(self._comment_rows(row_id, str(issue.get("key"))))
        return rows

    def _comment_rows(self, issue_id: str, issue_key: str) -> list[ChangedRow]:
        rows: list[ChangedRow] = []
        seen: set[str] = set()
        start = 0
        while True:
            page = self.client.get_json(
                f"/rest/api/3/issue/{issue_id}/comment",
                params={"startAt": str(start), "maxResults": "100", "orderBy": "created"},
            )
            comments = page.get("comments") if isinstance(page, Mapping) else None
            if not isinstance(comments, list):
                raise ApiRequestError("Jira comments response without comments", vendor="Jira")
            before = len(seen)
            for c in comments:
                if not isinstance(c, Mapping):
                    continue
                comment_id = numeric_id(c, f"comment of issue {issue_id}")
                seen.add(comment_id)
                if not isinstance(c.get("updated"), str):
                    continue
                updated = vendor_time(c["updated"], f"a comment of issue {issue_id} whose updated", vendor="Jira")
                values = comment_values(c, issue_id, issue_key)
                origin: dict[str, JsonValue] = {"source": "jira", "site": self.settings.base_url, "issueKey": issue_key}
                rows.append(ChangedRow(COMMENTS_TABLE, comment_id, values, format_utc(updated), origin))
            start += len(comments)
            total = page.get("total")
            if not comments or not isinstance(total, int) or start >= total:
                return rows
            if len(seen) == before:
                raise ApiUnavailableError(
                    f"Jira comments of issue {issue_id}: a page at startAt={start - len(comments)} brought no new "
                    "comment (paging does not advance)",
                    vendor="Jira",
                )

    # -- reconciliation of deleted issues ----------------------------------------------------------------------------

    def _sweep_due(self, sweep: Mapping[str, Any]) -> bool:
        at = sweep.get("at")
        if not isinstance(at, str):
            return True
        try:
            return self._now() - parse_time(at) >= timedelta(minutes=self.settings.reconcile_minutes)
        except ValueError:
            return True

    def _sweep(self, sweep: dict[str, Any], known: set[str]) -> list[ChangedRow]:
        current = self._all_ids()
        previous_at = sweep.get("at") if isinstance(sweep.get("at"), str) else None
        suspects = {str(i) for i in sweep.get("missing") or []}
        gone = known - current
        confirmed = sorted(gone & suspects, key=int)
        rows = [
            ChangedRow(
                ISSUES_TABLE,
                issue_id,
                None,
                f"deleted@{previous_at}",
                {"source": "jira", "site": self.settings.base_url, "reconciledAt": previous_at},
            )
            for issue_id in confirmed
        ]
        known.difference_update(confirmed)
        known.update(current)
        sweep["missing"] = sorted(gone - set(confirmed), key=int)
        sweep["at"] = format_utc(self._now())
        if confirmed:
            logger.info("jira %s: %d issues deleted (absent from two sweeps)", self._name, len(confirmed))
        return rows

    def _all_ids(self) -> set[str]:
        jql = scoped(self.settings.jql, f"updated >= {EPOCH_JQL}")
        ids: set[str] = set()
        token: str | None = None
        tokens: set[str] = set()
        idle = 0
        while True:
            body: dict[str, JsonValue] = {"jql": jql, "maxResults": _ID_PAGE}
            if token is not None:
                body["nextPageToken"] = token
            page = self.client.request("POST", SEARCH_PATH, json_body=body, idempotent=True).json()
            if not isinstance(page, Mapping):
                raise ApiRequestError("Jira search returned a body that is not a JSON object", vendor="Jira")
            before = len(ids)
            ids.update(issue_id(i) for i in page.get("issues") or [] if isinstance(i, Mapping))
            next_token = page.get("nextPageToken")
            if not isinstance(next_token, str) or not next_token or page.get("isLast") is True:
                return ids
            token = advancing(next_token, tokens, "nextPageToken", "search", vendor="Jira")
            # Pages may come back short (permissions), but page after page with no new id is a loop.
            idle = 0 if len(ids) > before else idle + 1
            if idle >= _MAX_IDLE_PAGES:
                raise ApiUnavailableError(
                    f"Jira id search returned {idle} pages in a row without a new issue id; the sweep stopped",
                    vendor="Jira",
                )

    # -- ActionHandler -------------------------------------------------------------------------------------------------

    @property
    def supported_actions(self) -> Sequence[ActionDescriptor]:
        """``create_issue``, ``update_issue``, ``add_comment``."""
        return ACTIONS

    def execute(self, action: Action, context: ActionContext) -> ActionResult:
        """Run one action against Jira.

        Raises:
            ActionNotSupportedError: an action type this connector does not have.
            ActionExecutionError: Jira refused (``retryable`` false) or failed/throttled (``retryable`` true).
        """
        run = RUNNERS.get(action.action_type)
        if run is None:
            raise ActionNotSupportedError(
                f'Action type "{action.action_type}" not supported by connector "{self._name}"'
            )
        try:
            data = run(self.client, action.params)
        except ApiOutcomeUnknownError as e:
            raise ActionExecutionError(f"{e.message}; check Jira before retrying", retryable=False) from None
        except ApiError as e:
            raise ActionExecutionError(e.message, retryable=e.retryable) from None
        return ActionResult(action.action_id, data, self._hlc.now())


# -- registration ----------------------------------------------------------------------------------------------------

DESCRIPTOR = ConnectorTypeDescriptor(
    type="jira",
    display_name="Jira",
    description="Jira Cloud issues (and comments) polled into tables; create and update issues, add comments.",
    category="api",
    config_schema={
        "type": "object",
        "required": ["domain", "email", "apiToken"],
        "properties": {
            "domain": {"type": "string", "description": "acme, acme.atlassian.net or https://acme.atlassian.net"},
            "email": {"type": "string"},
            "apiToken": {"type": "string", "description": "API token (stored as a secret)"},
            "jql": {"type": "string", "description": "scope of the synced issues, e.g. project = ENG"},
            "includeComments": {"type": "boolean", "default": False},
            "fields": {"type": "array", "items": {"type": "string"}, "description": "extra issue fields to sync"},
            "overlapMinutes": {"type": "integer", "default": 2},
            "reconcileMinutes": {"type": "integer", "default": 60, "description": "deleted-issue sweep; 0: off"},
            "timeZone": {"type": "string", "description": "the API user's profile time zone (read when absent)"},
            "pageSize": {"type": "integer", "default": 100, "maximum": 100},
        },
    },
    ingest_schema=API_INGEST_SCHEMA,
    output_tables=(
        {"table": ISSUES_TABLE, "rowId": "issue id", "description": "one row per issue"},
        {"table": COMMENTS_TABLE, "rowId": "comment id", "description": "with includeComments"},
    ),
    secret_fields=("apiToken",),
)


def create(config: ConnectorConfig, secrets: Mapping[str, str]) -> Connector:
    """The connector for a validated ``jira`` config; ``secrets`` holds the resolved ``apiToken``.

    Raises:
        ValidationError: a setting is malformed or the token is missing.
    """
    connector = JiraConnector(config.name, JiraSettings.from_config(config, secrets))
    # The poller schedules the ingest part only when the config has an ``ingest`` section.
    return Connector(config.name, ingest=connector, actions=connector)
