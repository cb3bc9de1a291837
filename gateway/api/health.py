"""The gateway's front door, liveness and metrics: ``GET /`` (where to go from here),
``GET /healthz`` (200 when the ledger can be reached) and ``GET /metrics`` (Prometheus text
format)."""

from __future__ import annotations

import hmac

from flask import Blueprint
from flask import Response
from flask import request
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client import generate_latest

from gateway.api.http import config
from gateway.core import exceptions as exc
from gateway.core.version import VERSION as __version__
from gateway.ledger.db import database
from gateway.operator import metrics

bp = Blueprint("health", __name__)


@bp.get("/")
def index():
    """Where a person who opened the gateway's address goes next (docs/api.md, "GET /"):
    ``{"name", "version", "links": {"review", "openapi", "health", "docs"}}``, links relative
    to the gateway; no authentication, no ledger read."""
    return {
        "name": "Publishing Gateway",
        "version": __version__,
        "links": {
            "review": "/review",
            "openapi": "/openapi.json",
            "health": "/healthz",
            "docs": "docs/api.md in the gateway's repository (the README first)",
        },
    }


@bp.get("/healthz")
def healthz():
    """``{"status": "ok", "ledger": "ok", "version"}``; 503 problem when the ledger is down
    (OperationalError is turned into ``ledger-unavailable`` by the app's handler)."""
    database.execute_sql("SELECT 1")
    return {"status": "ok", "ledger": "ok", "version": __version__}


@bp.get("/metrics")
def prometheus_metrics():
    """Ledger-wide and traffic figures in the Prometheus exposition format. Open unless
    ``GATEWAY_METRICS_TOKEN`` is set; then only ``Authorization: Bearer <that token>`` (401
    ``unauthenticated`` otherwise). It carries counts, never content or credentials; open,
    it names no tenant either (every family's ``tenant`` label summed away)."""
    expected = config().metrics_token
    if expected:
        header = request.headers.get("Authorization", "")
        sent = header[7:].strip() if header.startswith("Bearer ") else ""
        if not hmac.compare_digest(sent.encode(), expected.encode()):
            raise exc.Unauthenticated(
                "send 'Authorization: Bearer <GATEWAY_METRICS_TOKEN>' to read /metrics"
            )
    registry = metrics.registry(with_tenants=bool(expected))
    return Response(generate_latest(registry), mimetype=CONTENT_TYPE_LATEST)
