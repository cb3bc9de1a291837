"""The remote MCP listener ``gateway serve`` starts (issue 43): the official SDK's client
with a gateway token writes exactly one post through it, a call without a token is told where
the Protected Resource Metadata is (RFC 9728), token-less paths are limited per address, and
the listener comes back after it dies. One served gateway for the module."""

from __future__ import annotations

import json
import os
import signal
import time

import anyio
import pytest
import requests
from mcp_support import MODERN
from mcp_support import McpGateway
from mcp_support import count_objects
from mcp_support import http_session
from mcp_support import problem_of
from mcp_support import slug
from support import SITE_NAME
from support import draft_body
from support import free_port
from support import new_job_id
from support import op_key

LOG = "gateway.listener.http"  # the listener's request lines
RATE = 12  # token-less calls per address and minute (GATEWAY_OAUTH_RATE) here


@pytest.fixture(scope="module")
def served(shared_wp_site, tmp_path_factory):
    """``gateway serve`` with its listener on a free loopback port; ``served.mcp``: its URL."""
    workdir = tmp_path_factory.mktemp("remote-mcp")
    server = McpGateway(shared_wp_site, f"sqlite:///{workdir / 'ledger.db'}", workdir)
    listen = f"127.0.0.1:{free_port()}"
    server.env["GATEWAY_MCP_LISTEN"] = listen
    server.env["GATEWAY_OAUTH_RATE"] = f"{RATE}/60"
    server.start()
    server.mcp = f"http://{listen}/mcp"
    try:
        _wait_for_listener(server)
        yield server
    finally:
        server.kill()


def _wait_for_listener(server, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            requests.post(server.mcp, json={}, timeout=2)
            return
        except requests.RequestException:
            time.sleep(0.3)
    raise AssertionError("the listener did not start:\n" + server.logs()[-3000:])


def _listener_pid(server) -> int:
    """The pid of the listener process of ``server`` (its session, ``-m gateway.remote...``)."""
    for stat in os.listdir("/proc"):
        if not stat.isdigit():
            continue
        try:
            with open(f"/proc/{stat}/cmdline", "rb") as cmd:
                argv = cmd.read().split(b"\0")
            session = int(open(f"/proc/{stat}/stat").read().rsplit(")", 1)[1].split()[3])
        except OSError:
            continue
        if b"gateway.remote.listener" in argv and session == server.process.pid:
            return int(stat)
    raise AssertionError("no listener process")


@pytest.mark.wordpress
def test_an_sdk_client_with_a_gateway_token_writes_one_post(served, shared_wp_site):
    job_id = new_job_id()
    seen = {}

    async def main():
        async with http_session(served.mcp, served.token, MODERN) as session:
            start = {"job_id": job_id, "site": SITE_NAME, "task_version": 1}
            seen["start"] = await session.call_tool("start_job", start)
            draft = {"job_id": job_id, **draft_body()}
            seen["drafts"] = [await session.call_tool("put_draft", draft) for _ in range(2)]
            seen["other"] = await session.call_tool(
                "start_job", {"job_id": new_job_id(), "site": "nowhere", "task_version": 1}
            )

    anyio.run(main)
    assert not seen["start"].is_error, seen["start"].content
    first, again = seen["drafts"]
    assert not first.is_error, first.content
    assert first.structured_content["operation_key"] == op_key(job_id, "draft")
    assert again.structured_content["replayed"] is True
    assert count_objects(shared_wp_site, [op_key(job_id, "draft")])[op_key(job_id, "draft")] == 1
    assert slug(problem_of(seen["other"])) == "site-not-found"
    # the API's own request line, for the tenant, through the in-process call: one path
    lines = [json.loads(x) for x in served.logs().splitlines() if x.startswith("{")]
    drafts = [x for x in lines if x.get("route") == "/v1/jobs/<job_id>/draft"]
    assert drafts and all(x.get("tenant") == "acme" for x in drafts), drafts[-2:]
    assert served.token not in served.logs()


def test_without_a_token_the_listener_names_its_resource_metadata(served):
    base = served.mcp.removesuffix("/mcp")
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": "Bearer not-a-token"}):
        refused = requests.post(served.mcp, json=call, headers={**headers, **auth}, timeout=10)
        assert refused.status_code == 401, refused.text
        challenge = refused.headers["WWW-Authenticate"]
        assert challenge.startswith("Bearer ")
        metadata_url = f"{base}/.well-known/oauth-protected-resource/mcp"
        assert f'resource_metadata="{metadata_url}"' in challenge
    metadata = requests.get(metadata_url, timeout=10)
    assert metadata.status_code == 200
    document = metadata.json()
    assert document["resource"] == served.mcp
    assert document["authorization_servers"] == [base]
    assert document["bearer_methods_supported"] == ["header"]
    # the listener writes one line per request: the 401s too, without the token or a query
    lines = [json.loads(line) for line in served.logs().splitlines() if line.startswith("{")]
    listened = [(r.get("path"), r.get("status")) for r in lines if r.get("logger") == LOG]
    assert ("/mcp", 401) in listened and (
        "/.well-known/oauth-protected-resource/mcp",
        200,
    ) in listened
    assert "not-a-token" not in served.logs()
    # with a valid token, another Host or a foreign browser Origin is still refused
    token = {"Authorization": f"Bearer {served.token}"}
    for other, status in (
        ({"Host": "evil.example"}, 421),
        ({"Origin": "https://evil.example"}, 403),
    ):
        rebound = requests.post(
            served.mcp, json=call, headers={**headers, **token, **other}, timeout=10
        )
        assert rebound.status_code == status, (other, rebound.status_code, rebound.text)


def test_the_principal_environ_key_cannot_be_set_by_a_header_over_http(served):
    for name in ("gateway.principal", "Gateway-Principal", "gateway_principal"):
        answer = requests.get(served.url + "/v1/jobs", headers={name: "acme"}, timeout=10)
        assert answer.status_code == 401, (name, answer.status_code)


def test_token_less_paths_are_limited_per_address_and_a_dead_listener_comes_back(served):
    metadata_url = served.mcp.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")
    statuses = [requests.get(metadata_url, timeout=10) for _ in range(RATE + 1)]
    limited = statuses[-1]
    assert limited.status_code == 429, [s.status_code for s in statuses]
    assert int(limited.headers["Retry-After"]) >= 1
    assert limited.headers["Content-Type"] == "application/problem+json"
    assert limited.json()["type"].endswith("/unauthenticated-rate-limited")
    # /mcp is not counted there: its bearer check answers at once
    answer = requests.post(served.mcp, json={}, timeout=10)
    assert answer.status_code == 401

    os.kill(_listener_pid(served), signal.SIGKILL)
    time.sleep(0.5)
    _wait_for_listener(served)
    assert requests.post(served.mcp, json={}, timeout=10).status_code == 401


def test_behind_the_proxy_the_routes_see_the_forwarded_client_address():
    """With ``GATEWAY_PROXY_HOPS=1`` the token-less routes behind the gate (the registration
    rate per address) see the client's address, not the proxy's: one client's registrations
    never use up another's."""
    from gateway.core import config
    from gateway.remote.address_gate import AddressGate

    seen = []

    async def inner(scope, receive, send):
        seen.append(scope["client"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    cfg = config.load({"GATEWAY_SECRET_KEY": "k", "GATEWAY_PROXY_HOPS": "1"})
    gate = AddressGate(inner, cfg)
    scope = {
        "type": "http",
        "path": "/register",
        "client": ("127.0.0.1", 5000),
        "headers": [(b"x-forwarded-for", b"203.0.113.9")],
    }

    async def nothing():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def ignore(_message):
        return None

    anyio.run(gate, scope, nothing, ignore)
    assert seen == [("203.0.113.9", 5000)]
