"""A local Salesforce org: the documented subset of the REST API and OAuth the connector uses, on ``http.server``.

Salesforce is not reachable from here; this double follows Salesforce's documentation:

* ``POST /services/oauth2/token`` (form): ``grant_type=client_credentials`` (client id and secret),
  ``password`` (plus username and password), ``urn:ietf:params:oauth:grant-type:jwt-bearer`` (an RS256 assertion:
  ``iss`` client id, ``sub`` username, ``aud`` the login URL). Success ``{access_token, instance_url, id, token_type,
  issued_at, signature}``; failure 400 ``{"error", "error_description"}``.
* ``GET /services/data/vXX.X/query?q=`` and ``/queryAll?q=`` -- a SOQL subset: ``SELECT <fields> FROM <sObject>
  [WHERE <cond> AND ...] [ORDER BY <field> ASC|DESC, ...]`` with conditions ``SystemModstamp >= <datetime>`` and
  ``Field = 'text'|true|false``. ``query`` leaves out deleted records, ``queryAll`` returns them with ``IsDeleted``.
  Responses ``{totalSize, done, nextRecordsUrl?, records: [{attributes: {type, url}, ...}]}``; batches follow
  ``Sforce-Query-Options: batchSize=N`` (200..2000, default 2000); ``nextRecordsUrl`` is
  ``/services/data/vXX.X/query/<locator>-<offset>``, over a snapshot taken by the first request; an expired locator
  answers 400 ``INVALID_QUERY_LOCATOR``.
* ``POST /services/data/vXX.X/sobjects/<type>`` (201 ``{id, success, errors}``) and ``PATCH .../<type>/<id>`` (204).
* Errors ``[{"message", "errorCode", "fields"?}]``: 401 ``INVALID_SESSION_ID`` for an expired or unknown token, 403
  ``REQUEST_LIMIT_EXCEEDED`` when API limits are exceeded (the daily total, or injected concurrency limits), 400
  ``INVALID_FIELD`` / ``REQUIRED_FIELD_MISSING`` / ``MALFORMED_QUERY``, 404 ``NOT_FOUND``.
* Every API response carries ``Sforce-Limit-Info: api-usage=N/M``.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt

from tests.connectors.vendor_http import StateServer, serving

SYSTEM = ["Id", "IsDeleted", "SystemModstamp", "CreatedDate", "LastModifiedDate", "OwnerId"]
SCHEMA = {
    "Account": (
        "001",
        [*SYSTEM, "Name", "Type", "Industry", "Website", "Phone", "BillingCity", "BillingCountry", "AnnualRevenue",
         "NumberOfEmployees"],
        ["Name"],
    ),
    "Contact": ("003", [*SYSTEM, "AccountId", "FirstName", "LastName", "Email", "Phone", "Title"], ["LastName"]),
    "Opportunity": (
        "006",
        [*SYSTEM, "AccountId", "Name", "StageName", "Amount", "CloseDate", "Probability", "IsClosed", "IsWon"],
        ["Name", "StageName", "CloseDate"],
    ),
    "Lead": (
        "00Q",
        [*SYSTEM, "FirstName", "LastName", "Company", "Email", "Status", "LeadSource", "IsConverted"],
        ["LastName", "Company"],
    ),
}  # fmt: skip


def sf_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000+0000")


class SalesforceState:
    def __init__(
        self,
        *,
        client_id: str,
        client_secret: str,
        username: str = "integration@acme.example",
        password: str = "",
        public_key: Any = None,
        api_version: str = "62.0",
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.username = username
        self.password = password
        self.public_key = public_key
        self.api_version = api_version
        self.lock = threading.RLock()
        self.now = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)
        self.records: dict[str, dict[str, Any]] = {}  # id -> record (with "_type")
        self.tokens: set[str] = set()
        self.locators: dict[str, list[dict[str, Any]]] = {}
        self.api_calls = 0
        self.api_limit = 15000
        self.requests: list[tuple[str, str, Any, dict[str, str]]] = []
        self._concurrency: int = 0
        self._fail: list[int] = []
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._locators = itertools.count(1)
        self.base_url = ""
        # Rewrites a query page (locator, offset, page) -> page: a misbehaving Salesforce.
        self.page_hook: Callable[[str, int, dict[str, Any]], dict[str, Any]] | None = None

    # -- knobs -----------------------------------------------------------------------------------------------------

    def tick(self, seconds: float) -> None:
        with self.lock:
            self.now += timedelta(seconds=seconds)

    def expire_tokens(self) -> None:
        with self.lock:
            self.tokens.clear()

    def expire_locators(self) -> None:
        with self.lock:
            self.locators.clear()

    def concurrency_limited(self, times: int) -> None:
        with self.lock:
            self._concurrency += times

    def fail(self, times: int, status: int = 503) -> None:
        with self.lock:
            self._fail.extend([status] * times)

    def token_requests(self) -> list[dict[str, str]]:
        return [body for method, path, body, _ in self.requests if path == "/services/oauth2/token"]

    def queries(self) -> list[tuple[str, dict[str, str]]]:
        return [(path, headers) for method, path, _, headers in self.requests if "/query" in path]

    # -- data --------------------------------------------------------------------------------------------------------

    def insert(self, sobject: str, **fields: Any) -> str:
        with self.lock:
            prefix, _, _ = SCHEMA[sobject]
            record_id = f"{prefix}{next(self._ids):012d}AAA"
            stamp = sf_time(self.now)
            self.records[record_id] = {
                "_type": sobject,
                "Id": record_id,
                "IsDeleted": False,
                "SystemModstamp": stamp,
                "CreatedDate": stamp,
                "LastModifiedDate": stamp,
                "OwnerId": "005000000000001AAA",
                **fields,
            }
            return record_id

    def update(self, record_id: str, **fields: Any) -> None:
        with self.lock:
            stamp = sf_time(self.now)
            self.records[record_id].update(fields, SystemModstamp=stamp, LastModifiedDate=stamp)

    def delete(self, record_id: str) -> None:
        with self.lock:
            self.records[record_id].update(IsDeleted=True, SystemModstamp=sf_time(self.now))


class SoqlError(ValueError):
    pass


_SOQL = re.compile(
    r"^SELECT\s+(?P<fields>.+?)\s+FROM\s+(?P<obj>\w+)(?:\s+WHERE\s+(?P<where>.+?))?(?:\s+ORDER BY\s+(?P<order>.+?))?$",
    re.IGNORECASE | re.DOTALL,
)


def _split_and(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    tokens = re.split(r"(\(|\)|\s+AND\s+)", text, flags=re.IGNORECASE)
    for tok in tokens:
        if tok == "(":
            depth += 1
        elif tok == ")":
            depth -= 1
        if depth == 0 and re.fullmatch(r"\s+AND\s+", tok or "", flags=re.IGNORECASE):
            parts.append(current)
            current = ""
        else:
            current += tok or ""
    parts.append(current)
    return [p.strip() for p in parts if p.strip()]


_DATE_FIELDS = ("SystemModstamp", "CreatedDate", "LastModifiedDate")


def _condition(cond: str, known: Any) -> tuple[str, str, Any]:
    """One ``WHERE`` condition as ``(field, operator, value)``."""
    cond = cond.strip()
    while cond.startswith("(") and cond.endswith(")"):
        cond = cond[1:-1].strip()
    c = re.fullmatch(r"(\w+)\s*(>=|<=|=|>|<)\s*(.+)", cond)
    if not c or c.group(1) not in known:
        raise SoqlError("MALFORMED_QUERY", f"unexpected condition: {cond}")
    name, op, raw = c.groups()
    raw = raw.strip()
    if name in _DATE_FIELDS:
        try:
            return name, op, datetime.fromisoformat(raw)
        except ValueError:
            raise SoqlError("MALFORMED_QUERY", f"invalid datetime: {raw}") from None
    if raw.lower() in ("true", "false"):
        return name, op, raw.lower() == "true"
    if raw.startswith("'") and raw.endswith("'"):
        return name, op, raw[1:-1]
    raise SoqlError("MALFORMED_QUERY", f"unexpected value: {raw}")


def _matches(rec: dict[str, Any], conditions: list[tuple[str, str, Any]]) -> bool:
    for name, op, value in conditions:
        have = rec.get(name)
        if isinstance(value, datetime):
            have = datetime.fromisoformat(have) if have else None
            if have is None:
                return False
        ok = {
            "=": have == value,
            ">=": have is not None and have >= value,
            "<=": have is not None and have <= value,
            ">": have is not None and have > value,
            "<": have is not None and have < value,
        }[op]
        if not ok:
            return False
    return True


def run_soql(state: SalesforceState, soql: str, include_deleted: bool) -> list[dict[str, Any]]:
    m = _SOQL.match(soql.strip())
    if not m:
        raise SoqlError("MALFORMED_QUERY", "unexpected token")
    obj = m.group("obj")
    if obj not in SCHEMA:
        raise SoqlError("INVALID_TYPE", f"sObject type '{obj}' is not supported.")
    known = SCHEMA[obj][1]
    fields = [f.strip() for f in m.group("fields").split(",")]
    for f in fields:
        if f not in known:
            raise SoqlError("INVALID_FIELD", f"No such column '{f}' on entity '{obj}'.")
    conditions = [_condition(cond, known) for cond in _split_and(m.group("where") or "")]

    rows = [
        r for r in state.records.values()
        if r["_type"] == obj and (include_deleted or not r["IsDeleted"]) and _matches(r, conditions)
    ]  # fmt: skip
    for part in reversed([p.strip() for p in (m.group("order") or "").split(",") if p.strip()]):
        words = part.split()
        if words[0] not in known:
            raise SoqlError("INVALID_FIELD", f"No such column '{words[0]}' on entity '{obj}'.")
        rows.sort(
            key=lambda r, k=words[0]: (r.get(k) is None, r.get(k)),
            reverse=len(words) > 1 and words[1].upper() == "DESC",
        )
    out = []
    for r in rows:
        rec: dict[str, Any] = {
            "attributes": {"type": obj, "url": f"/services/data/v{state.api_version}/sobjects/{obj}/{r['Id']}"}
        }
        rec.update({f: r.get(f) for f in fields})
        out.append(rec)
    return out


class _Handler(BaseHTTPRequestHandler):
    server: StateServer[SalesforceState]
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

    def _errors(self, status: int, code: str, message: str, fields: list[str] | None = None) -> None:
        error: dict[str, Any] = {"message": message, "errorCode": code}
        if fields is not None:
            error["fields"] = fields
        self._send(status, [error], self._limit_headers())

    def _limit_headers(self) -> dict[str, str]:
        state = self.server.state
        return {"Sforce-Limit-Info": f"api-usage={state.api_calls}/{state.api_limit}"}

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def _dispatch(self, method: str) -> None:
        state = self.server.state
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        with state.lock:
            if url.path == "/services/oauth2/token" and method == "POST":
                form = {k: v[-1] for k, v in parse_qs(raw.decode()).items()}
                state.requests.append((method, url.path, form, dict(self.headers)))
                self._token(form)
                return
            body = json.loads(raw) if raw else None
            state.requests.append((method, url.path + (f"?{url.query}" if url.query else ""), body, dict(self.headers)))
            auth = self.headers.get("Authorization", "")
            if not auth.startswith("Bearer ") or auth[7:] not in state.tokens:
                self._errors(401, "INVALID_SESSION_ID", "Session expired or invalid")
                return
            state.api_calls += 1
            if state.api_calls > state.api_limit:
                self._errors(403, "REQUEST_LIMIT_EXCEEDED", "TotalRequests Limit exceeded.")
                return
            if state._concurrency:
                state._concurrency -= 1
                self._errors(403, "REQUEST_LIMIT_EXCEEDED", "ConcurrentPerOrgLongTxn Limit exceeded.")
                return
            if state._fail:
                self._errors(state._fail.pop(0), "UNKNOWN_EXCEPTION", "An unexpected error occurred.")
                return
            prefix = f"/services/data/v{state.api_version}"
            path = url.path
            if not path.startswith(prefix + "/"):
                self._errors(404, "NOT_FOUND", "The requested resource does not exist")
                return
            rest = path[len(prefix) :]
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if method == "GET" and rest in ("/query", "/queryAll", "/query/", "/queryAll/"):
                self._query(query.get("q", ""), include_deleted=rest.startswith("/queryAll"))
            elif method == "GET" and (m := re.fullmatch(r"/query(?:All)?/([\w]+)-(\d+)", rest)):
                self._more(m.group(1), int(m.group(2)))
            elif method == "POST" and (m := re.fullmatch(r"/sobjects/(\w+)/?", rest)):
                self._create(m.group(1), body)
            elif method == "PATCH" and (m := re.fullmatch(r"/sobjects/(\w+)/(\w+)", rest)):
                self._update(m.group(1), m.group(2), body)
            else:
                self._errors(404, "NOT_FOUND", "The requested resource does not exist")

    def _token(self, form: dict[str, str]) -> None:
        state = self.server.state
        grant = form.get("grant_type")
        ok = False
        if grant == "client_credentials":
            if form.get("client_id") != state.client_id or form.get("client_secret") != state.client_secret:
                self._send(400, {"error": "invalid_client", "error_description": "invalid client credentials"})
                return
            ok = True
        elif grant == "password":
            if form.get("client_id") != state.client_id or form.get("client_secret") != state.client_secret:
                self._send(400, {"error": "invalid_client", "error_description": "invalid client credentials"})
                return
            if form.get("username") != state.username or form.get("password") != state.password:
                self._send(400, {"error": "invalid_grant", "error_description": "authentication failure"})
                return
            ok = True
        elif grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
            try:
                claims = jwt.decode(
                    form.get("assertion", ""), state.public_key, algorithms=["RS256"], audience=state.base_url
                )
            except jwt.PyJWTError:
                self._send(400, {"error": "invalid_grant", "error_description": "invalid assertion"})
                return
            if claims.get("iss") != state.client_id or claims.get("sub") != state.username:
                self._send(400, {"error": "invalid_grant", "error_description": "user hasn't approved this consumer"})
                return
            ok = True
        if not ok:
            self._send(400, {"error": "unsupported_grant_type", "error_description": "grant type not supported"})
            return
        token = f"00D000000000001!AQ{next(state._tokens):08d}"
        state.tokens.add(token)
        self._send(
            200,
            {
                "access_token": token,
                "instance_url": state.base_url,
                "id": f"{state.base_url}/id/00D000000000001AAA/005000000000001AAA",
                "token_type": "Bearer",
                "issued_at": str(int(state.now.timestamp() * 1000)),
                "signature": "c2lnbmF0dXJl",
            },
        )

    def _page(self, locator: str, offset: int) -> None:
        state = self.server.state
        records = state.locators[locator]
        options = self.headers.get("Sforce-Query-Options", "")
        m = re.search(r"batchSize=(\d+)", options)
        size = max(200, min(2000, int(m.group(1)))) if m else 2000
        page = records[offset : offset + size]
        body: dict[str, Any] = {"totalSize": len(records), "done": offset + size >= len(records), "records": page}
        if not body["done"]:
            body["nextRecordsUrl"] = f"/services/data/v{state.api_version}/query/{locator}-{offset + size}"
        if state.page_hook is not None:
            body = state.page_hook(locator, offset, body)
        self._send(200, body, self._limit_headers())

    def _query(self, soql: str, *, include_deleted: bool) -> None:
        state = self.server.state
        try:
            records = run_soql(state, soql, include_deleted)
        except SoqlError as e:
            self._errors(400, e.args[0], e.args[1])
            return
        locator = f"01g{next(state._locators):015d}"
        state.locators[locator] = records
        self._page(locator, 0)

    def _more(self, locator: str, offset: int) -> None:
        if locator not in self.server.state.locators:
            self._errors(400, "INVALID_QUERY_LOCATOR", "invalid query locator")
            return
        self._page(locator, offset)

    def _check_fields(self, sobject: str, body: Any) -> bool:
        known = SCHEMA[sobject][1]
        if not isinstance(body, dict):
            self._errors(400, "JSON_PARSER_ERROR", "Unexpected parameter encountered during deserialization")
            return False
        for name in body:
            if name not in known or name in ("Id", "IsDeleted", "SystemModstamp", "CreatedDate", "LastModifiedDate"):
                self._errors(400, "INVALID_FIELD", f"No such column '{name}' on sobject of type {sobject}", [name])
                return False
        return True

    def _create(self, sobject: str, body: Any) -> None:
        state = self.server.state
        if sobject not in SCHEMA:
            self._errors(404, "NOT_FOUND", "The requested resource does not exist")
            return
        if not self._check_fields(sobject, body):
            return
        missing = [f for f in SCHEMA[sobject][2] if not body.get(f)]
        if missing:
            self._errors(400, "REQUIRED_FIELD_MISSING", f"Required fields are missing: [{', '.join(missing)}]", missing)
            return
        record_id = state.insert(sobject, **body)
        self._send(201, {"id": record_id, "success": True, "errors": []}, self._limit_headers())

    def _update(self, sobject: str, record_id: str, body: Any) -> None:
        state = self.server.state
        record = state.records.get(record_id)
        if sobject not in SCHEMA or record is None or record["_type"] != sobject or record["IsDeleted"]:
            self._errors(404, "NOT_FOUND", "The requested resource does not exist")
            return
        if not self._check_fields(sobject, body):
            return
        state.update(record_id, **body)
        self._send(204, None, self._limit_headers())


@contextmanager
def running(state: SalesforceState) -> Iterator[str]:
    """Serve ``state`` on a free local port; yields the base URL (My Domain, login and instance URL at once)."""

    def remember(url: str) -> None:
        state.base_url = url

    with serving(_Handler, state, remember) as url:
        yield url
