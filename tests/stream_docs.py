"""Rules documents with streams and membership filters, as the write-guard suites (unit, property, HTTP) share them."""

from __future__ import annotations

from typing import Any

MEMBER_OF: dict[str, Any] = {
    "table": "memberships",
    "column": "project",
    "where": [{"column": "user", "op": "eq", "value": "jwt:sub"}],
}
"""A membership: the ``project`` values of the ``memberships`` rows of the token's subject."""


def project_stream(table: str = "tasks", **fields: Any) -> dict[str, Any]:
    """The ``project_tasks`` stream: rows of ``table`` of the project a subscription names, among the token's
    ``projects``; ``fields`` add to it or replace (``write``, ``ttlSeconds``)."""
    return {
        "name": "project_tasks",
        "table": table,
        "filters": [{"column": "project_id", "op": "eq", "value": "param:project"}],
        "params": {"project": {"subscription": {"allowed": "jwt:projects"}}},
        **fields,
    }


def member_bucket(name: str, table: str) -> dict[str, Any]:
    """A bucket of the rows of ``table`` whose ``project_id`` is among the client's memberships (:data:`MEMBER_OF`)."""
    return {"name": name, "tables": [table], "filters": [{"column": "project_id", "op": "in", "membership": MEMBER_OF}]}


def own_bucket(table: str) -> dict[str, Any]:
    """A bucket of the rows of ``table`` the token's subject owns."""
    return {"name": "own", "tables": [table], "filters": [{"column": "owner", "op": "eq", "value": "jwt:sub"}]}
