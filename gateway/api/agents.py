"""Agent endpoints: ``GET /v1/agent-tools``, ``POST /v1/webhooks/openai`` and
``POST /v1/jobs/{job_id}/agent/continue``.

The webhook is authenticated by its signature, not by a token (``gateway.api`` skips token
authentication under ``/v1/webhooks/``).
"""

from __future__ import annotations

from flask import Blueprint
from flask import g
from flask import request

from gateway.agents import follow_ups
from gateway.agents import tools
from gateway.agents import webhooks
from gateway.api.common import job_of_path
from gateway.api.http import config
from gateway.api.http import json_body
from gateway.api.http import roles

bp = Blueprint("agents", __name__, url_prefix="/v1")


@bp.get("/agent-tools")
@roles("workflow", "editor", "admin")
def agent_tools():
    """The function-tool definitions an agent session needs for a gateway job."""
    return {"tools": tools.definitions()}


@bp.post("/webhooks/openai")
def openai_webhook():
    """Verify on the raw body, store under the unique event id (committed), then 200."""
    raw = request.get_data(cache=False)
    return webhooks.receive(config(), raw, dict(request.headers)), 200


@bp.post("/jobs/<job_id>/agent/continue")
@roles("workflow", "editor")
def continue_agent(job_id: str):
    """Continue the job's agent session after checking: an idle one (workflow or editor), a
    stopped one (editor); 201 the follow-up was claimed and sent now, 200 these facts were
    followed up before (nothing new sent)."""
    job = job_of_path(job_id)
    body = json_body("agent_continue")
    principal = g.principal
    answer, sent_now = follow_ups.continue_session(
        config(),
        job,
        f"{principal.role}:{principal.name}",
        editor=principal.role == "editor",
        reason=body.get("reason"),
    )
    return answer, 201 if sent_now else 200
