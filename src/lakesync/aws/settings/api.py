"""The API functions' settings (:class:`Settings`): ``push``, ``pull``, ``actions``, ``admin``, ``checkpoint``, the
authorizer, ``connector_poll`` and the WebSocket functions that serve frames (see
:data:`~lakesync.aws.settings.variables.FUNCTION_ENV_VARS`).

* ``LAKESYNC_GATEWAY_IDS`` -- comma-separated gateway ids served (default ``default``).
* ``LAKESYNC_TABLE_DELTAS`` / ``_ROWS`` / ``_HEADS`` / ``_DEDUP`` / ``_CONFIG`` / ``_ACTIONS`` -- DynamoDB table
  names (CDK generates them), *or* ``LAKESYNC_TABLE_PREFIX`` alone (``{prefix}-deltas`` ..., the local shortcut).
* ``LAKESYNC_JWT_SECRET`` (+ optional ``LAKESYNC_JWT_SECRET_PREVIOUS`` during a rotation) *or*
  ``LAKESYNC_JWT_SECRET_ARN`` (Secrets Manager; the ``AWSCURRENT`` and ``AWSPREVIOUS`` versions are both accepted).
  Every key is at least :data:`~lakesync.auth.MIN_KEY_BYTES` (32) bytes.
* ``LAKESYNC_MAX_TOKEN_LIFETIME_S`` -- the longest lifetime a token may claim (default 86,400: 24 hours; 60 to
  2,592,000): longer tokens are refused with 401 (:func:`lakesync.auth.verify_token`).
* ``LAKESYNC_FLUSH_THRESHOLD_BYTES``, ``LAKESYNC_BACKPRESSURE_BYTES`` -- buffer limits per shard.
* ``LAKESYNC_RATE_LIMITS`` -- per-caller rate limits over the defaults (:mod:`lakesync.gateway.limits`):
  ``family=requests/seconds`` entries, comma-separated (families ``push``, ``pull``, ``checkpoint``, ``actions``,
  ``socket``), ``family=off`` to lift one, ``off`` to lift all.
* ``LAKESYNC_SUB_SHARDS`` -- JSON object ``{"table": n}`` of hash sub-shards for hot tables.
* ``LAKESYNC_MAX_BODY_BYTES`` -- largest request body (default 1 MiB, at most
  :data:`~lakesync.aws.settings.variables.MAX_BODY_BYTES_LIMIT`: a protobuf body arrives base64-encoded inside the
  API Gateway event, which must fit Lambda's invocation payload).
* ``LAKESYNC_PULL_BASIS_TTL_MS`` -- how long a process serves cursor pulls from its last read of the sync rules and
  the shard registry (default 1,000, at most 60,000; 0 reads them for every pull): :mod:`lakesync.gateway.basis_cache`.
* ``LAKESYNC_CHECKPOINT_BUCKET`` -- the S3 bucket holding checkpoints (only the ``checkpoint`` function uses it;
  unset: no checkpoints, the route answers 404).

The connectors' variables, which every API function reads as well, are
:class:`~lakesync.aws.settings.connectors.ConnectorSettings`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from lakesync.auth import DEFAULT_MAX_LIFETIME_S, check_signing_key
from lakesync.aws.settings.env import Env
from lakesync.aws.settings.validators import gateway_ids, sub_shards, table_names
from lakesync.aws.settings.variables import (
    BACKPRESSURE_BYTES,
    CHECKPOINT_BUCKET,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_PULL_BASIS_TTL_MS,
    FLUSH_THRESHOLD_BYTES,
    JWT_SECRET,
    JWT_SECRET_ARN,
    JWT_SECRET_PREVIOUS,
    MAX_BODY_BYTES,
    MAX_BODY_BYTES_LIMIT,
    MAX_PULL_BASIS_TTL_MS,
    MAX_TOKEN_LIFETIME_LIMIT_S,
    MAX_TOKEN_LIFETIME_S,
    MIN_TOKEN_LIFETIME_LIMIT_S,
    PULL_BASIS_TTL_MS,
    RATE_LIMITS,
)
from lakesync.aws.tables import TableNames
from lakesync.gateway.deps import GatewaySettings
from lakesync.gateway.limits import DEFAULT_LIMITS, RateLimit, parse_limits

_DEFAULTS: Final = GatewaySettings()


@dataclass(frozen=True, slots=True)
class Settings:
    """Validated configuration of the API functions.

    Attributes:
        gateway_ids: Gateways served; any other gets 404.
        tables: Physical DynamoDB table names.
        jwt_secrets: ``(primary, previous?)`` from the environment; empty when ``jwt_secret_arn`` is set.
        jwt_secret_arn: Secrets Manager id of the JWT secret, fetched on first use.
        max_token_lifetime_s: The longest lifetime a token may claim (``LAKESYNC_MAX_TOKEN_LIFETIME_S``).
        flush_threshold_bytes: Unflushed bytes per shard that request a flush.
        backpressure_bytes: Unflushed bytes per shard that make pushes 503 (``None``: twice the threshold).
        sub_shards: Hash sub-shards per hot table.
        max_body_bytes: Largest request body accepted.
        checkpoint_bucket: S3 bucket of the checkpoints, or ``None`` when checkpoints are not served.
        pull_basis_ttl_ms: How long a process serves cursor pulls from its last read of the sync rules and the shard
            registry (``LAKESYNC_PULL_BASIS_TTL_MS``; 0 reads them for every pull).
        rate_limits: Per-caller rate limits by route family (``LAKESYNC_RATE_LIMITS``; empty: none).
    """

    gateway_ids: frozenset[str]
    tables: TableNames
    jwt_secrets: tuple[str, ...] = ()
    jwt_secret_arn: str | None = None
    max_token_lifetime_s: int = DEFAULT_MAX_LIFETIME_S
    flush_threshold_bytes: int = _DEFAULTS.flush_threshold_bytes
    backpressure_bytes: int | None = None
    sub_shards: Mapping[str, int] = field(default_factory=dict, hash=False)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    checkpoint_bucket: str | None = None
    pull_basis_ttl_ms: int = DEFAULT_PULL_BASIS_TTL_MS
    rate_limits: Mapping[str, RateLimit] = field(default_factory=lambda: dict(DEFAULT_LIMITS), hash=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Read and validate the variables.

        Raises:
            SettingsError: listing every missing or invalid variable.
        """
        env = Env(environ)
        lifetime = (DEFAULT_MAX_LIFETIME_S, MIN_TOKEN_LIFETIME_LIMIT_S, MAX_TOKEN_LIFETIME_LIMIT_S)
        settings = cls(
            gateway_ids=gateway_ids(env),
            tables=table_names(env),
            jwt_secrets=_secrets(env),
            jwt_secret_arn=env.raw(JWT_SECRET_ARN),
            max_token_lifetime_s=env.integer(MAX_TOKEN_LIFETIME_S, *lifetime, unit="s"),
            flush_threshold_bytes=env.integer(FLUSH_THRESHOLD_BYTES, _DEFAULTS.flush_threshold_bytes, 1),
            backpressure_bytes=env.optional_integer(BACKPRESSURE_BYTES, 0),
            sub_shards=sub_shards(env),
            max_body_bytes=env.integer(MAX_BODY_BYTES, DEFAULT_MAX_BODY_BYTES, 1, MAX_BODY_BYTES_LIMIT),
            checkpoint_bucket=env.bucket(CHECKPOINT_BUCKET),
            pull_basis_ttl_ms=env.integer(
                PULL_BASIS_TTL_MS, DEFAULT_PULL_BASIS_TTL_MS, 0, MAX_PULL_BASIS_TTL_MS, unit="ms"
            ),
            rate_limits=_rate_limits(env),
        )
        env.check()
        return settings

    def gateway_settings(self) -> GatewaySettings:
        """The services' settings."""
        return GatewaySettings(
            gateway_ids=self.gateway_ids,
            flush_threshold_bytes=self.flush_threshold_bytes,
            backpressure_bytes=self.backpressure_bytes,
            sub_shards=dict(self.sub_shards),
        )


def _rate_limits(env: Env) -> dict[str, RateLimit]:
    raw = env.raw(RATE_LIMITS)
    if raw is None:
        return dict(DEFAULT_LIMITS)
    try:
        return parse_limits(raw)
    except ValueError as exc:
        env.problem(f"{RATE_LIMITS}: {exc}")
        return dict(DEFAULT_LIMITS)


def _secrets(env: Env) -> tuple[str, ...]:
    if JWT_SECRET_ARN in env:
        if JWT_SECRET in env or JWT_SECRET_PREVIOUS in env:
            env.problem(f"set either {JWT_SECRET_ARN} or {JWT_SECRET} (+ {JWT_SECRET_PREVIOUS}), not both")
        return ()
    if JWT_SECRET not in env:
        env.problem(f"missing {JWT_SECRET} (or {JWT_SECRET_ARN})")
        return ()
    secrets = tuple(env.values[var] for var in (JWT_SECRET, JWT_SECRET_PREVIOUS) if var in env)
    for var, secret in zip((JWT_SECRET, JWT_SECRET_PREVIOUS), secrets, strict=False):
        try:
            check_signing_key(secret, var)
        except ValueError as exc:
            env.problem(str(exc))
    return secrets
