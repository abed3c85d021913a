"""POST/GET /v1/sync/{gw}/subscriptions and DELETE /v1/sync/{gw}/subscriptions/{id}: the caller's stream
subscriptions (:mod:`lakesync.gateway.subscriptions`), served by the pull function."""

from __future__ import annotations

from functions import _http as http
from functions._runtime import get_deps
from lakesync import edge
from lakesync.gateway import subscriptions as service
from lakesync.router import Response, Router

SUBSCRIPTIONS = "/v1/sync/{gw}/subscriptions"


def serve(app: Router) -> None:
    """Register the subscription routes on ``app``."""

    @app.post(SUBSCRIPTIONS)
    def subscribe(gw: str) -> Response:
        """201 the subscription ``{id, stream, params, expiresAt}`` (the same one again: its expiry refreshed)."""
        claims = http.authorize(app, gw)
        doc = edge.parse_json(http.read_body(app))
        held = service.subscribe(get_deps(), gw, claims.client_id, claims.custom_claims, doc)
        return http.json_response(held.to_json(), 201)

    @app.get(SUBSCRIPTIONS)
    def list_subscriptions(gw: str) -> Response:
        """200 ``{subscriptions: [...]}``: the caller's live subscriptions."""
        claims = http.authorize(app, gw)
        held = service.list_subscriptions(get_deps(), gw, claims.client_id)
        return http.json_response({"subscriptions": [h.to_json() for h in held]})

    @app.delete(SUBSCRIPTIONS + "/{id}")
    def unsubscribe(gw: str, id: str) -> Response:
        """204; 404 when the caller holds no live subscription of that id."""
        claims = http.authorize(app, gw)
        service.unsubscribe(get_deps(), gw, claims.client_id, id)
        return Response(204, edge.JSON, "")
