"""Fuzz of ``lakesync local`` from its own OpenAPI document (schemathesis): every operation is called with generated
valid and invalid requests (the document's examples, its coverage cases, then hypothesis-generated cases, both
schema-conforming and schema-violating) carrying valid client or admin tokens, over real HTTP.

Checked per response: no 5xx; the status is documented for the operation; the body and headers conform to the
documented response; and a rejected request (4xx) left every DynamoDB table exactly as it was (all items compared).
Bounded and derandomized: the same cases every run, ~1 minute (``pytest --collect-only`` counts them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from lakesync.api_routes import ROUTES, Route
from lakesync.auth import mint_token
from lakesync.aws.rate_limits import KEY_PREFIX as RATE_COUNTER_PREFIX
from lakesync.aws.tables import TableNames
from lakesync.local.runner import TABLE_PREFIX, LocalStack
from lakesync.openapi import OPERATIONS, build_document

pytestmark = [pytest.mark.integration]

GATEWAY = "default"
CLIENT = "client-a"  # the clientId of the document's push example
MAX_EXAMPLES = 30
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    negative_data_rejection,
    unsupported_method,
]
REJECTIONS = ["400", "401", "403", "404", "405", "406", "409", "413", "415", "422", "428", "429", "5xx"]
_EXAMPLES = {key: op.body_example for key, op in OPERATIONS.items() if op.body_example is not None}


@schemathesis.serializer("application/x-protobuf")
def _protobuf(_ctx: Any, value: Any) -> bytes:
    """Generated protobuf bodies go out as the bytes generated (mostly not a valid message: decoding must 400)."""
    if isinstance(value, bytes):
        return value
    return json.dumps(value).encode() if not isinstance(value, str) else value.encode("utf-8", "surrogatepass")


def _config() -> schemathesis.Config:
    return schemathesis.Config.from_dict(
        {
            "generation": {
                "mode": "all",
                "max-examples": MAX_EXAMPLES,
                "deterministic": True,
                "database": "none",
                # The tokens are ours (valid ones, added to every request); token errors have their own tests.
                "with-security-parameters": False,
            },
            "phases": {
                "examples": {"enabled": True},
                "coverage": {"enabled": True},
                "fuzzing": {"enabled": True},
                "stateful": {"enabled": False},
            },
            # Every case goes to the served gateway (others only reach the token check: tested below).
            "parameters": {"gw": GATEWAY},
            # A schema-violating body is rejected with any documented 4xx. schemathesis's list leaves out 413, which is
            # what an oversized one gets (a deltas array past maxItems is also past the 1 MiB body limit).
            "checks": {"negative_data_rejection": {"expected-statuses": REJECTIONS}},
        }
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with LocalStack(Path(tmp_path_factory.mktemp("fuzz")), port=0, persist=False, materialise=False) as running:
        yield running


class Tables:
    """Every item of every table, to tell whether a request wrote anything."""

    def __init__(self, stack: LocalStack) -> None:
        self.client = stack.dynamodb_client()
        self.names = list(TableNames.with_prefix(TABLE_PREFIX).as_dict().values())
        self.last = self.snapshot()

    def snapshot(self) -> dict[str, list[str]]:
        state = {}
        for name in self.names:
            items: list[str] = []
            kwargs: dict[str, Any] = {"TableName": name, "ConsistentRead": True}
            while True:
                page = self.client.scan(**kwargs)
                # the rate limits' request counters are not data: every request is counted, a refused one too
                data = [i for i in page["Items"] if not i.get("pk", {}).get("S", "").startswith(RATE_COUNTER_PREFIX)]
                items.extend(json.dumps(item, sort_keys=True, default=bytes.hex) for item in data)
                if "LastEvaluatedKey" not in page:
                    break
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
            state[name] = sorted(items)
        return state


@pytest.fixture(scope="module")
def tables(stack: LocalStack) -> Tables:
    return Tables(stack)


def _headers(stack: LocalStack, path: str, *, gw: str = GATEWAY) -> dict[str, str]:
    if path.startswith("/v1/admin/"):
        return {"Authorization": f"Bearer {mint_token('ops', gw, stack.secret, role='admin')}"}
    if path.startswith("/v1/sync/"):
        return {"Authorization": f"Bearer {mint_token(CLIENT, gw, stack.secret)}"}
    return {}


# Built at import: the document is a function of the code, and the server's URL is given per call.
schema = schemathesis.openapi.from_dict(build_document(), config=_config())


# Each operation is a test of its own (tests/conftest.py gives each its node id), run on one pytest-xdist worker with
# the module's stack.
@schema.parametrize()
def test_api_conforms_to_its_document(case: Any, stack: LocalStack, tables: Tables) -> None:
    # Given a generated request with a valid token for the operation
    headers = _headers(stack, case.path)
    # When it is sent
    response = case.call(base_url=stack.url, headers=headers)
    before, after = tables.last, tables.snapshot()
    tables.last = after
    # Then it is no server error, the answer is documented, and a rejected request wrote nothing
    assert response.status_code < 500, f"{case.method} {case.formatted_path} answered {response.status_code}"
    case.validate_response(response, checks=CHECKS, headers=headers)
    if response.status_code >= 400:
        assert after == before, f"{case.method} {case.formatted_path} answered {response.status_code} but wrote"


def test_schema_reference_with_a_non_string_cardinality_is_a_400(stack: LocalStack, tables: Tables) -> None:
    # Found by the fuzz: an unhashable cardinality was looked up in a set (500) before core/schema.py checked its type
    body = {
        "table": "todos",
        "columns": [{"name": "a", "type": "string", "references": {"table": "b", "column": "c", "cardinality": {}}}],
    }
    response = requests.post(
        f"{stack.url}/v1/admin/schema/{GATEWAY}", json=body, headers=_headers(stack, "/v1/admin/"), timeout=30
    )
    assert response.status_code == 400


@pytest.mark.parametrize(
    "route", [r for r in ROUTES if r.path.startswith("/v1/") and "{gw}" in r.path], ids=lambda r: r.route_key
)
def test_tokens_that_do_not_grant_the_route_are_refused_and_write_nothing(
    route: Route, stack: LocalStack, tables: Tables
) -> None:
    # Given the route's path on the served gateway, and tokens that do not grant it: API Gateway refuses a request
    # without a token (401) and its authorizer a badly signed one (403), each with its own body; the function the rest
    path = route.path.replace("{gw}", GATEWAY).replace("{name}", "local")
    bad_signature = {"Authorization": f"Bearer {mint_token(CLIENT, GATEWAY, 'x' * 32)}"}
    denied: dict[str, tuple[dict[str, str], int, object]] = {
        "no token": ({}, 401, {"message": "Unauthorized"}),
        "bad signature": (bad_signature, 403, {"message": "Forbidden"}),
        "other gateway": (_headers(stack, route.path, gw="other"), 403, "FORBIDDEN"),
    }
    if route.path.startswith("/v1/admin/"):
        client = {"Authorization": f"Bearer {mint_token(CLIENT, GATEWAY, stack.secret)}"}
        denied["client on admin"] = (client, 403, "FORBIDDEN")
    for name, (headers, status, answer) in denied.items():
        # When the route is called with a valid body for it
        response = requests.request(
            route.method, stack.url + path, json=_EXAMPLES.get(route.route_key), headers=headers, timeout=30
        )
        # Then it is refused with the documented status and error body, and nothing is written
        assert response.status_code == status, name
        body = response.json()
        assert (body if isinstance(answer, dict) else body["code"]) == answer, name
        after = tables.snapshot()
        assert after == tables.last, name
        tables.last = after
