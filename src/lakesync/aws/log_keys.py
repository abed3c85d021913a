"""When a deployment's writers may start writing first keys (``LAKESYNC_LOG_KEYS=auto``, the default).

A first-keyed log is safe only once no code of a release before first keys runs against the tables: such a writer
has no ``lk`` guard (its last-keyed chunk could claim sequences a first-keyed one holds), and such a reader does not
read first-keyed chunks. A deploy updates functions and jobs one at a time, and an invocation or job run that started
before its update goes on with the old code until it ends.

So the deployment says when it has updated everything: the CDK stack's marker resource, created after every function
and job (:mod:`lakesync_infra.rollout`), and :func:`lakesync.aws.dynamodb.create_tables` for tables it creates (no
earlier release ever ran on them). The marker is one item of the config table:

* ``grace_ms``: how long code of an earlier release may still run after the marker was written (the longest
  function or job timeout);
* ``seen``: when a writer first saw the marker (the first to see it stamps it, conditionally, so all agree).

Writers start first keys once ``seen + grace_ms`` has passed, and the marker is still there with that stamp. Until
then each process reads the marker at most once a minute (and once more when the grace is over); from then on,
never. Any failure reads as "not yet": last keys are always safe (a writer set to them
still writes first keys to a shard whose head records them).

The same marker says which layout of a chunk's text (:mod:`lakesync.aws.log_chunks`) every reader knows: ``lf``,
the newest layout of the release that wrote it (a marker without it is older than layout 2: 1). Writers use
``min(lf, LOG_FORMAT)`` once the gate is open, layout 1 before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from botocore.exceptions import BotoCoreError, ClientError

from lakesync.aws.errors import condition_failed
from lakesync.aws.log_chunks import LOG_FORMAT

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

logger = logging.getLogger(__name__)

MARKER_GATEWAY: Final = "#deployment"
"""The marker's ``gw`` key: not a gateway id (those are letters, digits and ``_ . : -``)."""
MARKER_SK: Final = "log-keys"
RECHECK_MS: Final = 60_000
"""How often a process whose writers may not start first keys yet reads the marker again."""


def marker_item(
    grace_ms: int, *, seen_ms: int | None = None, log_format: int = LOG_FORMAT
) -> dict[str, dict[str, str]]:
    """The marker as a config-table item (``seen_ms``: stamped already, as for tables created just now;
    ``log_format``: the newest chunk layout every reader knows)."""
    item = {
        "gw": {"S": MARKER_GATEWAY},
        "sk": {"S": MARKER_SK},
        "grace_ms": {"N": str(grace_ms)},
        "lf": {"N": str(log_format)},
    }
    if seen_ms is not None:
        item["seen"] = {"N": str(seen_ms)}
    return item


def write_marker(
    client: DynamoDBClient,
    config_table: str,
    grace_ms: int,
    *,
    seen_ms: int | None = None,
    log_format: int = LOG_FORMAT,
) -> None:
    """Say that every function and job now runs code that reads first keys and chunk layouts up to ``log_format``
    (a later marker replaces an earlier one, so its grace starts again)."""
    client.put_item(TableName=config_table, Item=marker_item(grace_ms, seen_ms=seen_ms, log_format=log_format))


def remove_marker(client: DynamoDBClient, config_table: str) -> None:
    """Take the marker back (the deploy that wrote it is rolled back): writers that have not started first keys
    yet no longer will."""
    client.delete_item(TableName=config_table, Key={"gw": {"S": MARKER_GATEWAY}, "sk": {"S": MARKER_SK}})


class FirstKeysGate:
    """Answers, cheaply and for the whole process, whether writers may start a shard's log on first keys.

    Args:
        client: DynamoDB client.
        config_table: The config table holding the marker.
        now_ms: Wall clock in epoch milliseconds (the stamp is compared across processes).
        recheck_ms: How long a "not yet" holds before the marker is read again.
    """

    def __init__(
        self,
        client: DynamoDBClient,
        config_table: str,
        *,
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        recheck_ms: int = RECHECK_MS,
    ) -> None:
        self._db = client
        self._table = config_table
        self._now_ms = now_ms
        self._recheck_ms = recheck_ms
        self._lock = threading.Lock()
        self._open = False
        self._opens_at: int | None = None
        self._next_read = 0
        self._marker_format = 1

    def __call__(self) -> bool:
        """Whether first keys may be started now."""
        if self._open:
            return True
        with self._lock:
            now = self._now_ms()
            known = self._opens_at is not None
            if not known:
                if now < self._next_read:
                    return False
                self._next_read = now + self._recheck_ms
                self._opens_at = self._read_opens_at(now)
            if self._opens_at is None or now < self._opens_at:
                return False
            if known:
                # The grace counted from an earlier read: the marker must still be there with that stamp (a deploy
                # that rolled back deleted it; one that wrote it again restarts the grace).
                confirmed = self._read_opens_at(now)
                if confirmed != self._opens_at:
                    self._opens_at = confirmed
                    self._next_read = now + self._recheck_ms
                    return False
            self._open = True
            return True

    def log_format(self) -> int:
        """The chunk layout writers may use now: the marker's, once the gate is open; layout 1 before."""
        return self._marker_format if self() else 1

    def _read_opens_at(self, now: int) -> int | None:
        try:
            item = self._marker()
            if item is None:
                return None
            grace = int(item["grace_ms"]["N"])
            if "seen" not in item:
                item = self._stamp(grace, _log_format(item), now) or self._marker()
                if item is None or "seen" not in item:
                    return None
            self._marker_format = min(_log_format(item), LOG_FORMAT)
            return int(item["seen"]["N"]) + grace
        except (ClientError, BotoCoreError, KeyError, ValueError) as exc:
            logger.warning("first keys stay off for now: the deployment marker could not be read (%s)", exc)
            return None

    def _marker(self) -> dict[str, dict[str, str]] | None:
        # A Query (not GetItem): the writers' access to the config table is Query and PutItem.
        out = self._db.query(
            TableName=self._table,
            KeyConditionExpression="gw = :g AND sk = :s",
            ExpressionAttributeValues={":g": {"S": MARKER_GATEWAY}, ":s": {"S": MARKER_SK}},
            ConsistentRead=True,
        )
        items = out.get("Items", [])
        return dict(items[0]) if items else None  # type: ignore[arg-type]

    def _stamp(self, grace: int, log_format: int, now: int) -> dict[str, dict[str, str]] | None:
        """Stamp the marker with ``now`` unless another writer did; the stamped item, or ``None`` if one did."""
        item = marker_item(grace, seen_ms=now, log_format=log_format)
        try:
            self._db.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression="attribute_exists(gw) AND attribute_not_exists(seen)",
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise
            return None
        return item


def _log_format(item: dict[str, dict[str, str]]) -> int:
    """The marker's chunk layout (1 for a marker of a release before layout 2)."""
    return max(1, int(item["lf"]["N"])) if "lf" in item else 1
