"""functions.log_keys_marker.lambda_handler, the CloudFormation custom resource, on the moto server with a real HTTP
server standing in for the presigned response URL: Create writes the marker, Update leaves it (and its stamp) alone,
Delete removes it, and CloudFormation hears back every time -- FAILED with the reason when the table is missing or the
request is malformed, so a deploy never waits an hour for an answer."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

import functions.log_keys_marker as marker_fn
from lakesync.aws.deployment_marker import MarkerRequestError, parse_marker_event
from lakesync.aws.log_chunks import LOG_FORMAT
from lakesync.aws.log_keys import MARKER_GATEWAY, MARKER_SK, FirstKeysGate, write_marker
from lakesync.aws.tables import TableNames
from lakesync.local.front import LambdaContext

EVENTS = Path(__file__).resolve().parent.parent.parent / "events"


class ResponseServer:
    """A local stand-in for CloudFormation's presigned S3 URL: records each PUT (path, headers, JSON body)."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append({"path": self.path, "content_type": self.headers.get("Content-Type"), "body": body})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return None

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/stack%7CLogKeysMarker?X-Amz-Signature=abc"

    def answers(self) -> list[dict[str, Any]]:
        return [json.loads(r["body"]) for r in self.received]


@pytest.fixture
def responses() -> Iterator[ResponseServer]:
    server = ResponseServer()
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def _event(name: str, url: str, table: str, **changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8"))
    event["ResponseURL"] = url
    event["ResourceProperties"]["TableName"] = table
    event.update(changes)
    return event


def _invoke(event: dict[str, Any]) -> None:
    marker_fn.dynamodb.cache_clear()
    context = LambdaContext(
        function_name="lakesync-log_keys_marker",
        aws_request_id="c0ffee00-0000-4000-8000-000000000000",
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:lakesync-log_keys_marker",
        memory_limit_in_mb=256,
    )
    marker_fn.lambda_handler(copy.deepcopy(event), context)


def _marker(client: Any, table: str) -> dict[str, Any] | None:
    key = {"gw": {"S": MARKER_GATEWAY}, "sk": {"S": MARKER_SK}}
    item: dict[str, Any] | None = client.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
    return item


def _answered(server: ResponseServer, event: dict[str, Any], status: str) -> dict[str, Any]:
    (answer,) = server.answers()
    server.received.clear()
    assert answer["Status"] == status, answer
    assert {k: answer[k] for k in ("StackId", "RequestId", "LogicalResourceId")} == {
        k: event[k] for k in ("StackId", "RequestId", "LogicalResourceId")
    }
    return answer


def test_create_update_delete(
    aws_env: None, dynamodb_client: Any, dynamodb_tables: TableNames, responses: ResponseServer
) -> None:
    # Given a deployment whose tables exist, the marker not yet written (an upgrade from an earlier release)
    table = dynamodb_tables.config
    dynamodb_client.delete_item(TableName=table, Key={"gw": {"S": MARKER_GATEWAY}, "sk": {"S": MARKER_SK}})
    # When CloudFormation creates the resource
    create = _event("log_keys_marker_create", responses.url, table)
    _invoke(create)
    # Then the marker holds the grace and the newest chunk layout this release reads, unstamped, and CloudFormation
    # is told, at the URL it gave, with the empty content type the presigned URL is signed for
    assert _marker(dynamodb_client, table) == {
        "gw": {"S": MARKER_GATEWAY},
        "sk": {"S": MARKER_SK},
        "grace_ms": {"N": create["ResourceProperties"]["GraceMs"]},
        "lf": {"N": str(LOG_FORMAT)},
    }
    assert responses.received[0]["path"].endswith("?X-Amz-Signature=abc")
    assert responses.received[0]["content_type"] == ""
    physical = _answered(responses, create, "SUCCESS")["PhysicalResourceId"]
    # When a writer has stamped it and a later deploy updates the resource
    assert not FirstKeysGate(dynamodb_client, table)()
    stamped = _marker(dynamodb_client, table)
    assert stamped is not None and "seen" in stamped
    same = _event("log_keys_marker_create", responses.url, table)["ResourceProperties"]
    _invoke(
        _event(
            "log_keys_marker_create",
            responses.url,
            table,
            RequestType="Update",
            PhysicalResourceId=physical,
            OldResourceProperties=same,
        )
    )
    # Then the marker keeps its stamp
    assert _answered(responses, create, "SUCCESS")["PhysicalResourceId"] == physical
    assert _marker(dynamodb_client, table) == stamped
    # When the resource is deleted (the deploy rolled back)
    delete = _event("log_keys_marker_delete", responses.url, table, PhysicalResourceId=physical)
    _invoke(delete)
    # Then the marker is gone
    assert _answered(responses, delete, "SUCCESS")["PhysicalResourceId"] == physical
    assert _marker(dynamodb_client, table) is None


def test_an_upgrade_to_a_release_reading_a_newer_chunk_layout_restarts_the_grace(
    aws_env: None, dynamodb_client: Any, dynamodb_tables: TableNames, responses: ResponseServer
) -> None:
    # Given a deployment of the release before layout 2: its marker has no layout, and is stamped and open long ago
    table = dynamodb_tables.config
    key = {"gw": {"S": MARKER_GATEWAY}, "sk": {"S": MARKER_SK}}
    dynamodb_client.put_item(TableName=table, Item={**key, "grace_ms": {"N": "3660000"}, "seen": {"N": "5"}})
    assert FirstKeysGate(dynamodb_client, table).log_format() == 1
    # When the upgrade's update reaches the resource (after every function and job), its layout now named
    update = _event("log_keys_marker_update", responses.url, table)
    assert "LogFormat" not in update["OldResourceProperties"]
    _invoke(update)
    # Then CloudFormation is told, and the marker is written afresh: the layout, the grace, no stamp
    _answered(responses, update, "SUCCESS")
    assert _marker(dynamodb_client, table) == {**key, "grace_ms": {"N": "3660000"}, "lf": {"N": str(LOG_FORMAT)}}
    # So writers take the layout up only a grace after they first see it, when no code of the release before runs
    now = [1_800_000_000_000]
    gate = FirstKeysGate(dynamodb_client, table, now_ms=lambda: now[0])
    assert gate.log_format() == 1
    now[0] += 3_660_000
    assert gate.log_format() == LOG_FORMAT


def test_a_create_that_fails_is_reported_and_its_delete_succeeds(
    aws_env: None, dynamodb_client: Any, responses: ResponseServer
) -> None:
    # Given a request naming a table that does not exist
    create = _event("log_keys_marker_create", responses.url, "no-such-table")
    # When CloudFormation creates the resource
    _invoke(create)
    # Then it hears FAILED, with the reason
    answer = _answered(responses, create, "FAILED")
    assert "ResourceNotFoundException" in answer["Reason"]
    # And the Delete CloudFormation sends to roll back succeeds: there is nothing to remove
    delete = _event(
        "log_keys_marker_delete", responses.url, "no-such-table", PhysicalResourceId=answer["PhysicalResourceId"]
    )
    _invoke(delete)
    _answered(responses, delete, "SUCCESS")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"RequestType": "Replace"}, "RequestType must be one of Create, Update, Delete"),
        ({"ResourceProperties": {"TableName": "t"}}, "ResourceProperties.GraceMs must be a whole number"),
        ({"ResourceProperties": {"TableName": "t", "GraceMs": "-5"}}, "GraceMs must be a whole number"),
        ({"ResourceProperties": {"GraceMs": "60000"}}, "ResourceProperties.TableName must name the config table"),
        ({"RequestId": ""}, "StackId, RequestId and LogicalResourceId must be non-empty strings"),
        (
            {"ResourceProperties": {"TableName": "t", "GraceMs": "1", "LogFormat": "two"}},
            "ResourceProperties.LogFormat must be a chunk layout number",
        ),
        (
            {"RequestType": "Update", "OldResourceProperties": {"TableName": "t", "GraceMs": "1", "LogFormat": "0"}},
            "OldResourceProperties.LogFormat must be a chunk layout number",
        ),
    ],
)
def test_a_malformed_request_is_answered_failed_and_writes_nothing(
    aws_env: None, dynamodb_client: Any, dynamodb_tables: TableNames, responses: ResponseServer, change, reason
) -> None:
    # Given a request with something wrong, on tables whose marker is stamped
    table = dynamodb_tables.config
    write_marker(dynamodb_client, table, 1, seen_ms=5)
    before = _marker(dynamodb_client, table)
    event = _event("log_keys_marker_create", responses.url, table)
    event.update(change)
    # When it arrives
    _invoke(event)
    # Then CloudFormation hears FAILED with the reason, and the marker is as it was
    (answer,) = responses.answers()
    assert answer["Status"] == "FAILED" and reason in answer["Reason"]
    assert _marker(dynamodb_client, table) == before


def test_a_request_without_a_response_url_cannot_be_answered() -> None:
    # A request without a URL is not CloudFormation's: the handler raises rather than pretend to answer
    event = json.loads((EVENTS / "log_keys_marker_create.json").read_text(encoding="utf-8"))
    del event["ResponseURL"]
    with pytest.raises(MarkerRequestError, match="ResponseURL"):
        parse_marker_event(event)
    # and the sample events parse as they are
    for name in ("log_keys_marker_create", "log_keys_marker_update", "log_keys_marker_delete"):
        sample = json.loads((EVENTS / f"{name}.json").read_text(encoding="utf-8"))
        parsed = parse_marker_event(sample)
        assert parsed.grace_ms == int(sample["ResourceProperties"]["GraceMs"])
        assert parsed.log_format == LOG_FORMAT
        assert parsed.old_log_format == (1 if name.endswith("update") else None)
