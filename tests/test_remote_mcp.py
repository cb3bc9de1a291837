"""The remote MCP listener ``gateway serve`` starts (issue 43): the official SDK's client
with a gateway token writes exactly one post through it, a call without a token is told where
the Protected Resource Metadata is (RFC 9728), token-less paths are limited per address, and
the listener comes back after it dies. One served gateway for the module.

Issue 53: slow bodies from several addresses (loopback's 127.0.0.x, each a source address of
its own) keep neither a new client nor ``/mcp`` waiting, and a loopback peer's
``X-Forwarded-For`` is ignored without ``GATEWAY_PROXY_HOPS``."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import time
from urllib.parse import urlsplit

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

from gateway.remote import address_gate

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


def _from(served, source: str) -> http.client.HTTPConnection:
    """A connection to the listener from the loopback address ``source`` (its own client)."""
    where = urlsplit(served.mcp)
    return http.client.HTTPConnection(
        where.hostname, where.port, timeout=10, source_address=(source, 0)
    )


def _slow_body(served, source: str) -> socket.socket:
    """A ``POST /token`` from ``source`` whose headers promise a body it never sends."""
    where = urlsplit(served.mcp)
    sock = socket.create_connection((where.hostname, where.port), 10, (source, 0))
    sock.sendall(
        f"POST /token HTTP/1.1\r\nHost: {where.netloc}\r\n"
        "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 4096\r\n\r\n"
        "grant_type=".encode()
    )
    return sock


def test_slow_bodies_from_several_addresses_keep_no_new_client_and_no_mcp_call_waiting(served):
    """Issue 53: 8 addresses x 4 token-less bodies that never end (32: every slot before).
    A new client's metadata and ``/token`` and a tool list with a token are still answered
    at once; the bodies hold no slot while they drip."""
    slow = [
        _slow_body(served, f"127.0.0.{20 + a}") for a in range(8) for _ in range(4)
    ]  # fmt: skip
    try:
        time.sleep(0.3)  # the listener has every head (it answers nothing before the body)
        started = time.monotonic()
        newcomer = _from(served, "127.0.0.40")
        newcomer.request("GET", "/.well-known/oauth-authorization-server")
        metadata = newcomer.getresponse()
        assert metadata.status == 200, metadata.read()
        metadata.read()
        form = "grant_type=authorization_code&code=unknown&client_id=unknown&code_verifier=x"
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        newcomer.request("POST", "/token", body=form, headers=headers)
        token = newcomer.getresponse()
        assert token.status in (400, 401), (token.status, token.read())
        assert json.loads(token.read())["error"] in ("invalid_client", "invalid_grant")
        listed = requests.post(
            served.mcp,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={
                "Accept": "application/json, text/event-stream",
                "Authorization": f"Bearer {served.token}",
            },
            timeout=10,
        )
        assert listed.status_code == 200, listed.text
        assert time.monotonic() - started < 2.0
    finally:
        for sock in slow:
            sock.close()


def test_without_proxy_hops_a_loopback_peer_is_counted_as_itself_whatever_it_forwards(served):
    """Issue 53: uvicorn trusted 127.0.0.1's ``X-Forwarded-For`` by default, so a peer there
    chose its own address (a fresh rate window per request). Without ``GATEWAY_PROXY_HOPS``
    the TCP peer counts: within ``GATEWAY_OAUTH_RATE`` + 1 requests, a 429."""
    statuses = []
    for number in range(RATE + 1):
        forwarded = {"X-Forwarded-For": f"203.0.113.{number}", "X-Forwarded-Proto": "https"}
        answer = requests.get(
            served.mcp.replace("/mcp", "/.well-known/oauth-authorization-server"),
            headers=forwarded,
            timeout=10,
        )
        statuses.append(answer.status_code)
        if answer.status_code == 429:
            break
    assert statuses[-1] == 429, statuses
    lines = [json.loads(x) for x in served.logs().splitlines() if x.startswith("{")]
    clients = {r.get("client") for r in lines if r.get("logger") == LOG}
    assert "127.0.0.1" in clients and not any(str(c).startswith("203.0.113.") for c in clients)


def test_a_token_less_body_has_a_deadline_and_a_size(monkeypatch):
    """A body that does not end within ``BODY_SECONDS`` of its headers is 408
    ``body-too-slow`` (with ``Retry-After``), one over ``MAX_BODY`` 413, and neither reaches
    the app; a whole one does, as it came."""
    from gateway.core import config

    monkeypatch.setattr(address_gate, "BODY_SECONDS", 0.2)
    seen, answers = [], []

    async def inner(scope, receive, send):
        seen.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    gate = address_gate.AddressGate(inner, config.load({"GATEWAY_SECRET_KEY": "k"}))

    def sender(started: list):
        async def send(message):
            if message["type"] == "http.response.start":
                started.append((message["status"], dict(message["headers"])))

        return send

    def bodies(*chunks: bytes, stall: bool = False):
        queue = [{"type": "http.request", "body": c, "more_body": True} for c in chunks[:-1]] + [
            {"type": "http.request", "body": chunks[-1], "more_body": stall}
        ]

        async def receive():
            if queue:
                return queue.pop(0)
            await anyio.sleep(60)  # a body that never ends

        return receive

    scope = {"type": "http", "path": "/token", "method": "POST", "client": ("127.0.0.1", 1)}
    for receive in (
        bodies(b"grant_", b"type=x", stall=True),
        bodies(*[b"x" * 16384] * 5),
        bodies(b"grant_", b"type=x"),
    ):
        anyio.run(gate, scope, receive, sender(answers))
    (slow, slow_headers), (large, _), (whole, _) = answers
    assert (slow, large, whole) == (408, 413, 204)
    assert slow_headers[b"retry-after"] == b"1"
    assert seen == [b"grant_type=x"]
