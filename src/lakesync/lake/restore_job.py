"""A restore of gateways' buffers from the lake on DynamoDB: what ``lakesync restore`` runs against the local stack
and the restore job runs on AWS (docs/lake.md, "Rebuild the gateway from the lake").

The target tables must hold nothing of the gateways. The old buffer, when one is named (``old``), is read first for
what it can still tell: its entries past the lake (the data at risk, lost) and the gateways' configuration. With
``replace`` the old buffer is the target itself: it is read, then every item of the buffer tables is deleted
(refused while they hold a gateway not being restored).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lakesync.aws.buffer_restore import DynamoDBBufferSurvey, DynamoDBRestoreTarget, clear_tables
from lakesync.aws.items import REGISTRY_PREFIX, str_attr
from lakesync.aws.table_setup import create_tables
from lakesync.aws.tables import TableNames
from lakesync.core.hlc import HLC
from lakesync.core.restore import RestoreReport, RestoreTargetNotEmptyError, UnflushedDataError
from lakesync.gateway.restore import LakeReader, Survey, restore, survey
from lakesync.ports import ObjectStore

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["registered_gateways", "restore_buffer"]


def registered_gateways(client: DynamoDBClient, names: TableNames) -> set[str]:
    """The gateways with shards in the registry of ``names`` (a scan of the config table; empty when it is gone)."""
    tables = (n for page in client.get_paginator("list_tables").paginate() for n in page.get("TableNames", []))
    if names.config not in set(tables):  # every page: ListTables answers 100 names at a time
        return set()
    found: set[str] = set()
    for page in client.get_paginator("scan").paginate(
        TableName=names.config,
        FilterExpression="begins_with(sk, :p)",
        ExpressionAttributeValues={":p": str_attr(REGISTRY_PREFIX)},
        ProjectionExpression="gw",
        ConsistentRead=True,
    ):
        found.update(item["gw"]["S"] for item in page.get("Items", []))
    return found


def restore_buffer(
    client: DynamoDBClient,
    names: TableNames,
    lake: LakeReader,
    gateways: Sequence[str],
    *,
    objects: ObjectStore | None,
    old: TableNames | None = None,
    replace: bool = False,
    lose_unflushed: bool = False,
    clock: HLC | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[RestoreReport]:
    """Restore each of ``gateways`` from ``lake`` into the tables ``names`` (created where missing).

    Args:
        client: DynamoDB.
        names: The tables to restore into.
        lake: The delta log.
        gateways: The gateways to restore.
        objects: The checkpoint bucket (a checkpoint at the restored positions is cut for each gateway).
        old: The old buffer's tables, read first (the data at risk, the configuration); ``None``: none.
        replace: Read the tables ``names`` as the old buffer, then delete every item in them.
        lose_unflushed: Replace a buffer that holds deltas the lake does not (they are lost; the report names them).
        clock: The server clock (the restore's HLC follows it).
        progress: Called with a line now and then.

    Raises:
        RestoreTargetNotEmptyError: the target holds a gateway being restored (without ``replace``), or, with it,
            a gateway that is not.
        UnflushedDataError: with ``replace``, the buffer holds deltas the lake does not (without ``lose_unflushed``).
    """
    if replace:
        others = sorted(registered_gateways(client, names) - set(gateways))
        if others:
            raise RestoreTargetNotEmptyError(
                f"replacing the buffer tables would delete gateways {others} as well: restore them too"
            )
        old = names
    watermarks = lake.watermarks()
    surveys = {
        gw: survey(DynamoDBBufferSurvey(client, old), gw, watermarks)
        if old is not None
        else Survey.unreadable("no old buffer was named")
        for gw in gateways
    }
    if replace:
        at_risk = {gw: s.at_risk.deltas for gw, s in surveys.items() if s.at_risk.deltas}
        if at_risk and not lose_unflushed:
            raise UnflushedDataError(
                f"the buffer holds deltas the lake does not ({at_risk}): flush them first, or accept their loss"
            )
        clear_tables(client, names)
    create_tables(client, names)
    target = DynamoDBRestoreTarget(client, names)
    clock = clock or HLC()
    return [
        restore(gw, lake, target, now=clock.now, objects=objects, old=surveys[gw], progress=progress) for gw in gateways
    ]
