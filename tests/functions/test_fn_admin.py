"""Admin routes through functions.admin.lambda_handler: every route's happy path from its sample event, the admin
role, and invalid documents (400, nothing stored); materialisation destinations registered, listed and unregistered
(409 / 404), a DELETE through the local HTTP front, and no credential in any response or log line.
"""

from __future__ import annotations

import json

import pytest

import functions.admin as admin_fn
import functions.push as push_fn

ADMIN_EVENTS = [
    "admin_sync_rules_post",
    "admin_sync_rules_get",
    "admin_schema_post",
    "admin_schema_get",
    "admin_flush",
    "admin_metrics",
    "admin_materialise_get",
    "admin_materialise_post",
    "admin_materialise_delete",
]


def test_admin_sync_rules_roundtrip(api):
    # Given the sample rules saved
    saved = api.call(admin_fn, api.event("admin_sync_rules_post", token=api.admin_token()))
    # When read back
    got = api.call(admin_fn, api.event("admin_sync_rules_get", token=api.admin_token()))
    # Then they are the saved document
    assert (saved.status, saved.json()) == (200, {"saved": True})
    assert got.status == 200
    assert got.json() == json.loads(api.event("admin_sync_rules_post")["body"])


def test_admin_sync_rules_default_to_an_empty_rule_set(api):
    got = api.call(admin_fn, api.event("admin_sync_rules_get", token=api.admin_token()))
    assert got.json() == {"version": 1, "buckets": []}


def test_admin_schema_roundtrip_and_version(api):
    # Given the sample schema saved twice (the second time unchanged)
    first = api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token()))
    again = api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token()))
    listed = api.call(admin_fn, api.event("admin_schema_get", token=api.admin_token()))
    # Then it is version 1 both times and listed with its columns
    assert first.json() == again.json() == {"saved": True, "table": "todos", "version": 1}
    schema = json.loads(api.event("admin_schema_post")["body"])
    assert listed.json() == {"schemas": [{"version": 1, "schema": schema}]}


def test_admin_schema_then_push_with_unknown_column_is_422(api):
    # Given the sample schema for todos
    api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token()))
    body = json.loads(api.event("push_json")["body"])
    body["deltas"][0]["columns"].append({"column": "priority", "value": 1})
    before = api.items()
    # When a push carries a column outside it, Then 422 SCHEMA_ERROR and nothing written
    reply = api.call(push_fn, api.event("push_json", body=body))
    assert reply.status == 422 and reply.json()["code"] == "SCHEMA_ERROR"
    assert api.items() == before


def test_admin_flush_records_a_request_seen_in_metrics(api):
    # Given a committed push and a flush request
    api.call(push_fn, api.event("push_json"))
    flushed = api.call(admin_fn, api.event("admin_flush", token=api.admin_token()))
    # When the metrics are read
    metrics = api.call(admin_fn, api.event("admin_metrics", token=api.admin_token())).json()
    # Then the request and the buffered delta are counted
    assert flushed.status == 200 and flushed.json()["flushed"] is True and flushed.json()["requestId"]
    assert metrics["pendingFlushRequests"] == 1
    assert metrics["logSize"] == 1 and metrics["tables"][0]["table"] == "todos"
    # And the flush lag names that delta, its commit read from the log on DynamoDB (the data a restore would lose)
    lag = metrics["flushLag"]
    ((shard,),) = [lag["shards"]]
    assert (lag["unflushedDeltas"], shard["table"], shard["unflushedDeltas"]) == (1, "todos", 1)
    assert lag["oldestCommitHlc"] == shard["oldestCommitHlc"] is not None
    assert lag["oldestCommitAgeSeconds"] is not None and 0 <= lag["oldestCommitAgeSeconds"] < 60


@pytest.mark.parametrize("name", ADMIN_EVENTS)
def test_admin_routes_refuse_client_tokens(api, name):
    before = api.items()
    reply = api.call(admin_fn, api.event(name, token=api.token()))
    assert (reply.status, reply.json()) == (403, {"error": "Admin role required", "code": "FORBIDDEN"})
    assert api.items() == before


@pytest.mark.parametrize("name", ADMIN_EVENTS)
def test_admin_routes_refuse_admins_of_other_gateways(api, name):
    reply = api.call(admin_fn, api.event(name, token=api.admin_token(gw="other")))
    assert reply.status == 403
    assert reply.json()["error"] == "Gateway ID mismatch: JWT authorises a different gateway"


@pytest.mark.parametrize(
    ("name", "raw", "status", "code"),
    [
        ("admin_sync_rules_post", "{", 400, "VALIDATION_ERROR"),
        ("admin_sync_rules_post", '{"version": 1, "buckets": [{"name": ""}]}', 400, "VALIDATION_ERROR"),
        ("admin_schema_post", '{"table": "1bad", "columns": []}', 400, "SCHEMA_ERROR"),
        ("admin_schema_post", '{"columns": []}', 400, "SCHEMA_ERROR"),
        ("admin_schema_post", "null", 400, "SCHEMA_ERROR"),
        ("admin_materialise_post", "{", 400, "VALIDATION_ERROR"),
        ("admin_materialise_post", "[]", 400, "VALIDATION_ERROR"),
        ("admin_materialise_post", '{"name": "a", "type": "postgres"}', 400, "VALIDATION_ERROR"),
        ("admin_materialise_post", '{"name": "a", "type": "sqlite", "url": "x", "extra": 1}', 400, "VALIDATION_ERROR"),
    ],
    ids=[
        "rules-json",
        "rules-invalid",
        "schema-table",
        "schema-missing",
        "schema-null",
        "dest-json",
        "dest-array",
        "dest-no-secret",
        "dest-unknown-field",
    ],
)
def test_admin_invalid_documents_are_400_and_not_stored(api, name, raw, status, code):
    reply = api.call(admin_fn, api.event(name, token=api.admin_token(), body=raw))
    assert reply.status == status and reply.json()["code"] == code
    assert api.items()["config"] == 0


def test_admin_schema_unsafe_evolution_is_400(api):
    api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token()))
    retyped = {"table": "todos", "columns": [{"name": "title", "type": "number"}]}
    reply = api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token(), body=retyped))
    assert reply.status == 400 and reply.json()["code"] == "SCHEMA_ERROR"


# -- materialisation destinations ----------------------------------------------------------------------------------


def _delete_event(api, name: str, token: str) -> dict:
    event = api.event("admin_materialise_delete", token=token)
    event["rawPath"] = event["requestContext"]["http"]["path"] = f"/v1/admin/materialise/default/{name}"
    event["pathParameters"] = {"gw": "default", "name": name}
    return event


def test_admin_materialise_register_list_unregister(api):
    document = json.loads(api.event("admin_materialise_post")["body"])
    # Given the sample destination registered
    registered = api.call(admin_fn, api.event("admin_materialise_post", token=api.admin_token()))
    listed = api.call(admin_fn, api.event("admin_materialise_get", token=api.admin_token()))
    # Then it is listed as sent
    assert (registered.status, registered.json()) == (200, {"registered": True, "name": "analytics"})
    assert (listed.status, listed.json()) == (200, {"destinations": [document]})
    assert listed.headers["Cache-Control"] == "no-store"
    # When it is unregistered, Then the list is empty and a second DELETE is 404
    removed = api.call(admin_fn, api.event("admin_materialise_delete", token=api.admin_token()))
    assert (removed.status, removed.json()) == (200, {"unregistered": True, "name": "analytics"})
    listed = api.call(admin_fn, api.event("admin_materialise_get", token=api.admin_token()))
    assert listed.json() == {"destinations": []}
    again = api.call(admin_fn, api.event("admin_materialise_delete", token=api.admin_token()))
    assert (again.status, again.json()) == (404, {"error": 'Destination "analytics" not found', "code": "NOT_FOUND"})
    assert api.items()["config"] == 0


def test_admin_materialise_lists_destinations_by_name(api):
    for name in ("zeta", "Alpha", "beta"):
        body = {"name": name, "type": "sqlite", "url": f"sqlite:///data/{name}.db"}
        assert api.call(admin_fn, api.event("admin_materialise_post", token=api.admin_token(), body=body)).status == 200
    listed = api.call(admin_fn, api.event("admin_materialise_get", token=api.admin_token())).json()
    assert [d["name"] for d in listed["destinations"]] == ["Alpha", "beta", "zeta"]
    # Another gateway's admin sees only its own (none)
    other = api.event("admin_materialise_get", token=api.admin_token(gw="other"), gateway="other")
    assert api.call(admin_fn, other).json() == {"destinations": []}


def test_admin_materialise_name_taken_is_409(api):
    api.call(admin_fn, api.event("admin_materialise_post", token=api.admin_token()))
    before = api.items()
    body = {"name": "analytics", "type": "sqlite", "url": "sqlite:///other.db"}
    reply = api.call(admin_fn, api.event("admin_materialise_post", token=api.admin_token(), body=body))
    assert (reply.status, reply.json()) == (
        409,
        {"error": 'Destination "analytics" already exists', "code": "VALIDATION_ERROR"},
    )
    assert api.items() == before
    assert api.call(admin_fn, api.event("admin_materialise_get", token=api.admin_token())).json() == {
        "destinations": [json.loads(api.event("admin_materialise_post")["body"])]
    }


@pytest.mark.parametrize("name", ["nope", "a%20b", "x" * 300, "..%2Frules"])
def test_admin_materialise_unknown_destination_is_404(api, name):
    reply = api.call(admin_fn, _delete_event(api, name, api.admin_token()))
    assert reply.status == 404 and reply.json()["code"] == "NOT_FOUND"
    assert reply.json()["error"].startswith('Destination "') and reply.json()["error"].endswith('" not found')
    assert len(reply.json()["error"]) < 100


def test_admin_materialise_delete_with_a_client_token_keeps_the_destination(api):
    api.call(admin_fn, api.event("admin_materialise_post", token=api.admin_token()))
    reply = api.call(admin_fn, api.event("admin_materialise_delete", token=api.token()))
    assert reply.status == 403
    assert (
        len(api.call(admin_fn, api.event("admin_materialise_get", token=api.admin_token())).json()["destinations"]) == 1
    )


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app:Hunter2-Secret@db.internal:5432/app",
        "postgresql://db.internal:5432/app?sslmode=require&password=Hunter2-Secret",
        "mysql://db.internal/app?auth_token=Hunter2-Secret",
    ],
)
def test_admin_materialise_credentials_are_refused_and_never_echoed_or_logged(api, capsys, caplog, url):
    # Given a destination whose url carries a password
    body = {"name": "leaky", "type": "postgres" if url.startswith("postgres") else "mysql", "url": url}
    reply = api.call(admin_fn, api.event("admin_materialise_post", token=api.admin_token(), body=body))
    # Then it is refused pointing to secretArn, nothing is stored, and the password is nowhere in the reply or logs
    assert reply.status == 400 and reply.json()["code"] == "VALIDATION_ERROR"
    assert "secretArn" in reply.json()["error"]
    assert api.items()["config"] == 0
    logged = capsys.readouterr()
    for text in (reply.body.decode(), json.dumps(reply.headers), logged.out, logged.err, caplog.text):
        assert "Hunter2" not in text
    assert "request rejected" in logged.out + caplog.text  # the rejection is logged (the check above is not vacuous)


def test_admin_materialise_responses_and_logs_hold_no_secret_values(api, capsys, caplog):
    # A stored destination is returned as its ARN and a password-free url only; the logs carry neither body
    api.call(admin_fn, api.event("admin_materialise_post", token=api.admin_token()))
    listed = api.call(admin_fn, api.event("admin_materialise_get", token=api.admin_token()))
    (destination,) = listed.json()["destinations"]
    assert set(destination) <= {"name", "type", "secretArn", "url", "tables"}
    assert "@" not in destination["url"]
    logged = capsys.readouterr()
    for text in (logged.out, logged.err, caplog.text):
        assert "rds.amazonaws.com" not in text


def test_admin_materialise_delete_through_the_local_http_front(api):
    # The local front turns any HTTP method into an event; a DELETE reaches the route like on API Gateway
    import http.client

    from lakesync.local.front import LocalFront

    api.call(admin_fn, api.event("admin_materialise_post", token=api.admin_token()))
    with LocalFront(admin_fn.lambda_handler) as front:
        connection = http.client.HTTPConnection("127.0.0.1", front.port, timeout=10)
        try:
            headers = {"Authorization": f"Bearer {api.admin_token()}"}
            connection.request("DELETE", "/v1/admin/materialise/default/analytics", headers=headers)
            response = connection.getresponse()
            deleted = (response.status, json.loads(response.read()))
            connection.request("DELETE", "/v1/admin/materialise/default/analytics", headers=headers)
            response = connection.getresponse()
            again = (response.status, json.loads(response.read()))
        finally:
            connection.close()
    assert deleted == (200, {"unregistered": True, "name": "analytics"})
    assert again == (404, {"error": 'Destination "analytics" not found', "code": "NOT_FOUND"})


def test_admin_materialise_wrong_method_is_405_listing_delete(api):
    event = api.event("admin_materialise_delete", token=api.admin_token())
    event["requestContext"]["http"]["method"] = "GET"
    reply = api.call(admin_fn, event)
    assert reply.status == 405 and reply.headers["Allow"] == "DELETE"
    event = api.event("admin_materialise_get", token=api.admin_token())
    event["requestContext"]["http"]["method"] = "DELETE"
    reply = api.call(admin_fn, event)
    assert reply.status == 405 and reply.headers["Allow"] == "GET, POST"


# -- bounds of stored documents and unsafe evolution (issue 11, part 7) -------------------------------------------


def _big_rules(buckets: int, filters: int, value: str) -> dict:
    return {
        "version": 1,
        "buckets": [
            {"name": f"b{b}", "tables": ["todos"], "filters": [{"column": "c", "op": "eq", "value": value}] * filters}
            for b in range(buckets)
        ],
    }


@pytest.mark.parametrize(
    ("document", "status", "error"),
    [
        # 726 KB of rules (before: 500, DynamoDB refused the item)
        (_big_rules(300, 30, "x" * 43), 400, "Sync rules may have at most 256 buckets; got 300"),
        (_big_rules(1, 65, "v"), 400, 'Bucket "b0" may have at most 64 filters'),
        (_big_rules(250, 30, "x" * 60), 413, None),
    ],
    ids=["buckets-726KB", "filters", "size"],
)
def test_admin_sync_rules_beyond_the_bounds_are_refused_and_not_stored(api, document, status, error):
    event = api.event("admin_sync_rules_post", token=api.admin_token(), body=document)
    if status == 400 and error.startswith("Sync rules may"):
        assert len(event["body"]) >= 725_000  # the size of the adversarial run's document
    reply = api.call(admin_fn, event)
    body = reply.json()
    assert (reply.status, body["code"]) == (status, "VALIDATION_ERROR")
    if error is not None:
        assert body["error"] == error
    else:
        assert body["error"].startswith("Sync rules document is ") and body["error"].endswith("the limit is 307,200")
    assert api.items()["config"] == 0


def test_admin_schema_of_20000_columns_is_400_and_not_stored(api):
    # Given a schema of 20,000 columns (before: 500, DynamoDB refused the item)
    doc = {"table": "wide", "columns": [{"name": f"c{i}", "type": "string"} for i in range(20_000)]}
    reply = api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token(), body=doc))
    # Then 400 SCHEMA_ERROR, nothing stored
    assert reply.status == 400
    assert reply.json() == {"error": "A schema may have at most 1,000 columns; wide has 20,000", "code": "SCHEMA_ERROR"}
    assert api.items()["config"] == 0


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"primaryKey": ["title"]}, 'Cannot change primaryKey from ["row_id"] to ["title"]'),
        ({"softDelete": False}, "Cannot change softDelete from true to false"),
        ({"sourceTable": "tasks"}, 'Cannot change sourceTable from "todos" to "tasks"'),
    ],
    ids=["primaryKey", "softDelete", "sourceTable"],
)
def test_admin_schema_changing_key_delete_or_source_is_an_unsafe_evolution(api, change, error):
    # Given the sample schema stored (version 1)
    assert api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token())).status == 200
    schema = json.loads(api.event("admin_schema_post")["body"])
    # When a new version changes how its rows are keyed, deleted or fed (before: accepted as version 2)
    reply = api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token(), body={**schema, **change}))
    # Then 400 SCHEMA_ERROR and version 1 stays
    assert reply.status == 400 and reply.json() == {"error": error, "code": "SCHEMA_ERROR"}
    listed = api.call(admin_fn, api.event("admin_schema_get", token=api.admin_token())).json()
    assert listed == {"schemas": [{"version": 1, "schema": schema}]}


def test_admin_schema_reference_with_an_object_cardinality_is_400(api):
    # (before: 500, the cardinality was looked up in a set)
    ref = {"table": "b", "column": "c", "cardinality": {}}
    doc = {"table": "todos", "columns": [{"name": "a", "type": "string", "references": ref}]}
    reply = api.call(admin_fn, api.event("admin_schema_post", token=api.admin_token(), body=doc))
    assert (reply.status, reply.json()["code"]) == (400, "SCHEMA_ERROR")
    assert api.items()["config"] == 0
