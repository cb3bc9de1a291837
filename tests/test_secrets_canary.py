"""Secrets canary: with known secrets configured (the site's application password, API tokens
of every role, the metrics token, the secret key), run the main job, the fault scenarios and
the review page through a real ``gateway serve``, then search the ledger database (with its
``-wal``), every log line and every response body: 0 hits.

The OpenAI project key and the webhook secret are configured too (against the local OpenAI
stand-in): a session is bound to a job, a signed webhook delivered (and a forged one refused),
and the server's agent worker answers the session's tool call with the key.

Transports: each one, REST and XML-RPC (which carries the application password in every
request body, where a logged request or an echoed fault would show it); the fault scenarios
hit each transport's own create and upload calls.

The OAuth sign-in's secrets (codes, access and refresh tokens, pending ids) have their canary
beside the flow that makes them, through the remote MCP listener: test_mcp_oauth_e2e."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import time

import pytest
import requests
from servers import Server
from support import SECRET_KEY
from support import TENANT
from support import all_ledger_rows
from support import both_transports
from support import call_fault
from support import draft_body
from support import new_job_id
from support import png_bytes
from support import sqlite_path

import gateway
from gateway.agents import tools
from gateway_tools.openai_standin import OpenAIStandIn

pytestmark = pytest.mark.wordpress
METRICS_TOKEN = "canary-metrics-7f3a9c"
ACTION = "agent.session.action_required"


class Recorder:
    """Calls the served gateway and keeps every response (status line, headers, body)."""

    def __init__(self, server: Server, token: str):
        self.server, self.token = server, token
        self.seen: list[bytes] = []

    def __call__(self, method: str, path: str, token: str | None = None, **kwargs):
        headers = {"Authorization": f"Bearer {token or self.token}", **kwargs.pop("headers", {})}
        for _ in range(8):  # retry like n8n on retryable answers
            try:
                answer = requests.request(
                    method, self.server.url + path, headers=headers, timeout=60, **kwargs
                )
            except requests.ConnectionError:
                continue
            self.keep(answer)
            if answer.status_code not in (409, 429, 503):
                break
        return answer

    def keep(self, answer: requests.Response) -> None:
        self.seen.append(str(dict(answer.headers)).encode() + b"\n" + answer.content)


def _token(server: Server, role: str) -> str:
    out = server._cli("tokens", "create", "--tenant", TENANT, "--role", role, "--name", role)
    return out.strip().splitlines()[-1]


def _main_job(call: Recorder, editor: str) -> None:
    job_id = new_job_id()
    assert call("PUT", f"/v1/jobs/{job_id}", json={"site": "blog", "task_version": 1}).ok
    image = {"file": ("hero.png", png_bytes((9, 9, 9)), "image/png")}
    assert call("PUT", f"/v1/jobs/{job_id}/media/hero", files=image).status_code == 201
    body = draft_body(
        content="<p>Intro</p>{{media:hero}}", featured_media={"slot": "hero"}, body_media=["hero"]
    )
    assert call("PUT", f"/v1/jobs/{job_id}/draft", json=body).status_code == 201
    assert call("POST", f"/v1/jobs/{job_id}/approval-requests", json={}).status_code == 201
    check = call("GET", f"/v1/jobs/{job_id}/verification").json()
    approval = {
        "task_version": 1,
        "content_sha256": check["content_sha256"],
        "post_id": check["post_id"],
        "expires_at": (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat(),
    }
    granted = call("POST", f"/v1/jobs/{job_id}/approvals", token=editor, json=approval)
    assert granted.status_code == 201, granted.text
    assert call("POST", f"/v1/jobs/{job_id}/publish", json={}).status_code == 201
    call("GET", f"/v1/jobs/{job_id}")
    call("GET", "/v1/report", token=editor)


def _fault_scenarios(call: Recorder, proxy, transport: str) -> None:
    faults = [
        ("create_post", "drop_response", {}),
        ("create_post", "php_notice", {}),
        ("create_post", "throttle", {"retry_after": 1}),
        ("upload", "status_after_forward", {}),
        ("upload", "unauthorized", {}),
    ]
    for target, kind, extra in faults:
        proxy.clear_faults()
        proxy.add_fault(call_fault(transport, target, kind, times=1, **extra))
        job_id = new_job_id()
        call("PUT", f"/v1/jobs/{job_id}", json={"site": "blog", "task_version": 1})
        if target == "upload":
            call("PUT", f"/v1/jobs/{job_id}/media/a", files={"file": ("a.png", png_bytes())})
        else:
            call("PUT", f"/v1/jobs/{job_id}/draft", json=draft_body())
        call("POST", f"/v1/jobs/{job_id}/recover", json={})
    proxy.clear_faults()
    call("GET", "/v1/jobs", token="not-a-token")  # an unauthorized call is logged


def _review_page(call: Recorder, editor: str) -> None:
    session = requests.Session()
    login = session.get(call.server.url + "/review/login", timeout=30)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', login.text).group(1)
    signed_in = session.post(
        call.server.url + "/review/login", data={"token": editor, "csrf_token": csrf}, timeout=30
    )
    page = session.get(call.server.url + "/review", timeout=30)
    assert page.status_code == 200 and 'id="drafts"' in page.text
    for answer in (login, signed_in, *signed_in.history, page):
        call.keep(answer)
    metrics = requests.get(
        call.server.url + "/metrics",
        headers={"Authorization": f"Bearer {METRICS_TOKEN}"},
        timeout=30,
    )
    assert metrics.status_code == 200
    call.keep(metrics)


def _agent_session(call: Recorder, standin: OpenAIStandIn) -> None:
    job_id, sid = new_job_id(), standin.create_session(tools=tools.definitions())
    bound = call(
        "PUT", f"/v1/jobs/{job_id}", json={"site": "blog", "task_version": 1, "session_id": sid}
    )
    assert bound.status_code == 201, bound.text
    [tool_call] = standin.require(sid, OpenAIStandIn.function_call("recover", {}))
    url = call.server.url + "/v1/webhooks/openai"
    forged = OpenAIStandIn.deliver(
        url, *standin.webhook(ACTION, sid, secret="whsec_" + "Zm9yZ2Vk" * 4)
    )
    call.keep(forged)
    assert forged.status_code == 400
    delivered = OpenAIStandIn.deliver(url, *standin.webhook(ACTION, sid))
    call.keep(delivered)
    assert delivered.status_code == 200
    deadline = time.monotonic() + 60
    while not standin.events(sid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert standin.events(sid), "the agent worker never answered the tool call"
    assert any(tool_call["call_id"] in str(event) for event in standin.events(sid))
    call("GET", f"/v1/jobs/{job_id}")


@both_transports
def test_no_secret_in_the_ledger_the_logs_or_any_response(
    wp_site, ledger_url, tmp_path, proxy, transport
):
    # WordPress's answers have time to arrive on a loaded machine (a 3 s read timeout made a
    # draft UNKNOWN there, its retry then answered 200 from reconciliation): what this test
    # checks is what is stored, logged and answered, not what a timeout does
    server = Server(
        wp_site, ledger_url, tmp_path, site_url=proxy.url, transport=transport, wp_timeout=30
    )
    server.env["GATEWAY_METRICS_TOKEN"] = METRICS_TOKEN
    editor, admin = _token(server, "editor"), _token(server, "admin")
    workflow = server.headers["Authorization"][len("Bearer ") :]
    with OpenAIStandIn() as standin:
        server.env.update(
            {
                "GATEWAY_OPENAI_API_KEY": standin.api_key,
                "GATEWAY_OPENAI_BASE_URL": standin.base_url,
                "GATEWAY_OPENAI_WEBHOOK_SECRET": standin.webhook_secret,
                "GATEWAY_AGENT_POLL_INTERVAL": "0.5",
                "GATEWAY_AGENT_STALE_AFTER": "3600",  # the webhook moves it, not the poll
            }
        )
        server.start(workers=2)
        call = Recorder(server, workflow)
        try:
            _main_job(call, editor)
            _fault_scenarios(call, proxy, transport)
            _agent_session(call, standin)
            _review_page(call, editor)
            call("GET", "/v1/reviews", token=admin)
        finally:
            server.kill()

    author = wp_site["users"]["author"]
    password = author["app_password"]
    basic = base64.b64encode(f"{author['username']}:{password}".encode()).decode()
    secrets = {
        "application password": password,
        "application password without spaces": password.replace(" ", ""),
        "Basic credentials": basic,
        "workflow token": workflow,
        "editor token": editor,
        "admin token": admin,
        "metrics token": METRICS_TOKEN,
        "secret key": SECRET_KEY,
        "OpenAI API key": standin.api_key,
        "OpenAI webhook secret": standin.webhook_secret,
        "OpenAI webhook signing key": standin.webhook_secret[len("whsec_") :],
    }
    places = {"responses": b"\n".join(call.seen)}
    places["logs"] = b"".join(p.read_bytes() for p in tmp_path.glob("serve-*.log"))
    path = sqlite_path(ledger_url)
    if path is not None:  # the database file and its write-ahead log, as bytes
        files = [path, path.with_name(path.name + "-wal")]
        places["ledger files"] = b"".join(f.read_bytes() for f in files if f.exists())
    gateway.create_app({"database_url": ledger_url, "secret_key": SECRET_KEY})  # binds it
    places["ledger rows"] = all_ledger_rows().encode()
    assert len(places["logs"]) > 1000 and len(call.seen) > 30  # the canary saw real traffic
    records = [json.loads(line) for line in places["logs"].splitlines() if line.startswith(b"{")]
    methods = {r.get("wp_method") for r in records}
    # WordPress calls of this transport were logged
    assert ("wp.newPost" if transport == "xmlrpc" else "POST") in methods, methods
    for where, data in places.items():  # and the search finds what is there
        assert f"{TENANT}/T-".encode() in data, where
    hits = [
        f"{name} in {where}"
        for name, secret in secrets.items()
        for where, data in places.items()
        if secret.encode() in data
    ]
    assert hits == []
