"""The stack's log-keys marker as a CloudFormation custom resource (:mod:`lakesync.aws.log_keys`).

CloudFormation creates the resource after every function and job of the deploy is updated; the handler then writes
the marker, and deletes it when the resource is deleted (the deploy that created it rolled back, or the stack is
removed). The resource names the newest chunk layout its release reads (``LogFormat``), so a release that reads a
newer one updates it, again after everything else: an update whose ``LogFormat`` differs from the one before writes
the marker afresh, unstamped, so writers take up the layout (and first keys for shards that have none yet) only a
grace after it, once no code of the release before runs. Any other update changes nothing: a marker already seen
keeps its stamp. Whatever happens, CloudFormation gets an answer at the request's presigned ``ResponseURL``: without
one a deploy waits an hour for it.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from botocore.exceptions import ClientError

from lakesync.aws.errors import error_code
from lakesync.aws.log_chunks import LOG_FORMAT
from lakesync.aws.log_keys import MARKER_GATEWAY, MARKER_SK, remove_marker, write_marker

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

logger = logging.getLogger(__name__)

RESPONSE_TIMEOUT_S: Final = 30
_REQUEST_TYPES: Final = ("Create", "Update", "Delete")


class MarkerRequestError(ValueError):
    """The custom resource event is not one this handler can act on."""


@dataclass(frozen=True, slots=True)
class MarkerRequest:
    """One CloudFormation request for the marker resource."""

    request_type: str
    table: str
    grace_ms: int
    response_url: str
    reply: Mapping[str, str]
    """What the response must echo: ``StackId``, ``RequestId``, ``LogicalResourceId``."""
    log_format: int = 1
    """The newest chunk layout the deployed release reads (``LogFormat``; a template without it: 1)."""
    old_log_format: int | None = None
    """An update's ``LogFormat`` before it (``None``: not an update)."""

    @property
    def physical_id(self) -> str:
        return f"{self.table}/{MARKER_GATEWAY}/{MARKER_SK}"


def parse_marker_event(event: Mapping[str, Any]) -> MarkerRequest:
    """Read the request. Raises :class:`MarkerRequestError` naming what is missing or wrong."""
    url = _response_url(event)
    if url is None:
        raise MarkerRequestError("ResponseURL must be an http(s) URL")
    reply = {key: event.get(key) for key in ("StackId", "RequestId", "LogicalResourceId")}
    if not all(isinstance(value, str) and value for value in reply.values()):
        raise MarkerRequestError("StackId, RequestId and LogicalResourceId must be non-empty strings")
    kind = event.get("RequestType")
    if kind not in _REQUEST_TYPES:
        raise MarkerRequestError(f"RequestType must be one of {', '.join(_REQUEST_TYPES)}")
    props = event.get("ResourceProperties")
    props = props if isinstance(props, Mapping) else {}
    table, grace = props.get("TableName"), props.get("GraceMs")
    if not isinstance(table, str) or not table:
        raise MarkerRequestError("ResourceProperties.TableName must name the config table")
    # CloudFormation passes every property as a string.
    if not isinstance(grace, str | int) or not str(grace).isdigit():
        raise MarkerRequestError("ResourceProperties.GraceMs must be a whole number of milliseconds")
    log_format = _log_format(props, "ResourceProperties")
    old = event.get("OldResourceProperties")
    old_log_format = _log_format(old if isinstance(old, Mapping) else {}, "OldResourceProperties")
    return MarkerRequest(
        kind,
        table,
        int(grace),
        url,
        {k: str(v) for k, v in reply.items()},
        log_format=log_format,
        old_log_format=old_log_format if kind == "Update" else None,
    )


def _log_format(props: Mapping[str, Any], where: str) -> int:
    raw = props.get("LogFormat", "1")
    if not isinstance(raw, str | int) or not str(raw).isdigit() or int(raw) < 1:
        raise MarkerRequestError(f"{where}.LogFormat must be a chunk layout number (1 or more)")
    return int(raw)


def _response_url(event: Mapping[str, Any]) -> str | None:
    url = event.get("ResponseURL")
    return url if isinstance(url, str) and url.startswith(("https://", "http://")) else None


def apply_marker_request(request: MarkerRequest, client: DynamoDBClient) -> None:
    """Create: write the marker. Delete: remove it (a table that is gone holds none). Update: write it afresh if the
    release's chunk layout changed, else nothing."""
    changed = request.old_log_format is not None and request.old_log_format != request.log_format
    if request.request_type == "Create" or (request.request_type == "Update" and changed):
        write_marker(client, request.table, request.grace_ms, log_format=min(request.log_format, LOG_FORMAT))
    elif request.request_type == "Delete":
        try:
            remove_marker(client, request.table)
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise


def handle_marker_event(
    event: Mapping[str, Any],
    client: Callable[[], DynamoDBClient],
    *,
    send: Callable[[str, bytes], None] | None = None,
) -> str:
    """Act on one request and answer CloudFormation; returns the status sent (``SUCCESS`` or ``FAILED``).

    A request that cannot be answered (no ``ResponseURL``) raises :class:`MarkerRequestError`. A Delete of a resource
    whose Create failed (its table name unusable) succeeds: there is nothing to remove.
    """
    send = send or _put
    try:
        request = parse_marker_event(event)
    except MarkerRequestError as exc:
        url = _response_url(event)
        if url is None:
            raise
        deleting = event.get("RequestType") == "Delete"
        status = "SUCCESS" if deleting else "FAILED"
        physical = str(event.get("PhysicalResourceId") or event.get("LogicalResourceId") or "log-keys-marker")
        send(url, _body(event, status, str(exc), physical))
        return status
    try:
        apply_marker_request(request, client())
    except Exception as exc:  # CloudFormation must hear of every failure, or the deploy waits an hour
        logger.exception("log-keys marker %s failed", request.request_type)
        send(request.response_url, _body(request.reply, "FAILED", f"{type(exc).__name__}: {exc}", request.physical_id))
        return "FAILED"
    send(request.response_url, _body(request.reply, "SUCCESS", "", request.physical_id))
    return "SUCCESS"


def _body(reply: Mapping[str, Any], status: str, reason: str, physical_id: str) -> bytes:
    document = {
        "Status": status,
        "Reason": reason[:1000] or status,
        "PhysicalResourceId": physical_id,
        "StackId": reply.get("StackId", ""),
        "RequestId": reply.get("RequestId", ""),
        "LogicalResourceId": reply.get("LogicalResourceId", ""),
        "NoEcho": False,
        "Data": {},
    }
    return json.dumps(document).encode("utf-8")


def _put(url: str, body: bytes) -> None:
    # The presigned S3 URL is signed for an empty Content-Type.
    request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": ""})
    with urllib.request.urlopen(request, timeout=RESPONSE_TIMEOUT_S) as response:
        response.read()
