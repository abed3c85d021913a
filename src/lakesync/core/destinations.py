"""Materialisation destinations: where a gateway's synced rows are written (pure; no I/O).

A destination document (the admin route's body, and what the config table stores)::

    {"name": "analytics", "type": "postgres",
     "secretArn": "arn:aws:secretsmanager:eu-west-1:123456789012:secret:lakesync/analytics-AbCdEf",
     "url": "postgresql://db.internal:5432/analytics", "tables": ["todos", "notes"]}

Invariants of a :class:`DestinationConfig` built by :func:`parse_destination`:

* No credential is ever part of it. Connection secrets live in Secrets Manager and the config holds only the secret's
  ARN (``secretArn``); a ``url`` is a password-free locator: a URL whose user-info carries a password (``user:pw@``),
  or whose query has a credential-like parameter (``password``, ``pwd``, ``secret``, ``token``, ...), is refused.
  Error messages never echo a ``url`` (it might hold the very secret being refused).
* A postgres/mysql ``url`` names *where* only: its query may carry only options that cannot redirect the connection
  (:data:`POSTGRES_OPTIONS`, :data:`MYSQL_OPTIONS`): never ``host``/``hostaddr``/``port``/``service`` (which would
  send the stored password elsewhere), files of the function (``passfile``, ``sslrootcert``, ``ssl_ca``...), a socket
  (``unix_socket``) or session ``options``; a literal host address is checked again against the network policy when
  the destination is dialled (:mod:`lakesync.sql.targets`).
* ``secretArn`` names a secret of the gateway (:func:`check_secret_scope`, where the deployment names its destination
  secret prefix): under ``{prefix}{gateway}/``, so one gateway's admin cannot have the materialiser read another
  gateway's credentials (nor the JWT signing key, nor any other secret the function may read).
* ``name`` matches ``[A-Za-z0-9][A-Za-z0-9_-]{0,63}`` (it is part of a storage key and of URLs).
* ``type`` decides what is required: ``postgres`` / ``mysql`` need ``secretArn`` or a ``url`` (a ``url`` alone suits
  IAM or trust authentication), ``sqlite`` needs ``url`` ``sqlite:///path`` and takes no ``secretArn``, ``bigquery``
  needs ``url`` ``bigquery://project/dataset`` (``secretArn``, the service-account JSON, is optional: without it
  the default credentials are used). The url's scheme must match the type.
* ``tables``, when given, is a non-empty list of distinct identifiers
  (:func:`lakesync.core.schema.is_valid_identifier`); absent (or ``null``) means every table that has a schema.
* Unknown fields are refused, strings and lists are bounded (:data:`MAX_URL_LENGTH`, :data:`MAX_SECRET_ARN_LENGTH`,
  :data:`MAX_TABLES`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from lakesync.core.errors import ValidationError
from lakesync.core.schema import IDENTIFIER_RULE, is_valid_identifier

__all__ = [
    "MAX_SECRET_ARN_LENGTH",
    "MAX_TABLES",
    "MAX_URL_LENGTH",
    "MYSQL_OPTIONS",
    "NAME_RE",
    "POSTGRES_OPTIONS",
    "DestinationConfig",
    "DestinationType",
    "check_secret_scope",
    "parse_destination",
]

MAX_URL_LENGTH: Final = 2048
MAX_SECRET_ARN_LENGTH: Final = 2048
MAX_TABLES: Final = 1000

NAME_RE: Final = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
"""A destination name; anchored with ``\\A``/``\\Z`` (no trailing newline)."""

SECRET_ARN_RE: Final = re.compile(
    r"\Aarn:aws[-a-z]*:secretsmanager:[a-z]{2}(?:-[a-z]+)+-[0-9]{1,2}:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]{1,512}\Z"
)
"""A Secrets Manager secret ARN (partition, region, 12-digit account, secret name with its optional suffix)."""

_BIGQUERY_PROJECT_RE: Final = re.compile(r"\A[a-z][a-z0-9-]{4,28}[a-z0-9]\Z")
_BIGQUERY_DATASET_RE: Final = re.compile(r"\A[A-Za-z0-9_]{1,1024}\Z")

_FIELDS: Final = ("name", "type", "secretArn", "url", "tables")

# Query parameters that would carry a credential, compared after lower-casing and dropping "_" and "-": names
# containing one of the words, or equal to one of the short names (``passfile`` or ``sslkey`` name files, not secrets).
_CREDENTIAL_WORDS: Final = ("password", "passwd", "secret", "token", "apikey", "accesskey", "credential", "privatekey")
_CREDENTIAL_NAMES: Final = frozenset({"pwd", "pass", "key", "auth", "sig", "signature"})

POSTGRES_OPTIONS: Final = frozenset(
    {
        "sslmode",
        "sslnegotiation",
        "sslcompression",
        "sslsni",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "channel_binding",
        "gssencmode",
        "require_auth",
        "connect_timeout",
        "application_name",
        "client_encoding",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "target_session_attrs",
    }
)
"""libpq parameters a PostgreSQL URL or connection string may carry besides its location: none changes where it
connects, reads a file of the function or sets session options."""

MYSQL_OPTIONS: Final = frozenset({"ssl_verify_cert", "ssl_verify_identity", "connect_timeout"})
"""Query parameters a ``mysql://`` URL may carry (``unix_socket`` and the ``ssl_ca``/``ssl_cert``/``ssl_key`` files
are refused)."""

_USE_SECRET_ARN: Final = (
    "put the connection (with its password) in a Secrets Manager secret and give its ARN as secretArn"
)


class DestinationType(enum.StrEnum):
    """The kind of query database a destination is."""

    POSTGRES = "postgres"
    MYSQL = "mysql"
    SQLITE = "sqlite"
    BIGQUERY = "bigquery"


_SCHEMES: Final[dict[DestinationType, tuple[str, ...]]] = {
    DestinationType.POSTGRES: ("postgresql", "postgres"),
    DestinationType.MYSQL: ("mysql", "mariadb"),
    DestinationType.SQLITE: ("sqlite",),
    DestinationType.BIGQUERY: ("bigquery",),
}


@dataclass(frozen=True, slots=True)
class DestinationConfig:
    """A validated materialisation destination of one gateway.

    Attributes:
        name: Unique per gateway; ``[A-Za-z0-9][A-Za-z0-9_-]{0,63}``.
        type: The kind of database.
        secret_arn: The Secrets Manager secret holding the connection: RDS-style JSON (``engine``, ``host``,
            ``port``, ``username``, ``password``, ``dbname``) or ``{"url": ...}`` for postgres/mysql; the
            service-account JSON for bigquery (optional there: default credentials).
        url: A password-free locator: ``sqlite:///path``, ``postgresql://host:port/db``, ``mysql://host/db``,
            ``bigquery://project/dataset``.
        tables: Materialise only these (delta) tables; ``None`` = every table with a schema.
    """

    name: str
    type: DestinationType
    secret_arn: str | None = None
    url: str | None = None
    tables: tuple[str, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        """The document form (camelCase; absent optional fields are left out): what is stored and returned."""
        doc: dict[str, Any] = {"name": self.name, "type": self.type.value}
        if self.secret_arn is not None:
            doc["secretArn"] = self.secret_arn
        if self.url is not None:
            doc["url"] = self.url
        if self.tables is not None:
            doc["tables"] = list(self.tables)
        return doc

    def applies_to(self, table: str) -> bool:
        """Whether deltas of ``table`` are materialised into this destination."""
        return self.tables is None or table in self.tables


def parse_destination(doc: object) -> DestinationConfig:
    """Validate a destination document (parsed JSON) and build the config.

    Checks, first failure wins: a JSON object; no unknown fields; ``name``; ``type``; ``secretArn``; ``url``
    (length, no password, scheme and shape for the type); what the type requires; ``tables``.

    Raises:
        ValidationError: 400 ``VALIDATION_ERROR``, the message naming the field.
    """
    if not isinstance(doc, Mapping):
        raise ValidationError(f"Destination must be a JSON object, not {_kind(doc)}")
    unknown = [key for key in doc if key not in _FIELDS]
    if unknown:
        shown = ", ".join(_quote(str(key)) for key in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        raise ValidationError(f"Unknown destination field(s): {shown}. Allowed: {', '.join(_FIELDS)}")

    name = doc.get("name")
    if name is None:
        raise ValidationError("Missing required field: name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValidationError(
            f"Invalid destination name{_shown(name)}: name must be 1 to 64 letters, digits, '_' or '-', "
            "starting with a letter or digit"
        )

    raw_type = doc.get("type")
    if raw_type is None:
        raise ValidationError("Missing required field: type")
    allowed = ", ".join(t.value for t in DestinationType)
    if not isinstance(raw_type, str) or raw_type not in _TYPES:
        raise ValidationError(f"Invalid destination type{_shown(raw_type)}: type must be one of: {allowed}")
    kind = DestinationType(raw_type)

    secret_arn = _secret_arn(doc.get("secretArn"), kind)
    url = _url(doc.get("url"), kind)
    if kind in (DestinationType.POSTGRES, DestinationType.MYSQL) and secret_arn is None and url is None:
        raise ValidationError(
            f"A {kind.value} destination needs secretArn (a Secrets Manager secret holding the connection) "
            "or a password-free url"
        )
    if kind is DestinationType.SQLITE and url is None:
        raise ValidationError("A sqlite destination needs url: sqlite:///path/to/file.db")
    if kind is DestinationType.BIGQUERY and url is None:
        raise ValidationError("A bigquery destination needs url: bigquery://project/dataset")

    return DestinationConfig(name, kind, secret_arn, url, _tables(doc.get("tables")))


_TYPES: Final = frozenset(t.value for t in DestinationType)


def check_secret_scope(config: DestinationConfig, *, prefix: str, gateway: str) -> None:
    """Raise unless the destination's secret (if any) is named under ``{prefix}{gateway}/``.

    Raises:
        ValidationError: 400, naming the rule (never the secret's content; the secret is not read).
    """
    if config.secret_arn is None:
        return
    root = prefix if prefix.endswith("/") else prefix + "/"
    root += f"{gateway}/"
    name = config.secret_arn.split(":secret:", 1)[-1]
    rest = name[len(root) :] if name.startswith(root) else ""
    if not rest or any(segment in ("", ".", "..") for segment in rest.split("/")):
        raise ValidationError(f"secretArn must name a secret of this gateway: its name must start with {root}")


def _secret_arn(value: object, kind: DestinationType) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"secretArn must be a string, not {_kind(value)}")
    if kind is DestinationType.SQLITE:
        raise ValidationError("secretArn does not apply to a sqlite destination")
    if len(value) > MAX_SECRET_ARN_LENGTH or not SECRET_ARN_RE.match(value):
        raise ValidationError(
            "secretArn must be a Secrets Manager secret ARN: "
            "arn:aws:secretsmanager:<region>:<12-digit account>:secret:<name>"
        )
    return value


def _url(value: object, kind: DestinationType) -> str | None:
    """The url, checked; messages never include it (it might carry the password being refused)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"url must be a string, not {_kind(value)}")
    if not value:
        raise ValidationError("url must not be empty")
    if len(value) > MAX_URL_LENGTH:
        raise ValidationError(f"url must be at most {MAX_URL_LENGTH} characters")
    if not value.isascii() or not value.isprintable() or " " in value:
        raise ValidationError("url must be printable ASCII without spaces (percent-encode other characters)")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError for a malformed or out-of-range port
    except ValueError:
        raise ValidationError("url is not a valid URL") from None
    _refuse_credentials(parts)
    schemes = _SCHEMES[kind]
    if parts.scheme.lower() not in schemes:
        expected = " or ".join(f"{s}://" for s in schemes)
        raise ValidationError(f"url scheme must match type {kind.value}: expected {expected}")
    if parts.fragment:
        raise ValidationError("url must not have a fragment")
    if kind is DestinationType.SQLITE:
        if not value.lower().startswith("sqlite:///") or len(value) == len("sqlite:///") or parts.query:
            raise ValidationError("url of a sqlite destination must be sqlite:///path/to/file.db")
    elif kind is DestinationType.BIGQUERY:
        dataset = parts.path[1:]
        # The whole netloc must be the project id: no user-info, no port.
        if parts.query or not _BIGQUERY_PROJECT_RE.match(parts.netloc) or not _BIGQUERY_DATASET_RE.match(dataset):
            raise ValidationError(
                "url of a bigquery destination must be bigquery://project/dataset "
                "(project id: 6-30 lower-case letters, digits or '-'; dataset: letters, digits or '_')"
            )
    elif not parts.hostname:
        raise ValidationError(f"url of a {kind.value} destination must name a host: {schemes[0]}://host:port/db")
    else:
        _refuse_redirects(parts, kind)
    return value


def _refuse_redirects(parts: SplitResult, kind: DestinationType) -> None:
    if "," in parts.netloc.rpartition("@")[2]:
        raise ValidationError(f"url of a {kind.value} destination must name one host (no host lists)")
    allowed = POSTGRES_OPTIONS if kind is DestinationType.POSTGRES else MYSQL_OPTIONS
    for key, _value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in allowed:
            raise ValidationError(
                f"url of a {kind.value} destination may not carry the parameter {_quote(key)}: only options that do "
                f"not redirect the connection are allowed ({', '.join(sorted(allowed))})"
            )


def _refuse_credentials(parts: SplitResult) -> None:
    userinfo, at, _host = parts.netloc.rpartition("@")
    if at and (":" in userinfo or ":" in unquote(userinfo)):
        raise ValidationError(f"url must not contain a password; {_USE_SECRET_ARN}")
    for key, _value in parse_qsl(parts.query, keep_blank_values=True):
        folded = key.lower().replace("_", "").replace("-", "")
        if folded in _CREDENTIAL_NAMES or any(word in folded for word in _CREDENTIAL_WORDS):
            raise ValidationError(f"url must not carry credentials in its query; {_USE_SECRET_ARN}")


def _tables(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise ValidationError("tables must be a non-empty array of table names (leave it out for every table)")
    if len(value) > MAX_TABLES:
        raise ValidationError(f"tables must list at most {MAX_TABLES} tables")
    seen: set[str] = set()
    for index, table in enumerate(value):
        if not is_valid_identifier(table):
            raise ValidationError(f"tables[{index}]{_shown(table)} is not a valid table name. {IDENTIFIER_RULE}")
        if table in seen:
            raise ValidationError(f'Duplicate table in tables: "{table}"')
        seen.add(table)
    return tuple(value)


def _kind(value: object) -> str:
    """The JSON type name of a parsed JSON value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _quote(text: str, limit: int = 64) -> str:
    """``text`` JSON-ish quoted, cut to ``limit`` characters, control characters escaped."""
    cut = text[:limit]
    escaped = cut.encode("unicode_escape").decode("ascii").replace('"', '\\"')
    return f'"{escaped}{"..." if len(text) > limit else ""}"'


def _shown(value: object) -> str:
    """`` "value"`` for a string (quoted, cut), else `` (a number)`` etc."""
    return f" {_quote(value)}" if isinstance(value, str) else f" ({_kind(value)})"
