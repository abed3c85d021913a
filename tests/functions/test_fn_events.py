"""events/*.json stay valid: each API event is an API Gateway HTTP API v2.0 event per Powertools (data class and
parser model), its route key and path parameters are the ones API Gateway would send for its path, and a handler test
uses every event. The events of the non-API functions (:data:`OTHER_EVENT_PREFIXES`) are checked by their own tests.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
from aws_lambda_powertools.utilities.parser.models import APIGatewayProxyEventV2Model

from lakesync.api_routes import find_route
from lakesync.wire import decode_sync_push

EVENTS_DIR = Path(__file__).resolve().parent.parent.parent / "events"
OTHER_EVENT_PREFIXES = ("flush_trigger", "rotate_secret", "lake_tick", "ws_")
ALL_EVENT_FILES = sorted(EVENTS_DIR.glob("*.json"))
EVENT_FILES = [p for p in ALL_EVENT_FILES if not p.stem.startswith(OTHER_EVENT_PREFIXES)]


def test_events_directory_has_a_sample_per_route():
    routes = {json.loads(p.read_text(encoding="utf-8"))["routeKey"] for p in EVENT_FILES}
    from lakesync.api_routes import ROUTES

    assert routes == {r.route_key for r in ROUTES}


@pytest.mark.parametrize("path", EVENT_FILES, ids=[p.stem for p in EVENT_FILES])
def test_event_parses_as_http_api_v2(path):
    raw = json.loads(path.read_text(encoding="utf-8"))
    model = APIGatewayProxyEventV2Model.model_validate(raw)
    event = APIGatewayProxyEventV2(raw)
    assert model.version == event.version == "2.0"
    assert event.request_context.request_id and event.request_context.stage == "$default"
    found = find_route(event.http_method, event.raw_path)
    assert found is not None
    route, params = found
    assert event.route_key == route.route_key == event.request_context.route_key
    assert event.path_parameters == params
    if event.body is not None:
        data = base64.b64decode(event.body) if event.is_base64_encoded else event.body.encode()
        assert event.headers["content-length"] == str(len(data))
        if event.headers["content-type"] == "application/x-protobuf":
            assert decode_sync_push(data).deltas
        else:
            assert json.loads(data)
    if route.path != "/health":
        assert event.headers["authorization"] == "Bearer {{token}}"


@pytest.mark.parametrize("path", ALL_EVENT_FILES, ids=[p.stem for p in ALL_EVENT_FILES])
def test_event_is_used_by_a_handler_test(path):
    here = Path(__file__).resolve()
    sources = [p.read_text(encoding="utf-8") for p in here.parent.glob("test_*.py") if p != here]
    assert any(f'"{path.stem}"' in source for source in sources)
