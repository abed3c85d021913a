"""Outbound connections to user-configured targets: resolved once, every address checked, the checked one dialled.

The deployment's :class:`~lakesync.core.network.NetworkPolicy` is process-wide (:func:`configure`, read from
``LAKESYNC_ALLOWED_NETWORKS`` by the functions' wiring; :data:`~lakesync.core.network.STRICT` until then). Every
connector and destination that dials a host an admin named goes through here:

* :func:`resolve` turns a host into the addresses to dial, refusing the whole host when *any* of its addresses is
  refused (a name that resolves to a public and a private address is not half-allowed);
* :func:`connect_tcp` opens a socket to one of those very addresses (so a DNS answer that changes between the check
  and the connection cannot slip in another), and the ``http.client`` connections and ``urllib`` handlers below use it
  while keeping the host name for the ``Host`` header, SNI and certificate checks;
* :func:`opener` builds a ``urllib`` opener with only the https handler (and http where the policy allows it): no
  ``file:``, ``ftp:`` or ``data:``, no proxies from the environment, no redirects followed.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import urllib.request
from typing import Any

from lakesync.core.errors import AdapterError
from lakesync.core.network import STRICT, ForbiddenTargetError, IPAddress, NetworkPolicy, literal_address

__all__ = [
    "VettedHTTPConnection",
    "VettedHTTPSConnection",
    "check_host",
    "check_url",
    "configure",
    "connect_tcp",
    "current",
    "opener",
    "resolve",
]

_lock = threading.Lock()
_policy: NetworkPolicy = STRICT


def configure(policy: NetworkPolicy) -> NetworkPolicy:
    """Make ``policy`` this process's; returns the previous one (tests restore it)."""
    global _policy
    with _lock:
        previous, _policy = _policy, policy
    return previous


def current() -> NetworkPolicy:
    """This process's policy."""
    return _policy


def check_host(host: str, *, what: str, policy: NetworkPolicy | None = None) -> None:
    """What can be said of ``host`` without resolving it: not empty, not a socket path, and a literal address allowed.

    Raises:
        ForbiddenTargetError: a refused literal address, a Unix socket directory or an empty host.
    """
    text = host.strip()
    if not text or text.startswith(("/", "@")) or "," in text:
        raise ForbiddenTargetError(f"{what} must name one network host (no socket paths or host lists)")
    address = literal_address(text)
    if address is not None:
        (policy or current()).check_address(address, what=what)


def check_url(url: str, *, what: str, policy: NetworkPolicy | None = None, resolve_host: bool = False) -> None:
    """An API base URL: https (http where allowed), a host, and no refused literal address; with ``resolve_host``,
    no refused address of the host name either (a name that does not resolve now is left to the dial-time check).

    Raises:
        ForbiddenTargetError: another scheme, no host, credentials in the URL or a refused address.
    """
    from urllib.parse import urlsplit

    chosen = policy or current()
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError for a malformed port
    except ValueError:
        raise ForbiddenTargetError(f"{what} is not a valid URL") from None
    chosen.check_scheme(parts.scheme, what=what)
    if parts.username is not None or parts.password is not None:
        raise ForbiddenTargetError(f"{what} must not carry credentials")
    if not parts.hostname:
        raise ForbiddenTargetError(f"{what} must name a host")
    check_host(parts.hostname, what=what, policy=chosen)
    if resolve_host:
        try:
            resolve(parts.hostname, parts.port or 443, what=what, policy=chosen)
        except AdapterError:
            pass  # not resolvable now: every connection resolves and checks again


def resolve(host: str, port: int, *, what: str, policy: NetworkPolicy | None = None) -> list[IPAddress]:
    """The addresses of ``host`` to dial, every one allowed by the policy.

    Raises:
        ForbiddenTargetError: the host, or any of its addresses, is refused (400 at registration).
        AdapterError: the name cannot be resolved (502).
    """
    chosen = policy or current()
    check_host(host, what=what, policy=chosen)
    address = literal_address(host)
    if address is not None:
        return [address]
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise AdapterError(f"{what}: the host name cannot be resolved") from None
    found: list[IPAddress] = []
    for info in infos:
        parsed = literal_address(str(info[4][0]))
        if parsed is None:
            continue
        chosen.check_address(parsed, what=what)
        if parsed not in found:
            found.append(parsed)
    if not found:
        raise AdapterError(f"{what}: the host name has no address")
    return found


def connect_tcp(
    host: str,
    port: int,
    timeout: float | None,
    source_address: tuple[str, int] | None = None,
    *,
    what: str = "the target",
    policy: NetworkPolicy | None = None,
) -> socket.socket:
    """A TCP socket to one of ``host``'s checked addresses (tried in order).

    Raises:
        ForbiddenTargetError: the host is refused. OSError: no address accepted the connection.
    """
    last: OSError | None = None
    for address in resolve(host, port, what=what, policy=policy):
        try:
            return socket.create_connection((str(address), port), timeout, source_address)
        except OSError as exc:
            last = exc
    assert last is not None
    raise last


def _dial(
    address: tuple[str, int], timeout: float | None = None, source_address: tuple[str, int] | None = None
) -> socket.socket:
    return connect_tcp(address[0], address[1], timeout, source_address, what=f"host {address[0]}")


class _VettedDial:
    """Makes an ``http.client`` connection open its socket with :func:`connect_tcp` (its ``Host`` header, SNI and
    certificate check keep the host name)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _dial


class VettedHTTPConnection(_VettedDial, http.client.HTTPConnection):
    """``http.client`` connection that dials only an address the policy allows."""


class VettedHTTPSConnection(_VettedDial, http.client.HTTPSConnection):
    """``http.client`` TLS connection to a checked address."""


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, context: ssl.SSLContext | None = None) -> None:
        super().__init__(context=context or ssl.create_default_context())
        self._ssl_context = context or ssl.create_default_context()

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(VettedHTTPSConnection, req, context=self._ssl_context)


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(VettedHTTPConnection, req)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as the 3xx it is: it would re-send credentials to wherever it points."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def opener(policy: NetworkPolicy | None = None) -> urllib.request.OpenerDirector:
    """A ``urllib`` opener with only the https handler (and http where ``policy`` allows it), dialling checked
    addresses, ignoring proxy variables and following no redirect."""
    chosen = policy or current()
    director = urllib.request.OpenerDirector()
    handlers: list[urllib.request.BaseHandler] = [
        _HTTPSHandler(),
        urllib.request.UnknownHandler(),  # any other scheme (file:, ftp:, data:): URLError "unknown url type"
        _NoRedirect(),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    ]
    if chosen.allow_http:
        handlers.append(_HTTPHandler())
    for handler in handlers:
        director.add_handler(handler)
    return director
