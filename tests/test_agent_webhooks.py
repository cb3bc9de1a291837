"""OpenAI webhooks: verified on the raw body by the SDK, stored under a unique event id and
committed before the 2xx, processed once by the worker; two gateway processes on one
PostgreSQL ledger answering one action once; the ledger migration of the agent tables."""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import agent_support
import pytest
import requests
from agent_support import bind
from agent_support import run_worker
from agent_support import tool_output
from agent_support import worker_process
from agent_support import worker_until
from n8n_support import wait_for
from servers import Server
from support import draft_body
from support import new_job_id
from support import op_key
from werkzeug.serving import make_server

from gateway.agents import submissions
from gateway.agents import tools
from gateway.ledger import db
from gateway.ledger import migrations
from gateway.ledger import models
from gateway.ledger.db import database
from gateway.ledger.models import WebhookEvent
from gateway_tools.openai_standin import OpenAIStandIn as S

# The agent tests' fixtures (agent_support.py): the OpenAI stand-in and the app bound to it.
standin = agent_support.standin
app = agent_support.app

ACTION = "agent.session.action_required"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture
def served(app):
    """The app behind a real threaded HTTP server (concurrent deliveries)."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/v1/webhooks/openai"
    server.shutdown()
    server.server_close()


def _rows(app) -> list[WebhookEvent]:
    with app.app_context(), database.connection_context():
        return list(WebhookEvent.select())


def _waiting_session(gw, standin) -> tuple[str, str, dict]:
    job_id, sid = new_job_id(), standin.create_session(tools=tools.definitions())
    assert bind(gw, job_id, sid).status_code == 201
    [call] = standin.require(sid, S.function_call("recover", {}))
    return job_id, sid, call


@pytest.mark.wordpress
def test_valid_delivery_is_stored_and_processed_once(gw, standin):
    _job_id, sid, call = _waiting_session(gw, standin)
    body, headers = standin.webhook(ACTION, sid)
    answer = gw.client.post("/v1/webhooks/openai", data=body, headers=headers)
    assert answer.status_code == 200 and answer.get_json()["duplicate"] is False
    again = gw.client.post("/v1/webhooks/openai", data=body, headers=headers)
    assert again.status_code == 200 and again.get_json()["duplicate"] is True
    counts = run_worker(gw.app)
    assert counts["events"] == 1 and counts["answered"] == 1
    assert run_worker(gw.app)["events"] == 0
    assert tool_output(standin, sid, call["call_id"])["success"] is True
    [row] = _rows(gw.app)
    assert (row.status, row.attempts, row.session_id) == ("done", 1, sid)


@pytest.mark.wordpress
def test_the_same_delivery_twenty_times_at_once_is_one_row_one_processing(gw, standin, served):
    _job_id, sid, call = _waiting_session(gw, standin)
    body, headers = standin.webhook(ACTION, sid)
    with ThreadPoolExecutor(max_workers=20) as pool:
        answers = list(pool.map(lambda _: S.deliver(served, body, headers), range(20)))
    assert [a.status_code for a in answers] == [200] * 20
    assert sum(not a.json()["duplicate"] for a in answers) == 1
    for _ in range(2):
        run_worker(gw.app)
    [row] = _rows(gw.app)
    assert row.attempts == 1 and row.status == "done"
    tool_output(standin, sid, call["call_id"])


@pytest.mark.parametrize("fault", ["forged", "missing-header", "6-min-old", "6-min-future"])
def test_bad_missing_or_stale_signature_is_400_and_nothing_stored(offline_gw, standin, fault):
    sid = standin.create_session()
    now = int(time.time())
    stamp = {"6-min-old": now - 360, "6-min-future": now + 360}.get(fault)
    secret = "whsec_" + "Zm9yZ2Vk" * 4 if fault == "forged" else None
    body, headers = standin.webhook(ACTION, sid, timestamp=stamp, secret=secret)
    if fault == "missing-header":
        headers.pop("webhook-signature")
    answer = offline_gw.client.post("/v1/webhooks/openai", data=body, headers=headers)
    assert answer.status_code == 400
    assert answer.mimetype == "application/problem+json"
    assert answer.get_json()["type"].endswith("webhook-signature-invalid")
    assert _rows(offline_gw.app) == []


@pytest.mark.wordpress
def test_crash_after_the_insert_before_the_answer_is_processed_once_after_the_retry(
    wp_site, ledger_url, tmp_path, gw, standin
):
    server = Server(wp_site, ledger_url, tmp_path)
    server.env["GATEWAY_OPENAI_WEBHOOK_SECRET"] = standin.webhook_secret
    try:
        server.start(crash_point="after_webhook_stored")
        _job_id, sid, call = _waiting_session(gw, standin)
        body, headers = standin.webhook(ACTION, sid)
        with pytest.raises(requests.ConnectionError):
            S.deliver(server.url + "/v1/webhooks/openai", body, headers)  # stored, unanswered
        server.kill()
        server.start()
        retried = S.deliver(
            server.url + "/v1/webhooks/openai", body, headers
        )  # the sender retries the same delivery
        assert retried.status_code == 200 and retried.json()["duplicate"] is True
    finally:
        server.kill()
    for _ in range(2):
        run_worker(gw.app)
    [row] = _rows(gw.app)
    assert row.attempts == 1 and row.status == "done"
    tool_output(standin, sid, call["call_id"])


@pytest.mark.wordpress
@pytest.mark.postgresql_pass  # two gateway processes share one ledger only on PostgreSQL
def test_two_gateway_processes_one_postgresql_ledger_one_submission_one_write(
    gw, standin, ledger_url
):
    job_id, sid = new_job_id(), standin.create_session(tools=tools.definitions())
    assert bind(gw, job_id, sid).status_code == 201
    [call] = standin.require(sid, S.function_call("put_draft", draft_body(title=job_id)))
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = list(pool.map(lambda _: worker_process(ledger_url, standin), range(2)))
    assert [d.returncode for d in done] == [0, 0], [d.stderr[-1000:] for d in done]
    for _ in range(3):  # whichever process lost the lease leaves nothing undone
        run_worker(gw.app)
    assert gw.count_objects(op_key(job_id, "draft"), "post") == 1
    tool_output(standin, sid, call["call_id"])
    assert len(standin.event_posts(sid)) == 1


def test_a_release_0_1_0_ledger_migrates_to_the_agent_tables(tmp_path):
    path = tmp_path / "ledger-0.1.0.db"
    with sqlite3.connect(path) as connection:
        connection.executescript((FIXTURES / "ledger-0.1.0.sql").read_text())
    db.bind(f"sqlite:///{path}")
    with database.connection_context():
        assert migrations.current_version() == migrations.BASELINE
        assert "agent_session" not in database.get_tables()
    assert migrations.migrate() == (migrations.BASELINE, migrations.latest_version())
    with database.connection_context():
        assert {"agent_session", "webhook_event"} <= set(database.get_tables())
        job = models.Job.select().first()  # the release's job takes a session now
        models.AgentSession.create(
            session_id="sess_migrated", tenant=job.tenant, job_id=job.job_id, task_version=1
        )
        assert models.AgentSession.select().count() == 1
    database.close()


@pytest.mark.wordpress
def test_gateway_serve_runs_one_agent_worker_that_answers_after_a_webhook(
    wp_site, ledger_url, tmp_path, standin
):
    server = Server(wp_site, ledger_url, tmp_path)
    server.env.update(
        {
            "GATEWAY_OPENAI_API_KEY": standin.api_key,
            "GATEWAY_OPENAI_BASE_URL": standin.base_url,
            "GATEWAY_OPENAI_WEBHOOK_SECRET": standin.webhook_secret,
            "GATEWAY_AGENT_POLL_INTERVAL": "0.5",
            "GATEWAY_AGENT_STALE_AFTER": "3600",  # the webhook moves it, not the poll
        }
    )
    try:
        server.start()
        job_id, sid = new_job_id(), standin.create_session(tools=tools.definitions())
        bound = server.call(
            "PUT", f"/v1/jobs/{job_id}", json={"site": "blog", "task_version": 1, "session_id": sid}
        )
        assert bound.status_code == 201, bound.text
        [call] = standin.require(sid, S.function_call("recover", {}))
        body, headers = standin.webhook(ACTION, sid)
        assert S.deliver(server.url + "/v1/webhooks/openai", body, headers).status_code == 200
        deadline = time.monotonic() + 60
        while not standin.events(sid) and time.monotonic() < deadline:
            time.sleep(0.5)
        answered = tool_output(standin, sid, call["call_id"])
        assert answered["success"] is True, answered

        # the worker counts the answer once OpenAI accepted it: the stand-in holds the event a
        # moment before the ledger does
        def counted():
            agent = server.call("GET", f"/v1/jobs/{job_id}").json()["agent"]
            return agent if agent["counters"]["tool_calls_answered"] else None

        agent = wait_for(counted, 10, "the served worker never counted its answer", interval=0.1)
        assert agent["counters"]["tool_calls_answered"] == 1, agent
    finally:
        server.kill()


def test_a_failed_session_event_stops_the_session_and_it_leaves_the_poll(offline_gw, standin):
    job_id, sid = new_job_id(), standin.create_session(tools=tools.definitions())
    assert bind(offline_gw, job_id, sid).status_code == 201
    body, headers = standin.fail(sid, error="the model backend gave up")
    answer = offline_gw.client.post("/v1/webhooks/openai", data=body, headers=headers)
    assert answer.status_code == 200 and answer.get_json()["type"] == "agent.session.failed"
    assert run_worker(offline_gw.app)["stopped"] == 1
    [row] = _rows(offline_gw.app)
    assert row.status == "done"
    agent = offline_gw.job(job_id).get_json()["agent"]
    assert agent["status"] == "failed"
    assert "the model backend gave up" in agent["stopped_reason"]
    asked = len(standin.log)
    run_worker(offline_gw.app)
    assert len(standin.log) == asked  # out of the poll


@pytest.mark.wordpress
def test_an_approval_result_lost_in_a_crash_is_resent_once_with_its_key(
    wp_site, ledger_url, tmp_path, gw, standin
):
    """An editor approves an MCP request through a real ``gateway serve``, which is killed
    after OpenAI accepted the result and before the ledger recorded it: the worker resends the
    stored event with the same idempotency key, and the session holds one result."""
    job_id, sid = new_job_id(), standin.create_session(tools=tools.definitions())
    assert bind(gw, job_id, sid).status_code == 201
    [mcp] = standin.require(sid, S.mcp_approval(name="export_contacts"))
    assert run_worker(gw.app)["review"] == 1
    editor = gw.make_token("editor")
    [review] = gw.client.get("/v1/reviews", headers=gw.headers(editor)).get_json()["reviews"]
    server = Server(wp_site, ledger_url, tmp_path)
    server.env.update(
        {"GATEWAY_OPENAI_API_KEY": standin.api_key, "GATEWAY_OPENAI_BASE_URL": standin.base_url}
    )
    try:
        server.start(crash_point="after_session_input_sent")
        with pytest.raises(requests.ConnectionError):
            requests.post(
                f"{server.url}/v1/reviews/{review['review_id']}/resolve",
                json={"decision": "approve"},
                headers={"Authorization": f"Bearer {editor}"},
                timeout=30,
            )
    finally:
        server.kill()
    key = op_key(job_id, "mcp_approval_result", mcp["request_id"])
    [row] = [r for r in gw.operations(job_id) if r["operation_key"] == key]
    assert row["state"] == "SENT"  # accepted by OpenAI, not recorded: the crash's window

    def settled() -> bool:
        return {r["operation_key"]: r["state"] for r in gw.operations(job_id)}[key] == "CONFIRMED"

    worker_until(ledger_url, standin, settled)
    [result] = standin.events(sid, "agent.session.input.mcp_approval_request_result")
    assert result["request_id"] == mcp["request_id"]
    assert result["response"] == {"type": "mcp_tool_call", "decision": "approve"}
    posts = standin.event_posts(sid)
    assert len(posts) == 2  # the crashed send and the resend
    assert {p["key"] for p in posts} == {submissions.idempotency_key(key)}
