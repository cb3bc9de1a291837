"""Agent sessions against the real test WordPress and the OpenAI stand-in (a real HTTP server
answering in the installed SDK's wire format): session binding, tools generated from the
schemas, required actions answered exactly once through the ledger, what only a person
decides, state rebuild over every saved item, and stops."""

from __future__ import annotations

import datetime as dt
import json
import re

import agent_support
import pytest
from agent_support import bind
from agent_support import run_worker
from agent_support import tool_output
from agent_support import worker_process
from agent_support import worker_until
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from support import all_ledger_rows
from support import draft_body
from support import new_job_id
from support import op_key
from support import problem_slug

from gateway.agents import submissions
from gateway.agents import tools
from gateway.core import validation
from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import Site
from gateway.ledger.models import SiteSlot
from gateway.tenancy import sites
from gateway_tools.openai_standin import OpenAIStandIn as S

# The agent tests' fixtures (agent_support.py): the OpenAI stand-in and the app bound to it.
standin = agent_support.standin
app = agent_support.app

POST_WRITE = r"^/wp-json/wp/v2/posts(/\d+)?/?$"
TOOL_RESULT = "agent.session.input.tool_result"


def _session(gw, standin, job_id: str | None = None) -> tuple[str, str]:
    job_id = job_id or new_job_id()
    sid = standin.create_session(tools=tools.definitions())
    answer = bind(gw, job_id, sid)
    assert answer.status_code == 201, answer.get_json()
    return job_id, sid


def _editor_resolve(gw, editor: str, review_id: int, decision: str, reason: str | None = None):
    body = {"decision": decision, **({"reason": reason} if reason else {})}
    return gw.client.post(f"/v1/reviews/{review_id}/resolve", json=body, headers=gw.headers(editor))


# ------------------------------------------------------------------ tools and binding


def test_agent_tools_are_generated_from_the_http_schemas(offline_gw):
    answer = offline_gw.client.get("/v1/agent-tools", headers=offline_gw.headers())
    assert answer.status_code == 200
    found = {t["name"]: t for t in answer.get_json()["tools"]}
    assert set(found) == {
        "upload_media",
        "put_draft",
        "insert_block",
        "verify",
        "request_approval",
        "bump_task_version",
        "recover",
        "checkpoint",
    }
    assert not any("publish" in name or name == "approve" for name in found)
    draft, generated = validation.schema("draft"), found["put_draft"]["parameters"]
    assert set(generated["properties"]) == set(draft["properties"])
    # OpenAI's strict form (issue 42): all required, the optional ones nullable, no $ref
    assert generated["required"] == list(generated["properties"])
    assert "$ref" not in json.dumps(generated) and generated["additionalProperties"] is False
    for name, prop in generated["properties"].items():
        optional = name not in draft["required"]
        assert ("null" in prop.get("type", [])) is optional, name
    title = generated["properties"]["title"]  # the limits and the text rule said in words
    assert "at most 1000 characters" in title["description"] and "control" in title["description"]
    assert found["upload_media"]["parameters"]["required"][0] == "slot"
    assert found["bump_task_version"]["parameters"]["properties"] == {
        "task_version": validation.schema("job")["properties"]["task_version"]
    }
    checkpoint = found["checkpoint"]["parameters"]  # the checkpoint route's own schema
    assert set(checkpoint["properties"]) == set(validation.schema("checkpoint")["properties"])
    assert "sha256" in checkpoint["properties"]["artifacts"]["items"]["required"]


def test_one_session_belongs_to_one_job_across_tenants(offline_gw, standin):
    gw = offline_gw
    job_id, sid = _session(gw, standin)
    assert bind(gw, job_id, sid).status_code == 200  # the same pair again
    other_tenant = gw.make_token("workflow", tenant="globex")
    with gw.app.app_context(), database.connection_context():
        sites.add_site(SECRET_KEY, "globex", SITE_NAME, gw.wp_url, "author", "a b c d e f")
    refused = bind(gw, new_job_id(), sid, token=other_tenant)
    assert refused.status_code == 409 and problem_slug(refused) == "session-bound"
    refused = bind(gw, new_job_id(), sid)
    assert refused.status_code == 409 and problem_slug(refused) == "session-bound"
    second = standin.create_session()
    refused = bind(gw, job_id, second)
    assert refused.status_code == 409
    assert problem_slug(refused) == "session-change-needs-version-bump"
    assert bind(gw, job_id, second, task_version=2).status_code == 200
    job = gw.job(job_id).get_json()
    assert job["session_id"] == second and job["agent"]["session_id"] == second
    assert bind(gw, job_id, sid, task_version=3).status_code == 409  # never back


# ------------------------------------------------------------------ exactly once


def test_the_standin_honours_idempotency_keys_with_the_sdk(standin):
    import openai

    sid = standin.create_session()
    [call] = standin.require(sid, S.function_call("verify", {}))
    client = openai.OpenAI(api_key=standin.api_key, base_url=standin.base_url, max_retries=0)
    event = {
        "type": TOOL_RESULT,
        "call_id": call["call_id"],
        "turn_id": call["turn_id"],
        "success": True,
        "output": "{}",
    }
    for _ in range(3):
        client.beta.agents.sessions.events.create(sid, events=[event], idempotency_key="k-1")
    assert len(standin.events(sid)) == 1 and len(standin.event_posts(sid)) == 3
    with pytest.raises(openai.ConflictError):  # a new key for an answered call: refused
        client.beta.agents.sessions.events.create(sid, events=[event], idempotency_key="k-2")
    with pytest.raises(openai.BadRequestError):  # the SDK's own types refuse a bad event
        client.beta.agents.sessions.events.create(sid, events=[{"type": "nope"}])


def test_the_standin_is_as_strict_as_the_sdk(standin):
    """What the stand-in receives is checked against the SDK's parameter types with extra keys
    forbidden at every level, and a result must name its call's turn; what it emits parses with
    the SDK's own webhook models, ``agent.session.failed`` and ``agent.environment.*``
    included."""
    import openai

    sid = standin.create_session(environment="self_hosted")
    [call] = standin.require(sid, S.function_call("verify", {}))
    client = openai.OpenAI(api_key=standin.api_key, base_url=standin.base_url, max_retries=0)
    good = {
        "type": TOOL_RESULT,
        "call_id": call["call_id"],
        "turn_id": call["turn_id"],
        "success": True,
        "output": "{}",
    }
    typo = {k: v for k, v in good.items() if k != "output"} | {"ouput": "{}"}
    nested = {
        "type": "agent.session.input.message",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi", "x": 1}]}],
    }
    for bad in (typo, {**good, "turn_id": "turn_someone_else"}, nested):
        with pytest.raises(openai.BadRequestError):
            client.beta.agents.sessions.events.create(sid, events=[bad])
    assert standin.events(sid) == [] and standin.session(sid).status == "requires_action"
    client.beta.agents.sessions.events.create(sid, events=[good])
    assert standin.events(sid) == [good]

    env_id = standin.environment_id(sid)
    emitted = {
        "agent.session.failed": sid,
        "agent.session.idle": sid,
        "agent.session.action_required": sid,
        "agent.environment.suspended": env_id,
        "agent.environment.expired": env_id,
    }
    for kind, target in emitted.items():
        body, headers = standin.webhook(kind, target)
        event = client.webhooks.unwrap(body, headers, secret=standin.webhook_secret)
        assert event.type == kind and event.data.id == target
    failed = client.webhooks.unwrap(*standin.fail(sid), secret=standin.webhook_secret)
    assert failed.data.environment_type == "self_hosted" and failed.data.environment_id == env_id
    assert client.beta.agents.sessions.retrieve(sid).status == "failed"
    with pytest.raises(ValueError):  # no such event in the SDK: the stand-in will not make it
        standin.webhook("agent.session.exploded", sid)


@pytest.mark.wordpress
def test_the_worker_backs_off_from_a_busy_site_and_answers_later(gw, standin):
    """The agent worker takes the site's slot like any caller; with every slot held it leaves
    the call unanswered (``later``: no failure told to the model, no WordPress write) and
    answers it at a later pass once a slot is free."""
    gw.app.config["GATEWAY"] = gw.app.config["GATEWAY"].with_overrides(site_concurrency=1)
    job_id, sid = _session(gw, standin)
    key = op_key(job_id, "draft")
    [call] = standin.require(sid, S.function_call("put_draft", draft_body(title=f"B {job_id}")))
    with gw.app.app_context(), database.connection_context():
        held = SiteSlot.create(
            site_id=Site.get(Site.tenant == TENANT, Site.name == SITE_NAME).id,
            slot=0,
            holder="another-caller",
            expires_at=db.utcnow() + dt.timedelta(minutes=5),
        )
    counts = run_worker(gw.app)
    assert counts["later"] == 1 and counts["answered"] == 0
    assert standin.events(sid) == []
    assert gw.count_objects(key, "post") == 0 and gw.operations(job_id) == []

    with gw.app.app_context(), database.connection_context():
        SiteSlot.delete().where(SiteSlot.id == held.id).execute()
    assert run_worker(gw.app)["answered"] == 1
    assert gw.count_objects(key, "post") == 1
    assert tool_output(standin, sid, call["call_id"])["success"] is True
    with gw.app.app_context(), database.connection_context():
        assert SiteSlot.select().count() == 0  # released when the job's pass ended


@pytest.mark.wordpress
def test_put_draft_runs_once_and_a_new_call_id_replays(gw, standin, caplog):
    job_id, sid = _session(gw, standin)
    body = draft_body(title=f"Agent {job_id}")
    [first] = standin.require(sid, S.function_call("put_draft", body))
    counts = run_worker(gw.app)
    assert counts["answered"] == 1
    key = op_key(job_id, "draft")
    assert gw.count_objects(key, "post") == 1
    event = tool_output(standin, sid, first["call_id"])
    assert event["success"] is True and json.loads(event["output"])["state"] == "CONFIRMED"
    result_key = op_key(job_id, "tool_result", first["call_id"])
    [post] = [p for p in standin.event_posts(sid)]
    assert post["key"] == submissions.idempotency_key(result_key)

    # The agent re-plans: same arguments, new call id, new turn -> the stored receipt.
    [again] = standin.require(sid, S.function_call("put_draft", body))
    run_worker(gw.app)
    output = json.loads(tool_output(standin, sid, again["call_id"])["output"])
    assert output["replayed"] is True and gw.count_objects(key, "post") == 1

    # Other arguments under the same version: refused, naming the bump tool.
    [changed] = standin.require(sid, S.function_call("put_draft", {**body, "title": "Other"}))
    run_worker(gw.app)
    refused = tool_output(standin, sid, changed["call_id"])
    problem = json.loads(refused["error"])
    assert refused["success"] is False and problem["type"].endswith("operation-key-reused")
    assert problem["next_tool"] == "bump_task_version"
    run_worker(gw.app)  # nothing pending: nothing resent, nothing executed
    assert len(standin.events(sid, "agent.session.input.tool_result")) == 3
    assert gw.count_objects(key, "post") == 1
    agent = gw.job(job_id).get_json()["agent"]
    assert agent["counters"]["tool_calls_answered"] == 3
    assert standin.api_key not in all_ledger_rows()
    assert standin.api_key not in caplog.text
    assert standin.api_key not in json.dumps(gw.job(job_id).get_json())


@pytest.mark.wordpress
@pytest.mark.parametrize("point", ["before_tool_result", "after_session_input_sent"])
def test_crash_between_write_and_submission_ends_in_one_post_one_submission(
    gw, standin, ledger_url, point
):
    job_id, sid = _session(gw, standin)
    [call] = standin.require(sid, S.function_call("put_draft", draft_body(title=job_id)))
    crashed = worker_process(ledger_url, standin, crash_point=point)
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    key = op_key(job_id, "draft")
    assert gw.count_objects(key, "post") == 1  # WordPress has the post; the agent has no answer

    # Restarted without the crash point; the dead worker's lease expires first.
    def settled() -> bool:
        return {r["action"]: r["state"] for r in gw.operations(job_id)}.get("tool_result") == (
            "CONFIRMED"
        )

    worker_until(ledger_url, standin, settled)
    assert gw.count_objects(key, "post") == 1
    tool_output(standin, sid, call["call_id"])  # exactly one accepted submission
    expected = submissions.idempotency_key(op_key(job_id, "tool_result", call["call_id"]))
    assert {p["key"] for p in standin.event_posts(sid)} == {expected}
    rows = {r["action"]: r for r in gw.operations(job_id)}
    assert rows["tool_result"]["state"] == "CONFIRMED" and rows["draft"]["state"] == "CONFIRMED"


# ------------------------------------------------------------------ a person decides


@pytest.mark.wordpress
def test_requests_only_a_person_decides_become_review_items(gw, standin):
    job_id, sid = _session(gw, standin)
    mcp, cua, unknown, env = standin.require(
        sid,
        S.mcp_approval(),
        S.computer_use_approval(),
        S.function_call("delete_all_posts", {}),
        S.environment_connection(),
    )
    for _ in range(2):
        counts = run_worker(gw.app)
    # Three requests wait for a person; the environment reconnection is refused with a reason
    # (no hook configured) and waits for a person too.
    assert counts["review"] == 3 and counts["refused"] == 1 and standin.events(sid) == []
    editor = gw.make_token("editor")
    items = gw.client.get("/v1/reviews", headers=gw.headers(editor)).get_json()["reviews"]
    by_type = {
        i["detail"]["action"]["type"] + i["detail"].get("unknown_tool", ""): i for i in items
    }
    assert len(items) == 4 and all(i["kind"] == "agent_action" for i in items)
    refused = by_type["environment_connection"]["detail"]["refused"]
    assert "GATEWAY_AGENT_ENVIRONMENT_HOOK" in refused
    environment = gw.job(job_id).get_json()["agent"]["environment"]
    assert (environment["id"], environment["status"]) == (env["environment_id"], "refused")
    assert gw.job(job_id).get_json()["status"] == "needs_review"
    wrong = _editor_resolve(gw, editor, by_type["environment_connection"]["review_id"], "approve")
    assert wrong.status_code == 422
    decisions = [
        ("mcp_approval_request", "approve", None),
        ("computer_use_approval_request", "deny", None),
        ("function_calldelete_all_posts", "deny", "not a gateway tool"),
        ("environment_connection", "dismiss", None),
    ]
    for name, decision, reason in decisions:
        answer = _editor_resolve(gw, editor, by_type[name]["review_id"], decision, reason)
        assert answer.status_code == 200, answer.get_json()
    run_worker(gw.app)  # nothing is answered twice
    kinds = [e["type"].rsplit(".", 1)[1] for e in standin.events(sid)]
    assert sorted(kinds) == sorted(
        ["mcp_approval_request_result", "computer_use_approval_request_result", "tool_result"]
    )
    [denied] = standin.events(sid, "agent.session.input.tool_result")
    assert denied["call_id"] == unknown["call_id"] and denied["success"] is False
    assert "not a gateway tool" in denied["error"]
    [mcp_result] = standin.events(sid, "agent.session.input.mcp_approval_request_result")
    assert mcp_result["request_id"] == mcp["request_id"]
    assert mcp_result["response"]["decision"] == "approve"
    [cua_result] = standin.events(sid, "agent.session.input.computer_use_approval_request_result")
    assert cua_result["request_id"] == cua["request_id"]
    assert cua_result["response"] == {"type": "browser_origin_access", "decision": "deny"}
    # the decision that stands, sent again: its answer again, nothing answered twice
    again = _editor_resolve(gw, editor, by_type[name]["review_id"], "dismiss")
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    again = _editor_resolve(gw, editor, by_type["mcp_approval_request"]["review_id"], "approve")
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["operation"]["operation_key"].endswith(mcp["request_id"])
    assert len(standin.events(sid, "agent.session.input.mcp_approval_request_result")) == 1
    other = _editor_resolve(gw, editor, by_type["mcp_approval_request"]["review_id"], "deny")
    assert other.status_code == 409 and problem_slug(other) == "review-decided"
    assert other.get_json()["decision"] == "approve"
    assert [a.type for a in standin.session(sid).required_actions] == ["environment_connection"]


# ------------------------------------------------------------------ rebuild


def test_recover_reads_every_saved_item(offline_gw, standin):
    gw = offline_gw
    job_id, sid = _session(gw, standin)
    standin.add_items(sid, 250, tool_calls=10)
    answer = gw.recover(job_id)
    assert answer.status_code == 200, answer.get_json()
    agent = answer.get_json()["agent"]
    assert agent["items_read"] == 250 and agent["pages"] >= 3
    assert len(agent["tool_calls"]["completed"]) == 10
    assert agent["business_success"] is False
    item_pages = [r for r in standin.log if r["path"].endswith("/items")]
    assert len(item_pages) == 3
    stored = gw.job(job_id).get_json()["agent"]["summary"]
    assert stored["items_read"] == 250  # GET shows the last stored summary, cheaply
    assert len([r for r in standin.log if r["path"].endswith("/items")]) == 3


# ------------------------------------------------------------------ stops


@pytest.mark.wordpress
def test_cancelled_job_pending_action_is_never_answered(gw, standin):
    job_id, sid = _session(gw, standin)
    standin.require(sid, S.function_call("put_draft", draft_body(title=job_id)))
    standin.down = True  # OpenAI unreachable at the moment of the cancel
    answer = gw.client.post(
        f"/v1/jobs/{job_id}/cancel", json={"reason": "wrong topic"}, headers=gw.headers()
    )
    assert answer.status_code == 200 and answer.get_json()["cancelled"] is True
    standin.down = False
    for _ in range(3):
        run_worker(gw.app)
    assert len(standin.events(sid, "agent.session.input.cancel")) == 1
    assert standin.events(sid, "agent.session.input.tool_result") == []
    assert gw.count_objects(op_key(job_id, "draft")) == 0


@pytest.mark.wordpress
def test_revoked_wordpress_password_stops_the_job(gwp, proxy, standin):
    gw = gwp
    job_id, sid = _session(gw, standin)
    with gw.app.app_context(), database.connection_context():
        sites.add_site(
            SECRET_KEY, TENANT, SITE_NAME, proxy.url, gw.author["username"], "xxxx " * 5 + "xxxx"
        )
    standin.require(sid, S.function_call("put_draft", draft_body(title=job_id)))
    proxy.reset_log()
    for _ in range(3):
        run_worker(gw.app)
    assert proxy.count("POST", POST_WRITE) <= 1
    assert standin.events(sid, "agent.session.input.tool_result") == []
    agent = gw.job(job_id).get_json()["agent"]
    assert "credentials" in agent["stopped_reason"]


@pytest.mark.wordpress
def test_review_page_shows_the_agent_request_and_the_editor_denies_it(gw, standin):
    job_id, sid = _session(gw, standin)
    [mcp] = standin.require(sid, S.mcp_approval(name="export_contacts"))
    run_worker(gw.app)
    client, editor = gw.app.test_client(), gw.make_token("editor")
    page = client.get("/review/login")
    client.post("/review/login", data={"token": editor, "csrf_token": _csrf(page)})
    page = client.get("/review")
    text = page.get_data(as_text=True)
    assert "MCP crm: export_contacts" in text and 'class="agent-approve"' in text
    review_id = int(re.search(r'id="review-(\d+)"', text).group(1))
    answer = client.post(
        f"/review/reviews/{review_id}/resolve",
        data={"decision": "deny", "reason": "no exports", "csrf_token": _csrf(page)},
    )
    assert answer.status_code in (302, 303)
    [result] = standin.events(sid, "agent.session.input.mcp_approval_request_result")
    assert result["request_id"] == mcp["request_id"] and result["response"]["decision"] == "deny"
    assert gw.job(job_id).get_json()["status"] != "needs_review"


def _csrf(page) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page.get_data(as_text=True)).group(1)


@pytest.mark.wordpress
def test_a_reached_limit_stops_the_agent_until_a_person_acts(gw, standin):
    job_id, sid = _session(gw, standin)
    gw.app.config["GATEWAY"] = gw.app.config["GATEWAY"].with_overrides(agent_max_tool_calls=1)
    [first] = standin.require(sid, S.function_call("recover", {}))
    standin.then(sid, S.function_call("recover", {}))
    standin.set_usage(sid, 1234)
    for _ in range(3):
        run_worker(gw.app)
    assert tool_output(standin, sid, first["call_id"])["success"] is True
    assert len(standin.events(sid)) == 1  # the second call waits for a person
    agent = gw.job(job_id).get_json()["agent"]
    assert agent["stopped_reason"] == "limit: tool calls answered reached 1"
    assert agent["counters"] == {
        "resume_attempts": 1,
        "tool_calls_answered": 1,
        "tokens_used": 1234,
    }
