"""The Salesforce connector: records of configured sObjects polled into tables, and record actions.

**Authentication** (``salesforce.authFlow``):

* ``client_credentials`` -- the server-to-server flow Salesforce recommends: ``POST {My Domain}/services/oauth2/token``
  with ``grant_type=client_credentials``, the connected (or external client) app's ``clientId`` and ``clientSecret``;
  ``instanceUrl`` must be the org's My Domain URL (``https://acme.my.salesforce.com``).
* ``jwt_bearer`` -- ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` with an RS256 assertion signed by
  ``privateKey`` (PEM; ``iss`` the client id, ``sub`` the username, ``aud`` the login URL). Needs ``cryptography``.
* ``password`` (the default, the original's fields) -- the username-password flow, which Salesforce has deprecated and
  blocks in new orgs; kept for existing configs. It authenticates against ``loginUrl``, else
  ``https://test.salesforce.com`` for ``isSandbox``, else ``https://login.salesforce.com``.

API calls go to the ``instance_url`` of the token response. An expired or revoked token (401 ``INVALID_SESSION_ID``)
re-authenticates once and repeats the call.

**Polling**: per sObject, ``GET /services/data/vXX.X/queryAll?q=SELECT <fields> FROM <sObject> WHERE SystemModstamp >=
<cursor - overlap> ORDER BY SystemModstamp ASC, Id ASC`` (``queryAll``, not ``query``: it also returns deleted records
with ``IsDeleted = true`` while they are in the Recycle Bin), paged through ``nextRecordsUrl`` with
``Sforce-Query-Options: batchSize``. ``SystemModstamp`` changes on every write, including system writes and deletion,
so it is the cursor (rather than ``LastModifiedDate``). Its filter precision is a second; a record's state is
identified by ``(Id, SystemModstamp)``: its ``version``. The overlap (default 300 s) re-reads records committed late by
long transactions; :class:`~lakesync.connectors.api_cursor.IncrementalState` keeps what was emitted from coming
out again. A poll that reaches its row limit keeps the query locator and the next poll continues it (a locator that
expired restarts the query from the cursor).

**Deleted records**: a ``queryAll`` row with ``IsDeleted = true`` becomes a deletion. Salesforce keeps deleted records
in the Recycle Bin for 15 days (less if it is emptied or over its size limit), and a hard delete skips it: a connector
stopped longer than that, or records hard-deleted, are not seen as deleted. Re-create the connector (a full re-read)
after such an outage; a full reconciliation of ids is not implemented for Salesforce.

**API limits**: every response's ``Sforce-Limit-Info: api-usage=N/M`` is recorded. Above ``maxApiUsagePercent``
(default 90) a poll stops after its current page and keeps its place, so polling spends at most one call per interval
until usage drops. 403 ``REQUEST_LIMIT_EXCEEDED`` is throttling: retried with backoff when it is the concurrent-request
limit, and failing the poll at once (retryable) when the org's daily total is used up.

**Actions**: ``create_record`` (``POST /services/data/vXX.X/sobjects/{type}``) and ``update_record`` (``PATCH
.../sobjects/{type}/{id}``). Salesforce's 4xx refusals (``REQUIRED_FIELD_MISSING``, ``INVALID_FIELD``, ``NOT_FOUND``)
are permanent, throttling and 5xx are retryable, and a create whose outcome is unknown is not retried.
"""

from __future__ import annotations

import logging
import re
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lakesync.connectors.api_cursor import IncrementalState, advancing, format_utc, vendor_time
from lakesync.connectors.api_settings import API_INGEST_SCHEMA, SettingsReader, client_options
from lakesync.connectors.base import ChangedRow, Connector, ConnectorTypeDescriptor, PollBatch, Position
from lakesync.connectors.http_api import (
    ApiAuthError,
    ApiError,
    ApiOutcomeUnknownError,
    ApiRequestError,
    HttpApiClient,
    HttpResponse,
    Redactor,
    RetryPolicy,
    Transport,
    VendorRules,
)
from lakesync.core.actions import Action, ActionContext, ActionDescriptor, ActionResult
from lakesync.core.canonical import JsonValue
from lakesync.core.connectors import ConnectorConfig
from lakesync.core.errors import ActionExecutionError, ActionNotSupportedError, ValidationError
from lakesync.core.hlc import HLC

__all__ = ["DEFAULT_OBJECTS", "DESCRIPTOR", "SObject", "SalesforceConnector", "SalesforceSettings", "create"]

logger = logging.getLogger(__name__)

DEFAULT_API_VERSION = "62.0"
_SECOND = timedelta(seconds=1)
_SOBJECT_RE = re.compile(r"\A[A-Za-z][A-Za-z0-9_]{0,79}\Z")
_FIELD_RE = re.compile(r"\A[A-Za-z][A-Za-z0-9_]{0,79}(\.[A-Za-z][A-Za-z0-9_]{0,79})*\Z")
_RECORD_ID_RE = re.compile(r"\A[A-Za-z0-9]{15}([A-Za-z0-9]{3})?\Z")
_SYSTEM_FIELDS = ("Id", "IsDeleted", "SystemModstamp")
_LIMIT_RE = re.compile(r"api-usage=(\d+)/(\d+)")


@dataclass(frozen=True, slots=True)
class SObject:
    """An sObject synced into a table, with the fields read (``Id``, ``IsDeleted``, ``SystemModstamp`` always)."""

    name: str
    table: str
    fields: tuple[str, ...]

    @property
    def select(self) -> tuple[str, ...]:
        """The SELECT list: the system fields first, then the configured ones."""
        return (*_SYSTEM_FIELDS, *(f for f in self.fields if f not in _SYSTEM_FIELDS))


DEFAULT_OBJECTS: dict[str, SObject] = {
    "includeAccounts": SObject(
        "Account",
        "sf_accounts",
        ("Name", "Type", "Industry", "Website", "Phone", "BillingCity", "BillingCountry", "AnnualRevenue",
         "NumberOfEmployees", "OwnerId", "CreatedDate", "LastModifiedDate"),
    ),
    "includeContacts": SObject(
        "Contact",
        "sf_contacts",
        ("AccountId", "FirstName", "LastName", "Email", "Phone", "Title", "OwnerId", "CreatedDate",
         "LastModifiedDate"),
    ),
    "includeOpportunities": SObject(
        "Opportunity",
        "sf_opportunities",
        ("AccountId", "Name", "StageName", "Amount", "CloseDate", "Probability", "IsClosed", "IsWon", "OwnerId",
         "CreatedDate", "LastModifiedDate"),
    ),
    "includeLeads": SObject(
        "Lead",
        "sf_leads",
        ("FirstName", "LastName", "Company", "Email", "Status", "LeadSource", "IsConverted", "OwnerId",
         "CreatedDate", "LastModifiedDate"),
    ),
}  # fmt: skip
"""The standard objects and their ``include*`` switches: accounts, contacts and opportunities by default, leads when
``includeLeads`` is true."""

_DEFAULT_ON = {"includeAccounts", "includeContacts", "includeOpportunities"}


# -- settings ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SalesforceSettings:
    """The ``salesforce`` settings object of a connector config, secrets resolved."""

    instance_url: str
    client_id: str
    auth_flow: str
    token_url: str
    client_secret: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    private_key: str | None = field(default=None, repr=False)
    api_version: str = DEFAULT_API_VERSION
    objects: tuple[SObject, ...] = ()
    soql_filter: str = ""
    overlap_seconds: int = 300
    max_api_usage_percent: float = 90.0
    batch_size: int = 2000

    @classmethod
    def from_config(cls, config: ConnectorConfig, secrets: Mapping[str, str]) -> SalesforceSettings:
        """Read the settings; ``secrets`` holds the resolved ``clientSecret``, ``password`` and ``privateKey``.

        Raises:
            ValidationError: a setting is malformed or a secret the flow needs is missing.
        """
        read = SettingsReader.of("Salesforce", config, secrets)
        flow = read.settings.get("authFlow", "password")
        instance_url = read.text("instanceUrl", required=True).rstrip("/")
        if flow == "client_credentials":
            token_url = instance_url
        else:
            sandbox = read.settings.get("isSandbox") is True
            default_login = "https://test.salesforce.com" if sandbox else "https://login.salesforce.com"
            token_url = (read.text("loginUrl") or default_login).rstrip("/")
        read.checked_url(instance_url, what="instanceUrl")
        read.checked_url(token_url, what="loginUrl")
        needed = {"password": ("clientSecret", "password"), "client_credentials": ("clientSecret",)}.get(
            flow, ("privateKey",)
        )
        for key in needed:
            read.required_secret(key)
        version = read.text("apiVersion") or DEFAULT_API_VERSION
        version = version[1:] if version.startswith("v") else version
        if not re.fullmatch(r"\d{2,3}\.0", version):
            raise ValidationError('Salesforce apiVersion must look like "62.0"')
        return cls(
            instance_url=instance_url,
            client_id=read.text("clientId", required=True),
            auth_flow=str(flow),
            token_url=token_url,
            client_secret=read.secret("clientSecret"),
            username=read.text("username") or None,
            password=read.secret("password"),
            private_key=read.secret("privateKey"),
            api_version=version,
            objects=_objects(read),
            soql_filter=read.text("soqlFilter"),
            overlap_seconds=read.integer("overlapSeconds", 300, minimum=0, maximum=86400),
            max_api_usage_percent=read.integer("maxApiUsagePercent", 90, minimum=1, maximum=100),
            batch_size=read.integer("batchSize", 2000, minimum=200, maximum=2000),
        )


def _objects(read: SettingsReader) -> tuple[SObject, ...]:
    out = [obj for switch, obj in DEFAULT_OBJECTS.items() if read.flag(switch, switch in _DEFAULT_ON)]
    custom = read.settings.get("objects", [])
    if not isinstance(custom, list):
        raise ValidationError("Salesforce connector objects must be an array")
    for i, entry in enumerate(custom):
        where = f"Salesforce connector objects[{i}]"
        if not isinstance(entry, Mapping):
            raise ValidationError(f"{where} must be an object")
        name, table, fields = entry.get("sobject"), entry.get("table"), entry.get("fields")
        if not isinstance(name, str) or not _SOBJECT_RE.match(name):
            raise ValidationError(f"{where}.sobject must be an sObject API name")
        if not isinstance(table, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,63}", table):
            raise ValidationError(f"{where}.table must be a table name")
        if not isinstance(fields, list) or not all(isinstance(f, str) and _FIELD_RE.match(f) for f in fields):
            raise ValidationError(f"{where}.fields must be an array of field API names")
        out.append(SObject(name, table, tuple(fields)))
    names = [o.name for o in out]
    if len(set(names)) != len(names) or len({o.table for o in out}) != len(out):
        raise ValidationError("Salesforce connector objects must name each sObject and table once")
    return tuple(out)


# -- vendor rules and authentication -----------------------------------------------------------------------------------


class SalesforceRules(VendorRules):
    """Salesforce REST: errors ``[{"message", "errorCode", "fields"}]``, limits in ``Sforce-Limit-Info``."""

    name = "Salesforce"

    def __init__(self) -> None:
        self.api_usage: tuple[int, int] | None = None

    def _codes(self, response: HttpResponse) -> tuple[str | None, str]:
        doc = response.json()
        if isinstance(doc, list) and doc and isinstance(doc[0], Mapping):
            first = doc[0]
            code = first.get("errorCode")
            messages = "; ".join(str(e.get("message")) for e in doc if isinstance(e, Mapping) and e.get("message"))
            return (code if isinstance(code, str) else None), messages
        if isinstance(doc, Mapping) and isinstance(doc.get("error"), str):  # the OAuth token endpoint
            return doc["error"], str(doc.get("error_description") or "")
        return None, ""

    def error_detail(self, response: HttpResponse) -> tuple[str | None, str]:
        """The first error's code and every error's message."""
        return self._codes(response)

    def is_throttled(self, response: HttpResponse) -> bool:
        """429, or 403 ``REQUEST_LIMIT_EXCEEDED`` (Salesforce's answer to an exhausted API limit)."""
        if response.status == 429:
            return True
        return response.status == 403 and self._codes(response)[0] == "REQUEST_LIMIT_EXCEEDED"

    def retry_in_call(self, response: HttpResponse) -> bool:
        """The org's daily request total does not recover in seconds; the concurrent-request limit does."""
        return "TotalRequests" not in self._codes(response)[1]

    def is_expired_token(self, response: HttpResponse) -> bool:
        """401 (``INVALID_SESSION_ID``: expired, revoked or from another org): authenticate again once."""
        return response.status == 401

    def observe(self, response: HttpResponse) -> None:
        """Record ``Sforce-Limit-Info: api-usage=N/M``."""
        info = response.header("sforce-limit-info")
        match = _LIMIT_RE.search(info or "")
        if match:
            self.api_usage = (int(match.group(1)), int(match.group(2)))


class SalesforceAuth:
    """Obtains an access token with the configured OAuth flow; renews it when the API says it expired."""

    def __init__(self, settings: SalesforceSettings, token_client: HttpApiClient, api: HttpApiClient) -> None:
        self._settings = settings
        self._token_client = token_client
        self._api = api
        self._token: str | None = None

    def headers(self) -> Mapping[str, str]:
        """``Authorization: Bearer <token>`` (authenticating first when there is no token)."""
        if self._token is None:
            self._authenticate()
        return {"Authorization": f"Bearer {self._token}"}

    def refresh(self) -> bool:
        """Authenticate again."""
        self._token = None
        self._authenticate()
        return True

    def _form(self) -> dict[str, str]:
        s = self._settings
        if s.auth_flow == "client_credentials":
            return {
                "grant_type": "client_credentials",
                "client_id": s.client_id,
                "client_secret": s.client_secret or "",
            }
        if s.auth_flow == "jwt_bearer":
            return {"grant_type": "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion": self._assertion()}
        return {
            "grant_type": "password",
            "client_id": s.client_id,
            "client_secret": s.client_secret or "",
            "username": s.username or "",
            "password": s.password or "",
        }

    def _assertion(self) -> str:
        try:
            import jwt  # PyJWT; RS256 needs the cryptography package
        except ImportError as e:  # pragma: no cover - PyJWT is a core dependency
            raise ApiAuthError("Salesforce JWT bearer flow needs PyJWT", vendor="Salesforce") from e
        s = self._settings
        claims = {"iss": s.client_id, "sub": s.username, "aud": s.token_url, "exp": int(time.time()) + 180}
        try:
            return jwt.encode(claims, s.private_key or "", algorithm="RS256")
        except (jwt.PyJWTError, NotImplementedError, ValueError, TypeError) as e:
            # Never quote the key or the library's message about it.
            raise ApiAuthError(
                f"Salesforce JWT bearer flow: cannot sign with the configured privateKey ({type(e).__name__}); "
                "it needs an RSA private key in PEM and the cryptography package",
                vendor="Salesforce",
            ) from None

    def _authenticate(self) -> None:
        try:
            doc = self._token_client.request(
                "POST", "/services/oauth2/token", form=self._form(), authenticate=False, idempotent=True
            ).json()
        except ApiRequestError as e:
            raise ApiAuthError(
                f"Salesforce authentication ({self._settings.auth_flow} flow) failed: {e.message}",
                vendor="Salesforce",
                status=e.http_status,
                vendor_code=e.vendor_code,
            ) from None
        if not isinstance(doc, Mapping) or not isinstance(doc.get("access_token"), str):
            raise ApiAuthError("Salesforce token response has no access_token", vendor="Salesforce")
        self._token = doc["access_token"]
        self._api.redactor.add(self._token)
        instance = doc.get("instance_url")
        if isinstance(instance, str) and instance:
            self._api.set_base_url(instance)


# -- the connector -----------------------------------------------------------------------------------------------------


def _soql_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SalesforceConnector:
    """Polls the configured sObjects (ingest source) and executes record actions (action handler)."""

    def __init__(
        self,
        name: str,
        settings: SalesforceSettings,
        *,
        transport: Transport | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] | None = None,
        hlc: HLC | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._name = name
        self.settings = settings
        self._hlc = hlc or HLC()
        self.rules = SalesforceRules()
        redactor = Redactor([settings.client_secret or "", settings.password or "", settings.private_key or ""])
        for line in (settings.private_key or "").splitlines():
            redactor.add(line.strip())
        common = client_options(transport=transport, retry=retry, sleep=sleep, timeout=timeout)
        common["redactor"] = redactor
        self.client = HttpApiClient(settings.instance_url, rules=self.rules, **common)
        self.token_client = HttpApiClient(settings.token_url, rules=SalesforceRules(), **common)
        self.client.auth = SalesforceAuth(settings, self.token_client, self.client)

    @property
    def name(self) -> str:
        """The connector's name."""
        return self._name

    def close(self) -> None:
        """Nothing is held open between requests."""

    # -- IngestSource --------------------------------------------------------------------------------------------------

    def poll(self, position: Position, limit: int) -> PollBatch:
        """Records changed (or deleted) since ``position``, object by object.

        Raises:
            AdapterError: Salesforce refused or could not be reached (nothing is stored; the poll is retried later).
        """
        limit = max(1, limit)
        stored = position.get("objects")
        states = {
            o.name: IncrementalState.from_json(stored.get(o.name) if isinstance(stored, Mapping) else None)
            for o in self.settings.objects
        }
        rows: list[ChangedRow] = []
        more = False
        overlap = timedelta(seconds=self.settings.overlap_seconds)
        for obj in self.settings.objects:
            if len(rows) >= limit:
                more = True
                break
            state = states[obj.name]
            stopped = self._read_object(obj, state, rows, limit)
            state.prune(overlap, _SECOND)
            if stopped == "limit":
                more = True
                break
            if stopped == "usage":
                break
        return PollBatch(rows, {"v": 1, "objects": {k: v.to_json() for k, v in states.items()}}, more)

    def _read_object(self, obj: SObject, state: IncrementalState, rows: list[ChangedRow], limit: int) -> str | None:
        resume = state.resume.get("next") if state.resume else None
        state.resume = None
        headers = {"Sforce-Query-Options": f"batchSize={self.settings.batch_size}"}
        url: str
        params: dict[str, str] | None
        if isinstance(resume, str):
            url, params = resume, None
        else:
            url, params = self._query_path(), {"q": self._soql(obj, state)}
        # Records read, emitted or not (an empty page counts as a full batch): bounds the requests of one poll.
        read = 0
        urls = {url} if params is None else set()
        while True:
            try:
                page = self.client.request("GET", url, params=params, headers=headers).json()
            except ApiRequestError as e:
                if params is not None or e.vendor_code not in ("INVALID_QUERY_LOCATOR", "NOT_FOUND"):
                    raise
                logger.info("salesforce %s: %s query locator expired; restarting from the cursor", self._name, obj.name)
                url, params = self._query_path(), {"q": self._soql(obj, state)}
                urls.clear()
                continue
            if not isinstance(page, Mapping) or not isinstance(page.get("records"), list):
                raise ApiRequestError("Salesforce query returned no records array", vendor="Salesforce")
            for record in page["records"]:
                row = self._row(obj, record, state) if isinstance(record, Mapping) else None
                if row is not None:
                    rows.append(row)
            read += len(page["records"]) or self.settings.batch_size
            next_url = page.get("nextRecordsUrl")
            if page.get("done") is True or not isinstance(next_url, str):
                return None
            url, params = advancing(next_url, urls, "nextRecordsUrl", f"{obj.name} query", vendor="Salesforce"), None
            if len(rows) >= limit or read >= limit:
                state.resume = {"next": next_url}
                return "limit"
            if self._over_budget():
                state.resume = {"next": next_url}
                return "usage"

    def _over_budget(self) -> bool:
        usage = self.rules.api_usage
        if usage is None or usage[1] <= 0:
            return False
        percent = 100.0 * usage[0] / usage[1]
        if percent < self.settings.max_api_usage_percent:
            return False
        logger.warning(
            "salesforce %s: API usage %d/%d is at or over %g%%; polling pauses after this page",
            self._name,
            usage[0],
            usage[1],
            self.settings.max_api_usage_percent,
        )
        return True

    def _query_path(self) -> str:
        return f"/services/data/v{self.settings.api_version}/queryAll"

    def _soql(self, obj: SObject, state: IncrementalState) -> str:
        conditions: list[str] = []
        start = state.query_start(timedelta(seconds=self.settings.overlap_seconds), _SECOND)
        if start is not None:
            conditions.append(f"SystemModstamp >= {_soql_time(start)}")
        if self.settings.soql_filter:
            conditions.append(f"({self.settings.soql_filter})")
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        return f"SELECT {', '.join(obj.select)} FROM {obj.name}{where} ORDER BY SystemModstamp ASC, Id ASC"

    def _row(self, obj: SObject, record: Mapping[str, Any], state: IncrementalState) -> ChangedRow | None:
        record_id, stamp = record.get("Id"), record.get("SystemModstamp")
        if not isinstance(record_id, str) or not record_id or not isinstance(stamp, str):
            raise ApiRequestError(f"Salesforce {obj.name} record without Id or SystemModstamp", vendor="Salesforce")
        modified = vendor_time(
            stamp, f"{obj.name} record {record_id[:40]!r} with a SystemModstamp", vendor="Salesforce"
        )
        if not state.accept(record_id, modified):
            return None
        attributes = record.get("attributes")
        origin: dict[str, JsonValue] = {
            "source": "salesforce",
            "sobject": obj.name,
            "url": attributes.get("url") if isinstance(attributes, Mapping) else None,
            "systemModstamp": stamp,
        }
        version = format_utc(modified)
        if record.get("IsDeleted") is True:
            return ChangedRow(obj.table, record_id, None, version, origin)
        values: dict[str, JsonValue] = {}
        for name in obj.fields:
            if name in _SYSTEM_FIELDS and name != "SystemModstamp":
                continue
            values[name.replace(".", "_")] = _field(record, name)
        values["SystemModstamp"] = stamp
        return ChangedRow(obj.table, record_id, values, version, origin)

    # -- ActionHandler -------------------------------------------------------------------------------------------------

    @property
    def supported_actions(self) -> Sequence[ActionDescriptor]:
        """``create_record`` and ``update_record``."""
        return ACTIONS

    def execute(self, action: Action, context: ActionContext) -> ActionResult:
        """Run one action against Salesforce.

        Raises:
            ActionNotSupportedError: an action type this connector does not have.
            ActionExecutionError: Salesforce refused (``retryable`` false) or failed/throttled (``retryable`` true).
        """
        if action.action_type not in ("create_record", "update_record"):
            raise ActionNotSupportedError(
                f'Action type "{action.action_type}" not supported by connector "{self._name}"'
            )
        params = action.params
        sobject = params.get("sobject")
        if not isinstance(sobject, str) or not _SOBJECT_RE.match(sobject):
            raise ActionExecutionError("sobject must be an sObject API name, e.g. Account", retryable=False)
        fields = params.get("fields")
        if not isinstance(fields, Mapping) or not fields:
            raise ActionExecutionError("fields must be a non-empty object of field values", retryable=False)
        base = f"/services/data/v{self.settings.api_version}/sobjects/{sobject}"
        try:
            if action.action_type == "create_record":
                created = self.client.request("POST", base, json_body=dict(fields)).json()
                record_id = created.get("id") if isinstance(created, Mapping) else None
                if not isinstance(record_id, str):
                    raise ActionExecutionError("Salesforce created the record but returned no id", retryable=False)
                data: dict[str, JsonValue] = {"id": record_id, "sobject": sobject}
            else:
                record_id = params.get("id")
                if not isinstance(record_id, str) or not _RECORD_ID_RE.match(record_id):
                    raise ActionExecutionError("id must be a 15 or 18 character record id", retryable=False)
                self.client.request("PATCH", f"{base}/{urllib.parse.quote(record_id)}", json_body=dict(fields))
                data = {"id": record_id, "sobject": sobject, "updated": sorted(fields)}
        except ApiOutcomeUnknownError as e:
            raise ActionExecutionError(f"{e.message}; check Salesforce before retrying", retryable=False) from None
        except ApiError as e:
            raise ActionExecutionError(e.message, retryable=e.retryable) from None
        return ActionResult(action.action_id, data, self._hlc.now())


def _field(record: Mapping[str, Any], path: str) -> JsonValue:
    """A field by API name, following relationship paths (``Owner.Name``)."""
    value: Any = record
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, Mapping):
        return {k: v for k, v in value.items() if k != "attributes"}
    return value


_SOBJECT: dict[str, JsonValue] = {"type": "string", "pattern": _SOBJECT_RE.pattern[2:-2]}
ACTIONS: tuple[ActionDescriptor, ...] = (
    ActionDescriptor(
        "create_record",
        "Create a Salesforce record; returns its id.",
        {
            "type": "object",
            "required": ["sobject", "fields"],
            "properties": {"sobject": _SOBJECT, "fields": {"type": "object", "minProperties": 1}},
        },
        target_param="sobject",
    ),
    ActionDescriptor(
        "update_record",
        "Update fields of a Salesforce record.",
        {
            "type": "object",
            "required": ["sobject", "id", "fields"],
            "properties": {
                "sobject": _SOBJECT,
                "id": {"type": "string", "minLength": 15, "maxLength": 18},
                "fields": {"type": "object", "minProperties": 1},
            },
        },
        target_param="sobject",
    ),
)


# -- registration ------------------------------------------------------------------------------------------------------

DESCRIPTOR = ConnectorTypeDescriptor(
    type="salesforce",
    display_name="Salesforce",
    description="Salesforce records (accounts, contacts, opportunities, leads, custom objects) polled into tables, "
    "deletions included; create and update records.",
    category="api",
    config_schema={
        "type": "object",
        "required": ["instanceUrl", "clientId"],
        "properties": {
            "authFlow": {"enum": ["password", "client_credentials", "jwt_bearer"], "default": "password"},
            "instanceUrl": {"type": "string", "description": "the org's My Domain URL"},
            "clientId": {"type": "string"},
            "clientSecret": {"type": "string", "description": "secret; password and client_credentials flows"},
            "username": {"type": "string", "description": "password and jwt_bearer flows"},
            "password": {"type": "string", "description": "secret; the deprecated username-password flow"},
            "privateKey": {"type": "string", "description": "secret, PEM; jwt_bearer flow"},
            "loginUrl": {"type": "string", "description": "token endpoint host of the password and JWT flows"},
            "isSandbox": {"type": "boolean", "default": False},
            "apiVersion": {"type": "string", "default": DEFAULT_API_VERSION},
            "soqlFilter": {"type": "string", "description": "a SOQL condition added to every object's query"},
            "includeAccounts": {"type": "boolean", "default": True},
            "includeContacts": {"type": "boolean", "default": True},
            "includeOpportunities": {"type": "boolean", "default": True},
            "includeLeads": {"type": "boolean", "default": False},
            "objects": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["sobject", "table", "fields"],
                    "properties": {
                        "sobject": {"type": "string"},
                        "table": {"type": "string"},
                        "fields": {"type": "array", "items": {"type": "string"}},
                    },
                },
            },
            "overlapSeconds": {"type": "integer", "default": 300},
            "maxApiUsagePercent": {"type": "integer", "default": 90},
            "batchSize": {"type": "integer", "default": 2000, "minimum": 200, "maximum": 2000},
        },
    },
    ingest_schema=API_INGEST_SCHEMA,
    output_tables=tuple(
        {"table": o.table, "sobject": o.name, "rowId": "record Id", "default": switch in _DEFAULT_ON}
        for switch, o in DEFAULT_OBJECTS.items()
    ),
    secret_fields=("clientSecret", "password", "privateKey"),
)


def create(config: ConnectorConfig, secrets: Mapping[str, str]) -> Connector:
    """The connector for a validated ``salesforce`` config; ``secrets`` holds the resolved credentials.

    Raises:
        ValidationError: a setting is malformed or a credential the flow needs is missing.
    """
    connector = SalesforceConnector(config.name, SalesforceSettings.from_config(config, secrets))
    # The poller schedules the ingest part only when the config has an ``ingest`` section.
    return Connector(config.name, ingest=connector, actions=connector)
