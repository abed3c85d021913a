"""The settings of the API connectors (Jira, Salesforce): one reader of a config's settings object, shared.

A :class:`SettingsReader` reads typed values by key with a default, refuses a value of the wrong type or out of its
range with a :class:`~lakesync.core.errors.ValidationError` that names the vendor and the key
(``Jira connector pageSize must be an integer between 1 and 100``), reads credentials from the resolved secrets and
checks a base URL against the deployment's network policy. :func:`client_options` are the HTTP client's keyword
arguments every API connector takes, and :data:`API_INGEST_SCHEMA` the ``ingest`` section they all accept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from lakesync import egress
from lakesync.connectors.http_api import RetryPolicy, Transport, UrllibTransport
from lakesync.core.canonical import JsonValue
from lakesync.core.connectors import ConnectorConfig
from lakesync.core.errors import ValidationError

__all__ = ["API_INGEST_SCHEMA", "SettingsReader", "client_options"]

API_INGEST_SCHEMA: Final[dict[str, JsonValue]] = {
    "type": "object",
    "properties": {"intervalMs": {"type": "number", "minimum": 1, "default": 10000}},
}
"""The ``ingest`` section of an API connector: only its polling interval."""


@dataclass(frozen=True, slots=True)
class SettingsReader:
    """Typed reads of one connector's settings object (``config.settings``) and its resolved secrets.

    Attributes:
        vendor: The vendor's name as messages say it (``Jira``, ``Salesforce``).
        settings: The settings object.
        secrets: The resolved credentials by field name.
    """

    vendor: str
    settings: Mapping[str, Any]
    secrets: Mapping[str, str]

    @classmethod
    def of(cls, vendor: str, config: ConnectorConfig, secrets: Mapping[str, str]) -> SettingsReader:
        """The reader of ``config``'s settings (none: an empty object)."""
        return cls(vendor, config.settings or {}, secrets)

    def _invalid(self, key: str, expected: str) -> ValidationError:
        return ValidationError(f"{self.vendor} connector {key} must be {expected}")

    def text(self, key: str, *, required: bool = False) -> str:
        """A string setting; ``""`` when absent and not required.

        Raises:
            ValidationError: not a string, or required and absent or empty.
        """
        value = self.settings.get(key)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value):
            raise self._invalid(key, f"a {'non-empty ' if required else ''}string")
        return value

    def flag(self, key: str, default: bool) -> bool:
        """A boolean setting.

        Raises:
            ValidationError: present and not a boolean.
        """
        value = self.settings.get(key, default)
        if not isinstance(value, bool):
            raise self._invalid(key, "a boolean")
        return value

    def integer(self, key: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
        """An integer setting within ``[minimum, maximum]`` (no upper bound when ``maximum`` is ``None``).

        Raises:
            ValidationError: present and not an integer (booleans are not), or out of range.
        """
        value = self.settings.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum or (maximum and value > maximum):
            bound = f" between {minimum} and {maximum}" if maximum else f" >= {minimum}"
            raise self._invalid(key, f"an integer{bound}")
        return value

    def secret(self, key: str) -> str | None:
        """A credential: its resolved value, else a plain value in the settings; ``None`` when absent, empty or an
        unresolved ``secret://`` reference."""
        value = self.secrets.get(key) or self.settings.get(key)
        if not isinstance(value, str) or not value or value.startswith("secret://"):
            return None
        return value

    def required_secret(self, key: str) -> str:
        """A credential the connector cannot work without.

        Raises:
            ValidationError: the credential is absent or was not resolved.
        """
        value = self.secret(key)
        if value is None:
            raise ValidationError(f"{self.vendor} connector requires a resolved {key} secret")
        return value

    def checked_url(self, url: str, *, what: str) -> str:
        """``url`` without a trailing ``/``, once it is an https URL of a host the network policy allows.

        Raises:
            ForbiddenTargetError: the URL or its host is refused (400).
        """
        url = url.rstrip("/")
        egress.check_url(url, what=f"{self.vendor} {what}", resolve_host=True)
        return url


def client_options(
    *,
    transport: Transport | None,
    retry: RetryPolicy | None,
    sleep: Callable[[float], None] | None,
    timeout: float,
) -> dict[str, Any]:
    """The keyword arguments of :class:`~lakesync.connectors.http_api.HttpApiClient` an API connector passes on:
    its transport and retry policy (urllib and the default policy unless given), timeout, and sleep when given."""
    options: dict[str, Any] = {
        "transport": transport or UrllibTransport(),
        "retry": retry or RetryPolicy(),
        "timeout": timeout,
    }
    if sleep is not None:
        options["sleep"] = sleep
    return options
