"""The remote MCP listener ``gateway serve`` starts (issue 43): the official SDK's client
with a gateway token writes exactly one post through it, a call without a token is told where
the Protected Resource Metadata is (RFC 9728), token-less paths are limited per address, and
the listener comes back after it dies. One served gateway for the module.

Issue 53: docs/mcp.md's nginx block, run as written on a port other than 443 (Debian's nginx,
the one the test WordPress uses; TLS with a certificate of a CA made by the test), signs an
editor in and completes a consent. Slow bodies from several addresses (loopback's 127.0.0.x,
each a source address of its own) keep neither a new client nor ``/mcp`` waiting, and a
loopback peer's ``X-Forwarded-For`` is ignored without ``GATEWAY_PROXY_HOPS``."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs
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
from support import OFFLINE_SITE
from support import SITE_NAME
from support import draft_body
from support import free_port
from support import loopback_ca
from support import new_job_id
from support import op_key

from gateway import server
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


def test_a_listener_that_loses_the_default_port_gives_it_up_in_one_line(caplog):
    """Issue 58: two gateways started at one moment both find the default port free; the
    listener that then cannot bind it is not restarted forever: its server says so in one
    line and serves on (``Background``'s watcher, as ``gateway serve`` runs it)."""
    from gateway.server import Background

    with socket.socket() as taken:  # the other gateway's listener, bound first
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        dies = [sys.executable, "-c", "raise SystemExit(1)"]  # as uvicorn failing to bind
        background = Background(0, False, None, dies, yields=("127.0.0.1", port))
        background.start()
        try:
            deadline = time.monotonic() + 30
            while any(t.name == "gateway-listener" for t in threading.enumerate()):
                assert time.monotonic() < deadline, f"the listener keeps restarting: {caplog.text}"
                time.sleep(0.1)
        finally:
            background.stop()
    lines = [r.getMessage() for r in caplog.records if r.name == "gateway.listener"]
    assert lines == [server.LISTENER_OFF % ("127.0.0.1", port)], lines


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


def test_a_browser_refused_by_the_gate_at_authorize_gets_the_error_page():
    """The gate's own refusals at ``/authorize`` (429 past ``GATEWAY_OAUTH_RATE``, 413 past
    ``MAX_BODY``) reach a person in a browser as the authorization server's error page, same
    status and ``Retry-After``; a client that does not ask for HTML, and every other path,
    keep the RFC 9457 problem."""
    from gateway.core import config
    from gateway.core.page_headers import SECURITY_HEADERS

    async def inner(scope, receive, send):
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    cfg = config.load({"GATEWAY_SECRET_KEY": "k", "GATEWAY_OAUTH_RATE": "1/60"})
    browser = [(b"accept", b"text/html,application/xhtml+xml,*/*;q=0.8")]

    def call(gate, path: str, headers: list, method: str = "GET", body: bytes = b""):
        answer = {"body": b""}

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                answer["headers"] = {k.decode(): v.decode() for k, v in message["headers"]}
            else:
                answer["body"] += message.get("body", b"")

        scope = {"type": "http", "path": path, "method": method, "headers": headers}
        anyio.run(gate, {**scope, "client": ("203.0.113.7", 1)}, receive, send)
        return answer

    gate = address_gate.AddressGate(inner, cfg)
    assert call(gate, "/authorize", browser)["status"] == 204  # the one request of the window
    page = call(gate, "/authorize", browser)
    assert page["status"] == 429 and int(page["headers"]["retry-after"]) > 0
    assert page["headers"]["content-type"] == "text/html; charset=utf-8"
    assert {k.lower(): v for k, v in SECURITY_HEADERS.items()}.items() <= page["headers"].items()
    text = page["body"].decode()
    assert '<code class="error-code">unauthenticated-rate-limited</code>' in text
    assert "too many requests without a token from this address" in text
    assert "Wait a minute, then start the connection again" in text
    for path, headers in (("/authorize", [(b"accept", b"*/*")]), ("/token", browser)):
        problem = call(gate, path, headers)
        assert problem["status"] == 429
        assert problem["headers"]["content-type"] == "application/problem+json"
        assert json.loads(problem["body"])["type"].endswith("/unauthenticated-rate-limited")

    gate = address_gate.AddressGate(inner, config.load({"GATEWAY_SECRET_KEY": "k"}))
    large = call(gate, "/authorize", browser, "POST", b"x" * (address_gate.MAX_BODY + 1))
    assert large["status"] == 413
    assert large["headers"]["content-type"] == "text/html; charset=utf-8"
    assert '<code class="error-code">payload-too-large</code>' in large["body"].decode()


# --------------------------------------------------------------------------- the docs' nginx

DOCS = Path(__file__).resolve().parents[1] / "docs" / "mcp.md"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
CALLBACK = f"http://127.0.0.1:{free_port()}/callback"  # nothing listens: never followed


def docs_nginx_block() -> str:
    """The ``server { ... }`` block of docs/mcp.md (the one for OAuth clients), as written."""
    blocks = re.findall(r"```nginx\n(.*?)```", DOCS.read_text(), re.S)
    (block,) = [one for one in blocks if one.startswith("server {")]
    return block


def nginx_config(folder: Path, block: str, replaced: dict[str, str]) -> Path:
    """An nginx configuration around ``block`` with each key of ``replaced`` (which must be in
    it) replaced: its own pid, log and temporary paths in ``folder``."""
    for written, local in replaced.items():
        assert written in block, f"docs/mcp.md's nginx block no longer has {written!r}"
        block = block.replace(written, local)
    temp = " ".join(
        f"{kind}_temp_path {folder / kind};" for kind in ("client_body", "proxy", "fastcgi")
    )
    user = "user root;" if os.geteuid() == 0 else ""  # its workers read the test's folder
    conf = folder / "nginx.conf"
    conf.write_text(
        f"{user} worker_processes 1; pid {folder / 'nginx.pid'};\n"
        f"error_log {folder / 'error.log'} warn;\nevents {{ worker_connections 64; }}\n"
        f"http {{ access_log off; {temp} uwsgi_temp_path {folder / 'uwsgi'}; "
        f"scgi_temp_path {folder / 'scgi'};\n{block}}}\n"
    )
    return conf


@pytest.fixture
def behind_nginx(tmp_path):
    """``gateway serve`` (no WordPress is called) with ``GATEWAY_PUBLIC_URL`` on a port other
    than 443, ``GATEWAY_PROXY_HOPS=1``, behind docs/mcp.md's nginx block: the server, with
    ``public`` (its URL) and ``cafile`` (the CA the test's clients trust)."""
    assert Path(NGINX).exists(), "no nginx: bash wp_test_site/up.sh installs Debian's nginx"
    cafile, cert, key = loopback_ca(tmp_path)
    port, listen = free_port(), f"127.0.0.1:{free_port()}"
    server = McpGateway(OFFLINE_SITE, f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path)
    server.public, server.cafile = f"https://localhost:{port}", cafile
    server.env.update(
        {
            "GATEWAY_PUBLIC_URL": server.public,
            "GATEWAY_PROXY_HOPS": "1",
            "GATEWAY_MCP_LISTEN": listen,
        }
    )
    server.editor = server.make_token(role="editor")
    nginx = None
    try:
        server.start(workers=1)
        conf = nginx_config(
            tmp_path,
            docs_nginx_block(),
            {
                "listen 443 ssl;": f"listen 127.0.0.1:{port} ssl;",
                "server_name gw.example.com;": "server_name localhost;",
                "/etc/ssl/certs/gw.example.com.pem": cert,
                "/etc/ssl/private/gw.example.com.key": key,
                "http://127.0.0.1:8001": f"http://{listen}",
                "http://127.0.0.1:8000": server.url,
            },
        )
        nginx = subprocess.Popen(
            [NGINX, "-p", str(tmp_path), "-c", str(conf), "-g", "daemon off;"],
            stderr=subprocess.PIPE,
        )
        _wait_for(server.public + "/.well-known/oauth-authorization-server", cafile, nginx)
        yield server
    finally:
        if nginx is not None:
            nginx.terminate()
            nginx.wait(timeout=10)
        server.kill()


def _wait_for(url: str, cafile: str, nginx: subprocess.Popen, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert nginx.poll() is None, nginx.stderr.read().decode()
        try:
            if requests.get(url, verify=cafile, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer through nginx")


def _post_form(browser: requests.Session, page: requests.Response, action: str, fields: dict):
    """What a browser posts from ``page``'s form ``action``: its hidden fields and ``fields``,
    with the ``Referer`` a browser sends under ``Referrer-Policy: same-origin``."""
    form = re.search(rf'<form[^>]*action="{re.escape(action)}".*?</form>', page.text, re.S)
    hidden = dict(re.findall(r'type="hidden" name="([^"]+)" value="([^"]*)"', form.group(0)))
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(page.url))
    return browser.post(
        origin + action,
        data={**hidden, **fields},
        headers={"Referer": page.url},
        allow_redirects=False,
        timeout=30,
    )


def test_the_docs_nginx_block_on_another_port_signs_an_editor_in_and_completes_a_consent(
    behind_nginx,
):
    """Issue 53: with ``Host $host`` the port was dropped and every editor POST was refused
    as a stale form (the Referer's origin is not the Host's). Through the docs' block as
    written: sign-in, a client registered, ``/authorize`` to the consent page, approval, the
    code exchanged, the tools listed, every request through nginx on its port."""
    base, cafile = behind_nginx.public, behind_nginx.cafile
    browser = requests.Session()
    browser.verify, browser.trust_env = cafile, False  # else REQUESTS_CA_BUNDLE wins
    signed = _post_form(
        browser, browser.get(base + "/review/login"), "/review/login",
        {"token": behind_nginx.editor},
    )  # fmt: skip
    assert signed.status_code == 303 and "/review/login" not in signed.headers["Location"]

    client = requests.post(
        base + "/register",
        json={"redirect_uris": [CALLBACK], "client_name": "nginx app",
              "grant_types": ["authorization_code", "refresh_token"]},
        verify=cafile, timeout=30,
    )  # fmt: skip
    assert client.status_code == 201, client.text
    client_id = client.json()["client_id"]
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    asked = requests.get(
        base + "/authorize",
        params={"response_type": "code", "client_id": client_id, "redirect_uri": CALLBACK,
                "code_challenge": challenge.decode().rstrip("="), "code_challenge_method": "S256",
                "state": "st", "resource": base + "/mcp"},
        allow_redirects=False, verify=cafile, timeout=30,
    )  # fmt: skip
    assert asked.status_code == 302, asked.text
    assert asked.headers["Location"].startswith(base + "/review/oauth?request=")
    page = browser.get(asked.headers["Location"])
    assert page.status_code == 200 and page.url == base + "/review/oauth", page.text
    approved = _post_form(browser, page, "/review/oauth/approve", {"sites": SITE_NAME})
    assert approved.status_code == 303, approved.text
    target = approved.headers["Location"]
    assert target.startswith(CALLBACK + "?"), target
    code = parse_qs(urlsplit(target).query)["code"][0]

    tokens = requests.post(
        base + "/token",
        data={"grant_type": "authorization_code", "code": code, "redirect_uri": CALLBACK,
              "client_id": client_id, "code_verifier": verifier, "resource": base + "/mcp"},
        verify=cafile, timeout=30,
    )  # fmt: skip
    assert tokens.status_code == 200, tokens.text
    listed = requests.post(
        base + "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Accept": "application/json, text/event-stream",
                 "Authorization": f"Bearer {tokens.json()['access_token']}"},
        verify=cafile, timeout=30,
    )  # fmt: skip
    assert listed.status_code == 200, listed.text
    assert {tool["name"] for tool in listed.json()["result"]["tools"]} >= {"start_job", "put_draft"}
