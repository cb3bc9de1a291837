"""``GET /v1/report``: the acceptance counters of the caller's tenant."""

from __future__ import annotations

from flask import Blueprint
from flask import g

from gateway.api.http import config
from gateway.api.http import roles
from gateway.operator import report as report_module

bp = Blueprint("report", __name__, url_prefix="/v1")


@bp.get("/report")
@roles("admin", "editor")
def report():
    """Duplicates found in WordPress by identifier, unauthorized calls, rejected checkpoint
    advances, operations left UNKNOWN, jobs by status."""
    return report_module.report(config(), g.principal.tenant)
