"""Least privilege, checked against what the code really calls: each function's handler (driven by the sample
events on the moto server), a run of the flush function (on moto's DynamoDB, S3, SQS and Glue Data Catalog) and each
job's AWS-side code (the flush store, the schema store, the checkpoint reads and writes, the restore job's restore
of the stack's tables) run with every AWS call
recorded; each call must be allowed by that function's or job's role in the template, and every DynamoDB grant of the
role must be used by some call -- so a role can neither miss a permission its code needs nor keep one it does not.
The Glue flush job is checked in the ``flushEngine: glue`` template, where it exists. The broadcaster is checked on
what it reads of the buffer under rules filtering by a membership table (its sessions table and the management API
are :mod:`lakesync_infra.realtime`'s, checked in ``test_infra_realtime``).

Calls are mapped to IAM actions and resources the way IAM evaluates them: a transaction item needs the item's
action (``PutItem``, ``UpdateItem``...) on its table, a batch needs the batch action on each table, a query on an
index needs the index's ARN. KMS is not visible to the client and is checked by the policy tests instead.
"""

from __future__ import annotations

import fnmatch
import json
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from lakesync.auth import mint_token
from lakesync.aws.tables import TableNames
from lakesync.core.delta import RowDelta
from tests.moto_api import create_glue_job

EVENTS = Path(__file__).resolve().parents[2] / "events"
GW = "default"
SECRET = "infra-access-test-secret-0123456789abcdef"
REGION = "us-east-1"
FAKE = {"region_name": REGION, "aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


class Recorder:
    """Every AWS call made through boto3's default session while registered: ``(service, operation, params)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def __call__(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.service_model.service_name, model.name, json.loads(json.dumps(params, default=str))))


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    rec = Recorder()
    events = boto3._get_default_session().events
    events.register("provide-client-params", rec, unique_id="infra-access-recorder")
    yield rec
    events.unregister("provide-client-params", unique_id="infra-access-recorder")


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, moto_endpoint: str, dynamodb_tables: TableNames) -> dict[str, Any]:
    """The functions' environment on the moto server: fresh tables, a checkpoint bucket, the JWT secret in Secrets
    Manager (read by ARN, as on AWS), a flush threshold of one byte (every push requests a flush) and no
    backpressure."""
    from functions._runtime import reset_runtime
    from lakesync.aws.settings.variables import TABLE_VARS

    for key in list(os.environ):
        if key.startswith(("LAKESYNC_", "AWS_")):
            monkeypatch.delenv(key)
    for key, value in {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }.items():
        monkeypatch.setenv(key, value)
    secrets = boto3.client("secretsmanager", endpoint_url=moto_endpoint, **FAKE)
    arn = secrets.create_secret(Name=f"jwt-{uuid.uuid4().hex[:8]}", SecretString=SECRET)["ARN"]
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    from lakesync.aws.objects import create_bucket

    create_bucket(boto3.client("s3", endpoint_url=moto_endpoint, **FAKE), bucket)
    for kind, var in TABLE_VARS.items():
        monkeypatch.setenv(var, getattr(dynamodb_tables, kind))
    monkeypatch.setenv("LAKESYNC_JWT_SECRET_ARN", arn)
    monkeypatch.setenv("LAKESYNC_GATEWAY_IDS", GW)
    monkeypatch.setenv("LAKESYNC_FLUSH_THRESHOLD_BYTES", "1")
    monkeypatch.setenv("LAKESYNC_BACKPRESSURE_BYTES", str(2**40))
    monkeypatch.setenv("LAKESYNC_CHECKPOINT_BUCKET", bucket)
    reset_runtime()
    yield {
        "tables": dynamodb_tables,
        "secret_arn": arn,
        "bucket": bucket,
        "endpoint": moto_endpoint,
        "monkeypatch": monkeypatch,
    }
    reset_runtime()


def _invoke(
    name: str,
    event_name: str,
    *,
    role: str = "client",
    body: Any = None,
    query: dict[str, str] | None = None,
    path: dict[str, str] | None = None,
) -> int:
    import importlib

    from lakesync.local.front import LambdaContext

    event = json.loads((EVENTS / f"{event_name}.json").read_text(encoding="utf-8"))
    token = mint_token("client-a", GW, SECRET, role=role, ttl_s=600)
    headers = event["headers"]
    if "authorization" in headers:
        headers["authorization"] = headers["authorization"].replace("{{token}}", token)
    if query is not None:
        event["queryStringParameters"] = query
        event["rawQueryString"] = "&".join(f"{k}={v}" for k, v in query.items())
    for param, value in (path or {}).items():
        old = event["pathParameters"][param]
        event["pathParameters"][param] = value
        event["rawPath"] = event["rawPath"].removesuffix(f"/{old}") + f"/{value}"
        event["requestContext"]["http"]["path"] = event["rawPath"]
    if body is not None:
        text = json.dumps(body)
        event["body"], event["isBase64Encoded"] = text, False
        headers["content-length"] = str(len(text.encode()))
    context = LambdaContext(
        function_name=f"lakesync-{name}",
        aws_request_id=str(uuid.uuid4()),
        invoked_function_arn=f"arn:aws:lambda:{REGION}:123456789012:function:lakesync-{name}",
        memory_limit_in_mb=1024,
    )
    reply = importlib.import_module(f"functions.{name}").lambda_handler(event, context)
    return int(reply["statusCode"])


def _forget_rows_applied(env: dict[str, Any]) -> int:
    """Set the sample shard's ``ra`` back to 0: as if the writer of its commits had stopped before their rows."""
    client = boto3.client("dynamodb", endpoint_url=env["endpoint"], **FAKE)
    client.update_item(
        TableName=env["tables"].heads, Key={"shard": {"S": f"{GW}#todos#0"}}, UpdateExpression="SET ra = :z",
        ExpressionAttributeValues={":z": {"N": "0"}},
    )  # fmt: skip
    return 200


def _expire_doubts(env: dict[str, Any]) -> int:
    """Move the sample shard's in-doubt runs (the push after ``_forget_rows_applied`` took the turn over) past their
    ``until``: as if no late batch could land any more; and let a new process serve the next request."""
    from functions._runtime import reset_runtime

    client = boto3.client("dynamodb", endpoint_url=env["endpoint"], **FAKE)
    key = {"shard": {"S": f"{GW}#todos#0"}}
    head = client.get_item(TableName=env["tables"].heads, Key=key, ConsistentRead=True)["Item"]
    runs = [[first, last, 0] for first, last, _ in json.loads(head["dq"]["S"])]
    client.update_item(
        TableName=env["tables"].heads, Key=key, UpdateExpression="SET dq = :dq",
        ExpressionAttributeValues={":dq": {"S": json.dumps(runs)}},
    )  # fmt: skip
    reset_runtime()
    return 200


def _second_push_body(hlc_ms: int = 1_763_000_000_000) -> dict[str, Any]:
    """The sample push with another write to the same row (newer by default): a second commit to the same shard."""
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import encode

    doc = json.loads(json.loads((EVENTS / "push_json.json").read_text(encoding="utf-8"))["body"])
    delta = make_delta(
        "UPDATE", table="todos", row_id="row-1", client_id="client-a", hlc=encode(hlc_ms, 0),
        columns={"done": True},
    )  # fmt: skip
    doc["deltas"] = [delta.to_json()]
    return dict(doc)


def _write_checkpoint(
    bucket: str, endpoint: str, *, positions: dict[str, int] | None = None, server_hlc: int | None = None
) -> None:
    from lakesync.aws.objects import S3ObjectStore
    from lakesync.core.checkpoint import checkpoint_id
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import encode
    from lakesync.core.merge import fold
    from lakesync.gateway.checkpoint import encode_row, write_checkpoint

    t0 = 1_763_000_000_000
    state = fold(
        [make_delta("INSERT", table="todos", row_id="r1", client_id="c1", hlc=encode(t0, 0), columns={"a": 1})]
    )
    assert state is not None
    write_checkpoint(
        S3ObjectStore(bucket, boto3.client("s3", endpoint_url=endpoint, **FAKE)),
        gateway=GW,
        checkpoint_id=checkpoint_id(t0, "0a1b2c3d"),  # the checkpoint events/checkpoint_chunk.json asks for
        created_at_ms=t0,
        positions=positions if positions is not None else {f"{GW}#todos#0": 1},
        server_hlc=server_hlc if server_hlc is not None else encode(t0, 0),
        tables=["todos"],
        rows=[encode_row(state)],
    )


# -- mapping calls to IAM ----------------------------------------------------------------------------------------


def _required(call: tuple[str, str, dict[str, Any]], names: dict[str, str]) -> list[tuple[str, str]]:
    """``(action, resource)`` pairs IAM checks for one call; ``names`` maps physical names to template renderings."""
    service, op, params = call
    if service == "dynamodb":
        return _dynamodb_required(op, params, names)
    if service == "s3":
        bucket = names[params["Bucket"]]
        if op in ("ListObjectsV2", "ListObjects"):
            return [("s3:ListBucket", bucket)]
        action = {"HeadObject": "GetObject"}.get(op, op)
        return [(f"s3:{action}", f"{bucket}/{params['Key']}")]
    if service == "secretsmanager":
        return _secrets_required(op, params, names)
    if service == "scheduler":
        return _scheduler_required(op, params, names)
    if service == "sqs":
        return [(f"sqs:{op}", names[params["QueueUrl"]])]
    if service == "glue":
        if "JobName" in params:
            return [(f"glue:{op}", names[params["JobName"]])]
        return _catalog_required(op, params)
    if service == "lambda" and op == "Invoke":
        return [("lambda:InvokeFunction", names[params["FunctionName"]])]
    if service == "cloudwatch" and op == "PutMetricData":  # no resource-level permissions (namespace: a condition)
        return [("cloudwatch:PutMetricData", "*")]
    raise AssertionError(f"unmapped call {service}.{op}")


def _dynamodb_required(op: str, params: dict[str, Any], names: dict[str, str]) -> list[tuple[str, str]]:
    """A DynamoDB call: a batch's action on each table, a transaction's per-item actions, ``ListTables`` on every
    resource (it has no resource-level permissions), else the table (or index)."""
    if op == "ListTables":
        return [("dynamodb:ListTables", "*")]
    if op in ("BatchGetItem", "BatchWriteItem"):
        return [(f"dynamodb:{op}", names[t]) for t in params["RequestItems"]]
    if op == "TransactWriteItems":
        kinds = {
            "Put": "PutItem",
            "Update": "UpdateItem",
            "Delete": "DeleteItem",
            "ConditionCheck": "ConditionCheckItem",
        }
        return [
            (f"dynamodb:{kinds[kind]}", names[body["TableName"]])
            for item in params["TransactItems"]
            for kind, body in item.items()
        ]
    table = names[params["TableName"]]
    if "IndexName" in params:
        table = f"{table}/index/{params['IndexName']}"
    return [(f"dynamodb:{op}", table)]


def _secrets_required(op: str, params: dict[str, Any], names: dict[str, str]) -> list[tuple[str, str]]:
    """A Secrets Manager call on the secret it names."""
    if op == "CreateSecret":  # tagging at creation needs TagResource too
        secret = _secret_arn(params["Name"], names)
        return [("secretsmanager:CreateSecret", secret)] + (
            [("secretsmanager:TagResource", secret)] if params.get("Tags") else []
        )
    return [(f"secretsmanager:{op}", _secret_arn(params["SecretId"], names))]


def _scheduler_required(op: str, params: dict[str, Any], names: dict[str, str]) -> list[tuple[str, str]]:
    """An EventBridge Scheduler call on the schedule, and passing the schedule's role when it sets a target."""
    schedule = f"{ARN_PREFIX}scheduler:<AWS::Region>:<AWS::AccountId>:schedule/{params['GroupName']}/{params['Name']}"
    required = [(f"scheduler:{op}", schedule)]
    if "Target" in params:  # the schedule's role is passed to EventBridge Scheduler
        required.append(("iam:PassRole", names[params["Target"]["RoleArn"]]))
    return required


ARN_PREFIX = "arn:<AWS::Partition>:"
GLUE_ARN = f"{ARN_PREFIX}glue:<AWS::Region>:<AWS::AccountId>:"


def _catalog_required(op: str, params: dict[str, Any]) -> list[tuple[str, str]]:
    """A Glue Data Catalog call: the action on the catalog, the database and (for a table's call) the table."""
    if op.endswith(("Database", "Databases")):
        database, table = params.get("Name") or params["DatabaseInput"]["Name"], None
    else:
        database, table = params["DatabaseName"], params.get("Name") or params["TableInput"]["Name"]
    resources = [f"{GLUE_ARN}catalog", f"{GLUE_ARN}database/{database}"]
    if table is not None:
        resources.append(f"{GLUE_ARN}table/{database}/{table}")
    return [(f"glue:{op}", resource) for resource in resources]


def _secret_arn(secret_id: str, names: dict[str, str]) -> str:
    """A secret's ARN as the template spells it: the JWT secret by its logical id, others (a connector's, by name or
    by moto's ARN) under the account's ``secret:`` prefix (a name gets the random suffix Secrets Manager appends)."""
    if secret_id in names:
        return names[secret_id]
    prefix = f"{ARN_PREFIX}secretsmanager:<AWS::Region>:<AWS::AccountId>:secret:"
    if secret_id.startswith("arn:"):
        return prefix + secret_id.split(":secret:", 1)[1]
    return f"{prefix}{secret_id}-AbCdEf"


def _allows(granted: list[tuple[str, str]], action: str, resource: str) -> bool:
    return any(fnmatch.fnmatchcase(action, a) and fnmatch.fnmatchcase(resource, r) for a, r in granted)


def _names(env: dict[str, Any], ids: dict[str, str]) -> dict[str, str]:
    tables: TableNames = env["tables"]
    names = {physical: f"<{ids[f'table:{kind}']}.Arn>" for kind, physical in tables.as_dict().items()}
    names[env["bucket"]] = f"<{ids['bucket:checkpoints']}.Arn>"
    names[env["secret_arn"]] = f"<{ids['secret:jwt']}>"
    return names


def _check(
    cfn: Any, role: str, calls: list[tuple[str, str, dict[str, Any]]], names: dict[str, str]
) -> tuple[set[tuple[str, str]], list[tuple[str, str]]]:
    """The calls' required pairs, and those the role does not allow."""
    granted = cfn.allowed(role)
    required = {pair for call in calls for pair in _required(call, names)}
    return required, sorted(pair for pair in required if not _allows(granted, *pair))


def _dynamodb_grants(cfn: Any, role: str) -> set[tuple[str, str]]:
    return {(a, r) for a, r in cfn.allowed(role) if a.startswith("dynamodb:")}


# -- the functions ---------------------------------------------------------------------------------------------


def _claim_idempotency_key(env: dict[str, Any]) -> None:
    """Another action holds the sample action's idempotency key: the sample claims its id, then releases it."""
    from lakesync.aws.action_store import DynamoDBActionStore

    client = boto3.client("dynamodb", endpoint_url=env["endpoint"], **FAKE)
    assert DynamoDBActionStore(client, env["tables"]).claim(GW, "client-a", "idem:issue-42", 2**40, 0)


def _since_session(env: dict[str, Any]) -> None:
    """client-a pulls `since` (its session starts) and pushes a delete, which queues the row for redelivery."""
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import encode

    assert _invoke("pull", "pull") < 300
    doc = _second_push_body()
    doc["deltas"] = [
        make_delta(
            "DELETE", table="todos", row_id="row-1", client_id="client-a", hlc=encode(1_763_000_000_001, 0)
        ).to_json()
    ]
    assert _invoke("push", "push_json", body=doc) < 300


def _pulled_since(env: dict[str, Any]) -> None:
    """client-a has a `since` session, so its push records what it hands out."""
    assert _invoke("pull", "pull") < 300


# -- connectors: a test type with an ingest source and actions, registered through the admin route ----------------

CONNECTOR = "tix"
SCHEDULER_ROLE_ARN = "arn:aws:iam::123456789012:role/lakesync-connector-schedules"
POLL_FUNCTION_ARN = f"arn:aws:lambda:{REGION}:123456789012:function:lakesync-connector_poll"
SCHEDULER_VARS = (
    "LAKESYNC_CONNECTOR_SCHEDULE_GROUP",
    "LAKESYNC_CONNECTOR_POLL_FUNCTION_ARN",
    "LAKESYNC_CONNECTOR_SCHEDULER_ROLE_ARN",
)


class _Feed:
    """An ingest source: one new row per poll, and a position too large for one item at the test's chunk size (so
    the position's chunk reads, writes and deletes all happen)."""

    name = CONNECTOR

    def poll(self, position: Any, limit: int) -> Any:
        from lakesync.connectors.base import ChangedRow, PollBatch

        n = int(position.get("n", 0))
        row = ChangedRow("todos", f"feed-{n}", {"title": f"ticket {n}", "done": False}, str(n), {"n": n})
        return PollBatch([row], {"n": n + 1, "pad": os.urandom(160).hex()})

    def close(self) -> None:
        pass


class _Tickets:
    """An action handler: creates a ticket."""

    name = CONNECTOR

    def __init__(self) -> None:
        from lakesync.core.actions import ActionDescriptor

        self.supported_actions = (ActionDescriptor("create", "Create a ticket"),)

    def execute(self, action: Any, context: Any) -> Any:
        from lakesync.core.actions import ActionResult

        return ActionResult(action.action_id, {"id": 1}, 7)


@pytest.fixture
def connector_type(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test connector type (its token a credential field), and position chunks of 64 bytes."""
    from lakesync.aws import connector_positions
    from lakesync.connectors import registry
    from lakesync.connectors.base import Connector, ConnectorTypeDescriptor

    descriptor = ConnectorTypeDescriptor(
        type=CONNECTOR,
        display_name="Tickets (test)",
        description="A test connector with an ingest source and actions",
        category="api",
        config_schema={"type": "object"},
        ingest_schema={"type": "object"},
        secret_fields=("apiToken",),
    )
    registry.register(descriptor, lambda config, secrets: Connector(config.name, ingest=_Feed(), actions=_Tickets()))
    monkeypatch.setattr(connector_positions, "CHUNK_BYTES", 64)
    yield
    registry.unregister(CONNECTOR)


def _connector_body() -> dict[str, Any]:
    return {
        "name": CONNECTOR,
        "type": CONNECTOR,
        CONNECTOR: {"apiToken": "plaintext-token-0123456789"},
        "ingest": {
            "intervalMs": 60_000,
            "tables": [{"table": "todos", "query": "tickets", "strategy": {"type": "diff"}}],
        },
        # clients may run its `create` (actions are off for clients without a policy)
        "actions": {"allow": [{"type": "create"}], "requireRole": "client"},
    }


def _schedule_group(cfn: Any) -> str:
    (group,) = cfn.of_type("AWS::Scheduler::ScheduleGroup").values()
    return str(group["Name"])


def _admin_schedules(env: dict[str, Any]) -> None:
    """The admin function's connector variables, as the stack sets them (the group exists, as the stack makes it)."""
    from botocore.exceptions import ClientError

    group = env["schedule_group"]
    for var, value in zip(SCHEDULER_VARS, (group, POLL_FUNCTION_ARN, SCHEDULER_ROLE_ARN), strict=True):
        env["monkeypatch"].setenv(var, value)
    env["monkeypatch"].setenv("LAKESYNC_CONNECTOR_SECRET_PREFIX", env["secret_prefix"])
    try:
        boto3.client("scheduler", endpoint_url=env["endpoint"], **FAKE).create_schedule_group(Name=group)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ConflictException":
            raise


def _poll(env: dict[str, Any]) -> int:
    """One scheduled poll of the test connector: 200 when it polled and the gateway applied its row."""
    import functions.connector_poll as connector_poll
    from lakesync.local.front import LambdaContext

    context = LambdaContext(function_name="p", aws_request_id=str(uuid.uuid4()), invoked_function_arn=POLL_FUNCTION_ARN)
    result = connector_poll.lambda_handler({"gateway": GW, "connector": CONNECTOR}, context)
    return 200 if result["status"] == "polled" and result["applied"] == 1 else 500


def _registered(env: dict[str, Any]) -> None:
    """The test connector registered through the admin route (its token moved into Secrets Manager, its schedule
    created) and polled once (its position, in chunks, at version 1)."""
    from functions._runtime import reset_runtime

    _admin_schedules(env)
    reset_runtime()
    _invoke("admin", "admin_connectors_delete", role="admin", path={"name": CONNECTOR})  # left by an earlier test
    assert _invoke("admin", "admin_connectors_post", role="admin", body=_connector_body()) < 300
    assert _poll(env) == 200


def _registered_for_poll(env: dict[str, Any]) -> None:
    """Registered and polled; then the poll function's own environment (no scheduler variables: only admin's)."""
    _registered(env)
    for var in SCHEDULER_VARS:
        env["monkeypatch"].delenv(var)


def _registered_with_idempotency_key(env: dict[str, Any]) -> None:
    _registered_for_poll(env)
    _claim_idempotency_key(env)


def _ticket_action() -> dict[str, Any]:
    """An action of the registered connector that its handler runs (and whose provenance row it pushes)."""
    from lakesync.core.actions import make_action

    action = make_action("client-a", 1_763_000_000_000 << 16, CONNECTOR, "create", {"title": "Bug"})
    return {"clientId": "client-a", "actions": [action.to_json()]}


SETUP: dict[str, Callable[[dict[str, Any]], None]] = {
    "actions": _registered_with_idempotency_key,
    "pull": _since_session,
    "push": _pulled_since,
    "admin": _registered,
    "connector_poll": _registered_for_poll,
}

_MATERIALISE_ADMIN = tuple(
    name
    for name in ("admin_materialise_post", "admin_materialise_get", "admin_materialise_delete")
    if (EVENTS / f"{name}.json").exists()
)
"""The destination routes' samples (add, list, remove), as they land beside the routes."""


def _two_chunk_push_body() -> dict[str, Any]:
    """The sample push with 49 new rows of two tables: two chunks (one per table's shard), whose heads (backpressure)
    and rows (growth) are read before the first commit."""
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import encode

    doc = json.loads(json.loads((EVENTS / "push_json.json").read_text(encoding="utf-8"))["body"])
    doc["deltas"] = [
        make_delta(
            "INSERT", table=("todos", "notes")[i % 2], row_id=f"bulk-{i}", client_id="client-a",
            hlc=encode(1_763_000_000_000, i),
            columns={"title": f"row {i}"},
        ).to_json()
        for i in range(49)
    ]  # fmt: skip
    return dict(doc)


SCENARIOS: dict[str, Callable[[dict[str, Any]], list[int]]] = {
    "push": lambda env: [
        _invoke("push", "push_json"),
        _invoke("push", "push_json", body=_two_chunk_push_body()),
        _forget_rows_applied(env),
        # the rows of the first commit seem unwritten (its writer stopped): this push folds them from the log, waits
        # for them briefly, then takes the turn over (the commits in doubt: recorded, their rows at alternate keys)
        _invoke("push", "push_json", body=_second_push_body()),
        # once no late batch can land, a push in a new process retires them: their record read, rows copied back,
        # record and alternate rows deleted
        _expire_doubts(env),
        _invoke("push", "push_json", body=_second_push_body(hlc_ms=1_763_000_000_001)),
        # a delta that loses to the row (its row is not written, so its deltaId gets a record of its own)
        _invoke("push", "push_json", body=_second_push_body(hlc_ms=1_700_000_000_000)),
    ],
    # a since pull of a client with a session (and rows to redeliver), one without (positions found by commit
    # HLC: clientId other than the token's), and a cursor pull
    "pull": lambda env: [
        _invoke("pull", "pull"),
        _invoke("pull", "pull", query={"since": "1", "clientId": "another-device", "limit": "100"}),
        _invoke("pull", "pull_cursor"),
    ],
    # the sample action (no handler for it) and discovery, then an action the registered connector runs (its
    # provenance row pushed through the push service)
    "actions": lambda env: [
        _invoke("actions", "action"),
        _invoke("actions", "actions"),
        _invoke("actions", "action", body=_ticket_action()),
    ],
    # a poll from a position in chunks: the chunks read, the lease taken, the row and its provenance pushed, the new
    # position's chunks written, the head committed, the old chunks deleted
    "connector_poll": lambda env: [_poll(env)],
    "admin": lambda env: (
        [
            _invoke("admin", name, role="admin")
            for name in (
                "admin_sync_rules_post",
                "admin_sync_rules_get",
                "admin_sync_rules_test",
                "admin_schema_post",
                "admin_schema_get",
                "admin_flush",
                "admin_metrics",
                "admin_explain",
                *_MATERIALISE_ADMIN,
                "admin_connectors_get",
                "connector_types",
            )
        ]
        # the registered connector removed (its schedule, its position in chunks, its secret), then registered again
        + [
            _invoke("admin", "admin_connectors_delete", role="admin", path={"name": CONNECTOR}),
            _invoke("admin", "admin_connectors_post", role="admin", body=_connector_body()),
        ]
    ),
    "checkpoint": lambda env: [_invoke("checkpoint", "checkpoint"), _invoke("checkpoint", "checkpoint_chunk")],
}
"""Per function: the requests that exercise every store call it makes (after a first push seeded the buffer)."""


CONNECTOR_CALLS = {
    "admin": {
        ("secretsmanager", "CreateSecret"),
        ("secretsmanager", "GetSecretValue"),
        ("secretsmanager", "DeleteSecret"),
        ("scheduler", "CreateSchedule"),
        ("scheduler", "DeleteSchedule"),
    },
    "actions": {("secretsmanager", "GetSecretValue")},
    "connector_poll": {("secretsmanager", "GetSecretValue")},
}
"""The connector calls each scenario must make (so the grants above are exercised, not just allowed)."""
PUSHES_THROUGH_PUSH = ("actions", "connector_poll")
"""Functions that push through the push service (action provenance; polled rows and their provenance): they hold
push's table grants, whose every one the push scenario proves needed."""


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_function_role_allows_exactly_what_its_handler_calls(cfn, ids, aws, recorder, connector_type, name):
    # Given table schemas, a seeded buffer (one push; not for the push function, which starts a shard itself) and
    # a checkpoint in the bucket
    assert _invoke("admin", "admin_schema_post", role="admin") < 300
    if name != "push":
        assert _invoke("push", "push_json") < 300
    _write_checkpoint(aws["bucket"], aws["endpoint"])
    aws["schedule_group"] = _schedule_group(cfn)
    aws["secret_prefix"] = _env_var(cfn, "connector_poll", "LAKESYNC_CONNECTOR_SECRET_PREFIX")
    SETUP.get(name, lambda env: None)(aws)
    from functions._runtime import reset_runtime

    reset_runtime()
    recorder.calls.clear()
    # When the function serves its requests, every AWS call recorded
    statuses = SCENARIOS[name](aws)
    # Then the requests succeeded, and made the connector calls the scenario is for
    assert all(status < 300 for status in statuses), statuses
    assert CONNECTOR_CALLS.get(name, set()) <= {(service, op) for service, op, _ in recorder.calls}
    # And the function's role allows every call it made
    role = cfn.role_of(cfn.functions()[name])
    names = _names(aws, ids) | {SCHEDULER_ROLE_ARN: f"<{ids['role:connector_schedules']}.Arn>"}
    required, missing = _check(cfn, role, recorder.calls, names)
    assert not missing, f"used but not granted: {missing}"
    # And every DynamoDB permission of the role was needed by some call (push's grants, of a function pushing
    # through the push service, by the push scenario)
    used = {pair for pair in required if pair[0].startswith("dynamodb:")}
    unused = sorted(g for g in _dynamodb_grants(cfn, role) if not any(_allows([g], *pair) for pair in used))
    if name in PUSHES_THROUGH_PUSH:
        # the push really happened (action provenance failures are only logged): it wrote a log item
        assert _wrote_log_item(recorder.calls, aws["tables"].deltas)
        unused = sorted(set(unused) - _dynamodb_grants(cfn, cfn.role_of(cfn.functions()["push"])))
    assert not unused, f"granted but never used: {unused}"


def _wrote_log_item(calls: list[tuple[str, str, dict[str, Any]]], deltas: str) -> bool:
    """Whether ``calls`` wrote to the log: a commit's put."""
    return any(
        service == "dynamodb" and op == "PutItem" and params["TableName"] == deltas for service, op, params in calls
    )


def _env_var(cfn: Any, function: str, var: str) -> str:
    return str(cfn.functions()[function]["Environment"]["Variables"][var])


def _membership_broadcast(env: dict[str, Any], *, released: bool) -> tuple[str, dict[str, Any]]:
    """Under rules reading ``tasks`` by project membership (with a stream whose parameter a membership checks), a
    connected client and an admin's write of its membership: the sessions table and the stream event of that write.
    ``released``: an earlier membership is in the gateway's checkpoint and released from the log."""
    from functions._runtime import get_deps
    from lakesync.aws.connections import DynamoDBConnectionStore
    from lakesync.aws.settings.variables import CONNECTIONS_TABLE
    from lakesync.aws.table_setup import create_tables
    from lakesync.core.delta import make_delta
    from lakesync.core.hlc import HLC
    from lakesync.core.messages import SyncPush
    from lakesync.core.realtime import Connection, Encoding
    from lakesync.core.rules import parse_sync_rules
    from lakesync.gateway.push import push
    from tests.ddb_stream import Stream
    from tests.integration.test_local_memberships import RULES

    client = boto3.client("dynamodb", endpoint_url=env["endpoint"], **FAKE)
    sessions = f"{env['tables'].deltas}-connections"
    create_tables(client, env["tables"], connections=sessions)
    env["monkeypatch"].setenv(CONNECTIONS_TABLE, sessions)
    get_deps().config.put_sync_rules(GW, parse_sync_rules(RULES))
    now = int(time.time())
    ann = Connection("ann-1", GW, "ann", {"sub": "ann"}, Encoding.BASE64, now + 600, now)
    DynamoDBConnectionStore(client, sessions).put_connection(ann)
    clock = HLC()

    def member(project: str) -> RowDelta:
        row = make_delta(
            "INSERT", table="memberships", row_id=f"ann-{project}", client_id="ops", hlc=clock.now(),
            columns={"user": "ann", "project": project},
        )  # fmt: skip
        assert push(get_deps(), GW, SyncPush("ops", (row,), 0), client_id="ops", trusted=True).accepted == 1
        return row

    if released:
        _release_in_checkpoint(env, member("p0"))
    stream = Stream(env["endpoint"], client, env["tables"].deltas)
    member("p1")
    return sessions, stream.event()


def _release_in_checkpoint(env: dict[str, Any], row: RowDelta) -> None:
    """A checkpoint of ``row``'s shard at its first entry, and the entry released from the log (as the flush does)."""
    from lakesync.aws.buffer.items import HeadAttr
    from lakesync.aws.objects import S3ObjectStore
    from lakesync.core.checkpoint import checkpoint_id
    from lakesync.core.merge import fold
    from lakesync.gateway.checkpoint import encode_row, write_checkpoint

    shard = f"{GW}#{row.table}#0"
    state = fold([row])
    assert state is not None
    write_checkpoint(
        S3ObjectStore(env["bucket"], boto3.client("s3", endpoint_url=env["endpoint"], **FAKE)),
        gateway=GW, checkpoint_id=checkpoint_id(int(time.time() * 1000), "0b1c2d3e"),
        created_at_ms=int(time.time() * 1000), positions={shard: 1}, server_hlc=row.hlc, tables=[row.table],
        rows=[encode_row(state)],
    )  # fmt: skip
    boto3.client("dynamodb", endpoint_url=env["endpoint"], **FAKE).update_item(
        TableName=env["tables"].heads, Key={"shard": {"S": shard}},
        UpdateExpression=f"SET {HeadAttr.RELEASED_SEQ} = :one", ExpressionAttributeValues={":one": {"N": "1"}},
    )  # fmt: skip


@pytest.mark.parametrize("released", [False, True], ids=["log", "checkpoint"])
def test_broadcaster_role_allows_exactly_what_reading_membership_tables_calls(cfn, ids, aws, recorder, released):
    # Given a client connected under rules filtering by a membership table, and a write of its membership (an earlier
    # one, with `released`, in the checkpoint and released from the log)
    from functions import ws_broadcast
    from functions._runtime import reset_runtime
    from lakesync.local.front import LambdaContext
    from tests.management_api import management_api

    sessions, event = _membership_broadcast(aws, released=released)
    with management_api() as api:
        api.connect("ann-1")
        aws["monkeypatch"].setenv("LAKESYNC_WS_CALLBACK_URL", api.url)
        reset_runtime()
        recorder.calls.clear()
        # When the broadcaster serves the write's stream record, every AWS call recorded
        context = LambdaContext(function_name="b", aws_request_id=str(uuid.uuid4()), invoked_function_arn="arn:b")
        assert ws_broadcast.lambda_handler(event, context) == {"batchItemFailures": []}
    # Then it read the membership table (the client got a pull-now notice: its scope moved)
    assert len(api.sent("ann-1")) == 1
    # And, leaving out the sessions table and the management API (lakesync_infra.realtime's grants, checked in
    # test_infra_realtime), the role allows every call it made
    role = cfn.role_of(cfn.functions()["ws_broadcast"])
    calls = [
        call for call in recorder.calls if call[0] != "apigatewaymanagementapi" and call[2].get("TableName") != sessions
    ]
    required, missing = _check(cfn, role, calls, _names(aws, ids))
    assert not missing, f"used but not granted: {missing}"
    # (with the log released, the membership table was read from the checkpoint: its pointer, manifest and chunk)
    read = sorted(params["Key"] for service, op, params in calls if (service, op) == ("s3", "GetObject"))
    assert len(read) == (3 if released else 0) and all(key.startswith(f"checkpoints/{GW}/") for key in read)
    # And every DynamoDB permission of the role on the buffer tables was needed by some call
    used = {pair for pair in required if pair[0].startswith("dynamodb:")}
    buffer = {f"<{ids[f'table:{kind}']}.Arn>" for kind in aws["tables"].as_dict()}
    grants = {g for g in _dynamodb_grants(cfn, role) if g[1].split("/index/")[0] in buffer}
    unused = sorted(g for g in grants if not any(_allows([g], *pair) for pair in used))
    assert not unused, f"granted but never used: {unused}"


def test_health_calls_nothing_and_may_do_nothing_but_log_and_trace(cfn, aws, recorder):
    # Given the health function
    # When it serves its request
    assert _invoke("health", "health") == 200
    # Then it made no AWS call, and its role holds only logging and tracing
    assert recorder.calls == []
    role = cfn.role_of(cfn.functions()["health"])
    assert {a.split(":")[0] for a, _ in cfn.allowed(role)} == {"logs", "xray"}


# -- the jobs' AWS-side code -------------------------------------------------------------------------------------


def _job_role(cfn: Any, ids: dict[str, str], kind: str) -> str:
    return str(cfn.resources[ids[f"job:{kind}"]]["Properties"]["Role"]["Fn::GetAtt"][0])


def test_flush_job_role_allows_exactly_what_the_flush_store_calls(glue_cfn, glue_ids, aws, recorder):
    # Given a buffer with committed entries and a flush request (a push over the one-byte threshold), and the Glue
    # flush job (flushEngine glue)
    cfn, ids = glue_cfn, glue_ids
    assert _invoke("push", "push_json") < 300
    from lakesync.aws.checkpoints import read_release_bounds
    from lakesync.aws.flush_store import DynamoConfig, FlushStore, ShardRange

    recorder.calls.clear()
    store = FlushStore.from_config(DynamoConfig(aws["tables"], endpoint_url=aws["endpoint"], region=REGION))
    # When the job's store does every step of a run: lease, shards and heads, read, advance, release, clear
    assert store.acquire_lease("run-1", 1_000, 60_000)
    assert store.renew_lease("run-1", 2_000, 60_000)
    assert store.lease() is not None
    gateways, heads = store.shards([GW])
    ((shard, head),) = heads.items()
    rng = ShardRange(shard.key, 0, head.seq)
    assert store.read_records(rng) and store.range_bytes(rng) > 0
    assert store.advance_flushed(shard, head.flushed_seq, head.seq, 1, 1)
    target = store.release_target(shard, head.seq, 2**62)
    assert target is not None
    store.mark_released(shard, *target)
    store.clear_flush_requests(gateways, 2**62)
    store.release_lease("run-1")
    read_release_bounds(aws["bucket"], [GW], endpoint_url=aws["endpoint"], region_name=REGION)
    # Then the flush job's role allows every call, and uses every DynamoDB grant
    role = _job_role(cfn, ids, "flush")
    required, missing = _check(cfn, role, recorder.calls, _names(aws, ids))
    assert not missing, f"used but not granted: {missing}"
    used = {pair for pair in required if pair[0].startswith("dynamodb:")}
    unused = sorted(g for g in _dynamodb_grants(cfn, role) if not any(_allows([g], *p) for p in used))
    assert not unused, f"granted but never used: {unused}"


def test_compact_and_checkpoint_job_roles_allow_their_stores_calls(cfn, ids, aws, recorder):
    # Given table schemas in the config table and a checkpoint in the bucket
    assert _invoke("admin", "admin_schema_post", role="admin") < 300
    from lakesync.aws.config_store import DynamoDBConfigStore
    from lakesync.aws.objects import S3ObjectStore
    from lakesync.core.checkpoint import load_manifest

    recorder.calls.clear()
    # When the compaction job reads the schemas
    client = boto3.client("dynamodb", endpoint_url=aws["endpoint"], **FAKE)
    assert DynamoDBConfigStore(client, aws["tables"]).get_schemas(GW)
    compact_calls = list(recorder.calls)
    recorder.calls.clear()
    # And the checkpoint job reads the latest manifest and writes a checkpoint
    objects = S3ObjectStore(aws["bucket"], boto3.client("s3", endpoint_url=aws["endpoint"], **FAKE))
    assert load_manifest(objects.get, GW) is None
    _write_checkpoint(aws["bucket"], aws["endpoint"])
    checkpoint_calls = list(recorder.calls)
    # Then each job's role allows its calls, and the compaction role's DynamoDB grants are all used
    names = _names(aws, ids)
    required, missing = _check(cfn, _job_role(cfn, ids, "compact"), compact_calls, names)
    assert not missing, f"used but not granted: {missing}"
    assert _dynamodb_grants(cfn, _job_role(cfn, ids, "compact")) == required
    _, missing = _check(cfn, _job_role(cfn, ids, "checkpoint"), checkpoint_calls, names)
    assert not missing, f"used but not granted: {missing}"
    assert _dynamodb_grants(cfn, _job_role(cfn, ids, "checkpoint")) == set()


# -- the AWS-side functions: their client calls, read from the code -----------------------------------------------


def _client_operations(module: str) -> set[str]:
    """API operations a module calls on a boto3 client (``self.client.get_job_runs`` -> ``GetJobRuns``)."""
    import ast
    import importlib

    source = Path(importlib.import_module(module).__file__ or "").read_text(encoding="utf-8")
    ops = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "client":
            if not node.attr.startswith("_") and node.attr not in ("meta", "exceptions"):
                ops.add("".join(part.capitalize() for part in node.attr.split("_")))
    return ops


def test_flush_trigger_may_make_every_glue_call_of_its_starter_on_the_flush_job_only(glue_cfn, glue_ids):
    # Given the Glue operations the job starter calls, and the flush as the Glue job (flushEngine glue)
    cfn, ids = glue_cfn, glue_ids
    ops = _client_operations("lakesync.aws.jobs")
    assert "StartJobRun" in ops
    # Then the flush trigger's role allows each of them on the flush job, and no Glue action anywhere else
    granted = cfn.allowed(cfn.role_of(cfn.functions()["flush_trigger"]))
    job = f"arn:<AWS::Partition>:glue:<AWS::Region>:<AWS::AccountId>:job/<{ids['job:flush']}>"
    glue = {(a, r) for a, r in granted if a.startswith("glue:")}
    assert glue == {(f"glue:{op}", job) for op in ops}
    # And it may invoke no function, and writes no table (it reads the config stream only)
    assert not [a for a, _ in granted if a.startswith("lambda:")]
    writes = ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem")
    assert not [a for a, _ in granted if a.startswith("dynamodb:") and a.endswith(writes)]


class _Invokes:
    """Lambda's ``Invoke`` for a starter (moto would run the function in Docker): each call recorded into the
    recorder as the client would, the first ``refusals`` refused (throttled)."""

    def __init__(self, recorder: Recorder, refusals: int = 0) -> None:
        self.recorder = recorder
        self.refusals = refusals

    def invoke(self, **params: Any) -> dict[str, Any]:
        from botocore.exceptions import ClientError

        self.recorder.calls.append(("lambda", "Invoke", {k: v for k, v in params.items() if k != "Payload"}))
        if self.refusals:
            self.refusals -= 1
            raise ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "Rate exceeded"}}, "Invoke")
        return {"StatusCode": 202}


def _old_runs(env: dict[str, Any], count: int) -> None:
    """``count`` finished runs of the flush function recorded long ago (the records kept are the newest)."""
    from lakesync.aws.flush_runs import FlushRunLog, new_run_id

    records = FlushRunLog(boto3.client("dynamodb", endpoint_url=env["endpoint"], **FAKE), env["tables"])
    for i in range(count):
        run = new_run_id(1_000_000 + i)
        records.queued(run, 1_000_000 + i)
        records.finished(run, True, 1_000_001 + i)


@pytest.mark.parametrize("engine", ["auto", "function"])
def test_flush_trigger_role_allows_exactly_what_starting_the_flush_function_calls(request, engine, aws, recorder):
    # Given a flush request on the stream after a push (a shard with a small backlog), the trigger configured as the
    # stack configures it (the flush function's name and timeout, the tables; by default also the Glue flush job, on
    # moto, and the backlog limit), the function's runs recorded up to the number kept, and Lambda throttling the
    # first Invoke
    import functions.flush_trigger as trigger_fn
    from lakesync.aws.jobs import glue_client
    from lakesync.local.front import LambdaContext

    deploying = request.getfixturevalue("synth" if engine == "auto" else "function_synth")
    cfn, ids = deploying.cfn, deploying.ids
    fn = cfn.functions()["flush_trigger"]
    variables = fn["Environment"]["Variables"]
    flush_name = "lakesync-dev-flush"
    aws["monkeypatch"].setenv("LAKESYNC_FLUSH_FUNCTION_NAME", flush_name)
    aws["monkeypatch"].setenv("LAKESYNC_FLUSH_FUNCTION_TIMEOUT_S", str(variables["LAKESYNC_FLUSH_FUNCTION_TIMEOUT_S"]))
    names = _names(aws, ids) | {flush_name: f"<{ids['function:flush']}.Arn>"}
    if "LAKESYNC_FLUSH_JOB_NAME" in variables:
        job = f"lakesync-flush-{uuid.uuid4().hex[:8]}"
        create_glue_job(glue_client(), job)
        aws["monkeypatch"].setenv("LAKESYNC_FLUSH_JOB_NAME", job)
        limit = variables["LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG"]
        aws["monkeypatch"].setenv("LAKESYNC_FLUSH_FUNCTION_MAX_BACKLOG", limit)
        names[job] = f"arn:<AWS::Partition>:glue:<AWS::Region>:<AWS::AccountId>:job/<{ids['job:flush']}>"
    assert _invoke("push", "push_json") < 300
    _old_runs(aws, 30)
    trigger_fn.get_starter.cache_clear()
    starter = trigger_fn.get_starter()
    starter.engines["function"].client = _Invokes(recorder, refusals=1)  # type: ignore[attr-defined]
    starter.poll_interval_s = 0.01  # the wait after the refusal
    now = int(time.time() * 1000)
    event = {
        "Records": [
            {
                "eventName": "INSERT",
                "dynamodb": {"SequenceNumber": "1", "NewImage": {"gw": {"S": GW}, "sk": {"S": f"flush#{now:015d}#a"}}},
            }
        ]
    }
    context = LambdaContext(function_name="t", aws_request_id="r", invoked_function_arn="arn:aws:lambda:::function:t")
    recorder.calls.clear()
    try:
        # When the batch arrives: the first Invoke is refused (recorded as failed, the oldest record pruned), the
        # trigger waits and queues the run
        out = trigger_fn.lambda_handler(event, context)
    finally:
        trigger_fn.get_starter.cache_clear()
    # Then a run was queued on the function (the backlog is small) and nothing is left for a retry
    assert out == {"batchItemFailures": []}
    assert [op for service, op, _ in recorder.calls if service == "lambda"] == ["Invoke", "Invoke"]
    # And the trigger's role allows every call it made, invoking the flush function only (and, by default, reading
    # the Glue flush job's runs), and uses every DynamoDB grant
    role = cfn.role_of(fn)
    required, missing = _check(cfn, role, recorder.calls, names)
    assert not missing, f"used but not granted: {missing}"
    assert {(a, r) for a, r in cfn.allowed(role) if a.startswith("lambda:")} == {
        ("lambda:InvokeFunction", f"<{ids['function:flush']}.Arn>")
    }
    used = {pair for pair in required if pair[0].startswith("dynamodb:")}
    tables = {g for g in _dynamodb_grants(cfn, role) if g[0] != "dynamodb:ListStreams" and "StreamArn" not in g[1]}
    unused = sorted(g for g in tables if not any(_allows([g], *p) for p in used))
    assert not unused, f"granted but never used (the stream's reads aside): {unused}"
    if engine == "auto":
        assert {op for service, op, _ in recorder.calls if service == "glue"} == {"GetJobRuns"}
    else:
        assert not [a for a, _ in cfn.allowed(role) if a.startswith("glue:")]


@pytest.mark.parametrize("engine", ["auto", "function", "glue"])
def test_lake_tick_role_allows_exactly_what_its_ticks_call(request, engine, aws, recorder, monkeypatch):
    # Given two commits to one shard (each push records a flush request), flushed and published; a checkpoint that
    # covers the first entry only, with a serverHlc above both; the Glue jobs on moto -- and where the flush function
    # is deployed its runs recorded up to the number kept and Lambda throttling the first Invoke; and a tick a day
    # past the retention, so that every read the tick can make is made: the release step's target lies past the
    # checkpoint
    deploying = request.getfixturevalue({"auto": "synth", "function": "function_synth", "glue": "glue_synth"}[engine])
    with_function = "function" in deploying.engines
    cfn, ids = deploying.cfn, deploying.ids
    assert _invoke("push", "push_json") < 300
    assert _invoke("push", "push_json", body=_second_push_body()) < 300
    from lakesync.aws.flush_store import FlushStore
    from lakesync.aws.jobs import glue_client
    from lakesync.core.hlc import encode
    from lakesync.core.lake_work import DEFAULT_RETENTION_MS, JOB_KINDS

    store = FlushStore(boto3.client("dynamodb", endpoint_url=aws["endpoint"], **FAKE), aws["tables"])
    _, heads = store.shards([GW])
    ((shard, head),) = heads.items()
    assert head.seq == 2
    store.advance_flushed(shard, 0, head.seq, 1, head.seq)
    store.advance_published(shard, head.seq)
    now = time.time_ns() // 1_000_000
    _write_checkpoint(aws["bucket"], aws["endpoint"], positions={shard.key: 1}, server_hlc=encode(now + 86_400_000, 0))
    glue = glue_client()
    jobs = {kind: f"lakesync-{kind}-{uuid.uuid4().hex[:8]}" for kind in JOB_KINDS if f"job:{kind}" in ids}
    flush_name = "lakesync-dev-flush"
    if with_function:
        tick_env = cfn.functions()["lake_tick"]["Environment"]["Variables"]
        monkeypatch.setenv("LAKESYNC_FLUSH_FUNCTION_NAME", flush_name)
        monkeypatch.setenv("LAKESYNC_FLUSH_FUNCTION_TIMEOUT_S", str(tick_env["LAKESYNC_FLUSH_FUNCTION_TIMEOUT_S"]))
        _old_runs(aws, 30)
    for kind, name in jobs.items():
        create_glue_job(glue, name)
        monkeypatch.setenv(f"LAKESYNC_{kind.upper()}_JOB_NAME", name)
    monkeypatch.setenv("LAKESYNC_FLUSH_PUBLISHES", "true")
    import functions.lake_tick as lake_tick
    from lakesync.local.front import LambdaContext

    lake_tick.get_tick.cache_clear()
    tick = lake_tick.get_tick()
    tick.now_ms = lambda: now + DEFAULT_RETENTION_MS + 86_400_000
    if with_function:
        tick.runners["flush"].engines["function"].client = _Invokes(recorder, refusals=1)  # type: ignore[attr-defined]
    recorder.calls.clear()
    # When each schedule ticks (the flush's twice with the function: its first Invoke is refused; the backlog is small,
    # so with both engines the function is chosen)
    context = LambdaContext(function_name="t", aws_request_id="r", invoked_function_arn="arn:aws:lambda:::function:t")
    outcomes = {}
    for kind in ("flush", *JOB_KINDS) if with_function else JOB_KINDS:
        outcomes[kind] = lake_tick.lambda_handler({"job": kind}, context)["outcome"]
    lake_tick.get_tick.cache_clear()
    # Then each job had work (the flush a request and a release, compaction a flushed lag)
    assert outcomes["flush"] == outcomes["compact"] == "started"
    # And the tick's role allows every call it made, and uses every DynamoDB grant
    names = _names(aws, ids) | {
        name: f"arn:<AWS::Partition>:glue:<AWS::Region>:<AWS::AccountId>:job/<{ids[f'job:{kind}']}>"
        for kind, name in jobs.items()
    }
    if with_function:
        names[flush_name] = f"<{ids['function:flush']}.Arn>"
    role = cfn.role_of(cfn.functions()["lake_tick"])
    required, missing = _check(cfn, role, recorder.calls, names)
    assert not missing, f"used but not granted: {missing}"
    assert {op for service, op, _ in recorder.calls if service in ("s3", "glue", "lambda")} == {
        "GetObject",
        "HeadObject",
        "GetJobRuns",
        "StartJobRun",
        *(["Invoke"] if with_function else []),
    }
    used = {pair for pair in required if pair[0].startswith("dynamodb:")}
    unused = sorted(g for g in _dynamodb_grants(cfn, role) if not any(_allows([g], *p) for p in used))
    assert not unused, f"granted but never used: {unused}"


def test_rotation_function_may_make_every_secrets_manager_call_of_its_rotator_on_the_jwt_secret(cfn, ids):
    # Given the Secrets Manager operations the rotator calls
    ops = _client_operations("lakesync.aws.rotation")
    assert {"PutSecretValue", "UpdateSecretVersionStage"} <= ops
    # Then the rotation function's role allows each of them on the JWT secret
    granted = cfn.allowed(cfn.role_of(cfn.functions()["rotate_secret"]))
    missing = [op for op in ops if not _allows(granted, f"secretsmanager:{op}", f"<{ids['secret:jwt']}>")]
    assert not missing, f"used but not granted: {missing}"


# -- the flush function: a run on moto's DynamoDB, S3, SQS and Glue Data Catalog ----------------------------------


def _physical(ids: dict[str, str], resources: dict[str, str]) -> Callable[[str], str]:
    """Renders a template ``Ref`` as the physical name the test created for it (``resources``: id key -> name)."""
    by_logical = {ids[key]: name for key, name in resources.items()}
    return lambda logical: by_logical[logical]


def test_flush_function_role_allows_exactly_what_a_run_calls(cfn, ids, aws, recorder):
    # Given a schema and a destination (so the run publishes), pushed deltas, a checkpoint, and on moto the lake
    # bucket, its Glue database (the stack creates it), a claim-check bucket and the materialisation queue
    from pyiceberg.catalog.glue import GlueCatalog

    from lakesync.aws.config_store import DynamoDBConfigStore
    from lakesync.aws.flush_function import FlushFunction
    from lakesync.aws.flush_store import FlushStore
    from lakesync.aws.objects import create_bucket
    from lakesync.aws.settings.lake import FlushFunctionSettings
    from lakesync.aws.settings.variables import LAKE_NAMESPACE
    from lakesync.core.destinations import parse_destination
    from lakesync.core.hlc import encode
    from lakesync.core.lake_work import DEFAULT_RETENTION_MS

    endpoint = aws["endpoint"]
    assert _invoke("admin", "admin_schema_post", role="admin") < 300
    assert _invoke("push", "push_json") < 300
    assert _invoke("push", "push_json", body=_second_push_body()) < 300
    _write_checkpoint(aws["bucket"], aws["endpoint"])
    secret = f"arn:aws:secretsmanager:{REGION}:123456789012:secret:lakesync/dev/destinations/pg-AbCdEf"
    DynamoDBConfigStore(boto3.client("dynamodb", endpoint_url=endpoint, **FAKE), aws["tables"]).add_destination(
        GW, parse_destination({"name": "pg", "type": "postgres", "secretArn": secret, "tables": ["todos"]})
    )
    lake, claims = f"lake-{uuid.uuid4().hex[:12]}", f"claims-{uuid.uuid4().hex[:12]}"
    for bucket in (lake, claims):
        create_bucket(boto3.client("s3", endpoint_url=endpoint, **FAKE), bucket)
    queue_url = boto3.client("sqs", endpoint_url=endpoint, **FAKE).create_queue(QueueName=f"m-{uuid.uuid4().hex[:8]}")[
        "QueueUrl"
    ]
    database = f"lakesync_dev_{uuid.uuid4().hex[:8]}"
    glue = boto3.client("glue", endpoint_url=endpoint, **FAKE)
    glue.create_database(DatabaseInput={"Name": database})
    # And the function's environment as the template sets it, each token resolved to the resource made for it
    resources = {f"table:{kind}": name for kind, name in aws["tables"].as_dict().items()}
    resources |= {"bucket:warehouse": lake, "bucket:checkpoints": aws["bucket"], "bucket:claim_check": claims}
    resources["queue:materialise"] = queue_url
    fn = cfn.functions()["flush"]
    ref = _physical(ids, resources)
    env = {k: cfn.render(v, ref) for k, v in fn["Environment"]["Variables"].items() if k != LAKE_NAMESPACE}
    env |= {LAKE_NAMESPACE: database, "AWS_REGION": REGION}
    settings = FlushFunctionSettings.from_env(env)
    assert (settings.warehouse, settings.catalog) == (f"s3://{lake}/warehouse", "glue")
    # (the catalog the function makes, but on moto: its Glue client recorded, its S3 file IO on the moto server)
    catalog = GlueCatalog(
        "lake",
        boto3.client("glue", endpoint_url=endpoint, **FAKE),
        **{
            "warehouse": settings.warehouse,
            "s3.endpoint": endpoint,
            "s3.region": REGION,
            "s3.access-key-id": FAKE["aws_access_key_id"],
            "s3.secret-access-key": FAKE["aws_secret_access_key"],
        },
    )
    recorder.calls.clear()
    # When the function runs the flush (the first run creates the delta log); then, after another push, a checkpoint
    # covering the first entry and a day past the retention, again: it meets the lease held by another run, waits
    # for it, flushes and releases the buffer's entry
    clock = {"now": time.time_ns() // 1_000_000}
    holder = FlushStore(boto3.client("dynamodb", endpoint_url=endpoint, **FAKE), aws["tables"])

    def other_run_ends(_seconds: float) -> None:
        mark = len(recorder.calls)
        holder.release_lease("another-run")
        del recorder.calls[mark:]  # the other run's call, not this one's

    service = FlushFunction(settings, catalog=catalog, now_ms=lambda: clock["now"], sleep=other_run_ends)
    first = service.flush(None, lambda: 900_000)
    calls = list(recorder.calls)
    assert _invoke("push", "push_json", body=_second_push_body(hlc_ms=1_763_000_000_500)) < 300
    shard = f"{GW}#todos#0"
    _write_checkpoint(aws["bucket"], endpoint, positions={shard: 1}, server_hlc=encode(clock["now"] + 86_400_000, 0))
    clock["now"] += DEFAULT_RETENTION_MS + 86_400_000
    assert holder.acquire_lease("another-run", clock["now"], 600_000)
    recorder.calls.clear()
    second = service.flush(None, lambda: 900_000)
    calls += recorder.calls
    # Then both flushed and published, the second released, and the delta log's files are in the lake bucket under
    # the warehouse prefix (pyarrow writes them, not boto3: the role's object grants there are checked in
    # test_infra_flush)
    assert (first["deltas"], second["deltas"]) == (2, 1)
    assert first["published_jobs"] >= 1 and second["released"]
    listed = boto3.client("s3", endpoint_url=endpoint, **FAKE).list_objects_v2(Bucket=lake)["Contents"]
    assert listed and all(o["Key"].startswith(f"warehouse/{database}.db/deltas/") for o in listed)
    # And the role allows every call the run made (the template's database token read as the database made here)
    database_token = cfn.render(fn["Environment"]["Variables"][LAKE_NAMESPACE])
    granted = [(a, r.replace(database_token, database)) for a, r in cfn.allowed(cfn.role_of(fn))]
    names = _names(aws, ids) | {lake: f"<{ids['bucket:warehouse']}.Arn>", claims: f"<{ids['bucket:claim_check']}.Arn>"}
    names[queue_url] = f"<{ids['queue:materialise']}.Arn>"
    required = {pair for call in calls for pair in _required(call, names)}
    missing = sorted(pair for pair in required if not _allows(granted, *pair))
    assert not missing, f"used but not granted: {missing}"
    # And every Glue grant was needed: the database read (and its creation tried: it exists), the delta log loaded,
    # created and committed
    catalog_used = {a for a, _ in required if a.startswith("glue:")}
    assert catalog_used == {a for a, _ in granted if a.startswith("glue:")}
    database_actions = {"glue:GetDatabase", "glue:CreateDatabase"}
    assert catalog_used == database_actions | {"glue:GetTable", "glue:CreateTable", "glue:UpdateTable"}
    # And every DynamoDB grant was needed
    used = {pair for pair in required if pair[0].startswith("dynamodb:")}
    unused = sorted(g for g in _dynamodb_grants(cfn, cfn.role_of(fn)) if not any(_allows([g], *p) for p in used))
    assert not unused, f"granted but never used: {unused}"


def test_restore_job_role_allows_exactly_what_a_restore_replacing_the_stacks_tables_calls(
    cfn, ids, aws, recorder, tmp_path
):
    # Given the stack's tables holding a flushed commit (a pyiceberg lake in tmp_path), a commit the lake does not
    # hold, and an item in every table, and the restore job
    from lakesync.aws.flush_store import DynamoConfig, FlushStore
    from lakesync.aws.objects import S3ObjectStore
    from lakesync.aws.tables import table_specs
    from lakesync.lake.catalog import local_catalog
    from lakesync.lake.flush import FlushConfig, run_flush
    from lakesync.lake.iceberg_flush import IcebergDeltaLog
    from lakesync.lake.restore_job import restore_buffer
    from lakesync.lake.restore_reader import IcebergLakeReader

    tables: TableNames = aws["tables"]
    client = boto3.client("dynamodb", endpoint_url=aws["endpoint"], **FAKE)
    assert _invoke("push", "push_json") < 300
    catalog = local_catalog(tmp_path / "catalog.db", tmp_path / "warehouse")
    store = FlushStore(client, tables)
    config = FlushConfig(DynamoConfig(tables), gateways=(GW,))
    run_flush(IcebergDeltaLog(catalog, config, reader=store.read_records), config, store=store)
    assert _invoke("push", "push_json", body=_second_push_body()) < 300
    for spec in table_specs(tables):
        types = {a["AttributeName"]: a["AttributeType"] for a in spec["AttributeDefinitions"]}
        key = {k["AttributeName"]: {types[k["AttributeName"]]: "0" if types[k["AttributeName"]] == "N" else "x"}
               for k in spec["KeySchema"]}  # fmt: skip
        client.put_item(TableName=spec["TableName"], Item=key)
    recorder.calls.clear()

    # When the job's code restores the gateway into them as on AWS: replacing them, losing the unflushed commit,
    # creating no table, cutting a checkpoint
    (report,) = restore_buffer(
        client,
        tables,
        IcebergLakeReader(catalog),
        [GW],
        objects=S3ObjectStore(aws["bucket"], boto3.client("s3", endpoint_url=aws["endpoint"], **FAKE)),
        replace=True,
        lose_unflushed=True,
        create_missing=False,
        settle_s=0,
    )
    assert report.rows and report.at_risk.deltas == 1 and report.checkpoint_id

    # Then the restore job's role allows every call, and uses every DynamoDB grant
    role = str(cfn.resources[ids["job:restore"]]["Properties"]["Role"]["Fn::GetAtt"][0])
    required, missing = _check(cfn, role, recorder.calls, _names(aws, ids))
    assert not missing, f"used but not granted: {missing}"
    used = {pair for pair in required if pair[0].startswith("dynamodb:")}
    unused = sorted(g for g in _dynamodb_grants(cfn, role) if not any(_allows([g], *p) for p in used))
    assert not unused, f"granted but never used: {unused}"
