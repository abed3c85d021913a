"""The connectors' settings (:class:`ConnectorSettings`), read by every function that opens connectors."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakesync.aws.settings.env import Env
from lakesync.aws.settings.validators import destination_secret_prefix, network_policy
from lakesync.aws.settings.variables import (
    CONNECTOR_POLL_FUNCTION_ARN,
    CONNECTOR_SCHEDULE_GROUP,
    CONNECTOR_SCHEDULER,
    CONNECTOR_SCHEDULER_ROLE_ARN,
    CONNECTOR_SECRET_PREFIX,
    CONNECTOR_SECRETS_DIR,
    NETWORK_ENV_VARS,
)

if TYPE_CHECKING:
    from lakesync.core.network import NetworkPolicy

_SECRET_PREFIX = re.compile(r"[A-Za-z0-9/_+=.@-]{1,256}")


@dataclass(frozen=True, slots=True)
class ConnectorSettings:
    """Where connectors keep their secrets and how their pollers are scheduled (all optional variables).

    * ``LAKESYNC_CONNECTOR_SCHEDULER`` -- ``eventbridge`` (needs ``LAKESYNC_CONNECTOR_SCHEDULE_GROUP``,
      ``LAKESYNC_CONNECTOR_POLL_FUNCTION_ARN`` and ``LAKESYNC_CONNECTOR_SCHEDULER_ROLE_ARN``; the default when those
      are set), ``local`` (the embedded default's poll loop finds connectors in the config table), or unset: no
      scheduler, so registering a connector with ``ingest`` fails.
    * ``LAKESYNC_CONNECTOR_SECRETS_DIR`` -- keep connector secrets as 0600 files there (the embedded default);
      unset: AWS Secrets Manager.
    * ``LAKESYNC_CONNECTOR_SECRET_PREFIX`` -- name prefix of the secrets registration creates (``lakesync/connectors``).
    * ``LAKESYNC_ALLOWED_NETWORKS`` / ``LAKESYNC_ALLOW_PLAIN_HTTP`` -- where connectors may connect
      (:func:`~lakesync.aws.settings.validators.network_policy`).
    * ``LAKESYNC_DESTINATION_SECRET_PREFIX`` -- the destinations' secret prefix, checked at their registration.
    """

    scheduler: str | None = None
    schedule_group: str | None = None
    poll_function_arn: str | None = None
    scheduler_role_arn: str | None = None
    secrets_dir: str | None = None
    secret_prefix: str = "lakesync/connectors"
    network: NetworkPolicy = field(default_factory=lambda: network_policy({}))
    destination_secret_prefix: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ConnectorSettings:
        """Read and validate the variables.

        Raises:
            SettingsError: an unknown scheduler, or ``eventbridge`` without its three variables.
        """
        env = Env(environ, prefix="LAKESYNC_CONNECTOR")
        targets = (CONNECTOR_SCHEDULE_GROUP, CONNECTOR_POLL_FUNCTION_ARN, CONNECTOR_SCHEDULER_ROLE_ARN)
        scheduler = env.optional(CONNECTOR_SCHEDULER) or ("eventbridge" if any(t in env for t in targets) else None)
        if scheduler not in (None, "eventbridge", "local"):
            env.problem(f"{CONNECTOR_SCHEDULER} must be eventbridge or local")
        if scheduler == "eventbridge":
            for target in targets:
                env.required(target)
        prefix = env.text(CONNECTOR_SECRET_PREFIX, "lakesync/connectors")
        if not _SECRET_PREFIX.fullmatch(prefix):
            env.problem(f"{CONNECTOR_SECRET_PREFIX} is not a valid secret name prefix")
        # unlike the other readers, an empty network variable is read as set (empty)
        network = network_policy({k: v.strip() for k, v in environ.items() if k in NETWORK_ENV_VARS}, env.errors)
        destinations = destination_secret_prefix(environ, env.errors)
        env.check()
        return cls(
            scheduler=scheduler,
            schedule_group=env.optional(CONNECTOR_SCHEDULE_GROUP),
            poll_function_arn=env.optional(CONNECTOR_POLL_FUNCTION_ARN),
            scheduler_role_arn=env.optional(CONNECTOR_SCHEDULER_ROLE_ARN),
            secrets_dir=env.optional(CONNECTOR_SECRETS_DIR),
            secret_prefix=prefix.rstrip("/"),
            network=network,
            destination_secret_prefix=destinations,
        )
