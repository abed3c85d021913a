"""A restore of gateways' buffers from the lake on DynamoDB: what ``lakesync restore`` runs against the local stack
and the restore job runs on AWS (docs/lake.md, "Rebuild the gateway from the lake").

While it runs, each gateway's restore mark is in its config partition, read by every push and pull with the rules:
they are refused (503 ``RESTORING``, which clients retry) until the gateway is rebuilt. The marks stay at least
:data:`SETTLE_S`, so that no serving process still uses what it read of the old log. A restore refused before it
wrote anything removes its marks; one that failed later keeps them, so nothing is served from a half-built buffer
until a restore (``replace``) ends.

The target tables must hold nothing of the gateways. The old buffer, when one is named (``old``), is read first for
what it can still tell: its entries past the lake (the data at risk, lost) and the gateways' configuration. With
``replace`` the old buffer is the target itself: it is read, then every item of the buffer tables is deleted
(refused while they hold a gateway not being restored).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from lakesync.aws.buffer.log_reader import REMEMBERED_CHUNK_MS
from lakesync.aws.buffer_restore import DynamoDBBufferSurvey, DynamoDBRestoreTarget, clear_tables
from lakesync.aws.items import REGISTRY_PREFIX, str_attr
from lakesync.aws.table_setup import create_tables, table_names
from lakesync.aws.tables import TableNames
from lakesync.core.hlc import HLC
from lakesync.core.restore import RestoreReport, RestoreTargetNotEmptyError, UnflushedDataError
from lakesync.gateway.restore import LakeReader, Survey, restore, survey
from lakesync.ports import ObjectStore

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["registered_gateways", "restore_buffer"]


SETTLE_S = REMEMBERED_CHUNK_MS / 1000
"""How long a restore holds its gateways at least: what a serving process read of the old log (its last chunk of a
shard, :data:`lakesync.aws.buffer.log_reader.REMEMBERED_CHUNK_MS`) is then too old to be used again."""


def registered_gateways(client: DynamoDBClient, names: TableNames) -> set[str]:
    """The gateways with shards in the registry of ``names`` (a scan of the config table; empty when it is gone)."""
    if names.config not in table_names(client):
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
    create_missing: bool = True,
    clock: HLC | None = None,
    progress: Callable[[str], None] | None = None,
    settle_s: float = SETTLE_S,
) -> list[RestoreReport]:
    """Restore each of ``gateways`` from ``lake`` into the tables ``names`` (created where missing, unless
    ``create_missing`` is false).

    Args:
        client: DynamoDB.
        names: The tables to restore into.
        lake: The delta log.
        gateways: The gateways to restore.
        objects: The checkpoint bucket (a checkpoint at the restored positions is cut for each gateway).
        old: The old buffer's tables, read first (the data at risk, the configuration); ``None``: none.
        replace: Read the tables ``names`` as the old buffer, then delete every item in them.
        lose_unflushed: Replace a buffer that holds deltas the lake does not (they are lost; the report names them).
        create_missing: Create the tables that are missing (and enable their TTL); false: they must all exist, as a
            deployed stack's do (CloudFormation's: the restore job on AWS neither creates nor changes a table).
        clock: The server clock (the restore's HLC follows it).
        progress: Called with a line now and then.
        settle_s: How long the gateways stay held at least (:data:`SETTLE_S`; less only where no process served
            the old buffer, or none that still runs).

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
    # The config table first: a push reads it before anything else, so none commits once the marks are in it.
    if create_missing:
        create_tables(client, names, only={names.config})
    target = DynamoDBRestoreTarget(client, names)
    held_at = time.monotonic()
    _hold(target, gateways, take_over=replace)
    reports: list[RestoreReport] = []
    try:
        if create_missing:
            create_tables(client, names)
        surveys = _surveys(client, old, lake, gateways)
        if replace:
            at_risk = {gw: s.at_risk.deltas for gw, s in surveys.items() if s.at_risk.deltas}
            if at_risk and not lose_unflushed:
                raise UnflushedDataError(
                    f"the buffer holds deltas the lake does not ({at_risk}): flush them first, or accept their loss"
                )
            clear_tables(client, names)
        clock = clock or HLC()
        for gw in gateways:
            reports.append(
                restore(gw, lake, target, now=clock.now, objects=objects, old=surveys[gw], progress=progress)
            )
    except (RestoreTargetNotEmptyError, UnflushedDataError):
        # Refused before a gateway's buffer was touched (the ones restored before it are whole): all serve again.
        _release(target, gateways, held_at + settle_s if reports else None, progress)
        raise
    _release(target, gateways, held_at + settle_s, progress)
    return reports


def _hold(target: DynamoDBRestoreTarget, gateways: Sequence[str], *, take_over: bool) -> None:
    """Write each gateway's restore mark, or none of them."""
    held: list[str] = []
    try:
        for gw in gateways:
            target.hold(gw, started_ms=int(time.time() * 1000), take_over=take_over)
            held.append(gw)
    except RestoreTargetNotEmptyError:
        for gw in held:
            target.release(gw)
        raise


def _release(
    target: DynamoDBRestoreTarget,
    gateways: Sequence[str],
    until: float | None,
    progress: Callable[[str], None] | None,
) -> None:
    """Remove the gateways' marks, at ``until`` (monotonic seconds) at the earliest (``None``: at once)."""
    wait = 0.0 if until is None else until - time.monotonic()
    if wait > 0:
        if progress is not None:
            progress(f"waiting {wait:.0f} s for the serving processes to forget the old log")
        time.sleep(wait)
    for gw in gateways:
        target.release(gw)


def _surveys(
    client: DynamoDBClient, old: TableNames | None, lake: LakeReader, gateways: Sequence[str]
) -> dict[str, Survey]:
    """What the old buffer ``old`` tells of each gateway (the deltas past the lake, the configuration)."""
    if old is None:
        return {gw: Survey.unreadable("no old buffer was named") for gw in gateways}
    watermarks = lake.watermarks()
    return {gw: survey(DynamoDBBufferSurvey(client, old), gw, watermarks) for gw in gateways}
