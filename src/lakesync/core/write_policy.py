"""Write policies of a sync-rules document: what a client may do to the rows it can see.

The rows a client may write are decided by the buckets (:mod:`lakesync.core.rules`): a write needs the row visible
before and after it. A policy narrows that further, per bucket (``"write"`` on a bucket) or per table (the document's
``"tables"``)::

    {"version": 3,
     "buckets": [{"name": "team", "tables": ["todos", "comments"],
                  "filters": [{"column": "team", "op": "eq", "value": "jwt:team"}],
                  "write": {"ops": ["insert", "update"], "immutableColumns": ["owner"]}}],
     "tables": {"comments": {"write": {"ops": ["insert"]}},
                "audit": {"write": {"ops": []}},
                "todos": {"write": {"readOnlyColumns": ["approved"]}},
                "billing": {"adminOnly": true}}}

* ``ops``: the kinds of write allowed, ``insert`` (the row does not exist), ``update`` (it does) and ``delete``;
  absent means all three, ``[]`` makes the bucket or table read-only.
* ``readOnlyColumns``: columns a client may never set; ``immutableColumns``: columns a client may set when it
  creates the row and never change afterwards. Sending a column's stored value again is not a change.
* ``adminOnly``: only admins (and connectors) read and write the table; clients neither pull nor push its rows.

Admin tokens and connector identities are trusted writers and are not checked. This module holds the types and their
validation; the evaluation is :func:`lakesync.core.rules.check_write`, beside the read rule it builds on.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lakesync.core.errors import SyncRuleError

RESERVED_TABLE_PREFIX = "_lakesync_"
"""Tables the engine writes itself (provenance, state): never written by clients nor given schemas or policies."""

MAX_POLICY_COLUMNS = 256
"""Most columns one policy may name in each of its column lists."""
MAX_TABLE_POLICIES = 256
"""Most tables a rules document may give a policy."""


class WriteOp(enum.StrEnum):
    """A kind of write, as judged on the stored row (not on the op a client claims)."""

    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


ALL_OPS = frozenset(WriteOp)
ABSENT: Any = object()
"""What a parser is given for a field the document leaves out (a field given as ``null`` is not absent)."""
_OP_LIST = ", ".join(op.value for op in WriteOp)


def is_reserved_table(table: str) -> bool:
    """Whether ``table`` is one of the engine's own (``_lakesync_*``, any case)."""
    return table.lower().startswith(RESERVED_TABLE_PREFIX)


@dataclass(frozen=True, slots=True)
class WritePolicy:
    """What a client may do to a row of a bucket or table (the default allows everything)."""

    ops: frozenset[WriteOp] = ALL_OPS
    read_only_columns: frozenset[str] = frozenset()
    immutable_columns: frozenset[str] = frozenset()

    @property
    def is_default(self) -> bool:
        """Whether the policy allows every write (nothing to store)."""
        return self.ops == ALL_OPS and not self.read_only_columns and not self.immutable_columns

    def to_json(self) -> dict[str, Any]:
        """The JSON shape ``{"ops", "readOnlyColumns"?, "immutableColumns"?}``, lists sorted."""
        doc: dict[str, Any] = {"ops": [op.value for op in WriteOp if op in self.ops]}
        if self.read_only_columns:
            doc["readOnlyColumns"] = sorted(self.read_only_columns)
        if self.immutable_columns:
            doc["immutableColumns"] = sorted(self.immutable_columns)
        return doc


DEFAULT_POLICY = WritePolicy()


@dataclass(frozen=True, slots=True)
class TablePolicy:
    """A table's policy: admin-only, or a write policy every bucket's own policy is narrowed by."""

    admin_only: bool = False
    write: WritePolicy = field(default=DEFAULT_POLICY)

    def to_json(self) -> dict[str, Any]:
        """The JSON shape ``{"adminOnly"?, "write"?}``."""
        doc: dict[str, Any] = {}
        if self.admin_only:
            doc["adminOnly"] = True
        if not self.write.is_default:
            doc["write"] = self.write.to_json()
        return doc


def _column_list(raw: object, where: str, name: str) -> frozenset[str]:
    if raw is ABSENT:
        return frozenset()
    if not isinstance(raw, list) or not all(isinstance(c, str) and c for c in raw):
        raise SyncRuleError(f"{where} {name} must be an array of non-empty column names")
    if len(raw) > MAX_POLICY_COLUMNS:
        raise SyncRuleError(f"{where} {name} may name at most {MAX_POLICY_COLUMNS} columns")
    return frozenset(raw)


def parse_write_policy(raw: object, where: str) -> WritePolicy:
    """Validate a ``"write"`` object of a bucket or a table (``where`` names it in messages); :data:`ABSENT` gives the
    default policy.

    Raises:
        SyncRuleError: the object or one of its fields is malformed (``null`` included).
    """
    if raw is ABSENT:
        return DEFAULT_POLICY
    if not isinstance(raw, Mapping):
        raise SyncRuleError(f"{where} write must be an object")
    unknown = sorted(set(raw) - {"ops", "readOnlyColumns", "immutableColumns"})
    if unknown:
        raise SyncRuleError(f"{where} write has unknown fields: {', '.join(unknown)}")
    raw_ops = raw.get("ops", ABSENT)
    ops = ALL_OPS
    if raw_ops is not ABSENT:
        if not isinstance(raw_ops, list) or not all(isinstance(op, str) and op in ALL_OPS for op in raw_ops):
            raise SyncRuleError(f"{where} write ops must be an array of: {_OP_LIST}")
        ops = frozenset(WriteOp(op) for op in raw_ops)
    read_only = _column_list(raw.get("readOnlyColumns", ABSENT), where, "write readOnlyColumns")
    immutable = _column_list(raw.get("immutableColumns", ABSENT), where, "write immutableColumns")
    return WritePolicy(ops, read_only, immutable)


def parse_table_policies(raw: object) -> dict[str, TablePolicy]:
    """Validate a rules document's ``"tables"`` object: table name -> ``{"adminOnly"?, "write"?}`` (:data:`ABSENT`:
    none).

    Raises:
        SyncRuleError: malformed (``null`` included), a reserved table, or more than :data:`MAX_TABLE_POLICIES` tables.
    """
    if raw is ABSENT:
        return {}
    if not isinstance(raw, Mapping):
        raise SyncRuleError("Sync rules tables must be an object of table name to policy")
    if len(raw) > MAX_TABLE_POLICIES:
        raise SyncRuleError(f"Sync rules may give at most {MAX_TABLE_POLICIES} tables a policy")
    policies = {}
    for table, body in raw.items():
        where = f'Table "{table}"'
        if not table:
            raise SyncRuleError("Sync rules tables must be named")
        if is_reserved_table(table):
            raise SyncRuleError(f"{where} is the engine's own; it cannot be given a policy")
        if not isinstance(body, Mapping):
            raise SyncRuleError(f"{where} policy must be an object")
        unknown = sorted(set(body) - {"adminOnly", "write"})
        if unknown:
            raise SyncRuleError(f"{where} policy has unknown fields: {', '.join(unknown)}")
        admin_only = body.get("adminOnly", False)
        if not isinstance(admin_only, bool):
            raise SyncRuleError(f"{where} adminOnly must be true or false")
        policies[table] = TablePolicy(admin_only, parse_write_policy(body.get("write", ABSENT), where))
    return policies


__all__ = [
    "ABSENT",
    "ALL_OPS",
    "DEFAULT_POLICY",
    "RESERVED_TABLE_PREFIX",
    "TablePolicy",
    "WriteOp",
    "WritePolicy",
    "is_reserved_table",
    "parse_table_policies",
    "parse_write_policy",
]
