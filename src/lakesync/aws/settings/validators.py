"""The readers more than one function family shares: the gateway ids, the table names, the sub-shards of hot tables,
and where connectors and destinations may connect (with the destinations' secret prefix).

Each reads from an :class:`~lakesync.aws.settings.env.Env` (or a plain mapping, for the network policy the embedded
default reads too) and records its problems rather than raising them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from lakesync.aws.settings.env import Env, flag_problem
from lakesync.aws.settings.variables import (
    ALLOW_PLAIN_HTTP,
    ALLOWED_NETWORKS,
    DESTINATION_SECRET_PREFIX,
    GATEWAY_IDS,
    SUB_SHARDS,
    TABLE_PREFIX,
    TABLE_VARS,
)
from lakesync.aws.tables import TableNames
from lakesync.core.schema import is_valid_identifier

if TYPE_CHECKING:
    from lakesync.core.network import IPNetwork, NetworkPolicy

_GATEWAY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
TABLE_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{3,255}")
"""A DynamoDB table name."""
MAX_SUB_SHARDS: Final = 256
"""The most hash sub-shards one table may be given."""
_DESTINATION_SECRET_PREFIX = re.compile(r"[A-Za-z0-9/_+=.@-]{1,400}")


def gateway_ids(env: Env) -> frozenset[str]:
    """``LAKESYNC_GATEWAY_IDS``: the comma-separated gateway ids served (``default`` when unset)."""
    ids = [part.strip() for part in (env.raw(GATEWAY_IDS) or "default").split(",")]
    bad = [i for i in ids if not _GATEWAY_ID.fullmatch(i)]
    if bad:
        env.problem(f"{GATEWAY_IDS} holds invalid gateway ids {bad!r} (letters, digits, _ . : - ; at most 128)")
    return frozenset(ids)


def table_names(env: Env) -> TableNames:
    """The DynamoDB tables: every ``LAKESYNC_TABLE_*`` name, or ``LAKESYNC_TABLE_PREFIX`` alone."""
    given = {kind: env.text(var) for kind, var in TABLE_VARS.items() if var in env}
    prefix = env.text(TABLE_PREFIX)
    if prefix and given:
        env.problem(f"set either {TABLE_PREFIX} or the {len(TABLE_VARS)} LAKESYNC_TABLE_* names, not both")
    if prefix:
        names = TableNames.with_prefix(prefix)
    else:
        missing = [var for kind, var in TABLE_VARS.items() if kind not in given]
        if missing:
            env.problem(f"missing {', '.join(missing)} (or set {TABLE_PREFIX})")
        names = TableNames(**{kind: given.get(kind, "") for kind in TABLE_VARS})
    for kind, name in names.as_dict().items():
        if (kind in given or prefix) and not TABLE_NAME.fullmatch(name):
            env.problem(f"table name {name!r} ({kind}) is not a valid DynamoDB table name")
    return names


def sub_shards(env: Env) -> dict[str, int]:
    """``LAKESYNC_SUB_SHARDS``: a JSON object ``{"table": n}`` of hash sub-shards for hot tables (empty when unset)."""
    doc = env.json_object(SUB_SHARDS, '{"table": n}')
    if doc is None:
        return {}
    shards: dict[str, int] = {}
    for table, n in doc.items():
        if not is_valid_identifier(table):
            env.problem(f"{SUB_SHARDS}: {table!r} is not a valid table name")
        elif isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SUB_SHARDS:
            env.problem(f"{SUB_SHARDS}: {table} must map to an integer in 1..{MAX_SUB_SHARDS}, got {n!r}")
        else:
            shards[table] = n
    return shards


def destination_secret_prefix(env: Mapping[str, str], errors: list[str]) -> str | None:
    """``LAKESYNC_DESTINATION_SECRET_PREFIX`` (``lakesync/prod/destinations/``), or ``None`` when unset."""
    raw = env.get(DESTINATION_SECRET_PREFIX, "").strip()
    if not raw:
        return None
    if not _DESTINATION_SECRET_PREFIX.fullmatch(raw):
        errors.append(f"{DESTINATION_SECRET_PREFIX} is not a valid secret name prefix")
    return raw


def network_policy(env: Mapping[str, str], errors: list[str] | None = None) -> NetworkPolicy:
    """Where connectors and destinations may connect (:class:`lakesync.core.network.NetworkPolicy`).

    * ``LAKESYNC_ALLOWED_NETWORKS`` -- comma-separated CIDRs dialled although loopback or private (an RDS in the VPC:
      ``10.0.0.0/16``); link-local and metadata ranges can never be allowed. Unset: public addresses only.
    * ``LAKESYNC_ALLOW_PLAIN_HTTP`` -- ``true`` lets API connectors use ``http://`` (``lakesync local`` only).
    """
    from lakesync.core.network import NetworkPolicy, parse_networks

    problems: list[str] = [] if errors is None else errors
    allowed: tuple[IPNetwork, ...] = ()
    try:
        allowed = parse_networks(env.get(ALLOWED_NETWORKS, "").split(","))
    except ValueError as exc:
        problems.append(f"{ALLOWED_NETWORKS}: {exc}")
    http = env.get(ALLOW_PLAIN_HTTP, "false")
    problem = flag_problem(ALLOW_PLAIN_HTTP, http)
    if problem is not None:
        problems.append(problem)
    return NetworkPolicy(allowed=allowed, allow_http=http.strip().lower() == "true")
