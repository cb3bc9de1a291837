"""Liveness and metrics: ``GET /healthz`` (200 when the ledger can be reached) and
``GET /metrics`` (Prometheus text format)."""

from __future__ import annotations

from flask import Blueprint
from flask import Response
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client import generate_latest

from gateway import __version__
from gateway import metrics
from gateway.db import database

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    """``{"status": "ok", "ledger": "ok", "version"}``; 503 problem when the ledger is down
    (OperationalError is turned into ``ledger-unavailable`` by the app's handler)."""
    database.execute_sql("SELECT 1")
    return {"status": "ok", "ledger": "ok", "version": __version__}


@bp.get("/metrics")
def prometheus_metrics():
    """Ledger-wide figures in the Prometheus exposition format (no authentication, like
    most exporters: it carries counts, never content or credentials)."""
    return Response(generate_latest(metrics.registry()), mimetype=CONTENT_TYPE_LATEST)
