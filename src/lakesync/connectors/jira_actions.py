"""The Jira connector's actions: ``create_issue``, ``update_issue`` and ``add_comment`` as Jira REST requests.

Text becomes Atlassian Document Format. A parameter of the wrong shape is refused before anything is sent
(``ActionExecutionError``, not retryable); what Jira answers is mapped by
:meth:`~lakesync.connectors.jira.JiraConnector.execute`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from lakesync.connectors.http_api import HttpApiClient
from lakesync.connectors.jira_issues import adf_document
from lakesync.core.actions import ActionDescriptor
from lakesync.core.canonical import JsonValue
from lakesync.core.errors import ActionExecutionError

__all__ = ["ACTIONS", "RUNNERS", "add_comment", "create_issue", "update_issue"]


def create_issue(client: HttpApiClient, params: Mapping[str, Any]) -> dict[str, JsonValue]:
    """``POST /rest/api/3/issue``: the new issue's id, key and URL."""
    fields: dict[str, JsonValue] = dict(_object_param(params, "fields"))
    fields["project"] = {"key": _required_param(params, "projectKey")}
    fields["summary"] = _required_param(params, "summary")
    fields["issuetype"] = {"name": _optional_param(params, "issueType") or "Task"}
    _common_fields(params, fields)
    created = client.request("POST", "/rest/api/3/issue", json_body={"fields": fields}).json()
    if not isinstance(created, Mapping) or not isinstance(created.get("key"), str):
        raise ActionExecutionError("Jira created the issue but returned no key", retryable=False)
    return {"id": created.get("id"), "key": created["key"], "self": created.get("self")}


def update_issue(client: HttpApiClient, params: Mapping[str, Any]) -> dict[str, JsonValue]:
    """``PUT /rest/api/3/issue/{key}``: the key and the fields changed."""
    key = _required_param(params, "issueKey")
    fields: dict[str, JsonValue] = dict(_object_param(params, "fields"))
    summary = _optional_param(params, "summary")
    if summary is not None:
        fields["summary"] = summary
    _common_fields(params, fields)
    if not fields:
        raise ActionExecutionError("update_issue needs at least one field to change", retryable=False)
    client.request("PUT", f"/rest/api/3/issue/{_path_segment(key)}", json_body={"fields": fields})
    return {"key": key, "updated": sorted(fields)}


def add_comment(client: HttpApiClient, params: Mapping[str, Any]) -> dict[str, JsonValue]:
    """``POST /rest/api/3/issue/{key}/comment``: the key and the new comment's id."""
    key = _required_param(params, "issueKey")
    body = _required_param(params, "body")
    created = client.request(
        "POST", f"/rest/api/3/issue/{_path_segment(key)}/comment", json_body={"body": adf_document(body)}
    ).json()
    comment_id = created.get("id") if isinstance(created, Mapping) else None
    return {"issueKey": key, "commentId": comment_id}


def _common_fields(params: Mapping[str, Any], fields: dict[str, JsonValue]) -> None:
    description = _optional_param(params, "description")
    if description is not None:
        fields["description"] = adf_document(description)
    priority = _optional_param(params, "priority")
    if priority is not None:
        fields["priority"] = {"name": priority}
    assignee = _optional_param(params, "assigneeAccountId")
    if assignee is not None:
        fields["assignee"] = {"accountId": assignee}
    labels = params.get("labels")
    if labels is not None:
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise ActionExecutionError("labels must be an array of strings", retryable=False)
        fields["labels"] = list(labels)


def _required_param(params: Mapping[str, Any], key: str) -> str:
    value = params.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ActionExecutionError(f"{key} is required (a non-empty string)", retryable=False)
    return value


def _optional_param(params: Mapping[str, Any], key: str) -> str | None:
    value = params.get(key)
    if value is not None and not isinstance(value, str):
        raise ActionExecutionError(f"{key} must be a string", retryable=False)
    return value


def _object_param(params: Mapping[str, Any], key: str) -> Mapping[str, JsonValue]:
    value = params.get(key, {})
    if not isinstance(value, Mapping):
        raise ActionExecutionError(f"{key} must be an object", retryable=False)
    return value


def _path_segment(value: str) -> str:
    return urllib.parse.quote(value, safe="")


_TEXT: dict[str, JsonValue] = {"type": "string", "minLength": 1}
ACTIONS: tuple[ActionDescriptor, ...] = (
    ActionDescriptor(
        "create_issue",
        "Create a Jira issue; returns its id and key.",
        {
            "type": "object",
            "required": ["projectKey", "summary"],
            "properties": {
                "projectKey": _TEXT,
                "summary": _TEXT,
                "issueType": {"type": "string", "default": "Task"},
                "description": {"type": "string", "description": "plain text, sent as Atlassian Document Format"},
                "priority": {"type": "string"},
                "assigneeAccountId": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}},
                "fields": {"type": "object", "description": "more fields, as Jira's create issue takes them"},
            },
        },
    ),
    ActionDescriptor(
        "update_issue",
        "Update fields of a Jira issue.",
        {
            "type": "object",
            "required": ["issueKey"],
            "properties": {
                "issueKey": _TEXT,
                "summary": {"type": "string"},
                "description": {"type": "string"},
                "priority": {"type": "string"},
                "assigneeAccountId": {"type": "string"},
                "labels": {"type": "array", "items": {"type": "string"}},
                "fields": {"type": "object"},
            },
        },
    ),
    ActionDescriptor(
        "add_comment",
        "Add a comment to a Jira issue; returns the comment id.",
        {
            "type": "object",
            "required": ["issueKey", "body"],
            "properties": {"issueKey": _TEXT, "body": {"type": "string", "description": "plain text"}},
        },
    ),
)


RUNNERS: dict[str, Callable[[HttpApiClient, Mapping[str, Any]], dict[str, JsonValue]]] = {
    "create_issue": create_issue,
    "update_issue": update_issue,
    "add_comment": add_comment,
}
"""Each action type's request, by type."""
