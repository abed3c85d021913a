"""A small JSON-over-HTTPS client for vendor APIs (Jira Cloud, Salesforce), on the standard library only.

What every vendor call gets:

* **Timeouts** on every request (connect and each read, ``timeout`` seconds; the whole response within
  :attr:`UrllibTransport.max_seconds`), and a cap on the body (:attr:`UrllibTransport.max_body_bytes`).
* **Throttling** -- a 429, or whatever the vendor's :class:`VendorRules` call throttling (Salesforce answers API-limit
  exhaustion with 403 ``REQUEST_LIMIT_EXCEEDED``) -- is retried after the response's ``Retry-After`` seconds (or a
  jittered exponential backoff when it has none). A ``Retry-After`` longer than :attr:`RetryPolicy.max_retry_after`
  is not slept through: the call fails with a retryable :class:`ApiThrottledError` and the caller (a poller on a
  schedule, an action the client retries) comes back later.
* **Server errors and network failures** (5xx, connection refused or reset, timeouts) are retried with full-jitter
  exponential backoff, at most :attr:`RetryPolicy.max_attempts` attempts and :attr:`RetryPolicy.max_total_sleep`
  seconds of sleeping per call.
* **Expired credentials**: when the vendor says the token expired (:meth:`VendorRules.is_expired_token`), the
  :class:`Authenticator` gets one chance to re-authenticate and the request is sent again once.
* **Errors** become :class:`ApiError` (an :class:`~lakesync.core.errors.AdapterError`, HTTP 502 at the edges) with
  the vendor, method, path, status and the vendor's own error code and message. Secret values the client knows of
  are replaced by ``***`` in every message and log record, and neither request bodies (which carry passwords on a
  token request) nor query strings are ever quoted.

The clock, the sleep and the random jitter are injectable, so tests run the backoff without waiting.
"""

from __future__ import annotations

import email.message
import email.utils
import http.client
import json
import logging
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lakesync import egress
from lakesync.core.errors import AdapterError
from lakesync.core.redact import Redactor

__all__ = [
    "ApiAuthError",
    "ApiError",
    "ApiOutcomeUnknownError",
    "ApiRequestError",
    "ApiThrottledError",
    "ApiUnavailableError",
    "Authenticator",
    "HttpApiClient",
    "HttpResponse",
    "NoAuth",
    "Redactor",
    "ResponseTooLargeError",
    "RetryPolicy",
    "Transport",
    "UrllibTransport",
    "VendorRules",
]

logger = logging.getLogger(__name__)

_USER_AGENT = "lakesync-connector/1"


# -- errors -----------------------------------------------------------------------------------------------------------


class ApiError(AdapterError):
    """A vendor API call failed.

    Attributes:
        vendor: ``"Jira"``, ``"Salesforce"``.
        http_status: The HTTP status, or ``None`` when no response arrived.
        vendor_code: The vendor's error code when it gave one (``REQUEST_LIMIT_EXCEEDED``, ``INVALID_FIELD``).
        retryable: Whether the same call may succeed later.
        retry_after: Seconds the vendor asked to wait, when it said.
    """

    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        vendor: str,
        status: int | None = None,
        vendor_code: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.vendor = vendor
        self.http_status = status
        self.vendor_code = vendor_code
        self.retry_after = retry_after


class ApiRequestError(ApiError):
    """The vendor refused the request as given (400, 403, 404, 409, 422 ...): retrying the same call cannot help."""


class ApiAuthError(ApiError):
    """The credentials were refused (and re-authenticating did not help, or the vendor has no refresh)."""


class ApiThrottledError(ApiError):
    """The vendor is rate-limiting the caller beyond the retry budget: come back after ``retry_after``."""

    retryable = True


class ApiUnavailableError(ApiError):
    """The vendor kept failing (5xx) or could not be reached within the retry budget."""

    retryable = True


class ApiOutcomeUnknownError(ApiUnavailableError):
    """A non-idempotent request (a create) may or may not have been applied: the connection failed after it was sent,
    or the vendor answered a 5xx. It is not retried: sending it again could apply it twice."""

    retryable = False


# -- transport --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """A response: status, headers (names lower-cased) and the raw body."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        """A header's value by case-insensitive name."""
        return self.headers.get(name.lower())

    def json(self) -> Any:
        """The body as JSON (``None`` when empty, not JSON or nested too deeply), made fit for a delta: ``NaN`` and
        ``Infinity`` (which Python's parser accepts) read as ``null``, lone surrogates (``"\\ud83d"``, a cut emoji)
        as U+FFFD. A push refuses both, so one such value would otherwise stop a connector for good."""
        if not self.body:
            return None
        try:
            doc = json.loads(self.body, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            return None
        if _ESCAPED_SURROGATE.search(self.body) is not None:
            doc = _replace_surrogates(doc)
        return doc


_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_constant(name: str) -> None:
    return None


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_replace_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    return value


class Transport(Protocol):
    """Sends one HTTP request; raises :class:`OSError` when no response arrives (refused, reset, timed out)."""

    def __call__(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: float
    ) -> HttpResponse: ...


def _lower_headers(message: email.message.Message) -> dict[str, str]:
    return {k.lower(): v for k, v in message.items()}


class ResponseTooLargeError(OSError):
    """The response body is larger than the transport accepts (no use retrying the same request at once)."""


class UrllibTransport:
    """The default transport: :mod:`urllib.request` through :func:`lakesync.egress.opener` -- only the https handler
    (http where the deployment allows it), the host's addresses checked against the network policy and the checked
    one dialled, no redirects followed (a redirect would re-send the Authorization header elsewhere), no proxies from
    the environment.

    ``timeout`` bounds each socket operation; ``max_seconds`` the whole response, so a server trickling bytes cannot
    hold a poll past its Lambda timeout; ``max_body_bytes`` the body, so an enormous page fails instead of
    exhausting the function's memory.
    """

    def __init__(self, *, max_seconds: float = 60.0, max_body_bytes: int = 64 << 20) -> None:
        self._opener = egress.opener()
        self.max_seconds = max_seconds
        self.max_body_bytes = max_body_bytes

    def __call__(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: float
    ) -> HttpResponse:
        """Send the request and read the whole response.

        Raises:
            ForbiddenTargetError: the URL's scheme or host is not allowed (never sent).
        """
        egress.check_url(url, what="the API URL")
        request = urllib.request.Request(url, data=body, headers=dict(headers), method=method)
        deadline = time.monotonic() + self.max_seconds
        try:
            with self._opener.open(request, timeout=timeout) as response:
                return HttpResponse(response.status, _lower_headers(response.headers), self._read(response, deadline))
        except urllib.error.HTTPError as e:
            with e:
                return HttpResponse(e.code, _lower_headers(e.headers), self._read(e, deadline))
        except urllib.error.URLError as e:
            reason = e.reason
            if isinstance(reason, OSError):
                raise reason from e  # keeps ConnectionRefusedError distinguishable: a request surely not applied
            raise OSError(str(reason)) from e
        except http.client.HTTPException as e:  # a response cut short (IncompleteRead, BadStatusLine)
            raise OSError(type(e).__name__) from e

    def _read(self, response: Any, deadline: float) -> bytes:
        """The body, a chunk at a time (``read1``: at most one socket read), within the deadline and the size cap."""
        length = response.headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            raise ResponseTooLargeError(f"response of {int(length):,} bytes, larger than {self.max_body_bytes:,}")
        read = getattr(response, "read1", None) or response.read
        chunks: list[bytes] = []
        size = 0
        while True:
            if time.monotonic() > deadline:
                raise TimeoutError(f"response not complete within {self.max_seconds:g} s")
            chunk = read(65536)
            if not chunk:
                return b"".join(chunks)
            size += len(chunk)
            if size > self.max_body_bytes:
                raise ResponseTooLargeError(f"response larger than {self.max_body_bytes:,} bytes")
            chunks.append(chunk)


# -- vendor rules and authentication --------------------------------------------------------------------------------


class VendorRules:
    """How a vendor says things; subclass per vendor. The defaults fit a plain REST API."""

    name = "API"

    def is_throttled(self, response: HttpResponse) -> bool:
        """Whether the response says the caller is over a rate limit."""
        return response.status == 429

    def is_expired_token(self, response: HttpResponse) -> bool:
        """Whether re-authenticating may cure the response."""
        return False

    def retry_in_call(self, response: HttpResponse) -> bool:
        """Whether a throttled response may clear within seconds (``False``: a daily quota is used up)."""
        return True

    def error_detail(self, response: HttpResponse) -> tuple[str | None, str]:
        """The vendor's error code (if any) and message from an error response body."""
        doc = response.json()
        if isinstance(doc, Mapping):
            message = doc.get("message") or doc.get("error_description") or doc.get("error")
            if isinstance(message, str):
                return None, message
        return None, ""

    def observe(self, response: HttpResponse) -> None:
        """See every response (e.g. to record API usage headers)."""


class Authenticator(Protocol):
    """Adds credentials to requests and renews them when the vendor says they expired."""

    def headers(self) -> Mapping[str, str]:
        """The headers that authenticate a request (authenticating first if needed)."""
        ...

    def refresh(self) -> bool:
        """Drop the current credentials and authenticate again; ``False`` when there is nothing to renew."""
        ...


class NoAuth:
    """No credentials (token endpoints authenticate in the body)."""

    def headers(self) -> Mapping[str, str]:
        """No headers."""
        return {}

    def refresh(self) -> bool:
        """Nothing to renew."""
        return False


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounds on retrying one call.

    Attributes:
        max_attempts: Requests sent at most (first try included) for throttling, 5xx and network failures.
        base_delay: First backoff step in seconds (full jitter: a random delay in ``[0, base * 2**n]``).
        max_delay: Cap of one backoff step.
        max_retry_after: The longest ``Retry-After`` slept through; a longer one fails the call as throttled.
        max_total_sleep: Seconds of sleeping per call at most (keeps a poll inside its Lambda timeout).
    """

    max_attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_retry_after: float = 60.0
    max_total_sleep: float = 120.0


_RETRYABLE_STATUSES = frozenset({500, 502, 503, 504})


def _retry_after_seconds(value: str | None, now: float) -> float | None:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


@dataclass
class _Call:
    """One request's progress through its retries."""

    where: str
    idempotent: bool
    attempt: int = 0
    slept: float = 0.0


def _request_body(
    headers: dict[str, str], json_body: Any, form: Mapping[str, str] | None
) -> tuple[dict[str, str], bytes | None]:
    """The headers with the body's ``Content-Type``, and the body (JSON, a form, or none)."""
    if json_body is not None:
        body = json.dumps(json_body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        return {**headers, "Content-Type": "application/json"}, body
    if form is not None:
        return {**headers, "Content-Type": "application/x-www-form-urlencoded"}, urllib.parse.urlencode(form).encode(
            "ascii"
        )
    return headers, None


@dataclass
class HttpApiClient:
    """JSON requests against one vendor API base URL.

    Args:
        base_url: ``https://your-domain.atlassian.net``, ``https://MyDomain.my.salesforce.com``; paths are joined
            to it, absolute URLs (``nextRecordsUrl`` is a path, but a vendor may hand out full URLs) must share its
            origin.
        rules: The vendor's :class:`VendorRules`.
        auth: The :class:`Authenticator`.
        redactor: Secrets to hide from messages and logs.
        transport: Sends requests (:class:`UrllibTransport` by default).
        timeout: Seconds per request.
        retry: The :class:`RetryPolicy`.
        sleep: ``time.sleep`` (injectable).
        wall_clock: ``time.time`` (injectable; for HTTP-date ``Retry-After``).
        jitter: ``random.random`` (injectable).
    """

    base_url: str
    rules: VendorRules = field(default_factory=VendorRules)
    auth: Authenticator = field(default_factory=NoAuth)
    redactor: Redactor = field(default_factory=Redactor)
    transport: Transport = field(default_factory=UrllibTransport)
    timeout: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep
    wall_clock: Callable[[], float] = time.time
    jitter: Callable[[], float] = random.random

    def __post_init__(self) -> None:
        self.set_base_url(self.base_url)

    def set_base_url(self, base_url: str) -> None:
        """Send later requests to ``base_url`` (Salesforce names the instance to use in its token response)."""
        self.base_url = base_url.rstrip("/")
        self._origin = urllib.parse.urlsplit(self.base_url)[:2]

    # -- public ---------------------------------------------------------------------------------------------------

    def get_json(self, path: str, *, params: Mapping[str, str] | None = None) -> Any:
        """``GET`` and the JSON body."""
        return self.request("GET", path, params=params).json()

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        form: Mapping[str, str] | None = None,
        authenticate: bool = True,
        idempotent: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpResponse:
        """Send a request with retries; a 2xx response or an :class:`ApiError`.

        Args:
            method: The HTTP method.
            path: A path under the base URL (``/rest/api/3/search/jql``) or an absolute URL of the same origin.
            params: Query parameters.
            json_body: A JSON body (sent as ``application/json``).
            form: A form body (``application/x-www-form-urlencoded``), e.g. for an OAuth token request.
            authenticate: Send the authenticator's headers (token requests do not).
            headers: More request headers (e.g. Salesforce's ``Sforce-Query-Options``).
            idempotent: Whether sending the request twice is harmless (default: every method but ``POST``). A
                non-idempotent request is retried only when it surely was not applied (throttled, connection
                refused); otherwise it fails with :class:`ApiOutcomeUnknownError`.

        Raises:
            ApiThrottledError: still throttled when the retry budget ran out, or asked to wait too long.
            ApiUnavailableError: 5xx or no response, within the retry budget.
            ApiAuthError: 401 (after one re-authentication when the vendor allows it).
            ApiRequestError: any other 4xx, or a redirect.
        """
        url = self._url(path, params)
        where = f"{method} {urllib.parse.urlsplit(url).path}"
        base_headers, body = _request_body(
            {"Accept": "application/json", "User-Agent": _USER_AGENT, **(headers or {})}, json_body, form
        )
        call = _Call(where, idempotent if idempotent is not None else method != "POST")
        refreshed = False
        while True:
            call.attempt += 1
            send_headers = dict(base_headers)
            if authenticate:
                send_headers.update(self.auth.headers())
            response = self._send(call, method, url, send_headers, body)
            if response is None:
                continue
            self.rules.observe(response)
            if 200 <= response.status < 300:
                return response
            code, detail = self.rules.error_detail(response)
            described = self._describe(where, response.status, code, detail)
            if self.rules.is_throttled(response):
                self._wait_throttled(call, response, code, described)
                continue
            if response.status == 401 or self.rules.is_expired_token(response):
                if not refreshed and authenticate and self.rules.is_expired_token(response) and self.auth.refresh():
                    refreshed = True
                    logger.info("%s %s: credentials expired; re-authenticated", self.rules.name, where)
                    continue
                raise ApiAuthError(described, **self._fields(response, code, None))
            self._wait_failed(call, response, code, described)

    def _send(
        self, call: _Call, method: str, url: str, headers: dict[str, str], body: bytes | None
    ) -> HttpResponse | None:
        """One exchange: the response, or ``None`` after waiting to retry a request that got none."""
        try:
            return self.transport(method, url, headers, body, self.timeout)
        except ResponseTooLargeError as e:
            raise ApiUnavailableError(
                f"{self.rules.name} {call.where}: {e}; ask for smaller pages", vendor=self.rules.name
            ) from None
        except OSError as e:
            reason = self.redactor(str(e) or type(e).__name__)
            if not call.idempotent and not isinstance(e, ConnectionRefusedError):
                raise ApiOutcomeUnknownError(
                    f"{self.rules.name} {call.where}: no response ({reason}); it may or may not have been applied",
                    vendor=self.rules.name,
                ) from None
            delay = self._backoff(call.attempt)
            if not self._may_wait(call, delay):
                raise ApiUnavailableError(
                    f"{self.rules.name} {call.where} failed: no response after {call.attempt} attempts ({reason})",
                    vendor=self.rules.name,
                ) from None
            logger.warning(
                "%s %s: no response (%s); retry %d in %.2fs", self.rules.name, call.where, reason, call.attempt, delay
            )
            self._wait(call, delay)
            return None

    def _wait_throttled(self, call: _Call, response: HttpResponse, code: str | None, described: str) -> None:
        """Wait before retrying a throttled request, or raise :class:`ApiThrottledError` when that is not allowed."""
        asked = _retry_after_seconds(response.header("retry-after"), self.wall_clock())
        if not self.rules.retry_in_call(response):
            raise ApiThrottledError(described, **self._fields(response, code, asked))
        if asked is not None and asked > self.retry.max_retry_after:
            raise ApiThrottledError(
                f"{described}; asked to retry after {asked:g}s", **self._fields(response, code, asked)
            )
        delay = asked if asked is not None else self._backoff(call.attempt)
        if not self._may_wait(call, delay):
            raise ApiThrottledError(
                f"{described}; still throttled after {call.attempt} attempts", **self._fields(response, code, asked)
            )
        logger.warning(
            "%s %s throttled (%s); retry %d in %.2fs",
            self.rules.name,
            call.where,
            code or response.status,
            call.attempt,
            delay,
        )
        self._wait(call, delay)

    def _wait_failed(self, call: _Call, response: HttpResponse, code: str | None, described: str) -> None:
        """Wait before retrying a failure worth retrying; raise the error it maps to otherwise."""
        if response.status >= 500 and not call.idempotent:
            raise ApiOutcomeUnknownError(
                f"{described}; it may or may not have been applied", **self._fields(response, code, None)
            )
        if response.status not in _RETRYABLE_STATUSES:
            error = ApiUnavailableError if response.status >= 500 else ApiRequestError
            raise error(described, **self._fields(response, code, None))
        asked = _retry_after_seconds(response.header("retry-after"), self.wall_clock())
        delay = min(asked, self.retry.max_retry_after) if asked is not None else self._backoff(call.attempt)
        if not self._may_wait(call, delay):
            raise ApiUnavailableError(
                f"{described}; after {call.attempt} attempts", **self._fields(response, code, asked)
            )
        logger.warning(
            "%s %s: HTTP %d; retry %d in %.2fs", self.rules.name, call.where, response.status, call.attempt, delay
        )
        self._wait(call, delay)

    def _may_wait(self, call: _Call, delay: float) -> bool:
        return call.attempt < self.retry.max_attempts and call.slept + delay <= self.retry.max_total_sleep

    def _wait(self, call: _Call, delay: float) -> None:
        self.sleep(delay)
        call.slept += delay

    # -- helpers --------------------------------------------------------------------------------------------------

    def _url(self, path: str, params: Mapping[str, str] | None) -> str:
        if path.startswith(("http://", "https://")):
            if urllib.parse.urlsplit(path)[:2] != self._origin:
                # Never send credentials to another host, whatever a response's link says.
                raise ApiRequestError(
                    f"{self.rules.name}: refusing a URL outside {self.base_url}", vendor=self.rules.name
                )
            url = path
        else:
            url = self.base_url + (path if path.startswith("/") else "/" + path)
        if params:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode(params, quote_via=urllib.parse.quote)
        return url

    def _backoff(self, attempt: int) -> float:
        return self.jitter() * min(self.retry.max_delay, self.retry.base_delay * 2.0 ** (attempt - 1))

    def _describe(self, where: str, status: int, code: str | None, detail: str) -> str:
        text = f"{self.rules.name} {where} returned HTTP {status}"
        if code:
            text += f" {code}"
        if detail:
            text += f": {detail[:500]}"
        return self.redactor(text)

    def _fields(self, response: HttpResponse, code: str | None, retry_after: float | None) -> dict[str, Any]:
        return {"vendor": self.rules.name, "status": response.status, "vendor_code": code, "retry_after": retry_after}
