"""Webhook endpoints (docs/api.md, "Webhook endpoints"): a workflow subscribes its tenant's
events, each endpoint with its own signing secret, shown once."""

from __future__ import annotations

from flask import Blueprint
from flask import g

from gateway.actions import deliveries
from gateway.actions import delivery_views
from gateway.actions import webhook_endpoints
from gateway.api.http import config
from gateway.api.http import json_body
from gateway.api.http import roles

bp = Blueprint("webhook_endpoints", __name__, url_prefix="/v1")

# What a replay of a POST that showed a secret answers instead of it (the request-key store
# keeps this body, never the secret: gateway.api.request_keys.finish).
SECRET_NOT_STORED = (
    "the secret is shown only in the first answer to this request and is not kept for its "
    "replays; if it was lost, rotate it: POST /v1/webhook-endpoints/{id}/secret"
)


def _shown_once(row, secret: str) -> dict:
    """The answer that shows ``secret``; a replay under the same Idempotency-Key answers
    the same body with ``"secret": null`` and ``secret_detail`` (:data:`SECRET_NOT_STORED`)."""
    body = webhook_endpoints.view(row, secret, shown=True)
    g.stored_answer = {**body, "secret": None, "secret_detail": SECRET_NOT_STORED}
    return body


@bp.post("/webhook-endpoints")
@roles("workflow", "admin")
def create_endpoint():
    """Make an endpoint of the token's tenant; 201 with its secret (shown only here)."""
    body = json_body("webhook_endpoint")
    row, secret = webhook_endpoints.create(
        config(), g.principal.tenant, body["url"], body["event_types"], body.get("description")
    )
    location = f"/v1/webhook-endpoints/{row.public_id}"
    return _shown_once(row, secret), 201, {"Location": location}


@bp.get("/webhook-endpoints")
@roles("workflow", "admin")
def list_endpoints():
    """The tenant's live endpoints, oldest first (never a secret)."""
    rows = webhook_endpoints.live(g.principal.tenant)
    return {"endpoints": [webhook_endpoints.view(row) for row in rows]}


@bp.get("/webhook-endpoints/<endpoint_id>")
@roles("workflow", "admin")
def get_endpoint(endpoint_id: str):
    """One endpoint of the tenant (404 for another tenant's or a deleted one)."""
    return webhook_endpoints.view(webhook_endpoints.get(g.principal.tenant, endpoint_id))


@bp.delete("/webhook-endpoints/<endpoint_id>")
@roles("workflow", "admin")
def delete_endpoint(endpoint_id: str):
    """Delete the endpoint; its pending deliveries stop. 204."""
    webhook_endpoints.delete(g.principal.tenant, endpoint_id)
    return "", 204


@bp.post("/webhook-endpoints/<endpoint_id>/secret")
@roles("workflow", "admin")
def rotate_secret(endpoint_id: str):
    """A new secret (shown only here); the previous one still signs for 24 hours."""
    json_body("empty")
    row, secret = webhook_endpoints.rotate(config(), g.principal.tenant, endpoint_id)
    return _shown_once(row, secret)


@bp.get("/webhook-endpoints/<endpoint_id>/deliveries")
@roles("workflow", "admin")
def list_deliveries(endpoint_id: str):
    """The endpoint's newest 100 deliveries, newest first."""
    endpoint = webhook_endpoints.get(g.principal.tenant, endpoint_id)
    return {"deliveries": delivery_views.of_endpoint(endpoint)}


@bp.post("/webhook-endpoints/<endpoint_id>/deliveries/<event_id>/redeliver")
@roles("workflow", "admin")
def redeliver(endpoint_id: str, event_id: str):
    """Send a REFUSED delivery again (same webhook-id); the next pass sends it."""
    json_body("empty")
    endpoint = webhook_endpoints.get(g.principal.tenant, endpoint_id)
    return deliveries.redeliver(endpoint, event_id)
