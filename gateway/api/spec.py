"""``GET /openapi.json``: the OpenAPI 3.1 document of this API (no authentication: it holds
the contract, never data), built once per app by :func:`gateway.api.openapi.build`."""

from __future__ import annotations

from flask import Blueprint
from flask import current_app

from gateway.api import openapi

bp = Blueprint("spec", __name__)


@bp.get("/openapi.json")
def openapi_document():
    """The OpenAPI 3.1 document of every route, built from the URL map and the request schemas."""
    document = current_app.extensions.get("openapi")
    if document is None:
        document = current_app.extensions["openapi"] = openapi.build(current_app)
    return document
