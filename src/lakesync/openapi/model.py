"""The vocabulary of the document's data: media types, :class:`Operation`, and the small schema helpers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

OPENAPI_PATH: Final = "/v1/openapi.json"
"""Where the document is served (without auth, as in the original)."""

JSON: Final = "application/json"
PROTOBUF: Final = "application/x-protobuf"
CHECKPOINT_STREAM: Final = "application/x-lakesync-checkpoint-stream"
CHECKPOINT_COLUMNS: Final = "application/x-lakesync-checkpoint-columns+json"

Auth = Literal["none", "client", "admin"]
Schema = dict[str, Any]


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def json_response(schema: Schema, description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": schema}}}


@dataclass(frozen=True, slots=True)
class Operation:
    """What the document says about one route beyond its method and path.

    Attributes:
        operation_id: Unique camelCase id.
        summary: One line.
        description: Longer text (Markdown).
        tag: The group the operation is listed under.
        auth: ``none``; ``client`` (any valid token for the path's gateway); ``admin`` (role ``admin``).
        query: Query parameters: name → (required, schema, description).
        query_examples: Example values of query parameters.
        body: Request body media types → schema; ``None`` for no body.
        body_example: An example JSON request body (used by docs and by the fuzzer's example phase).
        responses: Success responses: status → OpenAPI response object.
        errors: The error statuses the route can answer (each a shared component response).
    """

    operation_id: str
    summary: str
    description: str
    tag: str
    auth: Auth
    query: Mapping[str, tuple[bool, Schema, str]] = field(default_factory=dict)
    query_examples: Mapping[str, str] = field(default_factory=dict)
    body: Mapping[str, Schema] | None = None
    body_example: Any = None
    responses: Mapping[str, Any] = field(default_factory=dict)
    errors: tuple[int, ...] = ()


NON_EMPTY: Final[Schema] = {"type": "string", "minLength": 1}
