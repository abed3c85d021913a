"""The OpenAPI 3.1 document of the HTTP API, built from the route table (:data:`lakesync.api_routes.ROUTES`).

The routes come from ``ROUTES`` alone; this package adds what a route table does not know, as data: per route an
:class:`Operation` (summary, who may call it, query parameters, request bodies, success responses and the error
statuses it can answer) in :data:`OPERATIONS`, keyed by the route key, plus the shared component schemas.
:func:`build_document` refuses a route without an operation and an operation without a route, so the document
cannot fall behind the routes (a unit test builds it).

Invariants of the document:

* Every error response is ``{"error", "code"}`` with one of :data:`lakesync.core.errors.API_ERROR_CODES`; a 500
  also carries ``requestId``. The statuses are those of :mod:`lakesync.core.errors` and :mod:`lakesync.edge`.
* Every response carries ``API-Version: v1`` and ``X-Request-Id`` (the router adds them to every answer).
* Request schemas are never stricter than the server: a value the schema refuses is refused by the server too
  (with a 4xx). Where the server accepts more than the canonical form (the original's lenient number parsing), the
  schema describes the canonical form in its ``description`` and stays permissive.
* The document is a pure function of the code: :func:`document_json` is byte-stable (``docs/api.md`` is compared
  against it in a test).

Where things are: :mod:`.model` (the vocabulary: media types, :class:`Operation`), :mod:`.schemas` (the shared
component schemas), :mod:`.operations` (one :class:`Operation` per route key), :mod:`.builder` (the document),
:mod:`.markdown` (``docs/api.md``'s generated part); ``python -m lakesync.openapi [FILE]`` prints the document or
regenerates FILE.
"""

from __future__ import annotations

from lakesync.openapi.builder import build_document, document_json
from lakesync.openapi.markdown import BEGIN_MARKER, END_MARKER, render_markdown, update_markdown
from lakesync.openapi.model import OPENAPI_PATH, Operation
from lakesync.openapi.operations import OPERATIONS

__all__ = [
    "BEGIN_MARKER",
    "END_MARKER",
    "OPENAPI_PATH",
    "OPERATIONS",
    "Operation",
    "build_document",
    "document_json",
    "render_markdown",
    "update_markdown",
]
