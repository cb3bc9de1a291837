"""Agent endpoints: ``GET /v1/agent-tools`` and ``POST /v1/webhooks/openai``.

The webhook is authenticated by its signature, not by a token (``gateway.api`` skips token
authentication under ``/v1/webhooks/``).
"""

from __future__ import annotations

from flask import Blueprint
from flask import request

from gateway.agents import tools
from gateway.agents import webhooks
from gateway.api.http import config
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
