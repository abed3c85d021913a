"""Database targets an admin names (a connector's ``connectionString``, a destination's ``url``): parsed, limited to
parameters that cannot redirect the connection, and dialled only at addresses the network policy allows.

A target is *where* (host, port, database, user) plus options that only tune the connection (:data:`POSTGRES_OPTIONS`,
:data:`MYSQL_OPTIONS`). Everything else is refused with a 400 (:class:`~lakesync.core.network.ForbiddenTargetError`):
parameters that send the connection (and its password) elsewhere (``host``/``hostaddr``/``port`` in a URL's query,
``service``, ``unix_socket``, a socket directory as host, a host list), that read files of the function
(``passfile``, ``sslrootcert``, ``sslkey``, ``ssl_ca``...) or that change the session (``options``). Messages never
echo the connection string.

Both libpq forms are read here without a driver (the admin function has none): ``key=value`` keyword strings
(values bare or single-quoted with ``\\`` escapes) and ``postgresql://`` URLs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qsl, unquote, urlsplit

from lakesync import egress
from lakesync.core.destinations import MYSQL_OPTIONS, POSTGRES_OPTIONS
from lakesync.core.network import ForbiddenTargetError, NetworkPolicy

__all__ = [
    "MYSQL_OPTIONS",
    "POSTGRES_OPTIONS",
    "DatabaseTarget",
    "mysql_kwargs",
    "mysql_target",
    "postgres_target",
]

_POSTGRES_LOCATION: Final = frozenset({"host", "port", "dbname", "user", "password"})
_KEYWORD: Final = re.compile(r"\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*=\s*")
_PORT: Final = re.compile(r"\A[0-9]{1,5}\Z")


@dataclass(frozen=True, slots=True)
class DatabaseTarget:
    """A checked database target.

    Attributes:
        host: The one host name or address.
        port: The port (the engine's default when not given).
        database: The database, if named.
        user: The user, if named.
        password: The password, if the string carried one.
        options: The allowed tuning parameters.
    """

    host: str
    port: int
    database: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    options: Mapping[str, str] = field(default_factory=dict)

    @property
    def location(self) -> str:
        """``host:port/database``: what a message may show."""
        return f"{self.host}:{self.port}/{self.database or ''}"

    def addresses(self, *, what: str, policy: NetworkPolicy | None = None) -> list[str]:
        """The host's addresses to dial, each allowed by the policy (resolved now: call it for every connection).

        Raises:
            ForbiddenTargetError: the host or one of its addresses is refused. AdapterError: it does not resolve.
        """
        return [str(a) for a in egress.resolve(self.host, self.port, what=what, policy=policy)]

    def postgres_kwargs(self, *, what: str, policy: NetworkPolicy | None = None) -> dict[str, str]:
        """``psycopg.connect`` keyword arguments dialling the checked addresses (``hostaddr``), with ``host`` kept for
        TLS verification."""
        addresses = self.addresses(what=what, policy=policy)
        kwargs = {
            **self.options,
            "host": ",".join([self.host] * len(addresses)),
            "hostaddr": ",".join(addresses),
            "port": str(self.port),
        }
        for key, value in (("dbname", self.database), ("user", self.user), ("password", self.password)):
            if value is not None:
                kwargs[key] = value
        return kwargs


def _refuse(what: str, key: str) -> ForbiddenTargetError:
    return ForbiddenTargetError(
        f"{what} may not set {key!r}: only its host, port, database, user, password and the options "
        "that do not redirect the connection (sslmode, connect_timeout, application_name, ...) are allowed"
    )


def _keyword_pairs(text: str, what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    i = 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        match = _KEYWORD.match(text, i)
        if match is None:
            raise ForbiddenTargetError(f"{what} is not a valid connection string (key=value pairs or a URL)")
        i = match.end()
        value: list[str] = []
        quoted = i < len(text) and text[i] == "'"
        i += 1 if quoted else 0
        while i < len(text):
            ch = text[i]
            if ch == "\\" and i + 1 < len(text):
                value.append(text[i + 1])
                i += 2
                continue
            if (quoted and ch == "'") or (not quoted and ch.isspace()):
                i += 1 if quoted else 0
                break
            value.append(ch)
            i += 1
        else:
            if quoted:
                raise ForbiddenTargetError(f"{what} has an unterminated quoted value")
        pairs[match["key"].lower()] = "".join(value)
    return pairs


def _port(raw: str | None, default: int, what: str) -> int:
    if raw is None or raw == "":
        return default
    if not _PORT.match(raw) or not 0 < int(raw) < 65536:
        raise ForbiddenTargetError(f"{what} has an invalid port")
    return int(raw)


def _url_parts(
    url: str, what: str
) -> tuple[str, int | None, str | None, str | None, str | None, list[tuple[str, str]]]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ForbiddenTargetError(f"{what} is not a valid URL") from None
    if "," in parts.netloc.rpartition("@")[2]:
        raise ForbiddenTargetError(f"{what} must name one host (no host lists)")
    query = parse_qsl(parts.query, keep_blank_values=True)
    return (
        unquote(parts.hostname or ""),
        port,
        unquote(parts.path.lstrip("/")) or None,
        unquote(parts.username) if parts.username else None,
        unquote(parts.password) if parts.password is not None else None,
        query,
    )


def postgres_target(conninfo: str, *, what: str) -> DatabaseTarget:
    """A PostgreSQL connection string (URL or keyword form), checked.

    Raises:
        ForbiddenTargetError: a parameter outside the location and :data:`POSTGRES_OPTIONS`, no host or a socket
            path as host, a host list, or a refused literal address (400; the message never quotes the string).
    """
    text = conninfo.strip()
    if re.match(r"\Apostgres(?:ql)?://", text, re.IGNORECASE):
        host, port, database, user, password, query = _url_parts(text, what)
        options: dict[str, str] = {}
        for key, value in query:
            if key not in POSTGRES_OPTIONS:
                raise _refuse(what, key)
            options[key] = value
        target = DatabaseTarget(host, port or 5432, database, user, password, options)
    else:
        pairs = _keyword_pairs(text, what)
        for key in pairs:
            if key not in POSTGRES_OPTIONS and key not in _POSTGRES_LOCATION:
                raise _refuse(what, key)
        target = DatabaseTarget(
            pairs.get("host", ""),
            _port(pairs.get("port"), 5432, what),
            pairs.get("dbname"),
            pairs.get("user"),
            pairs.get("password"),
            {k: v for k, v in pairs.items() if k in POSTGRES_OPTIONS},
        )
    egress.check_host(target.host, what=what)
    return target


def mysql_target(url: str, *, what: str) -> DatabaseTarget:
    """A ``mysql://`` / ``mariadb://`` URL, checked.

    Raises:
        ForbiddenTargetError: another form, a query parameter outside :data:`MYSQL_OPTIONS`, no host, or a refused
            literal address (400).
    """
    if not re.match(r"\A(?:mysql|mariadb)://", url.strip(), re.IGNORECASE):
        raise ForbiddenTargetError(f"{what} must be a mysql:// URL")
    host, port, database, user, password, query = _url_parts(url.strip(), what)
    options: dict[str, str] = {}
    for key, value in query:
        if key not in MYSQL_OPTIONS:
            raise _refuse(what, key)
        options[key] = value
    egress.check_host(host, what=what)
    return DatabaseTarget(host, port or 3306, database, user, password, options)


def mysql_kwargs(target: DatabaseTarget, address: str) -> dict[str, object]:
    """``pymysql.connect`` keyword arguments for ``target`` dialled at the checked ``address``."""
    kwargs: dict[str, object] = {
        "host": address,
        "port": target.port,
        "user": target.user,
        "password": target.password or "",
        "database": target.database,
    }
    ssl: dict[str, object] = {}
    for key, value in target.options.items():
        if key == "connect_timeout":
            kwargs["connect_timeout"] = int(value) if value.isdigit() else 10
        else:
            ssl[key.removeprefix("ssl_")] = value.lower() in ("1", "true", "yes")
    if ssl:
        kwargs["ssl"] = ssl
    return kwargs
