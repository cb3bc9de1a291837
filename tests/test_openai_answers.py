"""OpenAI's answers to a session input decide its ledger row through the one classifier
(``gateway/core/answers.py``): a 400 or a 404 is a definite FAILED, a 401 refuses the gateway's
key (the row stays UNKNOWN and the workers pause), a 202 is CONFIRMED. Driven through the real
SDK against the OpenAI stand-in; no WordPress is involved."""

from __future__ import annotations

import agent_support
from agent_support import bind
from support import TENANT
from support import new_job_id

from gateway.agents import openai_key
from gateway.agents import sessions
from gateway.agents import submissions
from gateway.jobs import records
from gateway.ledger.db import database
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import FAILED
from gateway.ledger.models import UNKNOWN

standin = agent_support.standin
app = agent_support.app


def _tool_result(call_id: str) -> dict:
    return {
        "type": "agent.session.input.tool_result",
        "call_id": call_id,
        "turn_id": "turn_none",
        "output": "{}",
    }


def test_openai_answers_decide_the_submission_rows(offline_gw, standin):
    job_id, sid = new_job_id(), standin.create_session()
    assert bind(offline_gw, job_id, sid).status_code == 201
    gone = standin.create_session()
    standin.delete_session(gone)
    with offline_gw.app.app_context(), database.connection_context():
        config = offline_gw.app.config["GATEWAY"]
        oai = sessions.client(config)
        job = records.get_job(TENANT, job_id)

        def submit(slot: str, session_id: str, event: dict):
            return submissions.submit(config, oai, job, "tool_result", slot, session_id, event)

        cancel = {"type": "agent.session.input.cancel"}
        assert submit("cancel", sid, cancel).state == CONFIRMED  # 202
        refused = submit("no-such-call", sid, _tool_result("call_nothing_pending"))
        assert refused.state == FAILED and refused.problem["openai_status"] == 400
        missing = submit("gone", gone, cancel)
        assert missing.state == FAILED and missing.problem["openai_status"] == 404
        assert openai_key.view()["paused"] is False
        standin.revoke_key()
        key_refused = submit("after-revoke", sid, cancel)
        assert key_refused.state == UNKNOWN and key_refused.problem["openai_status"] == 401
        paused = openai_key.view()
        assert paused["paused"] is True and paused["status"] == 401
