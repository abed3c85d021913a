"""The ``materialise`` function's settings (:class:`MaterialiseSettings`).

* The table names, as the API functions read them (the config table holds destinations and schemas).
* ``LAKESYNC_CLAIM_CHECK_BUCKET`` -- the bucket of the materialisation payloads (read by ``materialise`` alone).
* ``LAKESYNC_ALLOWED_NETWORKS`` / ``LAKESYNC_ALLOW_PLAIN_HTTP`` -- where destinations may connect
  (:func:`~lakesync.aws.settings.validators.network_policy`).
* ``LAKESYNC_DESTINATION_SECRET_PREFIX`` -- the prefix a destination's secret must lie under.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakesync.aws.settings.env import Env
from lakesync.aws.settings.validators import destination_secret_prefix, network_policy, table_names
from lakesync.aws.settings.variables import CLAIM_CHECK_BUCKET
from lakesync.aws.tables import TableNames

if TYPE_CHECKING:
    from lakesync.core.network import NetworkPolicy


@dataclass(frozen=True, slots=True)
class MaterialiseSettings:
    """Validated configuration of the ``materialise`` function.

    Attributes:
        tables: Physical DynamoDB table names (the config table holds destinations and schemas).
        claim_check_bucket: The bucket of the payloads.
    """

    tables: TableNames
    claim_check_bucket: str
    network: NetworkPolicy = field(default_factory=lambda: network_policy({}))
    destination_secret_prefix: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> MaterialiseSettings:
        """Read and validate the variables.

        Raises:
            SettingsError: listing every missing or invalid variable.
        """
        env = Env(environ)
        tables = table_names(env)
        bucket = env.bucket(CLAIM_CHECK_BUCKET)
        if bucket is None:
            env.problem(f"missing {CLAIM_CHECK_BUCKET}")
        network = network_policy(env.values, env.errors)
        prefix = destination_secret_prefix(env.values, env.errors)
        env.check()
        assert bucket is not None
        return cls(tables=tables, claim_check_bucket=bucket, network=network, destination_secret_prefix=prefix)
