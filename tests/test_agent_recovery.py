"""Agent sessions that never stall and never outlive their permission (issue 27; the seed's
sections 4, 7, 11, 12 and the acceptance table of section 13), against the real test WordPress
and the OpenAI stand-in: the poll as the safety net under lost webhooks, events retried after an
outage, the binding re-checked at every resume, a deleted session, a refused OpenAI key, artifact
evidence, the environment hook, and the checked follow-up."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import sys
import threading
import time
from pathlib import Path

import agent_support
import pytest
from agent_support import agent_app
from agent_support import bind
from agent_support import run_worker
from agent_support import tool_output
from agent_support import worker_process
from agent_support import worker_until
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from support import draft_body
from support import new_job_id
from support import op_key
from support import problem_slug

from gateway.agents import submissions
from gateway.agents import tools
from gateway.ledger import db
from gateway.ledger import migrations
from gateway.ledger.db import database
from gateway.ledger.models import AgentSession
from gateway.ledger.models import Job
from gateway.ledger.models import WebhookEvent
from gateway.operator import doctor
from gateway.tenancy import sites
from gateway.tenancy import tokens
from gateway_tools.fault_proxy import Fault
from gateway_tools.openai_standin import OpenAIStandIn as S

POST_WRITE = r"^/wp-json/wp/v2/(posts|media)(/\d+)?/?$"

# The agent tests' fixtures (agent_support.py): the OpenAI stand-in and the app bound to it.
standin = agent_support.standin
app = agent_support.app

ACTION = "agent.session.action_required"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _session(gw, standin, token=None, environment: str = "none") -> tuple[str, str]:
    job_id = new_job_id()
    sid = standin.create_session(tools=tools.definitions(), environment=environment)
    answer = bind(gw, job_id, sid, token=token)
    assert answer.status_code == 201, answer.get_json()
    return job_id, sid


def _agent(gw, job_id: str, token=None) -> dict:
    answer = gw.client.get(f"/v1/jobs/{job_id}", headers=gw.headers(token))
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json()["agent"]


def _configure(gw, **overrides) -> None:
    gw.app.config["GATEWAY"] = gw.app.config["GATEWAY"].with_overrides(**overrides)


def _retrieves(standin, sid: str) -> int:
    return sum(1 for r in standin.log if r["method"] == "GET" and r["path"].endswith(sid))


def _reviews(gw, job_id: str, kind: str) -> list[dict]:
    editor = gw.make_token("editor")
    listed = gw.client.get("/v1/reviews", headers=gw.headers(editor)).get_json()["reviews"]
    return [r for r in listed if r["job_id"] == job_id and r["kind"] == kind]


def _continue(gw, job_id: str, token=None, client=None, **body):
    return (client or gw.client).post(
        f"/v1/jobs/{job_id}/agent/continue", json=body, headers=gw.headers(token)
    )


# ------------------------------------------------------------------ section 11: the poll


@pytest.mark.wordpress
def test_a_lost_webhook_of_an_in_progress_session_is_answered_by_the_poll(gw, standin, ledger_url):
    """The session was last seen ``in_progress``; its ``action_required`` webhook never
    comes. Real ``gateway worker`` processes answer it from the poll alone."""
    job_id, sid = _session(gw, standin)
    standin.set_status(sid, "in_progress")
    seen = worker_process(ledger_url, standin)
    assert seen.returncode == 0, seen.stderr[-2000:]
    assert _agent(gw, job_id)["status"] == "in_progress"
    [call] = standin.require(sid, S.function_call("put_draft", draft_body(title=f"P {job_id}")))
    worker_until(ledger_url, standin, lambda: len(standin.events(sid)) == 1, tries=3)
    assert tool_output(standin, sid, call["call_id"])["success"] is True
    assert gw.count_objects(op_key(job_id, "draft"), "post") == 1
    with gw.app.app_context(), database.connection_context():
        assert WebhookEvent.select().count() == 0  # no webhook was ever delivered


@pytest.mark.wordpress
def test_a_webhook_handled_while_openai_is_down_is_retried_and_answered(gw, standin):
    """The event arrives while OpenAI cannot be reached: it is not marked done, and the
    next pass handles it (the poll, an hour away, is not what answers)."""
    _configure(gw, agent_stale_after=3600.0)
    job_id, sid = _session(gw, standin)
    assert run_worker(gw.app)["sessions"] == 1  # seen idle just now: the poll waits an hour
    [call] = standin.require(sid, S.function_call("put_draft", draft_body(title=f"O {job_id}")))
    body, headers = standin.webhook(ACTION, sid)
    assert gw.client.post("/v1/webhooks/openai", data=body, headers=headers).status_code == 200
    standin.down = True
    counts = run_worker(gw.app)
    assert counts["events"] == 1 and counts["answered"] == 0 and counts["later"] >= 1
    with gw.app.app_context(), database.connection_context():
        [event] = WebhookEvent.select()
        assert (event.status, event.attempts) == ("pending", 1)
    standin.down = False
    counts = run_worker(gw.app)
    assert counts["events"] == 1 and counts["answered"] == 1
    with gw.app.app_context(), database.connection_context():
        [event] = WebhookEvent.select()
        assert (event.status, event.attempts) == ("done", 2)
    assert tool_output(standin, sid, call["call_id"])["success"] is True
    assert gw.count_objects(op_key(job_id, "draft"), "post") == 1


def test_the_poll_takes_every_unfinished_session_at_most_a_batch_per_pass(offline_gw, standin):
    gw = offline_gw
    _configure(gw, agent_poll_batch=2)
    live = [_session(gw, standin)[1] for _ in range(3)]
    statuses = {"idle": live[0], "in_progress": live[1], "requires_action": live[2]}
    standin.set_status(live[1], "in_progress")
    standin.set_status(live[2], "requires_action")
    finished = {}
    for how in ("failed", "stopped", "cancelled", "published"):
        job_id, sid = _session(gw, standin)
        finished[how] = (job_id, sid)
    standin.fail(finished["failed"][1])
    run_worker(gw.app)  # the batch of two, the most overdue (oldest) first
    run_worker(gw.app)
    run_worker(gw.app)
    with gw.app.app_context(), database.connection_context():
        AgentSession.update(stopped_reason="a person stopped it").where(
            AgentSession.session_id == finished["stopped"][1]
        ).execute()
        Job.update(cancelled=True).where(Job.job_id == finished["cancelled"][0]).execute()
        Job.update(phase="published").where(Job.job_id == finished["published"][0]).execute()
    before = {sid: _retrieves(standin, sid) for sid in [*live, *(s for _, s in finished.values())]}
    counts = run_worker(gw.app)
    assert counts["sessions"] <= 2  # the cap per pass
    for _ in range(3):
        run_worker(gw.app)
    for status, sid in statuses.items():  # whatever its last status, it is retrieved again
        assert _retrieves(standin, sid) > before[sid], status
        assert _agent(gw, gw_job(gw, sid))["status"] == status
    for how, (_job_id, sid) in finished.items():  # out of the poll
        assert _retrieves(standin, sid) == before[sid], how
    assert _agent(gw, finished["failed"][0])["status"] == "failed"


def gw_job(gw, sid: str) -> str:
    with gw.app.app_context(), database.connection_context():
        return AgentSession.get(AgentSession.session_id == sid).job_id


def test_the_poll_waits_longer_while_nothing_changes_with_jitter(offline_gw, standin):
    from gateway.agents import polling

    assert polling.delay(10, 100, 0, rand=lambda: 0.5) == pytest.approx(10)
    assert polling.delay(10, 100, 3, rand=lambda: 0.5) == pytest.approx(80)
    assert polling.delay(10, 100, 9, rand=lambda: 0.5) == pytest.approx(100)  # capped
    assert polling.delay(10, 100, 0, rand=lambda: 0.0) == pytest.approx(8)  # jitter -20 %
    assert polling.delay(10, 100, 0, rand=lambda: 0.999) < 12  # ... and below +20 %
    gw = offline_gw
    job_id, sid = _session(gw, standin)
    streaks = []
    for _ in range(3):
        run_worker(gw.app)
        with gw.app.app_context(), database.connection_context():
            streaks.append(AgentSession.get(AgentSession.session_id == sid).poll_streak)
    assert streaks == [0, 1, 2]  # new status once, then nothing new twice
    standin.set_status(sid, "in_progress")
    run_worker(gw.app)
    with gw.app.app_context(), database.connection_context():
        row = AgentSession.get(AgentSession.session_id == sid)
        assert row.poll_streak == 0 and row.next_poll_at is not None


# ------------------------------------------------------------------ section 12: permission


@pytest.mark.wordpress
def test_a_revoked_binding_token_stops_the_session_with_no_wordpress_write(gwp, proxy, standin):
    gw = gwp
    binder = gw.make_token("workflow", name="agent-binder")
    job_id, sid = _session(gw, standin, token=binder)
    binding = {"kind": "token", "token_name": "agent-binder", "valid": True}
    standin.require(sid, S.function_call("put_draft", draft_body(title=f"R {job_id}")))
    with gw.app.app_context(), database.connection_context():
        assert tokens.revoke_tokens(TENANT, "agent-binder") == 1
    assert gw.job(job_id).status_code == 200  # another workflow token still reads the job
    assert gw.client.get(f"/v1/jobs/{job_id}", headers=gw.headers(binder)).status_code == 401
    proxy.reset_log()
    for _ in range(3):
        run_worker(gw.app)
    assert proxy.count("POST", POST_WRITE) == 0
    assert gw.count_objects(op_key(job_id, "draft")) == 0
    assert standin.events(sid, "agent.session.input.tool_result") == []
    assert len(standin.events(sid, "agent.session.input.cancel")) == 1  # cancelled at OpenAI
    agent = _agent(gw, job_id)
    assert "agent-binder" in agent["stopped_reason"] and "revoked" in agent["stopped_reason"]
    assert agent["binding"] == {**binding, "valid": False}
    assert [op["action"] for op in gw.operations(job_id)] == ["session_cancel"]


def test_a_deleted_session_is_stopped_and_leaves_the_poll(offline_gw, standin):
    gw = offline_gw
    job_id, sid = _session(gw, standin)
    standin.require(sid, S.function_call("recover", {}))
    standin.delete_session(sid)
    counts = run_worker(gw.app)
    assert counts["stopped"] == 1 and counts["later"] == 0
    agent = _agent(gw, job_id)
    assert "no longer exists" in agent["stopped_reason"]
    asked = _retrieves(standin, sid)
    for _ in range(2):
        assert run_worker(gw.app)["later"] == 0
    assert _retrieves(standin, sid) == asked  # never asked again


@pytest.mark.wordpress
def test_an_openai_401_pauses_every_worker_visibly_until_the_key_changes(gw, standin):
    job_id, sid = _session(gw, standin)
    other_job, other_sid = _session(gw, standin)
    [call] = standin.require(sid, S.function_call("put_draft", draft_body(title=f"K {job_id}")))
    standin.revoke_key()
    assert run_worker(gw.app)["paused"] == 1
    asked = len(standin.log)
    counts = run_worker(gw.app)
    assert counts["paused"] == 1 and counts["sessions"] == 0
    assert len(standin.log) == asked  # paused: not one call to OpenAI
    agent = _agent(gw, job_id)
    assert agent["worker"]["paused"] is True and agent["worker"]["status"] == 401
    assert "401" in agent["worker"]["reason"]
    assert agent["stopped_reason"] is None and _agent(gw, other_job)["stopped_reason"] is None
    metrics = gw.client.get("/metrics").get_data(as_text=True)
    assert 'gateway_agent_worker_paused{status="401"} 1.0' in metrics
    with gw.app.app_context(), database.connection_context():
        report = doctor.doctor(gw.app.config["GATEWAY"], TENANT, SITE_NAME)
    [check] = [c for c in report["checks"] if c["check"] == "agent_worker"]
    assert check["ok"] is False and "401" in check["detail"] and check["fix"]
    assert standin.api_key not in json.dumps(agent) + metrics + json.dumps(report)

    _configure(gw, openai_api_key=standin.new_key())  # the operator rotates the key
    counts = run_worker(gw.app)
    assert counts["paused"] == 0 and counts["answered"] == 1
    assert tool_output(standin, sid, call["call_id"])["success"] is True
    assert _agent(gw, job_id)["worker"]["paused"] is False
    assert 'gateway_agent_worker_paused{status=""} 0.0' in gw.client.get("/metrics").get_data(
        as_text=True
    )
    assert gw.count_objects(op_key(job_id, "draft"), "post") == 1
    assert _agent(gw, other_job)["status"] == "idle" and other_sid


# ------------------------------------------------------------------ section 7: evidence


def _checkpoint_body(gw, job_id: str, content: str):
    digest = hashlib.sha256(content.encode()).hexdigest()
    artifacts = [{"role": "body", "uri": f"artifact://{job_id}/body.html", "sha256": digest}]
    answer = gw.client.post(
        f"/v1/jobs/{job_id}/checkpoints",
        json={"phase": "body_generated", "artifacts": artifacts},
        headers=gw.headers(),
    )
    assert answer.status_code == 201, answer.get_json()
    return artifacts


@pytest.mark.wordpress
@pytest.mark.parametrize("found_in", ["content", "saved_items"])
def test_an_artifact_digest_mismatch_stops_opens_a_review_and_writes_nothing(
    gwp, proxy, standin, found_in
):
    gw = gwp
    job_id, sid = _session(gw, standin)
    body = draft_body(title=f"A {job_id}")
    artifacts = _checkpoint_body(gw, job_id, body["content"])
    if found_in == "content":  # the session would write another body than the checkpoint's
        body = {**body, "content": body["content"] + "<p>changed after the checkpoint</p>"}
    else:  # the session's saved items claim a checkpoint the ledger does not hold
        claimed = [{**artifacts[0], "sha256": "0" * 64}]
        standin.add_call(
            sid,
            "checkpoint",
            {"phase": "body_generated", "artifacts": claimed},
            {"job_id": job_id, "task_version": 1, "phase": "body_generated"},
        )
    [call] = standin.require(sid, S.function_call("put_draft", body))
    proxy.reset_log()
    for _ in range(2):
        run_worker(gw.app)
    assert proxy.count("POST", POST_WRITE) == 0
    assert gw.count_objects(op_key(job_id, "draft")) == 0
    if found_in == "content":  # the refused call is answered with the refusal: the turn ends
        refused = tool_output(standin, sid, call["call_id"])
        problem = json.loads(refused["error"])
        assert refused["success"] is False and problem["type"].endswith("artifact-digest-mismatch")
        assert problem["expected_sha256"] == artifacts[0]["sha256"]
        assert problem["actual_sha256"] not in (None, artifacts[0]["sha256"])
        assert len(standin.events(sid)) == 1  # that result only: nothing from unproven content
    else:
        assert standin.events(sid) == []  # nothing answered from unproven content
    agent = _agent(gw, job_id)
    assert agent["stopped_reason"].startswith("artifact digest mismatch")
    [review] = _reviews(gw, job_id, "artifact_mismatch")
    [mismatch] = review["detail"]["mismatches"]
    expected = artifacts[0]["sha256"] if found_in == "content" else artifacts
    assert expected in (mismatch.get("expected_sha256"), mismatch.get("recorded"))
    assert gw.job(job_id).get_json()["status"] == "needs_review"
    editor = gw.make_token("editor")
    closed = gw.client.post(
        f"/v1/reviews/{review['review_id']}/resolve",
        json={"decision": "dismiss", "reason": "the agent redoes the body"},
        headers=gw.headers(editor),
    )
    assert closed.status_code == 200, closed.get_json()
    run_worker(gw.app)
    assert proxy.count("POST", POST_WRITE) == 0  # still stopped: an editor continues it
    if found_in == "content":  # no call left open: an editor's checked follow-up lifts the stop
        lifted = _continue(gw, job_id, token=editor, reason="the agent redoes the body")
        assert lifted.status_code == 201, lifted.get_json()
        assert lifted.get_json()["lifted_stop"]["stopped_reason"].startswith("artifact digest")
        assert _agent(gw, job_id)["stopped_reason"] is None
        assert len(standin.events(sid, "agent.session.input.message")) == 1


@pytest.mark.wordpress
def test_the_agents_checkpoint_binds_its_digests_and_matching_work_goes_on(gw, standin):
    job_id, sid = _session(gw, standin)
    body = draft_body(title=f"C {job_id}")
    digest = hashlib.sha256(body["content"].encode()).hexdigest()
    artifact = {"role": "body", "uri": f"artifact://{job_id}/body", "sha256": digest}
    [checkpoint] = standin.require(
        sid,
        S.function_call("checkpoint", {"phase": "body_generated", "artifacts": [artifact]}),
    )
    standin.then(sid, S.function_call("put_draft", body))
    for _ in range(3):
        run_worker(gw.app)
    recorded = tool_output(standin, sid, checkpoint["call_id"])
    assert recorded["success"] is True and json.loads(recorded["output"])["task_version"] == 1
    assert gw.job(job_id).get_json()["checkpoints"] == [
        {"phase": "body_generated", "artifacts": [artifact]}
    ]
    assert len(standin.events(sid, "agent.session.input.tool_result")) == 2
    assert gw.count_objects(op_key(job_id, "draft"), "post") == 1
    assert _agent(gw, job_id)["stopped_reason"] is None


HOOK = """
import json, sys
payload = json.load(sys.stdin)
with open({record!r}, "a") as out:
    out.write(json.dumps(payload) + "\\n")
print(json.dumps({answer}))
"""


def _hook(tmp_path: Path, answer: dict) -> tuple[str, Path]:
    record = tmp_path / "hook-inputs.jsonl"
    script = tmp_path / "connect_environment.py"
    script.write_text(HOOK.format(record=str(record), answer=answer))
    return f"{sys.executable} {script}", record


@pytest.mark.wordpress
@pytest.mark.parametrize("held", ["as_checkpointed", "replaced"])
def test_environment_connection_through_the_hook_checks_the_files(gw, standin, tmp_path, held):
    job_id, sid = _session(gw, standin, environment="self_hosted")
    artifacts = _checkpoint_body(gw, job_id, "<p>the body</p>")
    digest = artifacts[0]["sha256"] if held == "as_checkpointed" else "f" * 64
    answer = {"connected": True, "artifacts": [{"uri": artifacts[0]["uri"], "sha256": digest}]}
    command, record = _hook(tmp_path, answer)
    _configure(gw, agent_environment_hook=command)
    env_id = standin.environment_id(sid)
    standin.require(sid, S.environment_connection(env_id))
    for _ in range(2):
        run_worker(gw.app)
    inputs = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(inputs) == 1  # decided once for this request, not at every pass
    sent = inputs[0]
    assert sent["environment"]["id"] == env_id and sent["session_id"] == sid
    assert sent["environment"]["remote_url"].startswith("wss://")
    assert sent["artifacts"] == [{"phase": "body_generated", **artifacts[0]}]
    assert len(sent["idempotency_key"]) == 64 and standin.api_key not in json.dumps(sent)
    agent = _agent(gw, job_id)
    assert agent["environment"]["id"] == env_id
    assert agent["environment"]["status"] == "connected"
    if held == "as_checkpointed":
        assert agent["stopped_reason"] is None
        assert _reviews(gw, job_id, "artifact_mismatch") == []
    else:
        assert agent["stopped_reason"].startswith("artifact digest mismatch")
        [review] = _reviews(gw, job_id, "artifact_mismatch")
        assert review["detail"]["mismatches"][0]["actual_sha256"] == "f" * 64


@pytest.mark.wordpress
def test_environment_hook_refusal_and_environment_events_show_on_the_job(gw, standin, tmp_path):
    job_id, sid = _session(gw, standin, environment="self_hosted")
    command, _ = _hook(tmp_path, {"connected": False, "reason": "no runner left in the pool"})
    _configure(gw, agent_environment_hook=command)
    env_id = standin.environment_id(sid)
    standin.require(sid, S.environment_connection(env_id))
    counts = run_worker(gw.app)
    assert counts["refused"] == 1
    agent = _agent(gw, job_id)
    assert agent["environment"]["status"] == "refused"
    assert "no runner left in the pool" in agent["environment"]["reason"]
    [item] = _reviews(gw, job_id, "agent_action")
    assert "no runner left" in item["detail"]["refused"]
    standin.finish_turn(sid)  # the session gave up on the environment
    body, headers = standin.webhook("agent.environment.suspended", env_id)
    assert gw.client.post("/v1/webhooks/openai", data=body, headers=headers).status_code == 200
    run_worker(gw.app)
    agent = _agent(gw, job_id)
    assert agent["environment"]["status"] == "suspended"
    assert agent["environment"]["event"] == "agent.environment.suspended"
    with gw.app.app_context(), database.connection_context():
        [event] = WebhookEvent.select()
        assert event.status == "done"


# ------------------------------------------------------------------ section 4: follow-up


@pytest.mark.wordpress
def test_a_follow_up_is_refused_while_an_operation_is_unknown_and_sent_once_when_clean(
    gwp, proxy, standin
):
    gw = gwp
    job_id, sid = _session(gw, standin)
    proxy.add_fault(Fault(kind="drop_response", method="POST", path=r"^/wp-json/wp/v2/posts/?$"))
    lookups = Fault(kind="status_without_forward", status=503, path=r"/v1/objects", times=None)
    proxy.add_fault(lookups)  # the draft's outcome stays unproven
    unknown = gw.put_draft(job_id, draft_body(title=f"F {job_id}"))
    assert unknown.status_code == 503 and problem_slug(unknown) == "outcome-unknown"
    refused = _continue(gw, job_id)
    assert refused.status_code == 409 and problem_slug(refused) == "follow-up-refused"
    key = op_key(job_id, "draft")
    assert any(key in reason and "UNKNOWN" in reason for reason in refused.get_json()["blocking"])
    assert standin.event_posts(sid) == []  # nothing sent

    proxy.clear_faults()
    note = {"note": "Cite the 2025 report in the second paragraph."}  # issue 56: an editor's
    editor = gw.headers(gw.make_token("editor"))  # comment reaches the agent's next input
    noted = gw.client.post(f"/v1/jobs/{job_id}/comments", json=note, headers=editor)
    assert noted.status_code == 201, noted.get_json()
    sent = _continue(gw, job_id)
    assert sent.status_code == 201, sent.get_json()
    answer = sent.get_json()
    post_id = gw.job(job_id).get_json()["post_id"]
    assert answer["sent"] is True and answer["replayed"] is False
    assert answer["facts"]["draft"]["post_id"] == post_id
    by = noted.get_json()["actor"]
    assert answer["facts"]["notes"] == [{"event": "commented", "by": by, **note}]
    [message] = standin.events(sid, "agent.session.input.message")
    text = message["input"][0]["content"][0]["text"]
    assert f"post {post_id}" in text and "do not publish" in text
    assert f"editor {by} (commented): {note['note']}" in text
    again = _continue(gw, job_id)
    assert again.status_code == 200 and again.get_json()["replayed"] is True
    assert len(standin.events(sid, "agent.session.input.message")) == 1
    [post] = standin.event_posts(sid)  # sent once, with the key of its ledger operation
    assert post["key"] == submissions.idempotency_key(answer["operation"]["operation_key"])
    assert gw.count_objects(key, "post") == 1


def _until_follow_up_sent(gw, job_id: str, tries: int) -> None:
    """Poll the job's operations every 20 ms, at most ``tries`` times, until its follow-up
    row is SENT or CONFIRMED (a send in flight or done)."""
    for _ in range(tries):
        states = {o["action"]: o["state"] for o in gw.operations(job_id)}
        if states.get("follow_up") in ("SENT", "CONFIRMED"):
            return
        time.sleep(0.02)


@pytest.mark.wordpress
def test_two_racing_identical_follow_ups_send_the_event_once_and_answer_alike(gw, standin):
    """Issue 37: two concurrent first follow-ups of the same facts. The gateway's own claim
    decides (not OpenAI's idempotency key): the event is POSTed to OpenAI once, one answer is
    201 ``replayed: false``, the other 200 ``replayed: true`` with the same operation, both
    ``sent``. The stand-in answers the event slowly (1 s), so the second request may arrive
    while the first one's call is in flight; a third one is sent exactly then (the row SENT)
    and answers the same replay."""
    job_id, sid = _session(gw, standin)
    standin.event_delay = 1.0
    barrier, answers = threading.Barrier(2), []

    def follow_up(wait_for_sent: bool = False):
        client = gw.app.test_client()  # one client per thread, as separate callers
        if wait_for_sent:
            _until_follow_up_sent(gw, job_id, tries=200)
        else:
            barrier.wait(timeout=10)
        answers.append(_continue(gw, job_id, client=client))

    threads = [threading.Thread(target=follow_up) for _ in range(2)]
    threads.append(threading.Thread(target=follow_up, args=(True,)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert len(answers) == 3
    bodies = sorted(((a.status_code, a.get_json()) for a in answers), key=lambda b: b[0])
    assert [status for status, _ in bodies] == [200, 200, 201], bodies
    (_, replay), (_, late), (_, first) = bodies
    assert late == replay  # the same stored operation, answered alike
    assert (first["replayed"], replay["replayed"]) == (False, True)
    assert first["sent"] is True and replay["sent"] is True
    assert first["operation"]["operation_key"] == replay["operation"]["operation_key"]
    assert replay["operation"]["state"] == first["operation"]["state"] == "CONFIRMED"
    assert first["facts"] == replay["facts"] and first["message"] == replay["message"]
    assert len(standin.event_posts(sid)) == 1  # posted once: the gateway's claim decided
    assert len(standin.events(sid, "agent.session.input.message")) == 1
    assert first["operation"]["attempts"] == 1
    # the agents' claim writes what perform's does: the lease grant and the site's credentials
    assert first["operation"]["fencing_token"] is not None
    assert first["operation"]["credential_version"] is not None


@pytest.mark.wordpress
def test_the_creator_of_a_follow_up_whose_send_a_racer_won_answers_the_settled_send(
    gw, standin, monkeypatch
):
    """The interleaving the race above meets only sometimes, made certain: the first
    follow-up claims the row (PREPARED), and before it sends, an identical follow-up finds the
    row and wins the send (the stand-in holds the event 1 s). The creator answers 201 with the
    send settled (``sent: true``, CONFIRMED), not the in-flight row; the racer 200, the same
    operation; the event was posted once."""
    job_id, sid = _session(gw, standin)
    standin.event_delay = 1.0
    answers, claim_new = {}, submissions.claim_new

    def racer():
        answers["racer"] = _continue(gw, job_id, client=gw.app.test_client())

    def claim_then_lose_the_send(*args, **kwargs):
        row, created = claim_new(*args, **kwargs)
        if created:
            thread = threading.Thread(target=racer)
            thread.start()
            answers["thread"] = thread
            _until_follow_up_sent(gw, job_id, tries=500)  # the racer's send is in flight
        return row, created

    monkeypatch.setattr(submissions, "claim_new", claim_then_lose_the_send)
    first = _continue(gw, job_id)
    answers["thread"].join(timeout=60)
    assert first.status_code == 201, first.get_json()
    assert answers["racer"].status_code == 200, answers["racer"].get_json()
    creator, racing = first.get_json(), answers["racer"].get_json()
    assert (creator["replayed"], racing["replayed"]) == (False, True)
    assert creator["sent"] is True and racing["sent"] is True
    assert creator["operation"]["state"] == racing["operation"]["state"] == "CONFIRMED"
    assert creator["operation"]["operation_key"] == racing["operation"]["operation_key"]
    assert len(standin.event_posts(sid)) == 1


@pytest.mark.wordpress
def test_a_stopped_session_is_continued_only_by_an_editor_with_a_reason(gw, standin):
    job_id, sid = _session(gw, standin)
    with gw.app.app_context(), database.connection_context():
        AgentSession.update(stopped_reason="limit: resume attempts reached 50").where(
            AgentSession.session_id == sid
        ).execute()
    refused = _continue(gw, job_id)  # a workflow token may not lift a stop
    assert refused.status_code == 409 and problem_slug(refused) == "follow-up-refused"
    assert any("only an editor" in b for b in refused.get_json()["blocking"])
    editor = gw.make_token("editor")
    assert _continue(gw, job_id, token=editor).status_code == 422  # a reason is needed
    lifted = _continue(gw, job_id, token=editor, reason="checked the job: go on")
    assert lifted.status_code == 201, lifted.get_json()
    assert lifted.get_json()["lifted_stop"]["by"] == "editor:test-editor"
    assert _agent(gw, job_id)["stopped_reason"] is None
    assert len(standin.events(sid, "agent.session.input.message")) == 1
    busy = _continue(gw, job_id)  # the message started a turn: these facts were sent
    assert busy.status_code == 200 and busy.get_json()["replayed"] is True


@pytest.mark.wordpress
def test_gateway_jobs_continue_from_a_terminal(gw, standin, ledger_url):
    import os
    import subprocess

    from support import gateway_command

    job_id, sid = _session(gw, standin)
    standin.require(sid, S.mcp_approval())
    env = {
        **os.environ,
        "GATEWAY_DATABASE_URL": ledger_url,
        "GATEWAY_SECRET_KEY": SECRET_KEY,
        "GATEWAY_OPENAI_API_KEY": standin.api_key,
        "GATEWAY_OPENAI_BASE_URL": standin.base_url,
    }
    command = [*gateway_command(), "jobs", "continue", "--tenant", TENANT, "--job-id", job_id]
    blocked = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert blocked.returncode == 2 and "open required actions" in blocked.stderr
    assert len(blocked.stderr.strip().splitlines()) == 1 and standin.event_posts(sid) == []
    standin.finish_turn(sid)
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sent"] is True
    assert len(standin.events(sid, "agent.session.input.message")) == 1


# ------------------------------------------------------------------ migration 10


@pytest.mark.wordpress
def test_a_session_bound_before_version_10_goes_on_while_its_tenant_has_a_workflow_token(
    tmp_path, wp_site, standin
):
    """The ledger a schema-version-8 gateway left (``ledger-v8-agent.sql``): after the
    migration its session has no binding token; it is answered while tenant ``acme`` has a
    live workflow token, stopped once it has none, and a repeated bind records the caller's
    token as its binding."""
    path = tmp_path / "ledger-v8.db"
    with sqlite3.connect(path) as connection:
        connection.executescript((FIXTURES / "ledger-v8-agent.sql").read_text())
    url = f"sqlite:///{path}"
    db.bind(url)
    assert migrations.migrate() == (8, migrations.latest_version())
    application = agent_app(url, standin, secret_key="fixture-v8-secret-key")
    author = wp_site["users"]["author"]
    with application.app_context(), database.connection_context():
        sites.add_site(
            "fixture-v8-secret-key",
            TENANT,
            "blog",
            wp_site["url"],
            author["username"],
            author["app_password"],
        )  # the operator points the fixture's site at a live WordPress
        row = AgentSession.get(AgentSession.session_id == "sess_fixture_v8")
        assert row.bound_token_hash is None and row.poll_streak == 0
    sid = standin.create_session(tools=tools.definitions(), session_id="sess_fixture_v8")
    [first] = standin.require(sid, S.function_call("recover", {}))
    assert run_worker(application)["answered"] == 1
    assert tool_output(standin, sid, first["call_id"])["success"] is True

    with application.app_context(), database.connection_context():
        assert tokens.revoke_tokens(TENANT, "fixture-v8") == 1  # the tenant's last one
    standin.require(sid, S.function_call("recover", {}))
    assert run_worker(application)["stopped"] == 1
    assert len(standin.events(sid, "agent.session.input.tool_result")) == 1
    with application.app_context(), database.connection_context():
        reason = AgentSession.get(AgentSession.session_id == sid).stopped_reason
        token = tokens.create_token(TENANT, "workflow", "after-v10")
    assert "no live workflow token" in reason

    client, headers = application.test_client(), {"Authorization": f"Bearer {token}"}
    rebound = client.put(
        "/v1/jobs/fixture-v8-agent",
        json={"site": "blog", "task_version": 1, "session_id": sid},
        headers=headers,
    )
    assert rebound.status_code == 200, rebound.get_json()
    agent = client.get("/v1/jobs/fixture-v8-agent", headers=headers).get_json()["agent"]
    assert agent["binding"] == {"kind": "token", "token_name": "after-v10", "valid": True}
    assert agent["stopped_reason"] == reason  # a stop is lifted by an editor, not a bind
    database.close()
