"""Job budgets (:mod:`gateway.jobs.budgets`): read them, and let an editor or admin raise one.

No workflow token may raise a budget: a workflow that could widen its own allowance would not
be limited by it.
"""

from __future__ import annotations

from flask import Blueprint
from flask import g

from gateway.api.http import config
from gateway.api.http import json_body
from gateway.api.http import roles
from gateway.api.jobs import _job
from gateway.jobs import budgets

bp = Blueprint("budgets", __name__, url_prefix="/v1")


@bp.get("/jobs/<job_id>/budgets")
@roles("workflow", "editor", "admin")
def list_budgets(job_id: str):
    """``{"budgets": [{"name", "used", "limit", "exhausted", "raised_by"}]}``."""
    job = _job(job_id)
    return {"budgets": budgets.budgets_of(config(), job.tenant, job.job_id)}


@bp.put("/jobs/<job_id>/budgets/<name>")
@roles("editor", "admin")
def raise_budget(job_id: str, name: str):
    """Set the job's ceiling of budget ``name`` to ``{"limit": N}`` (editors and admins)."""
    job = _job(job_id)
    body = json_body("budget")
    return budgets.raise_ceiling(
        config(), job.tenant, job.job_id, name, body["limit"], g.principal.name
    )
