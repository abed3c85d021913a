"""The WebSocket functions' settings: :class:`RealtimeSettings` (``ws_*``, besides the API settings ``ws_connect``
and ``ws_message`` read) and :class:`BroadcastSettings` (``ws_broadcast``).

* ``LAKESYNC_CONNECTIONS_TABLE`` -- the sessions table (CDK generates it), or ``{LAKESYNC_TABLE_PREFIX}-connections``
  when only the prefix is set (the local shortcut).
* ``LAKESYNC_WS_CALLBACK_URL`` -- the WebSocket API stage's callback URL for the management API
  (``https://{api}.execute-api.{region}.amazonaws.com/{stage}``; locally the front's), read by ``ws_message`` (to
  close a session) and ``ws_broadcast`` (to send); ``ws_broadcast`` reads the table names too (sync rules).
* ``LAKESYNC_CHECKPOINT_BUCKET`` (optional) and ``LAKESYNC_SUB_SHARDS`` -- read by ``ws_broadcast`` as the API
  functions read them: the membership tables a sync rule filters by are read from the latest checkpoint and the log
  of the table's shards (:class:`~lakesync.gateway.membership_view.GatewayMemberships`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from lakesync.aws.settings.env import Env
from lakesync.aws.settings.validators import TABLE_NAME, sub_shards, table_names
from lakesync.aws.settings.variables import CHECKPOINT_BUCKET, CONNECTIONS_TABLE, TABLE_PREFIX, WS_CALLBACK_URL
from lakesync.aws.tables import TableNames, connections_table_name

_CALLBACK_URL = re.compile(r"https?://[A-Za-z0-9.-]+(?::\d{1,5})?(?:/[A-Za-z0-9._~$-]+)*/?")
"""A stage's callback URL (``https://{api}.execute-api.{region}.amazonaws.com/{stage}``; ``http`` for local)."""


@dataclass(frozen=True, slots=True)
class RealtimeSettings:
    """Validated configuration of the WebSocket functions (besides the API settings ``ws_connect`` and
    ``ws_message`` read).

    Attributes:
        connections_table: The sessions table.
        callback_url: The WebSocket API stage's callback URL (``None`` where the function does not send).
    """

    connections_table: str
    callback_url: str | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str], *, sends: bool = False) -> RealtimeSettings:
        """Read and validate the variables; ``sends``: the callback URL is required.

        Raises:
            SettingsError: listing every missing or invalid variable.
        """
        env = Env(environ)
        table = _connections_table(env)
        url = _callback_url(env, required=sends)
        env.check()
        return cls(table, url)


@dataclass(frozen=True, slots=True)
class BroadcastSettings:
    """Validated configuration of ``ws_broadcast``.

    Attributes:
        tables: Physical DynamoDB table names (the config table holds the sync rules).
        realtime: The sessions table and the callback URL (required).
        checkpoint_bucket: S3 bucket of the checkpoints a membership table is read from once its log was released
            (``None``: a membership table whose log was released cannot be read).
        sub_shards: Hash sub-shards per hot table (a membership table's shards).
    """

    tables: TableNames
    realtime: RealtimeSettings
    checkpoint_bucket: str | None = None
    sub_shards: Mapping[str, int] = field(default_factory=dict, hash=False)

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> BroadcastSettings:
        """Read and validate the variables.

        Raises:
            SettingsError: listing every missing or invalid variable.
        """
        env = Env(environ)
        tables = table_names(env)
        table = _connections_table(env)
        url = _callback_url(env, required=True)
        bucket = env.bucket(CHECKPOINT_BUCKET)
        shards = sub_shards(env)
        env.check()
        return cls(tables, RealtimeSettings(table, url), bucket, shards)


def _connections_table(env: Env) -> str:
    prefix = env.text(TABLE_PREFIX)
    name = env.text(CONNECTIONS_TABLE) or (connections_table_name(prefix) if prefix else "")
    if not name:
        env.problem(f"missing {CONNECTIONS_TABLE} (or set {TABLE_PREFIX})")
    elif not TABLE_NAME.fullmatch(name):
        env.problem(f"{CONNECTIONS_TABLE} {name!r} is not a valid DynamoDB table name")
    return name


def _callback_url(env: Env, *, required: bool) -> str | None:
    url = env.required(WS_CALLBACK_URL) if required else env.text(WS_CALLBACK_URL)
    if not url:
        return None
    if not _CALLBACK_URL.fullmatch(url):
        env.problem(f"{WS_CALLBACK_URL} {url!r} is not an http(s) URL of a WebSocket API stage")
    return url.rstrip("/")
