"""Review items for editors: ``GET /v1/reviews``, ``POST /v1/reviews/{id}/resolve``."""

from __future__ import annotations

from flask import Blueprint
from flask import g

from gateway.api.http import config
from gateway.api.http import json_body
from gateway.api.http import roles
from gateway.editorial import resolution
from gateway.editorial import reviews

bp = Blueprint("reviews", __name__, url_prefix="/v1")


@bp.get("/reviews")
@roles("editor", "admin")
def list_reviews():
    """The tenant's open review items (suspected duplicates, keys on several objects)."""
    return {"reviews": reviews.list_open(g.principal.tenant)}


@bp.post("/reviews/<int:review_id>/resolve")
@roles("editor", "admin")
def resolve(review_id: int):
    """``{"decision": "same_as", "post_id"}``, ``{"decision": "distinct"}``, or for an agent's
    request ``{"decision": "approve" | "deny" | "dismiss", "reason"}``. 200 with the resolution;
    the decision that stands sent again: 200 with ``Idempotent-Replayed: true``."""
    body = json_body("review_resolve")
    resolved = resolution.resolve_review(
        config(),
        g.principal.tenant,
        review_id,
        body["decision"],
        body.get("post_id"),
        g.principal.name,
        body.get("reason"),
    )
    # the decision that stood already: its answer again, marked as such (docs/api.md)
    headers = {"Idempotent-Replayed": "true"} if resolved.replayed else {}
    return resolved.body, 200, headers
