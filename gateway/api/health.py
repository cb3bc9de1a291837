"""Liveness: ``GET /healthz`` answers 200 when the ledger can be reached."""

from __future__ import annotations

from flask import Blueprint

from gateway import __version__
from gateway.db import database

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    """``{"status": "ok", "ledger": "ok", "version"}``; 503 problem when the ledger is down
    (OperationalError is turned into ``ledger-unavailable`` by the app's handler)."""
    database.execute_sql("SELECT 1")
    return {"status": "ok", "ledger": "ok", "version": __version__}
