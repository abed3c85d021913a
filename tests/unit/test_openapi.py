"""The OpenAPI document: generated from the route table (a route without a description fails), valid OpenAPI 3.1,
its examples valid against its own schemas, its error statuses those of the error classes, docs/api.md in sync."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema_rs
import pytest
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from lakesync import openapi
from lakesync.api_routes import ROUTES, Route
from lakesync.core import errors

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"
DOC = openapi.build_document()


def _operations():
    for path, methods in DOC["paths"].items():
        for method, op in methods.items():
            yield f"{method.upper()} {path}", op


def test_document_has_exactly_the_routes_of_the_route_table():
    assert sorted(key for key, _ in _operations()) == sorted(r.route_key for r in ROUTES)
    assert openapi.OPENAPI_PATH in DOC["paths"]


def test_a_route_without_a_description_fails_the_build():
    with pytest.raises(ValueError, match="without an OpenAPI description"):
        openapi.build_document((*ROUTES, Route("PUT", "/v1/sync/{gw}/push", "functions.push")))


def test_a_description_without_a_route_fails_the_build():
    with pytest.raises(ValueError, match="routes that do not exist"):
        openapi.build_document(ROUTES[1:])


def test_document_is_valid_openapi_3_1():
    OPENAPI_31_VALIDATOR.validate(json.loads(openapi.document_json()))
    assert DOC["openapi"] == "3.1.0"


def test_operation_ids_are_unique():
    ids = [op["operationId"] for _, op in _operations()]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("key", sorted(r.route_key for r in ROUTES))
def test_every_path_parameter_is_declared(key):
    route = next(r for r in ROUTES if r.route_key == key)
    op = DOC["paths"][route.path][route.method.lower()]
    declared = [p["name"] for p in op.get("parameters", []) if p["in"] == "path"]
    assert declared == list(route.parameters)


def test_public_operations_are_exactly_health_and_the_document():
    public = sorted(key for key, op in _operations() if not op["security"])
    assert public == ["GET /health", "GET /v1/connectors/types", f"GET {openapi.OPENAPI_PATH}"]


def test_authenticated_operations_document_the_token_errors():
    for key, op in _operations():
        if op["security"]:
            assert {"401", "403", "404", "500"} <= set(op["responses"]), key


def test_error_statuses_are_those_of_the_error_classes():
    # Given every status an error class answers with
    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    statuses = {errors.LakeSyncError.status} | {c.status for c in subclasses(errors.LakeSyncError)}
    # Then every documented error status is one of them, and error bodies use the API codes
    documented = {int(s) for _, op in _operations() for s in op["responses"] if int(s) >= 400}
    assert documented <= statuses
    assert DOC["components"]["schemas"]["Error"]["properties"]["code"]["enum"] == list(errors.API_ERROR_CODES)


def test_every_response_documents_the_version_header():
    for key, op in _operations():
        for status, response in op["responses"].items():
            if "$ref" in response:
                response = DOC["components"]["responses"][response["$ref"].rsplit("/", 1)[-1]]
            assert "API-Version" in response["headers"], (key, status)


def _validator(schema):
    return jsonschema_rs.Draft202012Validator({**schema, "components": DOC["components"]})


@pytest.mark.parametrize("key", sorted(k for k, op in _operations() if "requestBody" in op))
def test_body_examples_are_valid_for_their_schema(key):
    method, path = key.split(" ", 1)
    content = DOC["paths"][path][method.lower()]["requestBody"]["content"]["application/json"]
    if "example" in content:
        _validator(content["schema"]).validate(content["example"])


def test_hlc_schema_matches_what_the_server_emits():
    hlc = _validator({"$ref": "#/components/schemas/Hlc"})
    assert hlc.is_valid(str(2**64 - 1)) and hlc.is_valid("0")
    assert not hlc.is_valid(1) and not hlc.is_valid("1.5")


def test_document_json_is_stable_and_compact():
    text = openapi.document_json()
    assert text == json.dumps(openapi.build_document(), separators=(",", ":"), ensure_ascii=False)
    assert json.loads(text) == DOC


def test_docs_api_md_is_generated_from_the_document():
    # When docs/api.md's generated section is rendered again
    current = API_MD.read_text(encoding="utf-8")
    # Then nothing changes (else: python -m lakesync.openapi docs/api.md)
    assert openapi.update_markdown(current) == current
    assert openapi.BEGIN_MARKER in current and openapi.END_MARKER in current
