"""GET /v1/openapi.json through the health function: the generated document, without auth, with the API's headers."""

from __future__ import annotations

import functions.health as health_fn
from lakesync.openapi import build_document


def test_openapi_document_is_served_without_a_token(bare_api):
    # Given no configuration at all (the health function needs none)
    event = bare_api.event("openapi", token=None)
    # When the document is asked for
    reply = bare_api.call(health_fn, event)
    # Then it is the generated document, with the version header every answer carries
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "application/json"
    assert reply.headers["API-Version"] == "v1"
    assert reply.json() == build_document()


def test_openapi_document_ignores_a_token(bare_api):
    reply = bare_api.call(health_fn, bare_api.event("openapi", token="not-a-jwt"))
    assert reply.status == 200 and reply.json()["openapi"] == "3.1.0"


def test_other_methods_on_the_document_are_405(bare_api):
    event = bare_api.event("openapi")
    event["requestContext"]["http"]["method"] = "POST"
    reply = bare_api.call(health_fn, event)
    assert reply.status == 405
    assert reply.headers["Allow"] == "GET"
    assert reply.json() == {"error": "Method not allowed", "code": "VALIDATION_ERROR"}
