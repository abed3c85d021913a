"""``lakesync explain`` on a local data directory: the explain service (:mod:`lakesync.gateway.explain`) over the
buffer of the ``lakesync local`` running on it (its moto server, through the profile it writes) and the local lake
read with Spark SQL (:class:`~lakesync.spark.explain.SparkLakeRows`)."""

from __future__ import annotations

from pathlib import Path

from lakesync.aws.action_store import DynamoDBActionStore
from lakesync.aws.buffer.store import DynamoDBBufferStore
from lakesync.aws.clients import dynamodb_client
from lakesync.aws.config_store import DynamoDBConfigStore
from lakesync.aws.since_sessions import DynamoDBSinceSessions
from lakesync.aws.subscription_store import DynamoDBSubscriptionStore
from lakesync.aws.tables import TableNames
from lakesync.core.explanation import Explanation
from lakesync.gateway.deps import GatewayDeps
from lakesync.gateway.explain import ExplainQuery, explain_row
from lakesync.gateway.membership_view import GatewayMemberships
from lakesync.local.pipeline import lake_paths, lake_session
from lakesync.local.runner import TABLE_PREFIX, aws_profile

__all__ = ["explain_local", "local_deps"]


def local_deps(data_dir: Path) -> GatewayDeps:
    """The stores of the ``lakesync local`` running on ``data_dir``, as the explain service reads them.

    Raises:
        FileNotFoundError: no stack has started on ``data_dir``.
    """
    client = dynamodb_client(**aws_profile(data_dir))
    names = TableNames.with_prefix(TABLE_PREFIX)
    deps = GatewayDeps(
        buffer=DynamoDBBufferStore(client, names),
        config=DynamoDBConfigStore(client, names),
        actions=DynamoDBActionStore(client, names),
        since_sessions=DynamoDBSinceSessions(client, names),
        subscriptions=DynamoDBSubscriptionStore(client, names),
    )
    deps.memberships = GatewayMemberships(deps)
    return deps


def explain_local(data_dir: Path, gateway: str, query: ExplainQuery, *, lake: bool = True) -> Explanation:
    """Explain ``query``'s row from the local buffer and, with ``lake`` and a lake present, the local lake.

    Raises:
        FileNotFoundError: no stack has started on ``data_dir``.
    """
    deps = local_deps(data_dir)
    reader = None
    if lake and lake_paths(data_dir)[0].exists():
        from lakesync.spark.explain import SparkLakeRows

        reader = SparkLakeRows(lake_session(data_dir))
    return explain_row(deps, gateway, query, reader)
