"""Connector credentials: kept in a secret store, referenced from the config as ``secret://...``.

A connector type names its credential fields (:attr:`~lakesync.connectors.base.ConnectorTypeDescriptor.
secret_fields`: ``connectionString`` for ``postgres``/``mysql``, ``apiToken`` for ``jira``, ...). In the stored config
each of them is a **reference**, a string::

    secret://<secret id>            the secret's whole SecretString
    secret://<secret id>#<key>      one key of a JSON SecretString (e.g. an RDS-managed secret's "password")

where the secret id is a Secrets Manager ARN or name (locally, the embedded default's secret-file name).

**A reference stays inside its gateway** (:class:`SecretScope`): its secret's name must lie under
``{prefix}/{gateway}/`` -- the prefix registration stores plaintext credentials under -- and an ARN must be of the
function's own region and account (where the store knows them). Anything else (another gateway's secret, the JWT
signing key, any other secret the function's role could read) is refused with a 400 that names neither the secret's
value nor its content, and is never read: at registration (:func:`externalise`) and again at every resolution
(:func:`resolve`), so a config stored before this rule cannot resolve a foreign secret either.

At registration (:func:`externalise`) a credential field may be given either way:

* as a reference: kept as it is (the secret must exist and be readable: registration resolves it before storing);
* in plain text (what the original's clients send): stored into the secret store under
  ``{prefix}/{gateway}/{connector}/{field}`` and replaced by its reference, so the config table, the listing, the
  logs and every response only ever hold the reference.

Resolution (:func:`resolve`) happens only where a connector is opened (poller, ``source=`` pull, action), and the
resolved values never leave the :class:`~lakesync.connectors.base.Connector` built from them.
"""

from __future__ import annotations

import copy
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from lakesync.core.connectors import ConnectorConfig
from lakesync.core.errors import AdapterError, ValidationError

__all__ = [
    "REFERENCE_PREFIX",
    "FileSecretStore",
    "InMemorySecretStore",
    "SecretRef",
    "SecretScope",
    "SecretScopeError",
    "SecretStore",
    "externalise",
    "is_reference",
    "parse_reference",
    "resolve",
    "secret_name",
    "stored_secret_ids",
]

REFERENCE_PREFIX: Final = "secret://"
_SECRET_ID_RE: Final = re.compile(r"\A[A-Za-z0-9/_+=.@:-]{1,2048}\Z")
_KEY_RE: Final = re.compile(r"\A[A-Za-z0-9_.-]{1,128}\Z")


class SecretNotFoundError(AdapterError):
    """A secret store has no secret by that id (a reference to a secret that does not exist, or no longer does)."""


class SecretStore(Protocol):
    """Where connector credentials live (Secrets Manager on AWS, a 0600 file per secret in the embedded default)."""

    def put_secret(self, name: str, value: str) -> str:
        """Create or overwrite the secret ``name``; returns its id (the ARN on AWS) for references."""
        ...

    def get_secret(self, secret_id: str) -> str:
        """The secret's current string value.

        Raises:
            AdapterError: it does not exist or cannot be read.
        """
        ...

    def delete_secret(self, secret_id: str) -> None:
        """Delete the secret (a missing one is not an error)."""
        ...


@dataclass(frozen=True, slots=True)
class SecretRef:
    """A parsed ``secret://id#key`` reference."""

    secret_id: str
    key: str | None = None

    def __str__(self) -> str:
        return REFERENCE_PREFIX + self.secret_id + (f"#{self.key}" if self.key else "")


def is_reference(value: object) -> bool:
    """Whether ``value`` is a ``secret://`` reference string."""
    return isinstance(value, str) and value.startswith(REFERENCE_PREFIX)


def parse_reference(value: str, *, where: str = "secret") -> SecretRef:
    """Parse ``secret://id`` or ``secret://id#key``.

    Raises:
        ValidationError: a malformed reference (400).
    """
    body = value[len(REFERENCE_PREFIX) :]
    secret_id, _, key = body.partition("#")
    if not _SECRET_ID_RE.match(secret_id) or (key and not _KEY_RE.match(key)):
        raise ValidationError(f"{where} is not a valid secret reference (secret://<secret id or ARN>[#<json key>])")
    return SecretRef(secret_id, key or None)


class SecretScopeError(ValidationError):
    """A ``secret://`` reference names a secret outside its gateway's prefix (400; the secret is never read)."""

    code = "SECRET_OUT_OF_SCOPE"


_ARN_RE: Final = re.compile(
    r"\Aarn:(?P<partition>aws[a-z-]*):secretsmanager:(?P<region>[a-z0-9-]+):(?P<account>[0-9]{12}):secret:(?P<name>.+)\Z"
)


@dataclass(frozen=True, slots=True)
class SecretScope:
    """Which secrets a gateway's configs may reference: names under ``{prefix}/{gateway}/``, ARNs of the function's
    own ``region`` and ``account`` (each checked when known).

    Attributes:
        prefix: The deployment's connector secret prefix (no trailing ``/``).
        gateway: The gateway whose configs these are.
        region: The function's region, when known.
        account: The function's account, when known.
    """

    prefix: str
    gateway: str
    region: str | None = None
    account: str | None = None

    @property
    def root(self) -> str:
        """``{prefix}/{gateway}/``: every secret of the gateway is named under it."""
        return f"{self.prefix.rstrip('/')}/{self.gateway}/"

    def check(self, ref: SecretRef, *, where: str) -> None:
        """Raise unless ``ref`` names a secret of this gateway.

        Raises:
            SecretScopeError: another prefix, another gateway, a foreign region or account, or a name with ``..``.
        """
        secret_id = ref.secret_id
        name = secret_id
        if secret_id.startswith("arn:"):
            match = _ARN_RE.match(secret_id)
            if match is None:
                raise SecretScopeError(f"{where} is not a Secrets Manager secret ARN")
            name = match["name"]
            for part, own in (("region", self.region), ("account", self.account)):
                if own is not None and match[part] != own:
                    raise SecretScopeError(f"{where} references a secret of another {part}")
        rest = name[len(self.root) :] if name.startswith(self.root) else ""
        if not rest or any(segment in ("", ".", "..") for segment in rest.split("/")):
            raise SecretScopeError(
                f"{where} must reference a secret of this gateway: its name must start with {self.root}"
            )


def secret_name(prefix: str, gateway: str, connector: str, field: str) -> str:
    """The name a plaintext credential is stored under: ``{prefix}/{gateway}/{connector}/{field}``."""
    return f"{prefix}/{gateway}/{connector}/{field}"


def _settings(document: Mapping[str, Any], connector_type: str) -> dict[str, Any] | None:
    value = document.get(connector_type)
    return value if isinstance(value, dict) else None


def externalise(
    config: ConnectorConfig,
    secret_fields: Sequence[str],
    store: SecretStore,
    *,
    gateway: str,
    prefix: str,
) -> tuple[ConnectorConfig, list[str]]:
    """The config with every credential field a ``secret://`` reference, and the ids of the secrets it created.

    Plaintext values are stored (``secret_name``); references are checked for scope (:class:`SecretScope`: nothing
    outside the gateway's prefix is ever read), form and readability. On failure the secrets created so far are
    deleted again.

    Raises:
        SecretScopeError: a reference outside ``{prefix}/{gateway}/`` (400; the secret is not read).
        ValidationError: a credential field is neither a string nor a well-formed reference, or references a secret
            that does not exist (400).
        AdapterError: the secret store refused, or a referenced secret cannot be read (502).
    """
    document = copy.deepcopy(dict(config.document))
    settings = _settings(document, config.type)
    created: list[str] = []
    if settings is None:
        return config, created
    scope = store_scope(store, prefix=prefix, gateway=gateway)
    try:
        for field in secret_fields:
            if field not in settings or settings[field] is None:
                continue
            value = settings[field]
            where = f"{config.type}.{field}"
            if not isinstance(value, str):
                raise ValidationError(f"{where} must be a string")
            if is_reference(value):
                ref = parse_reference(value, where=where)
                scope.check(ref, where=where)
                try:
                    _read(store, ref, where)
                except SecretNotFoundError:
                    # The client named a secret that does not exist: its mistake, not the store's.
                    raise ValidationError(f"{where} references a secret that does not exist") from None
                continue
            secret_id = store.put_secret(secret_name(prefix, gateway, config.name, field), value)
            created.append(secret_id)
            settings[field] = str(SecretRef(secret_id))
    except Exception:
        for secret_id in created:
            store.delete_secret(secret_id)
        raise
    return ConnectorConfig(config.name, config.type, document), created


def stored_secret_ids(config: ConnectorConfig, secret_fields: Iterable[str], *, gateway: str, prefix: str) -> list[str]:
    """The ids of the secrets registration created for ``config`` (those named under ``prefix``), to delete with it."""
    settings = _settings(dict(config.document), config.type) or {}
    owned = secret_name(prefix, gateway, config.name, "")
    ids = []
    for field in secret_fields:
        value = settings.get(field)
        if isinstance(value, str) and is_reference(value):
            ref = parse_reference(value)
            # An ARN ends with the name plus a 6-character suffix; a local id is the name itself.
            name = ref.secret_id.split(":secret:", 1)[-1]
            if name.startswith(owned):
                ids.append(ref.secret_id)
    return ids


def _read(store: SecretStore, ref: SecretRef, where: str) -> str:
    raw = store.get_secret(ref.secret_id)
    if ref.key is None:
        return raw
    try:
        value = json.loads(raw)[ref.key]
    except (ValueError, KeyError, TypeError):
        raise AdapterError(f"{where}: the referenced secret has no JSON key {ref.key!r}") from None
    if not isinstance(value, str | int):
        raise AdapterError(f"{where}: the referenced secret's key {ref.key!r} is not a string")
    return str(value)


def store_scope(store: SecretStore, *, prefix: str, gateway: str) -> SecretScope:
    """The :class:`SecretScope` of ``gateway``, with the store's region and account when it knows them
    (``store.home``: ``(region, account)``)."""
    home = getattr(store, "home", None)
    region, account = home() if callable(home) else (None, None)
    return SecretScope(prefix, gateway, region, account)


def resolve(
    config: ConnectorConfig, secret_fields: Sequence[str], store: SecretStore, scope: SecretScope
) -> tuple[ConnectorConfig, dict[str, str]]:
    """The config with its references replaced by the secret values, and those values by field.

    Every reference is checked against ``scope`` before its secret is read, whenever the config was stored. A
    plaintext credential (a config stored before externalisation, or a test's) is passed through.

    Raises:
        SecretScopeError: a reference outside the gateway's prefix (400; nothing is read).
        AdapterError: a referenced secret cannot be read (502).
    """
    document = copy.deepcopy(dict(config.document))
    settings = _settings(document, config.type)
    resolved: dict[str, str] = {}
    if settings is None:
        return config, resolved
    for field in secret_fields:
        value = settings.get(field)
        if not isinstance(value, str):
            continue
        if is_reference(value):
            where = f"{config.type}.{field}"
            ref = parse_reference(value, where=where)
            scope.check(ref, where=where)
            value = _read(store, ref, where)
            settings[field] = value
        resolved[field] = value
    return ConnectorConfig(config.name, config.type, document), resolved


class InMemorySecretStore:
    """Secrets in a dict (tests); ids are the names."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.secrets: dict[str, str] = {}

    def put_secret(self, name: str, value: str) -> str:
        with self._lock:
            self.secrets[name] = value
        return name

    def get_secret(self, secret_id: str) -> str:
        with self._lock:
            try:
                return self.secrets[secret_id]
            except KeyError:
                raise SecretNotFoundError(f"Secret {secret_id!r} not found") from None

    def delete_secret(self, secret_id: str) -> None:
        with self._lock:
            self.secrets.pop(secret_id, None)


class FileSecretStore:
    """Secrets as files in a 0700 directory, one 0600 file each (the embedded default: they survive restarts as the
    journaled tables do). Ids are the names; the file name is the name with ``/`` replaced by ``__``."""

    def __init__(self, directory: Path) -> None:
        self._dir = directory

    def _path(self, secret_id: str) -> Path:
        if not _SECRET_ID_RE.match(secret_id) or ".." in secret_id:
            raise AdapterError("Invalid local secret id")
        return self._dir / secret_id.replace("/", "__").replace(":", "_")

    def put_secret(self, name: str, value: str) -> str:
        self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self._path(name)
        tmp = path.with_name(path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(value)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return name

    def get_secret(self, secret_id: str) -> str:
        try:
            return self._path(secret_id).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise SecretNotFoundError(f"Secret {secret_id!r} not found") from None

    def delete_secret(self, secret_id: str) -> None:
        self._path(secret_id).unlink(missing_ok=True)
