"""A local Jira Cloud: the documented subset of REST API v3 the connector uses, on ``http.server``.

Jira Cloud is not reachable from here; this double follows Atlassian's documentation of the endpoints:

* ``GET|POST /rest/api/3/search/jql`` -- the enhanced search: ``jql``, ``fields`` (without it, issues carry only their
  ``id``), ``maxResults`` (at most 100 with fields, 5,000 for ids only), ``nextPageToken``; responses
  ``{"issues", "nextPageToken"?, "isLast"}`` -- no ``startAt`` and no ``total``; the last page has no token. An
  unbounded query (no restriction) is refused with 400, a bad or expired page token with 400.
* ``GET|POST /rest/api/3/search`` -- removed: 410 Gone.
* JQL, the subset: ``project = KEY``, ``project in (A, B)``, ``updated >= "yyyy/MM/dd HH:mm"`` (minute precision, in
  the API user's profile time zone), ``AND``, parentheses, ``ORDER BY updated|key ASC|DESC``.
* Dates in responses are in the user's time zone (``2024-01-31T21:00:00.000+1100``).
* ``GET /rest/api/3/myself`` (``timeZone``), ``POST /rest/api/3/issue`` (201 ``{id, key, self}``; ``description``
  must be Atlassian Document Format), ``PUT /rest/api/3/issue/{key}`` (204), ``POST|GET
  /rest/api/3/issue/{key}/comment`` (201 / ``{startAt, maxResults, total, comments}``).
* Errors ``{"errorMessages": [...], "errors": {field: message}}``; basic auth with e-mail and API token, else 401;
  rate limiting 429 with ``Retry-After`` (injected with :meth:`JiraState.throttle`).
* Eventual consistency: with ``search_lag_s``, searches see each issue as it was that many seconds ago; ids in
  ``hidden`` are missing from searches altogether (not indexed yet).
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit
from zoneinfo import ZoneInfo

from tests.connectors.vendor_http import StateServer, serving


def jira_time(value: datetime, zone: ZoneInfo) -> str:
    local = value.astimezone(zone)
    return local.strftime("%Y-%m-%dT%H:%M:%S.") + f"{local.microsecond // 1000:03d}" + local.strftime("%z")


@dataclass
class Issue:
    id: str
    key: str
    project: str
    history: list[tuple[datetime, dict[str, Any] | None]] = field(default_factory=list)  # (written at, fields)
    comments: list[dict[str, Any]] = field(default_factory=list)

    def as_of(self, when: datetime) -> dict[str, Any] | None:
        state = None
        for at, fields in self.history:
            if at <= when:
                state = fields
        return state

    @property
    def current(self) -> dict[str, Any] | None:
        return self.history[-1][1] if self.history else None


class JqlError(ValueError):
    pass


_TOKEN = re.compile(r'\s*(\(|\)|,|>=|<=|!=|=|>|<|"[^"]*"|[A-Za-z0-9_./-]+)')


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise JqlError(f"Error in the JQL Query: unexpected character at position {pos}.")
        out.append(m.group(1))
        pos = m.end()
    return out


class JqlQuery:
    """The JQL subset: a predicate over (issue, fields) and an ordering."""

    def __init__(self, text: str, zone: ZoneInfo) -> None:
        self.zone = zone
        upper = text.upper()
        at = upper.find("ORDER BY")
        where, order = (text[:at], text[at + 8 :]) if at >= 0 else (text, "")
        self.order: list[tuple[str, bool]] = []
        for part in filter(None, (p.strip() for p in order.split(","))):
            words = part.split()
            if words[0] not in ("updated", "key", "created") or len(words) > 2:
                raise JqlError(f"Error in the JQL Query: cannot order by '{part}'.")
            self.order.append((words[0], len(words) == 2 and words[1].upper() == "DESC"))
        self.toks = _tokens(where)
        self.pos = 0
        if not self.toks:
            raise JqlError("Unbounded JQL queries are not allowed here. Please add a search restriction to your query.")
        self.predicate = self._or()
        if self.pos != len(self.toks):
            raise JqlError(f"Error in the JQL Query: unexpected '{self.toks[self.pos]}'.")

    def _peek(self) -> str | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def _next(self) -> str:
        tok = self._peek()
        if tok is None:
            raise JqlError("Error in the JQL Query: the query ended unexpectedly.")
        self.pos += 1
        return tok

    def _or(self) -> Callable[[Issue, dict[str, Any]], bool]:
        left = self._and()
        while (self._peek() or "").upper() == "OR":
            self._next()
            right = self._and()
            left = (lambda a, b: lambda i, f: a(i, f) or b(i, f))(left, right)
        return left

    def _and(self) -> Callable[[Issue, dict[str, Any]], bool]:
        left = self._atom()
        while (self._peek() or "").upper() == "AND":
            self._next()
            right = self._atom()
            left = (lambda a, b: lambda i, f: a(i, f) and b(i, f))(left, right)
        return left

    def _atom(self) -> Callable[[Issue, dict[str, Any]], bool]:
        tok = self._next()
        if tok == "(":
            inner = self._or()
            if self._next() != ")":
                raise JqlError("Error in the JQL Query: expected ')'.")
            return inner
        name = tok.lower()
        op = self._next()
        if name == "project":
            if op == "=":
                value = self._next().strip('"')
                return lambda i, f: i.project == value
            if op.lower() == "in":
                if self._next() != "(":
                    raise JqlError("Error in the JQL Query: expected '('.")
                values: set[str] = set()
                while True:
                    values.add(self._next().strip('"'))
                    sep = self._next()
                    if sep == ")":
                        break
                    if sep != ",":
                        raise JqlError("Error in the JQL Query: expected ',' or ')'.")
                return lambda i, f: i.project in values
        if name in ("updated", "created") and op in (">=", ">", "<", "<="):
            raw = self._next().strip('"')
            try:
                naive = datetime.strptime(raw, "%Y/%m/%d %H:%M")
            except ValueError:
                try:
                    naive = datetime.strptime(raw, "%Y-%m-%d %H:%M")
                except ValueError:
                    raise JqlError(f"Date value '{raw}' for field '{name}' is invalid.") from None
            bound = naive.replace(tzinfo=self.zone).astimezone(UTC)

            def compare(i: Issue, f: dict[str, Any]) -> bool:
                # JQL compares minutes: the issue's time truncated to the minute, in the user's zone.
                value = f[f"_{name}"].astimezone(self.zone).replace(second=0, microsecond=0).astimezone(UTC)
                return {">=": value >= bound, ">": value > bound, "<": value < bound, "<=": value <= bound}[op]

            return compare
        raise JqlError(f"Error in the JQL Query: the field '{tok}' or operator '{op}' is not supported here.")

    def sort_key(self, issue: Issue, fields: dict[str, Any]) -> tuple[Any, ...]:
        key: list[Any] = []
        for name, desc in self.order:
            if name == "key":
                proj, _, num = issue.key.partition("-")
                value: Any = (proj, int(num))
            else:
                value = fields[f"_{name}"].timestamp()
            if desc:
                value = (-value[1],) if isinstance(value, tuple) else -value
            key.append(value)
        key.append(int(issue.id))
        return tuple(key)


class JiraState:
    """What the server holds, and knobs the tests turn."""

    def __init__(self, *, email: str, api_token: str, time_zone: str = "UTC") -> None:
        self.email = email
        self.api_token = api_token
        self.zone = ZoneInfo(time_zone)
        self.time_zone = time_zone
        self.lock = threading.RLock()
        self.issues: dict[str, Issue] = {}
        self.projects = {"ENG", "OPS"}
        self.issue_types = {"Task", "Bug", "Story"}
        self.next_id = 10000
        self.next_comment_id = 50000
        self.now = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
        self.search_lag_s = 0.0
        self.hidden: set[str] = set()  # issue ids the search index has not caught up with yet
        self.requests: list[tuple[str, str, Any]] = []
        self._throttle: list[str | None] = []
        self._fail: list[int] = []
        self.token_epoch = 0
        self.base_url = ""
        # Rewrites a search answer (request body, answer) -> answer: a misbehaving Jira.
        self.search_hook: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
        # Rewrites a page of comments (the answer) -> answer.
        self.comment_hook: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    # -- knobs -------------------------------------------------------------------------------------------------------

    def tick(self, seconds: float) -> datetime:
        with self.lock:
            self.now += timedelta(seconds=seconds)
            return self.now

    def throttle(self, times: int, retry_after: str | None = "1") -> None:
        with self.lock:
            self._throttle.extend([retry_after] * times)

    def fail(self, times: int, status: int = 503) -> None:
        with self.lock:
            self._fail.extend([status] * times)

    def expire_page_tokens(self) -> None:
        with self.lock:
            self.token_epoch += 1

    def searches(self) -> list[dict[str, Any]]:
        return [body for method, path, body in self.requests if path == "/rest/api/3/search/jql"]

    # -- data ----------------------------------------------------------------------------------------------------------

    def add_issue(self, project: str, summary: str, **extra: Any) -> Issue:
        with self.lock:
            self.next_id += 1
            count = sum(1 for i in self.issues.values() if i.project == project) + 1
            issue = Issue(str(self.next_id), f"{project}-{count}", project)
            fields = {
                "summary": summary,
                "status": {"name": "To Do", "statusCategory": {"key": "new"}},
                "issuetype": {"name": extra.pop("issuetype", "Task")},
                "priority": {"name": "Medium"},
                "project": {"id": "1" if project == "ENG" else "2", "key": project},
                "assignee": None,
                "reporter": {"accountId": "acc-1", "displayName": "Ada"},
                "labels": [],
                "resolution": None,
                "description": None,
                "parent": None,
                "_created": self.now,
                "_updated": self.now,
                **extra,
            }
            issue.history.append((self.now, fields))
            self.issues[issue.id] = issue
            return issue

    def update_issue(self, issue_id: str, **changes: Any) -> None:
        with self.lock:
            issue = self.issues[issue_id]
            fields = dict(issue.current or {})
            fields.update(changes)
            fields["_updated"] = self.now
            issue.history.append((self.now, fields))

    def delete_issue(self, issue_id: str) -> None:
        with self.lock:
            self.issues[issue_id].history.append((self.now, None))

    def find(self, id_or_key: str) -> Issue | None:
        for issue in self.issues.values():
            if (issue.id == id_or_key or issue.key == id_or_key) and issue.current is not None:
                return issue
        return None

    def render(self, issue: Issue, fields: dict[str, Any], wanted: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {"id": issue.id, "key": issue.key, "self": f"{self.base_url}/rest/api/3/issue/{issue.id}"}
        if not wanted:
            return {"id": issue.id}
        rendered: dict[str, Any] = {}
        for name in wanted:
            if name in ("updated", "created"):
                rendered[name] = jira_time(fields[f"_{name}"], self.zone)
            elif name in fields:
                rendered[name] = fields[name]
        out["fields"] = rendered
        return out


class _Handler(BaseHTTPRequestHandler):
    server: StateServer[JiraState]
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, messages: list[str], errors: dict[str, str] | None = None) -> None:
        self._send(status, {"errorMessages": messages, "errors": errors or {}})

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw) if raw else None

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def _dispatch(self, method: str) -> None:
        state = self.server.state
        url = urlsplit(self.path)
        body = self._body() if method in ("POST", "PUT") else None
        with state.lock:
            state.requests.append((method, url.path, body))
            expected = "Basic " + base64.b64encode(f"{state.email}:{state.api_token}".encode()).decode()
            if self.headers.get("Authorization") != expected:
                self._error(401, ["Client must be authenticated to access this resource."])
                return
            if state._throttle:
                retry_after = state._throttle.pop(0)
                headers = {"Retry-After": retry_after} if retry_after is not None else {}
                headers["X-RateLimit-Reason"] = "jira-burst-based"
                self._send(429, {"errorMessages": ["Rate limit exceeded."]}, headers)
                return
            if state._fail:
                self._error(state._fail.pop(0), ["Service temporarily unavailable."])
                return
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            path = url.path
            if path in ("/rest/api/3/search", "/rest/api/2/search"):
                self._error(410, ["The requested API has been removed. Please migrate to /rest/api/3/search/jql."])
            elif path == "/rest/api/3/search/jql":
                if method == "GET":
                    body = dict(query)
                    if "fields" in body:
                        body["fields"] = body["fields"].split(",")
                self._search(body or {})
            elif path == "/rest/api/3/myself" and method == "GET":
                self._send(200, {"accountId": "acc-1", "emailAddress": state.email, "timeZone": state.time_zone})
            elif path == "/rest/api/3/issue" and method == "POST":
                self._create(body or {})
            elif (m := re.fullmatch(r"/rest/api/3/issue/([^/]+)/comment", path)) is not None:
                self._comment(method, m.group(1), body or {}, query)
            elif (m := re.fullmatch(r"/rest/api/3/issue/([^/]+)", path)) is not None and method == "PUT":
                self._update(m.group(1), body or {})
            else:
                self._error(404, ["Not found."])

    def _search(self, body: dict[str, Any]) -> None:
        state = self.server.state
        try:
            query = JqlQuery(str(body.get("jql", "")), state.zone)
        except JqlError as e:
            self._error(400, [str(e)])
            return
        wanted = list(body.get("fields") or [])
        cap = 100 if wanted else 5000
        size = max(1, min(int(body.get("maxResults", 50)), cap))
        offset = 0
        token = body.get("nextPageToken")
        if token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token))
                if decoded["jql"] != body.get("jql") or decoded["epoch"] != state.token_epoch:
                    raise ValueError
                offset = int(decoded["offset"])
            except (ValueError, KeyError, TypeError):
                self._error(400, ["The provided next page token is invalid or expired."])
                return
        visible_at = state.now - timedelta(seconds=state.search_lag_s)
        matches = []
        for issue in state.issues.values():
            fields = issue.as_of(visible_at)
            if fields is not None and issue.id not in state.hidden and query.predicate(issue, fields):
                matches.append((query.sort_key(issue, fields), issue, fields))
        matches.sort(key=lambda m: m[0])
        page = matches[offset : offset + size]
        out: dict[str, Any] = {"issues": [state.render(i, f, wanted) for _, i, f in page]}
        if offset + size < len(matches):
            payload = {"jql": body.get("jql"), "offset": offset + size, "epoch": state.token_epoch}
            out["nextPageToken"] = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()
            out["isLast"] = False
        else:
            out["isLast"] = True
        if state.search_hook is not None:
            out = state.search_hook(body, out)
        self._send(200, out)

    def _create(self, body: dict[str, Any]) -> None:
        state = self.server.state
        fields = body.get("fields") or {}
        errors: dict[str, str] = {}
        project = (fields.get("project") or {}).get("key")
        if project not in state.projects:
            errors["project"] = "Specify a valid project ID or key"
        if not fields.get("summary"):
            errors["summary"] = "You must specify a summary of the issue."
        if (fields.get("issuetype") or {}).get("name") not in state.issue_types:
            errors["issuetype"] = "Specify an issue type"
        description = fields.get("description")
        if description is not None and not (isinstance(description, dict) and description.get("type") == "doc"):
            errors["description"] = "Operation value must be an Atlassian Document (see the Atlassian Document Format)"
        if errors:
            self._error(400, [], errors)
            return
        extra = {k: v for k, v in fields.items() if k not in ("project", "summary", "issuetype")}
        issue = state.add_issue(project, fields["summary"], issuetype=fields["issuetype"]["name"], **extra)
        self._send(201, {"id": issue.id, "key": issue.key, "self": f"{state.base_url}/rest/api/3/issue/{issue.id}"})

    def _update(self, key: str, body: dict[str, Any]) -> None:
        state = self.server.state
        issue = state.find(key)
        if issue is None:
            self._error(404, ["Issue does not exist or you do not have permission to see it."])
            return
        fields = body.get("fields") or {}
        description = fields.get("description")
        if description is not None and not (isinstance(description, dict) and description.get("type") == "doc"):
            self._error(400, [], {"description": "Operation value must be an Atlassian Document"})
            return
        if "summary" in fields and not fields["summary"]:
            self._error(400, [], {"summary": "You must specify a summary of the issue."})
            return
        state.update_issue(issue.id, **fields)
        self._send(204)

    def _comment(self, method: str, key: str, body: dict[str, Any], query: dict[str, str]) -> None:
        state = self.server.state
        issue = state.find(key)
        if issue is None:
            self._error(404, ["Issue does not exist or you do not have permission to see it."])
            return
        if method == "GET":
            start, size = int(query.get("startAt", 0)), int(query.get("maxResults", 50))
            comments = issue.comments[start : start + size]
            page = {"startAt": start, "maxResults": size, "total": len(issue.comments), "comments": comments}
            self._send(200, page if state.comment_hook is None else state.comment_hook(page))
            return
        doc = body.get("body")
        if not (isinstance(doc, dict) and doc.get("type") == "doc"):
            self._error(400, [], {"comment": "Comment body can not be empty!"})
            return
        state.next_comment_id += 1
        stamp = jira_time(state.now, state.zone)
        comment = {
            "id": str(state.next_comment_id),
            "self": f"{state.base_url}/rest/api/3/issue/{issue.id}/comment/{state.next_comment_id}",
            "author": {"accountId": "acc-1", "displayName": "Ada"},
            "body": doc,
            "created": stamp,
            "updated": stamp,
        }
        issue.comments.append(comment)
        state.update_issue(issue.id)
        self._send(201, comment)


@contextmanager
def running(state: JiraState) -> Iterator[str]:
    """Serve ``state`` on a free local port; yields the base URL."""

    def remember(url: str) -> None:
        state.base_url = url

    with serving(_Handler, state, remember) as url:
        yield url
