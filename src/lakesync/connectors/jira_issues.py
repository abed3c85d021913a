"""Jira's data as LakeSync rows: the JQL of a poll, issues and comments as row values (Atlassian Document Format as
plain text), and the compressed sets of issue ids a position keeps for the deletion sweep."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

from lakesync.connectors.http_api import ApiRequestError
from lakesync.core.canonical import JsonValue

__all__ = [
    "COMMENTS_TABLE",
    "EPOCH_JQL",
    "ISSUES_TABLE",
    "ISSUE_FIELDS",
    "adf_document",
    "adf_text",
    "comment_values",
    "decode_ids",
    "encode_ids",
    "issue_id",
    "issue_values",
    "jql_time",
    "numeric_id",
    "scoped",
    "strip_order_by",
]

ISSUES_TABLE = "jira_issues"
COMMENTS_TABLE = "jira_comments"
ISSUE_FIELDS = (
    "summary",
    "status",
    "issuetype",
    "priority",
    "project",
    "assignee",
    "reporter",
    "labels",
    "created",
    "updated",
    "resolution",
    "description",
    "parent",
)
"""The fields every search asks for (the enhanced search returns ids only without a field list)."""
EPOCH_JQL = '"1970/01/01 00:00"'


# -- JQL ------------------------------------------------------------------------------------------------------------


def jql_time(value: datetime, zone: tzinfo) -> str:
    """An instant as a JQL date-time literal in ``zone`` (JQL compares at minute precision)."""
    return '"' + value.astimezone(zone).strftime("%Y/%m/%d %H:%M") + '"'


def scoped(jql: str, condition: str) -> str:
    """``condition`` within the configured scope ``jql`` (none: everything)."""
    return f"({jql}) AND {condition}" if jql else condition


def strip_order_by(jql: str) -> str:
    """The scope without a trailing ``ORDER BY`` (the connector orders by ``updated``)."""
    upper = jql.upper()
    at = upper.rfind("ORDER BY")
    return (jql[:at] if at >= 0 else jql).strip()


# -- issues and comments as rows ------------------------------------------------------------------------------


def issue_values(issue: Mapping[str, Any], f: Mapping[str, Any], extra_fields: Sequence[str]) -> dict[str, JsonValue]:
    """An issue's row values: the standard fields flattened (names, keys, account ids, ADF as text), then the
    configured extra fields as Jira sends them."""

    def name_of(v: object, key: str = "name") -> JsonValue:
        return v.get(key) if isinstance(v, Mapping) else None

    status = f.get("status")
    category = status.get("statusCategory") if isinstance(status, Mapping) else None
    values: dict[str, JsonValue] = {
        "key": issue.get("key"),
        "summary": f.get("summary"),
        "status": name_of(status),
        "status_category": name_of(category, "key"),
        "issue_type": name_of(f.get("issuetype")),
        "priority": name_of(f.get("priority")),
        "project_key": name_of(f.get("project"), "key"),
        "project_id": name_of(f.get("project"), "id"),
        "assignee_account_id": name_of(f.get("assignee"), "accountId"),
        "assignee_name": name_of(f.get("assignee"), "displayName"),
        "reporter_account_id": name_of(f.get("reporter"), "accountId"),
        "reporter_name": name_of(f.get("reporter"), "displayName"),
        "labels": labels(f.get("labels")),
        "resolution": name_of(f.get("resolution")),
        "parent_key": name_of(f.get("parent"), "key"),
        "description": adf_text(f.get("description")),
        "created": f.get("created"),
        "updated": f.get("updated"),
    }
    for extra in extra_fields:
        if extra not in ISSUE_FIELDS:
            values[extra] = f.get(extra)
    return values


def comment_values(comment: Mapping[str, Any], issue_id: str, issue_key: str) -> dict[str, JsonValue]:
    """A comment's row values (its body as text)."""
    raw_author = comment.get("author")
    author: Mapping[str, Any] = raw_author if isinstance(raw_author, Mapping) else {}
    return {
        "issue_id": issue_id,
        "issue_key": issue_key,
        "author_account_id": author.get("accountId"),
        "author_name": author.get("displayName"),
        "body": adf_text(comment.get("body")),
        "created": comment.get("created"),
        "updated": comment.get("updated"),
    }


def labels(value: object) -> list[JsonValue]:
    """Labels as Jira sends them (a list of strings); anything else reads as none."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def issue_id(issue: Mapping[str, Any]) -> str:
    """An issue's id as its digits (Jira's ids are numeric strings; the deletion sweep stores them as numbers)."""
    return numeric_id(issue, "issue")


def numeric_id(item: Mapping[str, Any], what: str) -> str:
    """An item's ``id`` as its digits.

    Raises:
        ApiRequestError: the id is not a non-negative integer or a string of digits.
    """
    value = item.get("id")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return str(value)
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return value
    raise ApiRequestError(f"Jira returned a {what} whose id is not numeric: {str(value)[:80]!r}", vendor="Jira")


# -- Atlassian Document Format ----------------------------------------------------------------------------------------


def adf_document(text: str) -> dict[str, JsonValue]:
    """Plain text as an ADF document: one paragraph per line (blank lines become empty paragraphs)."""
    paragraphs: list[JsonValue] = []
    for line in text.split("\n"):
        content: list[JsonValue] = [{"type": "text", "text": line}] if line else []
        paragraphs.append({"type": "paragraph", "content": content})
    return {"type": "doc", "version": 1, "content": paragraphs}


def adf_text(node: object) -> str | None:
    """The plain text of an ADF document (paragraphs and blocks on their own lines); ``None`` for ``None``."""
    if node is None:
        return None
    if isinstance(node, str):
        return node
    out: list[str] = []

    def walk(n: object) -> None:
        if isinstance(n, Mapping):
            kind = n.get("type")
            if kind == "text" and isinstance(n.get("text"), str):
                out.append(n["text"])
            elif kind == "hardBreak":
                out.append("\n")
            elif kind == "mention":
                attrs = n.get("attrs")
                if isinstance(attrs, Mapping) and isinstance(attrs.get("text"), str):
                    out.append(attrs["text"])
            children = n.get("content")
            for child in children if isinstance(children, list) else ():
                walk(child)
            if kind in {"paragraph", "heading", "codeBlock", "blockquote", "listItem", "rule"}:
                out.append("\n")

    walk(node)
    return "".join(out).strip("\n")


# -- id sets in the position ----------------------------------------------------------------------------------------


def encode_ids(ids: Iterable[str]) -> str:
    """A set of numeric issue ids as base64(zlib(varint deltas of the sorted ids))."""
    numbers = sorted({int(i) for i in ids})
    raw = bytearray()
    previous = 0
    for n in numbers:
        delta = n - previous
        previous = n
        while True:
            byte = delta & 0x7F
            delta >>= 7
            if delta:
                raw.append(byte | 0x80)
            else:
                raw.append(byte)
                break
    return base64.b64encode(zlib.compress(bytes(raw), 9)).decode("ascii")


def decode_ids(text: str) -> set[str]:
    """The inverse of :func:`encode_ids` (``""`` → empty)."""
    if not text:
        return set()
    raw = zlib.decompress(base64.b64decode(text))
    out: set[str] = set()
    value = shift = previous = 0
    for byte in raw:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
            continue
        previous += value
        out.add(str(previous))
        value = shift = 0
    return out
