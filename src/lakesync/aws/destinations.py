"""The destinations a materialisation job goes to: configured per gateway, credentials from Secrets Manager.

:class:`ConfiguredDestinations` reads a gateway's destination configs from the config store (cached for
``config_ttl_s``, so an added or removed destination takes effect within that time), fetches each one's secret
(cached for ``secret_ttl_s``: a rotated password reaches warm functions) and keeps one open connection per
destination between invocations. A destination that fails is closed and forgotten, so the next job reconnects
(with a fresh secret). Connection details never reach logs or errors: failures name the destination only. A secret
outside the gateway's ``{secret_prefix}{gateway}/`` is never read.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lakesync.core.destinations import DestinationConfig, check_secret_scope
from lakesync.core.errors import DestinationError, LakeSyncError
from lakesync.ports import ConfigStore, Destination, ResolvedDestinations

if TYPE_CHECKING:
    from mypy_boto3_secretsmanager import SecretsManagerClient

Connector = Callable[[DestinationConfig, Mapping[str, Any] | None], Destination]
"""Opens a destination from its config and its secret's JSON (None without a secret)."""


def open_destination(config: DestinationConfig, secret: Mapping[str, Any] | None) -> Destination:
    """Open a destination with :mod:`lakesync.sql`: the secret's ``url``, its RDS-style fields, or the config's url,
    vetted (an admin configured it): no parameter that redirects the connection, and the host resolved, checked
    against the network policy and dialled by address (:mod:`lakesync.sql.targets`).

    Raises:
        DestinationError: nothing to connect with, or the connection failed.
        ForbiddenTargetError: a redirecting parameter or a refused host.
    """
    from lakesync import sql

    if secret is not None:
        return sql.connect_params(secret, name=config.name, type=config.type.value, url=config.url, vet=True)
    if config.url is None:
        raise DestinationError(f"Destination {config.name!r} has neither a secret nor a url", retryable=False)
    return sql.connect(config.url, name=config.name, vet=True)


class ConfiguredDestinations:
    """A :class:`~lakesync.ports.DestinationProvider` over the config store and Secrets Manager.

    Args:
        config: The config store listing each gateway's destinations.
        secrets: A Secrets Manager client factory (called on first use).
        connect: Opens one destination (default: :func:`open_destination`).
        extra: Destinations every gateway and table also get (the embedded default's local database).
        secret_prefix: The deployment's destination secret prefix: a destination's secret is read only when named
            under ``{secret_prefix}{gateway}/`` (checked before every read, whenever the config was stored);
            ``None``: not checked (a deployment that names no prefix).
        config_ttl_s: How long a gateway's destination list is reused.
        secret_ttl_s: How long a fetched secret is reused.
        clock: Monotonic seconds (tests).
    """

    def __init__(
        self,
        config: ConfigStore,
        secrets: Callable[[], SecretsManagerClient] | None = None,
        *,
        connect: Connector = open_destination,
        extra: Sequence[Destination] = (),
        secret_prefix: str | None = None,
        config_ttl_s: float = 60.0,
        secret_ttl_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._secrets_factory = secrets
        self._secrets_client: SecretsManagerClient | None = None
        self._connect = connect
        self._extra = tuple(extra)
        self._secret_prefix = secret_prefix
        self._config_ttl_s = config_ttl_s
        self._secret_ttl_s = secret_ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._configs: dict[str, tuple[float, list[DestinationConfig]]] = {}
        self._open: dict[tuple[str, DestinationConfig], Destination] = {}
        self._secret_cache: dict[str, tuple[float, Mapping[str, Any]]] = {}

    def destinations(self, gateway: str, table: str) -> ResolvedDestinations:
        """The extra destinations, then the gateway's configured ones that take ``table`` (opened on first use); a
        destination that cannot be opened is reported in ``failures`` so the others still get the job.

        Raises:
            DestinationError: the destination list cannot be read.
        """
        with self._lock:
            configs = [c for c in self._gateway_configs(gateway) if c.applies_to(table)]
            opened: list[Destination] = list(self._extra)
            failures: dict[str, LakeSyncError] = {}
            for cfg in configs:
                key = (gateway, cfg)
                if key not in self._open:
                    try:
                        self._open[key] = self._connect(cfg, self._secret(gateway, cfg))
                    except LakeSyncError as exc:
                        failures[cfg.name] = exc
                        continue
                    except Exception as exc:
                        failures[cfg.name] = DestinationError(
                            f"Destination {cfg.name!r} cannot be opened: {type(exc).__name__}"
                        )
                        continue
                opened.append(self._open[key])
            return ResolvedDestinations(tuple(opened), failures)

    def discard(self, destination: Destination) -> None:
        """Close and forget a failed destination (and its cached secret)."""
        with self._lock:
            for key, open_one in list(self._open.items()):
                if open_one is destination:
                    del self._open[key]
                    if key[1].secret_arn is not None:
                        self._secret_cache.pop(key[1].secret_arn, None)
            if destination in self._extra:
                return
        try:
            destination.close()
        except Exception:  # already broken; nothing more to release
            pass

    def close(self) -> None:
        """Close every open destination."""
        with self._lock:
            opened, self._open = list(self._open.values()), {}
        for destination in [*opened, *self._extra]:
            try:
                destination.close()
            except Exception:
                pass

    def _gateway_configs(self, gateway: str) -> list[DestinationConfig]:
        now = self._clock()
        cached = self._configs.get(gateway)
        if cached is not None and now - cached[0] < self._config_ttl_s:
            return cached[1]
        try:
            configs = self._config.list_destinations(gateway)
        except LakeSyncError as exc:
            raise DestinationError(f"The destinations of gateway {gateway!r} cannot be read: {exc.message}") from exc
        current = set(configs)
        for key in [k for k in self._open if k[0] == gateway and k[1] not in current]:
            self._open.pop(key).close()  # removed or changed: drop its connection
        self._configs[gateway] = (now, configs)
        return configs

    def _secret(self, gateway: str, cfg: DestinationConfig) -> Mapping[str, Any] | None:
        arn = cfg.secret_arn
        if arn is None:
            return None
        if self._secret_prefix is not None:
            check_secret_scope(cfg, prefix=self._secret_prefix, gateway=gateway)
        now = self._clock()
        cached = self._secret_cache.get(arn)
        if cached is not None and now - cached[0] < self._secret_ttl_s:
            return cached[1]
        if self._secrets_factory is None:
            raise DestinationError(f"Destination {cfg.name!r} needs a secret but no Secrets Manager is configured")
        if self._secrets_client is None:
            self._secrets_client = self._secrets_factory()
        try:
            raw = self._secrets_client.get_secret_value(SecretId=arn)["SecretString"]
            value = json.loads(raw)
        except Exception as exc:
            raise DestinationError(
                f"The secret of destination {cfg.name!r} cannot be read ({type(exc).__name__})"
            ) from None
        if not isinstance(value, dict):
            raise DestinationError(f"The secret of destination {cfg.name!r} is not a JSON object", retryable=False)
        self._secret_cache[arn] = (now, value)
        return value


__all__ = ["ConfiguredDestinations", "Connector", "open_destination"]
