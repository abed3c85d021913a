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
"""

from __future__ import annotations

import base64
import logging
import urllib.parse
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from lakesync import egress
from lakesync.connectors.api_cursor import IncrementalState, advancing, format_utc, parse_time, vendor_time
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
    UrllibTransport,
    VendorRules,
)
from lakesync.core.actions import Action, ActionContext, ActionDescriptor, ActionResult
from lakesync.core.canonical import JsonValue
from lakesync.core.connectors import ConnectorConfig
from lakesync.core.errors import ActionExecutionError, ActionNotSupportedError, ValidationError
from lakesync.core.hlc import HLC

__all__ = ["COMMENTS_TABLE", "DESCRIPTOR", "ISSUES_TABLE", "JiraConnector", "JiraSettings", "adf_text", "create"]

logger = logging.getLogger(__name__)

ISSUES_TABLE = "jira_issues"
COMMENTS_TABLE = "jira_comments"
SEARCH_PATH = "/rest/api/3/search/jql"
ISSUE_FIELDS = (
    "summary",
    "status",
    "issuetype",
    "priority",
    "project",
    "assignee",
    "reporter",
    "labels",
    "created",
    "updated",
    "resolution",
    "description",
    "parent",
)
_MINUTE = timedelta(minutes=1)
_EPOCH_JQL = '"1970/01/01 00:00"'
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
        s = config.settings or {}
        token = secrets.get("apiToken") or s.get("apiToken")
        if not isinstance(token, str) or not token or token.startswith("secret://"):
            raise ValidationError("Jira connector requires a resolved apiToken secret")
        base_url = base_url_for(_str(s, "domain", required=True))
        egress.check_url(base_url, what="Jira domain", resolve_host=True)
        return cls(
            base_url=base_url,
            email=_str(s, "email", required=True),
            api_token=token,
            jql=_strip_order_by(_str(s, "jql")),
            include_comments=_bool(s, "includeComments", False),
            extra_fields=tuple(_str_list(s, "fields")),
            overlap_minutes=_int(s, "overlapMinutes", 2, minimum=0),
            reconcile_minutes=_int(s, "reconcileMinutes", 60, minimum=0),
            time_zone=_str(s, "timeZone") or None,
            page_size=_int(s, "pageSize", 100, minimum=1, maximum=_MAX_PAGE),
        )


def base_url_for(domain: str) -> str:
    """``acme`` → ``https://acme.atlassian.net``; a host or a URL is used as given."""
    domain = domain.strip().rstrip("/")
    if "://" in domain:
        return domain
    if "." in domain:
        return "https://" + domain
    return f"https://{domain}.atlassian.net"


def _str(s: Mapping[str, Any], key: str, *, required: bool = False) -> str:
    value = s.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise ValidationError(f"Jira connector {key} must be a {'non-empty ' if required else ''}string")
    return value


def _bool(s: Mapping[str, Any], key: str, default: bool) -> bool:
    value = s.get(key, default)
    if not isinstance(value, bool):
        raise ValidationError(f"Jira connector {key} must be a boolean")
    return value


def _int(s: Mapping[str, Any], key: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
    value = s.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum or (maximum and value > maximum):
        bound = f" between {minimum} and {maximum}" if maximum else f" >= {minimum}"
        raise ValidationError(f"Jira connector {key} must be an integer{bound}")
    return value


def _str_list(s: Mapping[str, Any], key: str) -> list[str]:
    value = s.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValidationError(f"Jira connector {key} must be an array of field ids")
    return list(value)


def _strip_order_by(jql: str) -> str:
    """The scope without a trailing ``ORDER BY`` (the connector orders by ``updated``)."""
    upper = jql.upper()
    at = upper.rfind("ORDER BY")
    return (jql[:at] if at >= 0 else jql).strip()


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


# -- Atlassian Document Format ----------------------------------------------------------------------------------------


def adf_document(text: str) -> dict[str, JsonValue]:
    """Plain text as an ADF document: one paragraph per line (blank lines become empty paragraphs)."""
    paragraphs: list[JsonValue] = []
    for line in text.split("\n"):
        content: list[JsonValue] = [{"type": "text", "text": line}] if line else []
        paragraphs.append({"type": "paragraph", "content": content})
    return {"type": "doc", "version": 1, "content": paragraphs}


def adf_text(node: object) -> str | None:
    """The plain text of an ADF document (paragraphs and blocks on their own lines); ``None`` for ``None``."""
    if node is None:
        return None
    if isinstance(node, str):
        return node
    out: list[str] = []

    def walk(n: object) -> None:
        if isinstance(n, Mapping):
            kind = n.get("type")
            if kind == "text" and isinstance(n.get("text"), str):
                out.append(n["text"])
            elif kind == "hardBreak":
                out.append("\n")
            elif kind == "mention":
                attrs = n.get("attrs")
                if isinstance(attrs, Mapping) and isinstance(attrs.get("text"), str):
                    out.append(attrs["text"])
            children = n.get("content")
            for child in children if isinstance(children, list) else ():
                walk(child)
            if kind in {"paragraph", "heading", "codeBlock", "blockquote", "listItem", "rule"}:
                out.append("\n")

    walk(node)
    return "".join(out).strip("\n")


# -- id sets in the position ----------------------------------------------------------------------------------------


def encode_ids(ids: Iterable[str]) -> str:
    """A set of numeric issue ids as base64(zlib(varint deltas of the sorted ids))."""
    numbers = sorted({int(i) for i in ids})
    raw = bytearray()
    previous = 0
    for n in numbers:
        delta = n - previous
        previous = n
        while True:
            byte = delta & 0x7F
            delta >>= 7
            if delta:
                raw.append(byte | 0x80)
            else:
                raw.append(byte)
                break
    return base64.b64encode(zlib.compress(bytes(raw), 9)).decode("ascii")


def decode_ids(text: str) -> set[str]:
    """The inverse of :func:`encode_ids` (``""`` → empty)."""
    if not text:
        return set()
    raw = zlib.decompress(base64.b64decode(text))
    out: set[str] = set()
    value = shift = previous = 0
    for byte in raw:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
            continue
        previous += value
        out.add(str(previous))
        value = shift = 0
    return out


# -- the connector ----------------------------------------------------------------------------------------------------


def _jql_time(value: datetime, zone: tzinfo) -> str:
    return '"' + value.astimezone(zone).strftime("%Y/%m/%d %H:%M") + '"'


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
        kwargs: dict[str, Any] = {}
        if sleep is not None:
            kwargs["sleep"] = sleep
        self.client = HttpApiClient(
            settings.base_url,
            rules=JiraRules(),
            auth=BasicAuth(settings.email, settings.api_token),
            redactor=Redactor(
                [settings.api_token, BasicAuth(settings.email, settings.api_token).headers()["Authorization"]]
            ),
            transport=transport or UrllibTransport(),
            retry=retry or RetryPolicy(),
            timeout=timeout,
            **kwargs,
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
        bound = f"updated >= {_jql_time(start, zone)}" if start is not None else f"updated >= {_EPOCH_JQL}"
        scope = f"({self.settings.jql}) AND " if self.settings.jql else ""
        return f"{scope}{bound} ORDER BY updated ASC, key ASC"

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
        issue_id = _issue_id(issue)
        updated = vendor_time(fields["updated"], f"an issue {issue_id} whose fields.updated", vendor="Jira")
        # An ``updated`` in the future (an import, a skewed clock) must not move the cursor past issues still to come.
        if not state.accept(issue_id, updated, not_after=self._now()):
            return []
        version = format_utc(updated)
        origin: dict[str, JsonValue] = {
            "source": "jira",
            "site": self.settings.base_url,
            "issueKey": issue.get("key"),
            "updated": fields["updated"],
        }
        rows = [ChangedRow(ISSUES_TABLE, issue_id, self._issue_values(issue, fields), version, origin)]
        if self.settings.include_comments:
            rows.extend(self._comment_rows(issue_id, str(issue.get("key"))))
        return rows

    def _issue_values(self, issue: Mapping[str, Any], f: Mapping[str, Any]) -> dict[str, JsonValue]:
        def name_of(v: object, key: str = "name") -> JsonValue:
            return v.get(key) if isinstance(v, Mapping) else None

        status = f.get("status")
        category = status.get("statusCategory") if isinstance(status, Mapping) else None
        values: dict[str, JsonValue] = {
            "key": issue.get("key"),
            "summary": f.get("summary"),
            "status": name_of(status),
            "status_category": name_of(category, "key"),
            "issue_type": name_of(f.get("issuetype")),
            "priority": name_of(f.get("priority")),
            "project_key": name_of(f.get("project"), "key"),
            "project_id": name_of(f.get("project"), "id"),
            "assignee_account_id": name_of(f.get("assignee"), "accountId"),
            "assignee_name": name_of(f.get("assignee"), "displayName"),
            "reporter_account_id": name_of(f.get("reporter"), "accountId"),
            "reporter_name": name_of(f.get("reporter"), "displayName"),
            "labels": _labels(f.get("labels")),
            "resolution": name_of(f.get("resolution")),
            "parent_key": name_of(f.get("parent"), "key"),
            "description": adf_text(f.get("description")),
            "created": f.get("created"),
            "updated": f.get("updated"),
        }
        for extra in self.settings.extra_fields:
            if extra not in ISSUE_FIELDS:
                values[extra] = f.get(extra)
        return values

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
                comment_id = _numeric_id(c, f"comment of issue {issue_id}")
                seen.add(comment_id)
                if not isinstance(c.get("updated"), str):
                    continue
                updated = vendor_time(c["updated"], f"a comment of issue {issue_id} whose updated", vendor="Jira")
                raw_author = c.get("author")
                author: Mapping[str, Any] = raw_author if isinstance(raw_author, Mapping) else {}
                values: dict[str, JsonValue] = {
                    "issue_id": issue_id,
                    "issue_key": issue_key,
                    "author_account_id": author.get("accountId"),
                    "author_name": author.get("displayName"),
                    "body": adf_text(c.get("body")),
                    "created": c.get("created"),
                    "updated": c.get("updated"),
                }
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
        jql = f"({self.settings.jql}) AND updated >= {_EPOCH_JQL}" if self.settings.jql else f"updated >= {_EPOCH_JQL}"
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
            ids.update(_issue_id(i) for i in page.get("issues") or [] if isinstance(i, Mapping))
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
        run = {
            "create_issue": self._create_issue,
            "update_issue": self._update_issue,
            "add_comment": self._add_comment,
        }.get(action.action_type)
        if run is None:
            raise ActionNotSupportedError(
                f'Action type "{action.action_type}" not supported by connector "{self._name}"'
            )
        try:
            data = run(action.params)
        except ApiOutcomeUnknownError as e:
            raise ActionExecutionError(f"{e.message}; check Jira before retrying", retryable=False) from None
        except ApiError as e:
            raise ActionExecutionError(e.message, retryable=e.retryable) from None
        return ActionResult(action.action_id, data, self._hlc.now())

    def _create_issue(self, params: Mapping[str, Any]) -> dict[str, JsonValue]:
        fields: dict[str, JsonValue] = dict(_object_param(params, "fields"))
        fields["project"] = {"key": _required_param(params, "projectKey")}
        fields["summary"] = _required_param(params, "summary")
        fields["issuetype"] = {"name": _optional_param(params, "issueType") or "Task"}
        self._common_fields(params, fields)
        created = self.client.request("POST", "/rest/api/3/issue", json_body={"fields": fields}).json()
        if not isinstance(created, Mapping) or not isinstance(created.get("key"), str):
            raise ActionExecutionError("Jira created the issue but returned no key", retryable=False)
        return {"id": created.get("id"), "key": created["key"], "self": created.get("self")}

    def _update_issue(self, params: Mapping[str, Any]) -> dict[str, JsonValue]:
        key = _required_param(params, "issueKey")
        fields: dict[str, JsonValue] = dict(_object_param(params, "fields"))
        summary = _optional_param(params, "summary")
        if summary is not None:
            fields["summary"] = summary
        self._common_fields(params, fields)
        if not fields:
            raise ActionExecutionError("update_issue needs at least one field to change", retryable=False)
        self.client.request("PUT", f"/rest/api/3/issue/{_path_segment(key)}", json_body={"fields": fields})
        return {"key": key, "updated": sorted(fields)}

    def _add_comment(self, params: Mapping[str, Any]) -> dict[str, JsonValue]:
        key = _required_param(params, "issueKey")
        body = _required_param(params, "body")
        created = self.client.request(
            "POST", f"/rest/api/3/issue/{_path_segment(key)}/comment", json_body={"body": adf_document(body)}
        ).json()
        comment_id = created.get("id") if isinstance(created, Mapping) else None
        return {"issueKey": key, "commentId": comment_id}

    @staticmethod
    def _common_fields(params: Mapping[str, Any], fields: dict[str, JsonValue]) -> None:
        description = _optional_param(params, "description")
        if description is not None:
            fields["description"] = adf_document(description)
        priority = _optional_param(params, "priority")
        if priority is not None:
            fields["priority"] = {"name": priority}
        assignee = _optional_param(params, "assigneeAccountId")
        if assignee is not None:
            fields["assignee"] = {"accountId": assignee}
        labels = params.get("labels")
        if labels is not None:
            if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
                raise ActionExecutionError("labels must be an array of strings", retryable=False)
            fields["labels"] = list(labels)


def _labels(value: object) -> list[JsonValue]:
    """Labels as Jira sends them (a list of strings); anything else reads as none."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _issue_id(issue: Mapping[str, Any]) -> str:
    """An issue's id as its digits (Jira's ids are numeric strings; the deletion sweep stores them as numbers)."""
    return _numeric_id(issue, "issue")


def _numeric_id(item: Mapping[str, Any], what: str) -> str:
    value = item.get("id")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return value
    raise ApiRequestError(f"Jira returned a {what} whose id is not numeric: {str(value)[:80]!r}", vendor="Jira")


def _required_param(params: Mapping[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ActionExecutionError(f"{key} is required (a non-empty string)", retryable=False)
    return value


def _optional_param(params: Mapping[str, Any], key: str) -> str | None:
    value = params.get(key)
    if value is not None and not isinstance(value, str):
        raise ActionExecutionError(f"{key} must be a string", retryable=False)
    return value


def _object_param(params: Mapping[str, Any], key: str) -> Mapping[str, JsonValue]:
    value = params.get(key, {})
    if not isinstance(value, Mapping):
        raise ActionExecutionError(f"{key} must be an object", retryable=False)
    return value


def _path_segment(value: str) -> str:
    return urllib.parse.quote(value, safe="")


_TEXT: dict[str, JsonValue] = {"type": "string", "minLength": 1}
ACTIONS: tuple[ActionDescriptor, ...] = (
    ActionDescriptor(
        "create_issue",
        "Create a Jira issue; returns its id and key.",
        {
            "type": "object",
            "required": ["projectKey", "summary"],
            "properties": {
                "projectKey": _TEXT,
                "summary": _TEXT,
                "issueType": {"type": "string", "default": "Task"},
                "description": {"type": "string", "description": "plain text, sent as Atlassian Document Format"},
                "priority": {"type": "string"},
                "assigneeAccountId": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}},
                "fields": {"type": "object", "description": "more fields, as Jira's create issue takes them"},
            },
        },
    ),
    ActionDescriptor(
        "update_issue",
        "Update fields of a Jira issue.",
        {
            "type": "object",
            "required": ["issueKey"],
            "properties": {
                "issueKey": _TEXT,
                "summary": {"type": "string"},
                "description": {"type": "string"},
                "priority": {"type": "string"},
                "assigneeAccountId": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}},
                "fields": {"type": "object"},
            },
        },
    ),
    ActionDescriptor(
        "add_comment",
        "Add a comment to a Jira issue; returns the comment id.",
        {
            "type": "object",
            "required": ["issueKey", "body"],
            "properties": {"issueKey": _TEXT, "body": {"type": "string", "description": "plain text"}},
        },
    ),
)


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
    ingest_schema={
        "type": "object",
        "properties": {"intervalMs": {"type": "number", "minimum": 1, "default": 10000}},
    },
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
