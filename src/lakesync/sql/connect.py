"""Open a SQL destination from a URL or from connection parameters (an RDS-style secret).

URLs: ``postgresql://`` / ``postgres://`` (libpq URL, query parameters such as ``sslmode`` pass through),
``mysql://`` / ``mariadb://`` (``user:password@host:port/database``; ``ssl_ca``, ``ssl_verify_cert``,
``unix_socket`` query parameters), ``sqlite:///relative/path``, ``sqlite:////absolute/path``, ``sqlite:///:memory:``,
``bigquery://project/dataset``.

Passwords never reach a log line or an error message: messages name the database by :func:`mask_url`, and the
destination scrubs the password from driver errors. Nothing here connects: the first ``apply`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from lakesync.core.errors import DestinationError
from lakesync.core.redact import mask_url
from lakesync.sql.destination import SqlDestination

__all__ = ["connect", "connect_params", "mask_url"]

_TYPES: Final = {
    "postgresql": "postgres",
    "postgres": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "sqlite": "sqlite",
    "bigquery": "bigquery",
}
_ENGINES: Final = {
    "postgres": "postgres",
    "postgresql": "postgres",
    "aurora-postgresql": "postgres",
    "mysql": "mysql",
    "mariadb": "mysql",
    "aurora-mysql": "mysql",
    "aurora": "mysql",
    "sqlite": "sqlite",
    "bigquery": "bigquery",
}
_MYSQL_QUERY: Final = ("ssl_ca", "ssl_cert", "ssl_key", "ssl_verify_cert", "ssl_verify_identity", "unix_socket")


def _refuse(message: str) -> DestinationError:
    return DestinationError(message, retryable=False)


def connect(
    url: str,
    *,
    name: str,
    password: str | None = None,
    bigquery_client_factory: Callable[[str], Any] | None = None,
    vet: bool = False,
) -> SqlDestination:
    """A destination for ``url`` (see the module docstring for the schemes).

    Args:
        url: The database URL.
        name: The destination's name.
        password: A password kept out of the URL (e.g. from a secret); overrides one in the URL.
        bigquery_client_factory: For ``bigquery://``: builds the client from the project id (default:
            ``google.cloud.bigquery.Client(project=...)`` with the default credentials).
        vet: The URL is an admin's (a configured destination, not the operator's own): it may carry only its
            location and options that do not redirect it (:mod:`lakesync.sql.targets`), and its host is resolved
            and checked against the network policy at every connect, which dials the checked address.

    Raises:
        DestinationError: not retryable, for an unsupported scheme or a malformed URL (the message masks it).
        ForbiddenTargetError: with ``vet``, a redirecting parameter or a refused literal host (400).
    """
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    kind = _TYPES.get(scheme)
    if kind is None:
        raise _refuse(f"destination {name}: unsupported URL {mask_url(url)!r} (postgresql, mysql, sqlite, bigquery)")
    if kind == "sqlite":
        return _sqlite(url, name)
    if kind == "bigquery":
        return _bigquery(url, name, bigquery_client_factory, None)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise _refuse(f"destination {name}: malformed URL {mask_url(url)!r}") from None
    secret = password if password is not None else (unquote(parts.password) if parts.password else None)
    secrets = (secret,) if secret else ()
    if vet:
        return _vetted(url, kind, name, password, secrets)
    if kind == "postgres":
        from lakesync.sql.postgres import PostgresExecutor

        kwargs: dict[str, Any] = {}
        if password is not None:
            kwargs["password"] = password
        executor: Any = PostgresExecutor(url, kwargs=kwargs, location=mask_url(url), secrets=secrets)
        return SqlDestination(name, executor)
    from lakesync.sql.mysql import MySQLExecutor

    params: dict[str, Any] = {
        "host": parts.hostname or "localhost",
        "port": port or 3306,
        "user": unquote(parts.username) if parts.username else None,
        "database": unquote(parts.path.lstrip("/")) or None,
    }
    if secret is not None:
        params["password"] = secret
    ssl: dict[str, Any] = {}
    for key, value in parse_qsl(parts.query):
        if key not in _MYSQL_QUERY:
            raise _refuse(f"destination {name}: unsupported parameter {key!r} in {mask_url(url)!r}")
        if key == "unix_socket":
            params["unix_socket"] = value
        elif key in ("ssl_verify_cert", "ssl_verify_identity"):
            ssl[key.removeprefix("ssl_")] = value.lower() in ("1", "true", "yes")
        else:
            ssl[key.removeprefix("ssl_")] = value
    if ssl:
        params["ssl"] = ssl
    return SqlDestination(name, MySQLExecutor(params, location=mask_url(url), secrets=secrets))


def _vetted(url: str, kind: str, name: str, password: str | None, secrets: tuple[str, ...]) -> SqlDestination:
    from lakesync.sql.targets import mysql_target, postgres_target

    what = f"destination {name} url"
    target = (postgres_target if kind == "postgres" else mysql_target)(url, what=what)
    if password is not None:
        target = dataclasses.replace(target, password=password)
    executor: Any
    if kind == "postgres":
        from lakesync.sql.postgres import PostgresExecutor

        executor = PostgresExecutor(location=mask_url(url), secrets=secrets, target=target)
    else:
        from lakesync.sql.mysql import MySQLExecutor

        executor = MySQLExecutor({}, location=mask_url(url), secrets=secrets, target=target)
    return SqlDestination(name, executor)


def connect_params(
    params: Mapping[str, Any],
    *,
    name: str,
    type: str,
    url: str | None = None,
    bigquery_client_factory: Callable[[str], Any] | None = None,
    vet: bool = False,
) -> SqlDestination:
    """A destination from connection parameters, e.g. an RDS secret or ``{"url": ...}``.

    Args:
        params: ``{"url": ...}`` (plus an optional ``password``), or RDS-style ``engine``, ``host``, ``port``,
            ``username``, ``password``, ``dbname`` (``database`` also accepted); for ``bigquery`` the
            service-account JSON (``"type": "service_account"``), used as the client's credentials.
        name: The destination's name.
        type: ``postgres``, ``mysql``, ``sqlite`` or ``bigquery`` (a :class:`~lakesync.core.destinations.
            DestinationType` value); the secret's ``engine``, when given, must agree.
        url: A password-free locator that ``params`` complete (its host/database are defaults for the secret's).
        bigquery_client_factory: As in :func:`connect`.
        vet: As in :func:`connect` (the secret's host is checked and dialled by address too).

    Raises:
        DestinationError: not retryable, when the parameters are incomplete or contradict ``type``.
        ForbiddenTargetError: with ``vet``, a redirecting parameter or a refused host (400).
    """
    kind = _ENGINES.get(str(type).lower())
    if kind is None:
        raise _refuse(f"destination {name}: unsupported type {type!r}")
    engine = params.get("engine")
    if engine is not None and _ENGINES.get(str(engine).lower()) != kind:
        raise _refuse(f"destination {name}: the secret's engine {engine!r} does not match type {type!r}")
    if kind == "bigquery":
        if url is None and "url" not in params:
            raise _refuse(f"destination {name}: a bigquery destination needs url bigquery://project/dataset")
        credentials = dict(params) if params.get("type") == "service_account" else None
        return _bigquery(str(url or params["url"]), name, bigquery_client_factory, credentials)
    password = params.get("password")
    if password is not None and not isinstance(password, str):
        raise _refuse(f"destination {name}: password must be a string")
    if "url" in params:
        return connect(str(params["url"]), name=name, password=password, vet=vet)
    if kind == "sqlite":
        if url is None:
            raise _refuse(f"destination {name}: a sqlite destination needs url sqlite:///path")
        return connect(url, name=name)
    base = urlsplit(url) if url else None
    host = params.get("host") or (base.hostname if base else None)
    if not host:
        raise _refuse(f"destination {name}: connection parameters need a host")
    port = params.get("port") or (base.port if base else None)
    dbname = params.get("dbname") or params.get("database") or (unquote(base.path.lstrip("/")) if base else None)
    user = params.get("username") or params.get("user") or (unquote(base.username) if base and base.username else None)
    scheme = "postgresql" if kind == "postgres" else "mysql"
    netloc = (quote(str(user), safe="") + "@" if user else "") + str(host) + (f":{int(port)}" if port else "")
    query = base.query if base else ""
    locator = urlunsplit((scheme, netloc, "/" + quote(str(dbname or ""), safe=""), query, ""))
    return connect(locator, name=name, password=password, vet=vet)


def _sqlite(url: str, name: str) -> SqlDestination:
    from lakesync.sql.sqlite import SQLiteExecutor

    prefix = "sqlite:///"
    if not url.lower().startswith(prefix) or len(url) == len(prefix) or "?" in url:
        raise _refuse(f"destination {name}: sqlite URL must be sqlite:///path (got {mask_url(url)!r})")
    path = unquote(url[len(prefix) :])
    return SqlDestination(name, SQLiteExecutor(path))


def _bigquery(
    url: str,
    name: str,
    factory: Callable[[str], Any] | None,
    credentials: Mapping[str, Any] | None,
) -> SqlDestination:
    from lakesync.sql.bigquery import BigQueryExecutor, parse_bigquery_url

    try:
        project, dataset = parse_bigquery_url(url)
    except ValueError as exc:
        raise _refuse(f"destination {name}: {exc}") from None
    return SqlDestination(name, BigQueryExecutor(project, dataset, client_factory=factory, credentials=credentials))
