"""Remote MCP with OAuth, end to end (issue 43): one real ``gateway serve`` with its MCP
listener on a free loopback port, the test WordPress as the tenant's site ``blog`` (and, for
the grant's limits, the same WordPress as a second site ``shop`` and as another tenant's
site), and the official SDK's OAuth client (``mcp.client.auth.OAuthClientProvider``) with
the SDK's streamable HTTP client. Its ``redirect_handler`` is an editor's browser: a
``requests`` session signed in at the review site with an editor token, which opens the
``/authorize`` URL, follows it to the consent page, ticks a site, approves and keeps the 303's
``Location``; its ``callback_handler`` hands back the code, state and ``iss`` from it.

What a user checks: the sign-in starts from the 401 of ``/mcp`` (RFC 9728 discovery), a
dynamic registration (RFC 7591) or a client metadata document (CIMD, served over HTTPS on
loopback with a test CA the served gateway trusts through ``SSL_CERT_FILE``, its
``host:port`` in ``GATEWAY_OAUTH_CIMD_ALLOW_HOSTS``; an unlisted loopback URL refused);
a tool call writes exactly one post, counted in WordPress; ``gateway tokens list`` shows the
grant and its last use; a client that misbehaves (plain ``requests``) gets an unregistered
redirect URI shown, not redirected, and a wrong PKCE verifier, redirect URI or resource
refused at ``/token``, and a reused code ends its grant; the grant cannot leave its sites,
has no publishing tool and its token opens nothing at ``/v1``; another tenant's editor and a
workflow token cannot approve; a refresh rotates, a reused refresh token ends the family,
``gateway tokens revoke --grant`` refuses the next call; and no code, token, client secret or
pending id is in the served gateway's and listener's output (uvicorn's and the SDK server's
lines included), the SDK client's log records, the ledger's rows and files, or any response
but the one it belongs in.

One served gateway for the module (about 3 s to start; the module takes about 5 s on the
project's 2-core machine); each test signs its own client in, so they run in any order.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.client
import http.server
import json
import logging
import re
import secrets
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import field
from urllib.parse import parse_qs
from urllib.parse import urlencode
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import httpx2
import pytest
import requests
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult
from mcp.shared.auth import OAuthClientMetadata
from mcp_support import MODERN
from mcp_support import TOOLS
from mcp_support import McpGateway
from mcp_support import count_objects
from mcp_support import http_session
from mcp_support import problem_of
from mcp_support import slug
from pydantic import AnyUrl
from servers import PASSWORD_ENV
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from support import TokenMemory
from support import all_ledger_rows
from support import draft_body
from support import free_port
from support import loopback_ca
from support import new_job_id
from support import op_key
from support import sqlite_path

import gateway

pytestmark = pytest.mark.wordpress

OTHER_SITE = "shop"  # the tenant's second site: never ticked on the consent page here
RIVAL = "rival"  # another tenant, with a site of its own
CALLBACK_PORT = free_port()  # nothing listens: the browser never follows the approve 303
CALLBACK = f"http://127.0.0.1:{CALLBACK_PORT}/callback"
LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


# --------------------------------------------------------------------------- what was seen


@dataclass
class Seen:
    """Every secret the module's flows produced, and every response any client of the test
    got, each with where it may carry a secret: ``authorize`` (the pending id in the consent
    URL of the 302), ``approve`` (the code in the 303 to the client), ``token`` (tokens in a
    ``/token`` answer)."""

    secrets: dict[str, set[str]] = field(default_factory=dict)
    responses: list[tuple[str, str]] = field(default_factory=list)

    def secret(self, kind: str, value: str | None) -> None:
        if value:
            self.secrets.setdefault(kind, set()).add(value)

    def keep(self, where: str, answer: requests.Response) -> None:
        for one in (*answer.history, answer):
            headers = "\n".join(f"{k}: {v}" for k, v in one.headers.items())
            self.responses.append((where, f"{one.status_code}\n{headers}\n\n{one.text}"))


SEEN = Seen()


# The SDK client's loggers (not urllib3's: ``requests`` is the editor's browser, whose
# history holds the consent link as any browser's does)
SDK_LOGGERS = ("mcp", "httpx2", "httpcore2")


class Records(logging.Handler):
    """The test process's log records of the SDK client (:data:`SDK_LOGGERS`), at DEBUG:
    the SDK's side of the logs the canary searches."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.name} {record.getMessage()}")


# --------------------------------------------------------------------------- documents


class Documents(http.server.BaseHTTPRequestHandler):
    """Client metadata documents over HTTPS: ``self.server.pages`` path -> JSON body; every
    path asked for is kept in ``self.server.hits``."""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.server.hits.append(self.path)
        body = self.server.pages.get(self.path)
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args):
        pass


def client_document(url: str, name: str) -> bytes:
    return json.dumps(
        {
            "client_id": url,
            "client_name": name,
            "redirect_uris": [CALLBACK],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
        }
    ).encode()


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    """An HTTPS server on 127.0.0.1 with a certificate of a test CA: (server, CA bundle,
    ``host:port``)."""
    folder = tmp_path_factory.mktemp("cimd")
    cafile, cert, key = loopback_ca(folder)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Documents)
    server.pages, server.hits = {}, []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server, cafile, f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class Silent:
    """A document host that accepts connections and never answers (a slow document server):
    ``accepted`` counts the connections; ``host``: its ``host:port``."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.host = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        with contextlib.suppress(OSError):
            while True:
                self.accepted.append(self.listener.accept()[0])

    def hang_up(self):
        """Close every connection accepted so far (a fetch waiting on one fails at once)."""
        for one in self.accepted:
            one.close()

    def close(self):
        self.listener.close()
        self.hang_up()


@pytest.fixture(scope="module")
def broken_documents(tmp_path_factory):
    """Two document hosts the served gateway may fetch from: (a :class:`Silent` one, the
    ``host:port`` of an HTTPS server whose certificate no CA the gateway trusts signed)."""
    _cafile, cert, key = loopback_ca(tmp_path_factory.mktemp("untrusted"))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Documents)
    server.pages, server.hits = {}, []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    silent = Silent()
    yield silent, f"127.0.0.1:{server.server_address[1]}"
    silent.close()
    server.shutdown()
    server.server_close()


# --------------------------------------------------------------------------- the gateway


@pytest.fixture(scope="module")
def served(shared_wp_site, documents, broken_documents, tmp_path_factory):
    """``gateway serve`` with its listener; ``served.mcp`` its ``/mcp`` URL; tokens: an
    editor of the tenant (``served.editor``), another tenant's editor (``served.rival``).
    The served processes trust the test CA (``SSL_CERT_FILE``: Python's default TLS context,
    which the egress guard uses, reads it) and may fetch documents from its ``host:port``.
    The test process's log records are kept in ``served.records`` for the module."""
    _server, cafile, docs_host = documents
    silent, untrusted_host = broken_documents
    workdir = tmp_path_factory.mktemp("mcp-oauth")
    server = McpGateway(shared_wp_site, f"sqlite:///{workdir / 'ledger.db'}", workdir)
    author = shared_wp_site["users"]["author"]["username"]
    for tenant, name in ((TENANT, OTHER_SITE), (RIVAL, "rivalblog")):
        server._cli(
            "sites", "add", "--tenant", tenant, "--name", name, "--url", shared_wp_site["url"],
            "--username", author, "--app-password-env", PASSWORD_ENV, "--no-check",
        )  # fmt: skip
    server.editor = server.make_token(role="editor")
    server.rival = server.make_token(tenant=RIVAL, role="editor")
    listen = f"127.0.0.1:{free_port()}"
    server.env.update(
        {
            "GATEWAY_MCP_LISTEN": listen,
            "GATEWAY_OAUTH_CIMD_ALLOW_HOSTS": f"{docs_host},{silent.host},{untrusted_host}",
            "SSL_CERT_FILE": cafile,
        }
    )
    records = Records()
    sdk_loggers = [logging.getLogger(name) for name in SDK_LOGGERS]
    levels = [one.level for one in sdk_loggers]
    for one in sdk_loggers:
        one.addHandler(records)
        one.setLevel(logging.DEBUG)
    server.mcp = f"http://{listen}/mcp"
    server.issuer = f"http://{listen}"
    server.records = records
    try:
        server.start()
        deadline = time.monotonic() + 60
        while True:
            try:
                requests.post(server.mcp, json={}, timeout=2)
                break
            except requests.RequestException:
                assert time.monotonic() < deadline, server.logs()[-3000:]
                time.sleep(0.3)
        yield server
    finally:
        server.kill()
        for one, level in zip(sdk_loggers, levels, strict=True):
            one.removeHandler(records)
            one.setLevel(level)


def cli_json(served, *args: str):
    return json.loads(served._cli(*args))


def grant_of(served, client_name: str) -> dict:
    """The one grant ``gateway tokens list`` shows for the client called ``client_name``."""
    rows = cli_json(served, "tokens", "list", "--tenant", TENANT)
    (grant,) = [r for r in rows if r["kind"] == "grant" and r["client_name"] == client_name]
    return grant


def mcp_status(served, token: str) -> int:
    """The status of a plain ``tools/list`` POST to ``/mcp`` with ``token`` (a 200 lists
    the tools)."""
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
    answer = requests.post(served.mcp, json=LIST_TOOLS, headers=headers, timeout=30)
    SEEN.keep("mcp", answer)
    if answer.status_code == 200:
        listed = {tool["name"] for tool in answer.json()["result"]["tools"]}
        assert listed == set(TOOLS), answer.text
    return answer.status_code


def token_call(served, form: dict) -> requests.Response:
    """A form POSTed to the listener's ``/token``; the tokens it answers are kept in
    :data:`SEEN`."""
    answer = requests.post(served.issuer + "/token", data=form, timeout=30)
    SEEN.keep("token", answer)
    if answer.ok:
        SEEN.secret("access token", answer.json()["access_token"])
        SEEN.secret("refresh token", answer.json()["refresh_token"])
    return answer


def refresh(served, client_id: str, refresh_token: str) -> requests.Response:
    """``grant_type=refresh_token`` at ``/token``, as a client sends it."""
    form = {
        "grant_type": "refresh_token",
        "client_id": client_id,
        "refresh_token": refresh_token,
        "resource": served.mcp,
    }
    return token_call(served, form)


WELL_KNOWN = (
    "/.well-known/oauth-authorization-server",
    "/.well-known/oauth-authorization-server/mcp",
    "/.well-known/oauth-protected-resource/mcp",
    "/.well-known/oauth-protected-resource",
)


# --------------------------------------------------------------------------- the browser


class Browser:
    """A person's browser on the review site: a ``requests`` session (cookies kept)."""

    def __init__(self, served):
        self.base = served.url
        self.http = requests.Session()

    def get(self, url: str, **kwargs) -> requests.Response:
        answer = self.http.get(url, timeout=30, **kwargs)
        SEEN.keep("browser", answer)
        return answer

    def post(self, path: str, data: dict, csrf_page: str = "/review") -> requests.Response:
        """POST ``data`` with the hidden fields of ``csrf_page``'s form (the CSRF token; on
        the consent page also ``request_ref``, the request it shows)."""
        page = self.get(self.base + csrf_page).text
        hidden = dict(re.findall(r'name="(csrf_token|request_ref)" value="([^"]+)"', page))
        answer = self.http.post(
            self.base + path, data={**data, **hidden}, allow_redirects=False, timeout=30
        )
        where = "approve" if path == "/review/oauth/approve" and answer.status_code == 303 else ""
        SEEN.keep(where or "browser", answer)
        return answer

    def sign_in(self, token: str) -> requests.Response:
        return self.post("/review/login", {"token": token}, csrf_page="/review/login")


@dataclass
class Consent:
    """What the editor's browser saw of one sign-in."""

    pending_id: str = ""
    page: str = ""
    authorize: requests.Response | None = None
    result: AuthorizationCodeResult | None = None


class Refused(Exception):
    """``/authorize`` answered something other than the redirect to the consent page."""


def approve_in_browser(
    served,
    authorization_url: str,
    sites: tuple[str, ...] = (SITE_NAME,),
    consent: Consent | None = None,
    before_approve: Callable[[Consent], None] | None = None,
) -> Consent:
    """The editor: signed in first, then opens the authorization URL, which sends the
    browser to the consent page (``before_approve(consent)`` then runs), ticks ``sites`` and
    approves. Returns ``consent`` filled in: the pending id, the page, and the code, state
    and ``iss`` of the 303 to the client.

    Raises:
        Refused: ``/authorize`` did not send the browser to the consent page.
    """
    consent = consent or Consent()
    editor = Browser(served)
    assert editor.sign_in(served.editor).status_code == 303
    answer = requests.get(authorization_url, allow_redirects=False, timeout=30)
    consent.authorize = answer
    if answer.status_code != 302:
        SEEN.keep("browser", answer)
        raise Refused(f"/authorize answered {answer.status_code}: {answer.text}")
    SEEN.keep("authorize", answer)
    location = answer.headers["Location"]
    assert location.startswith(served.url + "/review/oauth?request="), location
    consent.pending_id = parse_qs(urlsplit(location).query)["request"][0]
    SEEN.secret("pending id", consent.pending_id)
    page = editor.get(location)
    assert page.status_code == 200 and page.url == served.url + "/review/oauth"
    consent.page = page.text
    if before_approve is not None:
        before_approve(consent)
    approved = editor.post(
        "/review/oauth/approve", {"sites": list(sites)}, csrf_page="/review/oauth"
    )
    assert approved.status_code == 303, approved.text
    target = approved.headers["Location"]
    assert target.startswith(CALLBACK + "?"), target
    query = parse_qs(urlsplit(target).query)
    SEEN.secret("code", query["code"][0])
    consent.result = AuthorizationCodeResult(
        code=query["code"][0], state=query["state"][0], iss=query["iss"][0]
    )
    return consent


class SignIn:
    """An MCP client signed in through the SDK's OAuth client: the editor's browser approves
    ``sites`` (``before_approve(consent)`` runs once the editor has the page open);
    ``metadata_url``: a client metadata document URL (CIMD) instead of a registration."""

    def __init__(
        self,
        served,
        sites: tuple[str, ...] = (SITE_NAME,),
        metadata_url: str | None = None,
        before_approve: Callable[[Consent], None] | None = None,
    ):
        self.served = served
        self.sites = sites
        self.before_approve = before_approve
        self.name = f"E2E app {uuid.uuid4().hex[:8]}"
        self.storage = TokenMemory(SEEN.secret)
        self.consent = Consent()
        self.exchanges: list[tuple[str, str, int]] = []  # (method, path, status) of the SDK's
        metadata = OAuthClientMetadata(
            redirect_uris=[AnyUrl(CALLBACK)],
            client_name=self.name,
            token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"],
        )
        self.auth = OAuthClientProvider(
            served.mcp,
            metadata,
            self.storage,
            self._redirect,
            self._callback,
            client_metadata_url=metadata_url,
        )

    # the SDK's two handlers

    async def _redirect(self, authorization_url: str) -> None:
        await anyio.to_thread.run_sync(self._approve, authorization_url)

    async def _callback(self) -> AuthorizationCodeResult:
        return self.consent.result

    def _approve(self, authorization_url: str) -> None:
        approve_in_browser(self.served, authorization_url, self.sites, self.consent,
                           self.before_approve)  # fmt: skip

    # the SDK's HTTP client

    async def _keep(self, response: httpx2.Response) -> None:
        await response.aread()
        path = response.request.url.path
        self.exchanges.append((response.request.method, path, response.status_code))
        headers = "\n".join(f"{k}: {v}" for k, v in response.headers.items())
        where = "token" if path == "/token" else "sdk"
        SEEN.responses.append((where, f"{response.status_code}\n{headers}\n\n{response.text}"))

    def http(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            auth=self.auth,
            timeout=httpx2.Timeout(60.0, read=300.0),
            event_hooks={"response": [self._keep]},
        )

    @contextlib.asynccontextmanager
    async def session(self):
        """An SDK client session with the listener (protocol 2026-07-28), signed in on its
        first request."""
        async with (
            self.http() as http,
            streamable_http_client(self.served.mcp, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.discover()
            yield session

    @property
    def access(self) -> str:
        return self.storage.tokens.access_token

    @property
    def client_id(self) -> str:
        return self.storage.client.client_id


def signed_in(served, **kwargs) -> SignIn:
    """A client signed in (its tool list read once)."""
    flow = SignIn(served, **kwargs)

    async def main():
        async with flow.session() as session:
            await session.list_tools()

    anyio.run(main)
    return flow


# --------------------------------------------------------------------------- tests


def test_from_a_401_an_editor_signs_a_registered_client_in_and_one_post_is_written(
    served, shared_wp_site
):
    flow = SignIn(served)
    job_id = new_job_id()
    seen = {}

    async def main():
        async with flow.session() as session:
            seen["tools"] = [t.name for t in (await session.list_tools()).tools]
            start = {"job_id": job_id, "site": SITE_NAME, "task_version": 1}
            seen["start"] = await session.call_tool("start_job", start)
            draft = {"job_id": job_id, **draft_body()}
            seen["drafts"] = [await session.call_tool("put_draft", draft) for _ in range(2)]

    anyio.run(main)
    # discovery from the 401 (RFC 9728, RFC 8414), a registration (RFC 7591), the code
    # exchanged, then the same request again with the token
    steps = [(method, path) for method, path, _ in flow.exchanges]
    assert steps[:6] == [
        ("POST", "/mcp"),
        ("GET", "/.well-known/oauth-protected-resource/mcp"),
        ("GET", "/.well-known/oauth-authorization-server"),
        ("POST", "/register"),
        ("POST", "/token"),
        ("POST", "/mcp"),
    ], flow.exchanges
    assert [status for *_, status in flow.exchanges[:6]] == [401, 200, 200, 201, 200, 200]
    # the same documents at RFC 8414's path-inserted and RFC 9728's root URLs
    base = served.mcp.removesuffix("/mcp")
    known = {p: requests.get(base + p, timeout=30) for p in WELL_KNOWN}
    assert [answer.status_code for answer in known.values()] == [200] * 4
    documents = [answer.json() for answer in known.values()]
    assert documents[0] == documents[1] and documents[2] == documents[3]
    assert flow.storage.client.client_secret is None  # a public client: no secret minted
    assert flow.storage.tokens.refresh_token
    assert "registered dynamically" in flow.consent.page and flow.name in flow.consent.page
    assert f'value="{SITE_NAME}"' in flow.consent.page
    assert f'value="{OTHER_SITE}"' in flow.consent.page and "rivalblog" not in flow.consent.page

    assert sorted(seen["tools"]) == sorted(TOOLS)
    assert not seen["start"].is_error, seen["start"].content
    first, again = seen["drafts"]
    assert not first.is_error, first.content
    assert first.structured_content["operation_key"] == op_key(job_id, "draft")
    assert again.structured_content["replayed"] is True
    assert count_objects(shared_wp_site, [op_key(job_id, "draft")]) == {op_key(job_id, "draft"): 1}
    grant = grant_of(served, flow.name)
    assert grant["sites"] == [SITE_NAME] and grant["client_host"] is None
    assert grant["last_used_at"] is not None and grant["revoked_at"] is None
    # the API's own request lines, for the tenant, through the in-process call
    lines = [json.loads(x) for x in served.logs().splitlines() if x.startswith("{")]
    drafts = [x for x in lines if x.get("route") == "/v1/jobs/<job_id>/draft"]
    assert drafts and all(x.get("tenant") == TENANT for x in drafts), drafts[-2:]


def test_a_client_metadata_document_over_https_signs_in_and_an_unlisted_one_is_refused(
    served, documents
):
    docs, _cafile, docs_host = documents
    url = f"https://{docs_host}/client.json"
    name = f"E2E document app {uuid.uuid4().hex[:8]}"
    docs.pages["/client.json"] = client_document(url, name)
    flow = signed_in(served, metadata_url=url)
    assert flow.client_id == url
    assert "/register" not in [path for _, path, _ in flow.exchanges]
    assert docs.hits.count("/client.json") == 1  # fetched once, then the ledger's cache
    assert docs_host in flow.consent.page and "verified" in flow.consent.page
    grant = grant_of(served, name)
    assert grant["client_host"] == docs_host and grant["last_used_at"] is not None

    # the same server named as localhost: loopback, and that host:port is not listed
    port = docs_host.rsplit(":", 1)[1]
    unlisted = f"https://localhost:{port}/unlisted.json"
    docs.pages["/unlisted.json"] = client_document(unlisted, "Unlisted app")
    refused = SignIn(served, metadata_url=unlisted)

    async def main():
        async with refused.http() as http:
            await http.post(served.mcp, json=LIST_TOOLS, headers=MCP_HEADERS)

    with pytest.raises(Refused):
        anyio.run(main)
    answer = refused.consent.authorize
    assert answer.status_code == 400 and "Location" not in answer.headers
    assert answer.json()["error"] == "invalid_request", answer.text
    assert "/unlisted.json" not in docs.hits
    assert "client metadata document refused" in served.logs()
    assert refused.storage.tokens is None


def _authorize_document(served, url: str, source: str = "127.0.0.1") -> tuple[int, dict]:
    """``GET /authorize`` for the metadata document client ``url``, from the loopback
    address ``source``: its status and JSON answer."""
    where = urlsplit(served.issuer)
    query = urlencode(
        {
            "response_type": "code",
            "client_id": url,
            "redirect_uri": CALLBACK,
            "code_challenge": "x" * 43,
            "code_challenge_method": "S256",
            "state": "s",
        }
    )
    connection = http.client.HTTPConnection(
        where.hostname, where.port, timeout=30, source_address=(source, 0)
    )
    try:
        connection.request("GET", f"/authorize?{query}")
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


def test_a_slow_document_server_is_asked_once_and_slows_no_one(served, broken_documents):
    """Issue 53: 8 addresses x 4 sign-ins whose metadata documents sit on a server that does
    not answer. The server is asked once (one fetch per host: the others are refused at once),
    a new client's metadata and a tool list with a token are answered meanwhile, and once
    that fetch failed the next sign-in naming the host is refused without a fetch."""
    silent, _untrusted = broken_documents
    urls = [f"https://{silent.host}/app-{n}.json" for n in range(32)]
    with ThreadPoolExecutor(32) as pool:
        asked = [
            pool.submit(_authorize_document, served, url, f"127.0.0.{70 + n // 4}")
            for n, url in enumerate(urls)
        ]
        time.sleep(0.5)
        started = time.monotonic()
        metadata = requests.get(
            served.issuer + "/.well-known/oauth-authorization-server", timeout=10
        )
        assert metadata.status_code == 200
        assert mcp_status(served, served.token) == 200
        assert time.monotonic() - started < 2.0
        deadline = time.monotonic() + 10  # all but the one fetching, refused without waiting
        while sum(one.done() for one in asked) < 31 and time.monotonic() < deadline:
            time.sleep(0.05)
        refused_at_once = sum(one.done() for one in asked)
        silent.hang_up()  # the one fetch in flight fails now, instead of at its 5 s deadline
        answers = [one.result() for one in asked]
    assert len(silent.accepted) == 1 and refused_at_once == 31
    assert {status for status, _ in answers} == {400}
    said = [body["error_description"] for _, body in answers]
    assert sum("being fetched" in one for one in said) == 31, said
    assert not any("not found" in one for one in said), said
    started = time.monotonic()
    status, body = _authorize_document(served, f"https://{silent.host}/later.json")
    assert status == 400 and "not fetched again" in body["error_description"], body
    assert time.monotonic() - started < 1.0 and len(silent.accepted) == 1


def test_a_document_behind_an_untrusted_certificate_is_said_to_fail_tls(served, broken_documents):
    """Issue 53: the browser was told "Client ID ... not found"; now the TLS failure."""
    _silent, untrusted = broken_documents
    status, body = _authorize_document(served, f"https://{untrusted}/app.json")
    assert status == 400, body
    assert body["error"] == "invalid_request"
    assert "TLS failed" in body["error_description"], body
    assert "CERTIFICATE_VERIFY_FAILED" in body["error_description"], body


def test_pkce_the_redirect_uri_the_resource_and_a_reused_code_are_checked_over_http(served):
    """A client sending what a good one never would (plain ``requests``): an authorization
    request for a redirect URI it did not register is shown to the user, never redirected;
    at ``/token`` a wrong verifier, another redirect URI and another resource (audience) are
    refused and revoke nothing; a code presented again ends the grant."""
    name = f"E2E raw app {uuid.uuid4().hex[:8]}"
    metadata = {"redirect_uris": [CALLBACK], "client_name": name}
    registered = requests.post(served.issuer + "/register", json=metadata, timeout=30)
    SEEN.keep("client", registered)
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]
    assert registered.json()["token_endpoint_auth_method"] == "none"
    assert "client_secret" not in registered.json()
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": CALLBACK,
        "code_challenge": base64.urlsafe_b64encode(digest).decode().rstrip("="),
        "code_challenge_method": "S256",
        "state": "raw-state",
        "resource": served.mcp,
    }
    elsewhere = {**query, "redirect_uri": "https://attacker.example/cb"}
    shown = requests.get(
        served.issuer + "/authorize", params=elsewhere, allow_redirects=False, timeout=30
    )
    SEEN.keep("client", shown)
    assert shown.status_code == 400 and "Location" not in shown.headers
    assert "attacker.example" not in shown.headers.get("Location", "")

    consent = approve_in_browser(served, f"{served.issuer}/authorize?{urlencode(query)}")
    assert (consent.result.state, consent.result.iss) == ("raw-state", served.issuer)
    form = {
        "grant_type": "authorization_code",
        "code": consent.result.code,
        "redirect_uri": CALLBACK,
        "client_id": client_id,
        "code_verifier": verifier,
        "resource": served.mcp,
    }
    for change, error in (
        ({"code_verifier": secrets.token_urlsafe(48)}, "invalid_grant"),
        ({"redirect_uri": f"http://127.0.0.1:{CALLBACK_PORT}/other"}, "invalid_request"),
        ({"resource": "https://other.example/mcp"}, "invalid_target"),
    ):
        answer = token_call(served, {**form, **change})
        assert (answer.status_code, answer.json()["error"]) == (400, error), change
    assert grant_of(served, name)["revoked_at"] is None  # refused before redemption
    issued = token_call(served, form)
    assert issued.status_code == 200, issued.text
    access = issued.json()["access_token"]
    assert mcp_status(served, access) == 200
    again = token_call(served, form)
    assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")
    assert mcp_status(served, access) == 401
    assert grant_of(served, name)["revoked_why"] == "code-reused"


def test_the_grant_keeps_to_its_sites_cannot_publish_and_only_its_editor_approves(
    served, shared_wp_site
):
    def others_try(consent: Consent) -> None:
        """While the editor has the page open: another tenant's editor follows the same
        link, and a workflow token tries to sign in."""
        link = f"{served.url}/review/oauth?request={consent.pending_id}"
        rival = Browser(served)
        assert rival.sign_in(served.rival).status_code == 303
        page = rival.get(link)
        assert page.status_code == 404 and "opened by another editor" in page.text
        for path in ("/review/oauth/approve", "/review/oauth/deny"):
            answer = rival.post(path, {"sites": ["rivalblog", SITE_NAME]})
            assert answer.status_code == 404 and "Location" not in answer.headers
        workflow = Browser(served)
        assert workflow.sign_in(served.token).status_code == 403
        assert workflow.get(link).url == served.url + "/review/login"
        answer = workflow.post(
            "/review/oauth/approve", {"sites": [SITE_NAME]}, csrf_page="/review/login"
        )
        assert answer.status_code == 303 and answer.headers["Location"] == "/review/login"

    flow = SignIn(served, before_approve=others_try)
    job_id = new_job_id()
    seen = {}

    async def main():
        async with flow.session() as session:
            seen["tools"] = [t.name for t in (await session.list_tools()).tools]
            start = {"job_id": job_id, "site": OTHER_SITE, "task_version": 1}
            seen["start"] = await session.call_tool("start_job", start)
            seen["draft"] = await session.call_tool("put_draft", {"job_id": job_id, **draft_body()})

    anyio.run(main)
    assert slug(problem_of(seen["start"])) == "forbidden"
    assert slug(problem_of(seen["draft"])) == "job-not-found"
    assert count_objects(shared_wp_site, [op_key(job_id, "draft")]) == {op_key(job_id, "draft"): 0}
    # no tool approves or publishes, and the grant's token opens nothing of the API
    assert not [t for t in seen["tools"] if "publish" in t or t.startswith("approve")]
    bearer = {"Authorization": f"Bearer {flow.access}"}
    for method, path in (("POST", f"/v1/jobs/{job_id}/publish"), ("GET", "/v1/jobs")):
        answer = requests.request(method, served.url + path, headers=bearer, json={}, timeout=30)
        SEEN.keep("api", answer)
        assert answer.status_code == 401, (path, answer.status_code)
    assert grant_of(served, flow.name)["sites"] == [SITE_NAME]
    rows = cli_json(served, "tokens", "list", "--tenant", RIVAL)
    assert [r for r in rows if r["kind"] == "grant"] == []


def test_a_refresh_rotates_a_reused_one_ends_the_family_and_a_revoked_grant_is_refused(served):
    flow = signed_in(served)
    first = flow.storage.tokens
    rotated = refresh(served, flow.client_id, first.refresh_token)
    assert rotated.status_code == 200, rotated.text
    second = rotated.json()
    assert second["refresh_token"] != first.refresh_token
    assert second["access_token"] != first.access_token
    assert mcp_status(served, second["access_token"]) == 200

    # claude.ai's second node presents the same token within the grace window
    # (PrefectHQ/fastmcp#4264): a pair of its own, the grant lives; the client keeps this one
    twin = refresh(served, flow.client_id, first.refresh_token)
    assert twin.status_code == 200, twin.text
    kept = refresh(served, flow.client_id, twin.json()["refresh_token"])
    assert kept.status_code == 200, kept.text
    third = kept.json()
    retired = refresh(served, flow.client_id, second["refresh_token"])  # the fork not kept
    assert retired.json()["error"] == "invalid_grant"
    assert mcp_status(served, third["access_token"]) == 200

    # a token older than the last rotation presented again (a thief): the family ends
    reused = refresh(served, flow.client_id, first.refresh_token)
    assert (reused.status_code, reused.json()["error"]) == (400, "invalid_grant")
    tokens = (first.access_token, second["access_token"], third["access_token"])
    for token in tokens:
        assert mcp_status(served, token) == 401
    latest = refresh(served, flow.client_id, third["refresh_token"])
    assert latest.json()["error"] == "invalid_grant"
    ended = grant_of(served, flow.name)
    assert ended["revoked_at"] is not None and ended["revoked_why"] == "refresh-reused"

    # a grant revoked by the operator: its next call is refused
    other = signed_in(served)
    assert mcp_status(served, other.access) == 200
    grant_id = grant_of(served, other.name)["grant_id"]
    done = cli_json(served, "tokens", "revoke", "--tenant", TENANT, "--grant", str(grant_id))
    assert done == {"tenant": TENANT, "grant": grant_id, "revoked": 1}
    assert mcp_status(served, other.access) == 401
    assert refresh(served, other.client_id, other.storage.tokens.refresh_token).status_code == 400
    assert grant_of(served, other.name)["revoked_at"] is not None


def test_no_code_token_client_secret_or_pending_id_is_logged_stored_or_answered(
    served, shared_wp_site
):
    """Its own flows first (a registered and a document client signed in, a tool call, a
    refresh, a reused refresh, a revocation), then every secret of the module's flows so
    far searched in the served gateway's and listener's output (uvicorn's and the SDK
    server's lines included), the SDK client's log records, the ledger's rows and files, and
    every response but the one it belongs in."""
    flow = SignIn(served)
    job_id = new_job_id()

    async def main():
        async with flow.session() as session:
            start = {"job_id": job_id, "site": SITE_NAME, "task_version": 1}
            assert not (await session.call_tool("start_job", start)).is_error
            assert not (await session.call_tool("get_job", {"job_id": job_id})).is_error

    anyio.run(main)
    rotated = refresh(served, flow.client_id, flow.storage.tokens.refresh_token)
    assert rotated.status_code == 200
    again = refresh(served, flow.client_id, rotated.json()["refresh_token"])
    assert again.status_code == 200  # the rotated token is no longer the last rotation:
    assert refresh(served, flow.client_id, flow.storage.tokens.refresh_token).status_code == 400
    assert mcp_status(served, again.json()["access_token"]) == 401
    revoked = signed_in(served)
    grant_id = grant_of(served, revoked.name)["grant_id"]
    cli_json(served, "tokens", "revoke", "--tenant", TENANT, "--grant", str(grant_id))
    assert mcp_status(served, revoked.access) == 401

    async def with_static_token():  # the first-party token still works beside the grants
        async with http_session(served.mcp, served.token, MODERN) as session:
            assert not (await session.call_tool("get_job", {"job_id": job_id})).is_error

    anyio.run(with_static_token)

    assert set(SEEN.secrets) >= {"pending id", "code", "access token", "refresh token"}
    assert "client secret" not in SEEN.secrets  # public clients only: none was ever minted
    logs = served.logs()
    sdk_lines = "\n".join(served.records.lines)
    assert "HTTP Request: POST" in sdk_lines and "/token" in sdk_lines  # the SDK's side seen
    assert len(logs) > 1000 and "remote MCP listener at" in logs
    gateway.create_app(
        {"database_url": served.env["GATEWAY_DATABASE_URL"], "secret_key": SECRET_KEY}
    )
    rows = all_ledger_rows()
    path = sqlite_path(served.env["GATEWAY_DATABASE_URL"])
    files = b"".join(
        f.read_bytes() for f in (path, path.with_name(path.name + "-wal")) if f.exists()
    )
    assert job_id in rows and flow.name in rows  # the search finds what is there
    places = {
        "served logs": logs,
        "SDK client logs": sdk_lines,
        "ledger rows": rows,
        "ledger files": files.decode("latin-1"),
    }
    belongs = {"pending id": "authorize", "code": "approve", "access token": "token"}
    belongs["refresh token"] = "token"
    hits = []
    for kind, values in SEEN.secrets.items():
        home = belongs[kind]
        for value in values:
            hits += [f"{kind} in {where}" for where, text in places.items() if value in text]
            hits += [
                f"{kind} in a {where} response"
                for where, text in SEEN.responses
                if value in text and where != home
            ]
    assert hits == [], hits
    # and every secret is in the answer it belongs in: the search finds what is there
    homes = {
        home: "\n".join(t for w, t in SEEN.responses if w == home) for home in belongs.values()
    }
    astray = [
        k for k, values in SEEN.secrets.items() if any(v not in homes[belongs[k]] for v in values)
    ]
    assert astray == []
