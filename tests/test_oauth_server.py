"""The MCP authorization server (issue 43) over HTTP: the ``mcp`` SDK's routes with the
gateway's provider and wrappers (gateway.oauth), in a Starlette app reached through httpx2's
ASGI transport, driven by the SDK's own OAuth client (``mcp.client.auth``) where it can be and
by plain requests where a test must send what a good client never would. The editor's
decision is made directly with ``grants.claim`` and ``grants.approve`` (the consent page is
the review site's). A client metadata document is served over HTTPS on loopback with a test
CA made here (``cryptography``), its ``host:port`` in ``GATEWAY_OAUTH_CIMD_ALLOW_HOSTS``.
Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import html.parser
import http.server
import json
import logging
import re
import secrets
import ssl
import threading
from urllib.parse import parse_qs
from urllib.parse import urlsplit

import anyio
import anyio.to_thread
import httpx2
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend
from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from mcp.server.auth.provider import ProviderTokenVerifier
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.server.auth.routes import create_protected_resource_routes
from mcp.shared.auth import AuthorizationCodeResult
from mcp.shared.auth import OAuthClientMetadata
from pydantic import AnyHttpUrl
from pydantic import AnyUrl
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.routing import Route

from gateway.core import config as config_module
from gateway.core.digests import sha256_hex
from gateway.core.page_headers import SECURITY_HEADERS
from gateway.ledger import db
from gateway.ledger import migrations
from gateway.ledger.db import database
from gateway.ledger.oauth_models import OAuthClient
from gateway.ledger.oauth_models import OAuthGrant
from gateway.ledger.oauth_models import OAuthPending
from gateway.ledger.oauth_models import OAuthToken
from gateway.oauth import client_documents
from gateway.oauth import refusals
from gateway.oauth.provider import GatewayProvider
from gateway.oauth.redirects import client_redirect
from gateway.oauth.routes import issuer_url
from gateway.oauth.routes import routes
from gateway.tenancy import grants
from gateway.tenancy import oauth_clients
from gateway.tenancy import oauth_tokens
from tests.support import ROOT
from tests.support import TokenMemory
from tests.support import all_ledger_rows
from tests.support import loopback_ca

ISSUER = "http://127.0.0.1:8765"
RESOURCE = f"{ISSUER}/mcp"
CONSENT = "http://127.0.0.1:8000"
CALLBACK = "http://127.0.0.1:33418/callback"
EDITOR = "editor-token-hash"


@pytest.fixture
def ledger(ledger_url):
    db.bind(ledger_url)
    migrations.migrate()
    yield ledger_url
    db.close_all()


def settings(**overrides):
    return config_module.load({}, testing=True).with_overrides(**overrides)


def in_ledger(call):
    with database.connection_context():
        return call()


async def echo(scope, receive, send):
    """The stand-in for ``/mcp``: answers with the verified token's claims (what the
    listener's tools would act for)."""
    body = json.dumps(scope["user"].access_token.claims).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


def build_app(provider: GatewayProvider) -> Starlette:
    """The authorization server's routes, the protected resource metadata and a ``/mcp``
    behind the SDK's bearer check with ``validate_token_resource`` (as the listener mounts
    them)."""
    resource = AnyHttpUrl(RESOURCE)
    protected = RequireAuthMiddleware(
        echo, [grants.TOOL_SCOPE], build_resource_metadata_url(resource)
    )
    backend = BearerAuthBackend(ProviderTokenVerifier(provider), resource_server_url=resource)
    return Starlette(
        routes=[
            *routes(provider),
            *create_protected_resource_routes(resource, [issuer_url(ISSUER)], [grants.TOOL_SCOPE]),
            Route("/mcp", protected, methods=["GET", "POST"]),
        ],
        middleware=[Middleware(AuthenticationMiddleware, backend=backend)],
    )


class Server:
    """One provider, its app and a plain HTTP client for it (no redirects followed)."""

    def __init__(self, cafile: str | None = None, **overrides):
        self.config = settings(**overrides)
        self.provider = GatewayProvider(self.config, ISSUER, CONSENT, cafile=cafile)
        self.app = build_app(self.provider)

    def client(self, **kwargs) -> httpx2.AsyncClient:
        transport = httpx2.ASGITransport(
            app=self.app, client=kwargs.pop("address", ("10.0.0.1", 1))
        )
        return httpx2.AsyncClient(transport=transport, base_url=ISSUER, **kwargs)


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).decode().rstrip("=")


async def register(http: httpx2.AsyncClient, **metadata) -> httpx2.Response:
    body = {"redirect_uris": [CALLBACK], "client_name": "App", **metadata}
    return await http.post("/register", json=body)


async def public_client(http: httpx2.AsyncClient) -> str:
    answer = await register(http, token_endpoint_auth_method="none")
    assert answer.status_code == 201, answer.text
    return answer.json()["client_id"]


def authorize_query(client: str, challenge: str, **extra) -> dict:
    query = {
        "response_type": "code",
        "client_id": client,
        "redirect_uri": CALLBACK,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "st-1",
        "resource": RESOURCE,
    }
    query.update(extra)
    return {k: v for k, v in query.items() if v is not None}


def pending_id_of(answer: httpx2.Response) -> str:
    assert answer.status_code == 302, answer.text
    location = answer.headers["location"]
    assert location.startswith(f"{CONSENT}/review/oauth?request=")
    return parse_qs(urlsplit(location).query)["request"][0]


def approve(pending_id: str) -> str:
    """The editor of acme approves the request for the site blog: the client's redirect."""

    def decide():
        assert grants.claim(pending_id, EDITOR) is not None
        decision = grants.approve(
            pending_id, EDITOR, "acme", ["blog"], "editor-1", "App", dt.timedelta(seconds=60)
        )
        return client_redirect(decision, ISSUER)

    return in_ledger(decide)


async def approve_async(pending_id: str) -> str:
    return await anyio.to_thread.run_sync(approve, pending_id)


async def code_for(http: httpx2.AsyncClient, client_id: str, challenge: str, **extra) -> str:
    answer = await http.get("/authorize", params=authorize_query(client_id, challenge, **extra))
    redirect = await approve_async(pending_id_of(answer))
    query = parse_qs(urlsplit(redirect).query)
    assert query["iss"] == [ISSUER] and query["state"] == ["st-1"]
    return query["code"][0]


async def token(http: httpx2.AsyncClient, **form) -> httpx2.Response:
    return await http.post("/token", data={k: v for k, v in form.items() if v is not None})


async def signed_in(http: httpx2.AsyncClient) -> tuple[str, dict]:
    """A public client registered, approved and its code exchanged: (client id, tokens)."""
    client_id = await public_client(http)
    verifier, challenge = pkce()
    code = await code_for(http, client_id, challenge)
    answer = await token(
        http,
        grant_type="authorization_code",
        code=code,
        redirect_uri=CALLBACK,
        client_id=client_id,
        code_verifier=verifier,
        resource=RESOURCE,
    )
    assert answer.status_code == 200, answer.text
    return client_id, answer.json()


def grant_row() -> OAuthGrant:
    return in_ledger(lambda: OAuthGrant.get())


def sdk_auth(server: Server, client_metadata_url: str | None = None):
    """The SDK's ``OAuthClientProvider`` whose "browser" opens ``/authorize``, lets the editor
    approve, and hands back what the redirect carried. Returns (auth, storage, seen): ``seen``
    collects every secret the flow showed (pending id, code) for the log canary."""
    storage, seen, result = TokenMemory(), [], {}

    async def open_browser(url: str) -> None:
        async with server.client() as browser:
            pending_id = pending_id_of(await browser.get(url))
        redirect = await approve_async(pending_id)
        query = parse_qs(urlsplit(redirect).query)
        seen.extend([pending_id, query["code"][0]])
        result["answer"] = AuthorizationCodeResult(
            code=query["code"][0], state=query["state"][0], iss=query["iss"][0]
        )

    async def callback() -> AuthorizationCodeResult:
        return result["answer"]

    metadata = OAuthClientMetadata(
        redirect_uris=[AnyUrl(CALLBACK)],
        client_name="SDK client",
        token_endpoint_auth_method="none",
    )
    auth = OAuthClientProvider(
        RESOURCE, metadata, storage, open_browser, callback, client_metadata_url=client_metadata_url
    )
    return auth, storage, seen


# --------------------------------------------------------------------------- a test CA


class Documents(http.server.BaseHTTPRequestHandler):
    """Serves ``self.server.pages``: path -> (status, headers, body); counts requests."""

    def do_GET(self):  # noqa: N802 - http.server's name
        self.server.hits.append(self.path)
        status, headers, body = self.server.pages.get(self.path, (404, {}, b""))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def documents(tmp_path):
    """An HTTPS server on 127.0.0.1 with a certificate from a test CA: (server, CA bundle,
    base URL)."""
    cafile, cert, key = loopback_ca(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Documents)
    server.pages, server.hits = {}, []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, cafile, f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def document(url: str, **fields) -> bytes:
    body = {
        "client_id": url,
        "client_name": "Doc client",
        "redirect_uris": [CALLBACK],
        "token_endpoint_auth_method": "none",
        **fields,
    }
    return json.dumps({k: v for k, v in body.items() if v is not None}).encode()


# --------------------------------------------------------------------------- tests


def test_the_metadata_advertises_cimd_s256_iss_and_public_clients_and_follows_the_switches(
    ledger,
):
    async def main():
        async with Server().client() as http:
            found = (await http.get("/.well-known/oauth-authorization-server")).json()
        assert found["issuer"] == ISSUER  # no trailing slash: RFC 8414 §3.3 compares strings
        assert found["client_id_metadata_document_supported"] is True
        assert found["authorization_response_iss_parameter_supported"] is True
        assert found["code_challenge_methods_supported"] == ["S256"]
        assert found["token_endpoint_auth_methods_supported"] == ["none"]
        assert found["scopes_supported"] == [grants.TOOL_SCOPE]
        assert found["registration_endpoint"] == f"{ISSUER}/register"
        assert found["revocation_endpoint"] == f"{ISSUER}/revoke"
        async with Server().client() as http:
            # RFC 8414 §3.1 path insertion, and RFC 9728's root URL: answered, not 404
            inserted = await http.get("/.well-known/oauth-authorization-server/mcp")
            root = await http.get("/.well-known/oauth-protected-resource")
            at_mcp = await http.get("/.well-known/oauth-protected-resource/mcp")
        assert inserted.status_code == root.status_code == at_mcp.status_code == 200
        assert inserted.json() == found
        assert root.json() == at_mcp.json() and root.json()["resource"] == RESOURCE

        async with Server(oauth_dcr=False, oauth_cimd=False).client() as http:
            off = (await http.get("/.well-known/oauth-authorization-server")).json()
            assert (await register(http, token_endpoint_auth_method="none")).status_code == 404
        assert "registration_endpoint" not in off
        assert "client_id_metadata_document_supported" not in off

    anyio.run(main)


def test_the_sdk_client_signs_in_from_a_401_with_dcr_and_nothing_secret_is_logged(ledger, caplog):
    """Discovery from the 401 (RFC 9728), DCR, the consent redirect, the code exchange with
    PKCE and the resource, the RFC 9207 ``iss`` checked by the SDK's client, then ``/mcp``
    answered for the grant's tenant and sites. No code, token or pending id in any log line
    (the SDK's loggers included) or the ledger."""
    caplog.set_level(logging.DEBUG)
    server = Server()

    async def main():
        auth, storage, seen = sdk_auth(server)
        async with server.client(auth=auth) as http:
            answer = await http.get("/mcp")
        assert answer.status_code == 200, answer.text
        claims = answer.json()
        assert (claims["tenant"], claims["sites"], claims["resource"]) == (
            "acme",
            ["blog"],
            RESOURCE,
        )
        assert claims["iss"] == ISSUER and claims["principal_hash"] == grant_row().principal_hash
        assert storage.client.client_secret is None  # a public client: no secret minted
        return [*seen, storage.tokens.access_token, storage.tokens.refresh_token]

    secrets_seen = anyio.run(main)
    logged, rows = caplog.text, all_ledger_rows()
    assert "HTTP Request: POST" in logged and "oauth_token" in logged  # httpx2's, peewee's SQL
    for secret in secrets_seen:
        assert secret not in logged
        assert secret not in rows
    with database.connection_context():
        assert server.provider.principal_for("not-a-token") is None


def test_a_client_metadata_document_over_https_is_fetched_checked_and_cached(ledger, documents):
    """The SDK's client uses its document URL as ``client_id`` (CIMD advertised); the
    gateway fetches it through the egress guard with the test CA (its ``host:port`` listed)
    once, and uses the cache after."""
    server_, cafile, base = documents
    url = f"{base}/client.json"
    server_.pages["/client.json"] = (200, {"Content-Type": "application/json"}, document(url))
    host = urlsplit(base).netloc
    server = Server(cafile=cafile, oauth_cimd_allow_hosts=frozenset({host}))

    async def main():
        auth, storage, _ = sdk_auth(server, client_metadata_url=url)
        async with server.client(auth=auth) as http:
            answer = await http.get("/mcp")
        assert answer.status_code == 200, answer.text
        assert storage.client.client_id == url

    anyio.run(main)
    assert server_.hits == ["/client.json"]  # fetched once: /authorize, /token used the cache
    row = in_ledger(lambda: OAuthClient.get(OAuthClient.client_id == url))
    assert row.kind == oauth_clients.CIMD and grant_row().client_id == url


def test_a_document_is_refused_unlisted_loopback_wrong_id_secret_redirect_or_too_large(
    ledger, documents
):
    server_, cafile, base = documents
    host = urlsplit(base).netloc
    json_type = {"Content-Type": "application/json"}
    pages = {
        "/wrong-id.json": (200, json_type, document(f"{base}/other.json")),
        "/secret.json": (200, json_type, document(f"{base}/secret.json", client_secret="s")),
        "/basic.json": (
            200,
            json_type,
            document(f"{base}/basic.json", token_endpoint_auth_method=None),
        ),
        "/no-uris.json": (200, json_type, document(f"{base}/no-uris.json", redirect_uris=[])),
        "/moved.json": (302, {"Location": f"{base}/client.json"}, b""),
        "/large.json": (200, json_type, document(f"{base}/large.json", client_name="x" * 6000)),
        "/not-json.json": (200, json_type, b"<html>"),
    }
    server_.pages.update(pages)
    allowed = frozenset({host})
    for path in pages:
        with pytest.raises(client_documents.DocumentRefused):
            client_documents.fetch(f"{base}{path}", allowed, cafile)
    unlisted = f"https://127.0.0.1:{server_.server_address[1] + 1}/client.json"
    with pytest.raises(client_documents.DocumentRefused, match="not a public address"):
        client_documents.fetch(unlisted, allowed, cafile)
    with pytest.raises(client_documents.DocumentRefused, match="not a public address"):
        client_documents.fetch(f"{base}/wrong-id.json", frozenset(), cafile)  # not listed
    with pytest.raises(client_documents.DocumentRefused, match="https URL with a path"):
        client_documents.fetch(base + "/", allowed, cafile)
    hits_before = len(server_.hits)

    server = Server(cafile=cafile, oauth_cimd_allow_hosts=allowed)
    off = Server(cafile=cafile, oauth_cimd_allow_hosts=allowed, oauth_cimd=False)
    server_.pages["/client.json"] = (200, json_type, document(f"{base}/client.json"))

    async def main():
        _, challenge = pkce()
        async with server.client() as http:
            for client_id in (unlisted, f"{base}/wrong-id.json"):
                answer = await http.get("/authorize", params=authorize_query(client_id, challenge))
                assert answer.status_code == 400 and "location" not in answer.headers
        async with off.client() as http:
            query = authorize_query(f"{base}/client.json", challenge)
            answer = await http.get("/authorize", params=query)
            assert answer.status_code == 400 and "location" not in answer.headers

    anyio.run(main)
    assert server_.hits[hits_before:] == ["/wrong-id.json"]  # CIMD off: not even fetched


def test_dcr_registers_public_clients_only_and_is_rate_limited_per_address(ledger):
    server = Server(oauth_dcr_rate=(3, 3600))

    async def main():
        async with server.client() as http:
            secret = await register(http, token_endpoint_auth_method="client_secret_post")
            assert secret.status_code == 400
            assert secret.json()["error"] == "invalid_client_metadata"
            plain = await register(http)  # no method: replaced by none, no secret minted
            assert plain.status_code == 201, plain.text
            assert plain.json()["token_endpoint_auth_method"] == "none"
            assert "client_secret" not in plain.json()
            assert (await register(http, token_endpoint_auth_method="none")).status_code == 201
            limited = await register(http, token_endpoint_auth_method="none")
            assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
        async with server.client(address=("10.0.0.2", 1)) as other:
            assert (await register(other, token_endpoint_auth_method="none")).status_code == 201
        return plain.json()["client_id"]

    client_id = anyio.run(main)
    rows = in_ledger(lambda: list(OAuthClient.select()))
    assert len(rows) == 3 and all(r.kind == oauth_clients.DCR for r in rows)
    assert all("client_secret" not in r.metadata for r in rows)
    assert client_id in {r.client_id for r in rows}


def test_registration_metadata_and_the_requests_waiting_for_an_editor_are_capped(ledger):
    """The security review stored a 55 KiB registration whole and a pending request per
    ``/authorize`` call, ``state`` of any length: now 400 ``invalid_client_metadata`` past
    5 KiB (RFC 7591 §3.2.2), 400 ``invalid_request`` for a ``state`` past 1024 characters, and
    503 ``temporarily_unavailable`` once a client has its cap of unclaimed requests, whose
    ``Retry-After`` and description say when a place frees: when enough of the waiting
    requests expire (15 minutes each; nobody can list them), or when an editor opens one."""
    server = Server(oauth_pending_per_client=2)
    start = db.utcnow()
    clock = {"now": start}
    server.provider.clock = lambda: clock["now"]

    def at(minutes: float) -> None:
        clock["now"] = start + dt.timedelta(minutes=minutes)

    async def main():
        async with server.client() as http:
            big = await register(http, token_endpoint_auth_method="none", client_name="x" * 55_000)
            assert (big.status_code, big.json()["error"]) == (400, "invalid_client_metadata")
            client_id = await public_client(http)
            _, challenge = pkce()
            long_state = authorize_query(client_id, challenge, state="s" * 1025)
            answer = await http.get("/authorize", params=long_state)
            assert (answer.status_code, answer.json()["error"]) == (400, "invalid_request")

            async def sign_in() -> httpx2.Response:
                query = authorize_query(client_id, challenge, state="s" * 1024)
                return await http.get("/authorize", params=query)

            ids = [pending_id_of(await sign_in())]  # expires at 15
            at(5)
            ids.append(pending_id_of(await sign_in()))  # expires at 20
            at(6)
            full = await sign_in()
            assert full.status_code == 503 and full.headers["retry-after"] == "540"
            assert full.json() == {
                "error": "temporarily_unavailable",
                "error_description": "too many sign-in requests of this app wait unopened for "
                "an editor; the next expires in 540 seconds: start the sign-in again then",
            }
            assert "location" not in full.headers
            at(15 - 1 / 60)
            assert (await sign_in()).headers["retry-after"] == "1"
            at(15)  # the first request expired: its place is free
            ids.append(pending_id_of(await sign_in()))  # expires at 30
            at(16)  # two workers raced past the cap: a third waits (until 31), two must expire
            in_ledger(
                lambda: grants.open_pending(
                    client_id,
                    CALLBACK,
                    True,
                    challenge,
                    RESOURCE,
                    [],
                    None,
                    dt.timedelta(minutes=15),
                    clock["now"],
                )
            )
            assert (await sign_in()).headers["retry-after"] == str(14 * 60)
            for pending_id in ids[1:]:  # an editor opened two: their places are free at once
                assert in_ledger(lambda p=pending_id: grants.claim(p, EDITOR, clock["now"]))
            pending_id_of(await sign_in())

    anyio.run(main)
    assert in_ledger(OAuthClient.select().count) == 1
    assert in_ledger(OAuthPending.select().count) == 5


def test_unused_registrations_expire_and_are_forgotten_by_the_next_registration(ledger):
    clock = {"now": dt.datetime(2026, 12, 5, 12, 0)}
    server = Server(oauth_dcr_unused_hours=24.0)
    server.provider.clock = lambda: clock["now"]

    async def main():
        async with server.client() as http:
            old = await public_client(http)
            assert await server.provider.get_client(old) is not None
            clock["now"] += dt.timedelta(hours=25)
            assert await server.provider.get_client(old) is None  # expired: never served
            await public_client(http)  # and forgotten by the next registration

    anyio.run(main)
    assert in_ledger(lambda: OAuthClient.select().count()) == 1


def test_authorize_errors_are_shown_to_the_user_never_redirected_to_the_client(ledger):
    """Unknown client, a redirect URI not registered, no PKCE, ``plain`` PKCE, another
    ``response_type``, a wrong resource: each a 400 for the user's eyes, no ``Location``,
    no pending authorisation kept."""
    server = Server()

    async def main():
        async with server.client() as http:
            client_id = await public_client(http)
            _, challenge = pkce()
            cases = [
                {"client_id": "dcr-unknown"},
                {"redirect_uri": "https://attacker.example/cb"},
                {"code_challenge": None},
                {"code_challenge_method": "plain"},
                {"response_type": "token"},
                {"resource": "https://other.example/mcp"},
                {"resource": f"{ISSUER}/other"},
            ]
            errors = []
            for case in cases:
                answer = await http.get(
                    "/authorize", params=authorize_query(client_id, challenge, **case)
                )
                assert answer.status_code == 400, (case, answer.status_code)
                assert "location" not in answer.headers
                errors.append(answer.json()["error"])
            return errors

    errors = anyio.run(main)
    assert errors[-2:] == ["invalid_target", "invalid_target"]
    assert errors[4] == "unsupported_response_type"
    assert in_ledger(OAuthPending.select().count) == 0


CHROME = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8"
FIREFOX = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
HOSTILE = 'dcr-"><script>alert(1)</script><a href=https://attacker.example/x>'
STATE = "st-never-shown-9f3a"


def assert_page(answer: httpx2.Response, status: int) -> str:
    """``answer`` is the error page a browser gets: ``status``, HTML with the review site's
    security headers, no redirect, no link anywhere, never the state. Returns its text."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    for name, value in SECURITY_HEADERS.items():
        assert answer.headers[name] == value, name
    assert answer.headers["vary"] == "Accept"
    assert "location" not in answer.headers
    page = answer.text
    assert page.startswith("<!doctype html>") and '<html lang="en">' in page
    tags = Tags()
    tags.feed(page)
    assert not {"a", "script", "form", "iframe", "base"} & set(tags.names)
    assert not tags.links and STATE not in page
    return page


class Tags(html.parser.HTMLParser):
    """The elements of a page as a browser's parser sees them, and every attribute that
    would make the browser go somewhere (``href``, ``src``, ``action``, a refresh)."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []
        self.links: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        self.names.append(tag)
        for name, value in attrs:
            refresh = name == "http-equiv" and (value or "").lower() == "refresh"
            if name in ("href", "src", "action", "formaction") or refresh:
                self.links.append((name, value))


def test_a_browser_is_shown_a_page_with_the_reason_the_code_and_what_to_do(ledger):
    """RFC 6749 §4.1.2.1 ("inform the resource owner"): a request whose ``Accept`` prefers
    HTML (every browser's) gets each refusal as a page: the reason escaped (a client id made
    of markup shows as text), the error code, the advice, the status and ``Retry-After`` of
    the JSON answer; never the ``state``, no link to the client's redirect URI. Nothing is
    kept."""
    server = Server(oauth_pending_per_client=1)

    async def main():
        async with server.client(headers={"Accept": CHROME}) as browser:
            client_id = await public_client(browser)
            _, challenge = pkce()

            async def shown(status: int, **case) -> str:
                query = authorize_query(client_id, challenge, state=STATE, **case)
                return assert_page(await browser.get("/authorize", params=query), status)

            page = await shown(400, client_id=HOSTILE)
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
            assert '<code class="error-code">invalid_request</code>' in page
            page = await shown(400, redirect_uri="https://attacker.example/cb")
            assert "Redirect URI &#39;https://attacker.example/cb&#39; not registered" in page
            assert "Ask the application&#39;s developer to fix it" in page
            page = await shown(400, response_type="token")
            assert '<code class="error-code">unsupported_response_type</code>' in page
            page = await shown(400, resource="https://other.example/mcp")
            assert '<code class="error-code">invalid_target</code>' in page
            page = await shown(400, client_id="https://127.0.0.1:9/app.json")  # CIMD, unlisted
            assert "the client metadata document https://127.0.0.1:9/app.json cannot be" in page
            assert "Remove the connector" not in page  # the document's host must change
            pending_id_of(
                await browser.get("/authorize", params=authorize_query(client_id, challenge))
            )
            busy = await browser.get("/authorize", params=authorize_query(client_id, challenge))
            page = assert_page(busy, 503)
            assert 895 <= int(busy.headers["retry-after"]) <= 900  # the waiting one's 15 minutes
            assert '<code class="error-code">temporarily_unavailable</code>' in page
            assert "Start the connection again from the app in 15 minutes, when the next" in page
            assert "editor to open" not in page  # nobody can list the waiting requests

    anyio.run(main)
    assert in_ledger(OAuthPending.select().count) == 1  # the one sent to the consent page


def advice_of(page: str) -> str:
    return re.search(r'<td class="advice">(.*?)</td>', page, re.DOTALL).group(1)


def test_a_page_says_what_the_sdks_terse_reasons_mean_and_what_a_person_can_do(ledger):
    """A person read "Client ID 'dcr-…' not found" and "code_challenge: Field required" and
    was told to ask the app's developer. An unknown client id is most often a registration
    forgotten after ``GATEWAY_OAUTH_DCR_UNUSED_HOURS`` without an approval: the page says so
    and to add the connector again (the developer second); the SDK's checks get a plain
    sentence each above the raw reason, which stays for the developer."""
    server = Server(oauth_dcr_unused_hours=24.0)

    async def main():
        async with server.client(headers={"Accept": FIREFOX}) as browser:
            client_id = await public_client(browser)
            _, challenge = pkce()

            async def shown(**case) -> str:
                query = authorize_query(client_id, challenge, state=STATE, **case)
                return assert_page(await browser.get("/authorize", params=query), 400)

            page = await shown(client_id="dcr-forgotten")
            assert "Client ID &#39;dcr-forgotten&#39; not found" in page
            assert "The gateway does not know the client ID the app sent." in page
            advice = advice_of(page)
            assert "no editor approved a sign-in with it within 24 hours" in advice
            assert advice.index("Remove the connector") < advice.index("ask the application")
            page = await shown(code_challenge=None)
            assert "code_challenge: Field required" in page
            assert "did not send a PKCE code challenge (S256), which this gateway requires" in page
            assert advice_of(page).startswith("Trying again the same way will not help")
            page = await shown(response_type="token", code_challenge_method="plain")
            assert "response_type: Input should be &#39;code&#39;" in page
            assert "did not ask for an authorization code (response_type=code)" in page
            assert "asked for a PKCE method other than S256" in page
            page = await shown(redirect_uri="http://127.0.0.1:33418/elsewhere")
            assert "asked to be sent back to an address it did not register here" in page

    anyio.run(main)


def test_a_request_that_does_not_prefer_html_keeps_the_json_answer(ledger):
    """No ``Accept``, ``*/*`` (curl, requests), ``application/json`` or JSON named before
    HTML: the JSON answer as before (the SDK's direct answer carries ``state`` back), only
    ``Vary: Accept`` added. A browser's ``Accept``, ``text/html`` alone or named first: the
    page."""
    server = Server()

    async def main():
        async with server.client() as http:
            client_id = await public_client(http)
            _, challenge = pkce()
            query = authorize_query(client_id, challenge, client_id="dcr-unknown", state=STATE)
            for accept in (None, "*/*", "application/json", "application/json, text/html"):
                answer = await http.get(
                    "/authorize", params=query, headers={"Accept": accept} if accept else {}
                )
                assert answer.status_code == 400, accept
                assert answer.headers["content-type"] == "application/json"
                assert answer.headers["cache-control"] == "no-store"
                assert answer.headers["vary"] == "Accept"
                assert answer.json() == {
                    "error": "invalid_request",
                    "error_description": "Client ID 'dcr-unknown' not found",
                    "state": STATE,
                }
            for accept in (FIREFOX, "text/html", "text/html, application/json"):
                page = assert_page(
                    await http.get("/authorize", params=query, headers={"Accept": accept}), 400
                )
                assert "Client ID &#39;dcr-unknown&#39; not found" in page

    anyio.run(main)


def test_loopback_redirects_match_on_any_port_with_the_exact_path_and_scopes_are_clamped(ledger):
    server = Server()

    async def main():
        async with server.client() as http:
            client_id = await public_client(http)
            _, challenge = pkce()

            async def ask(redirect_uri, **extra):
                query = authorize_query(client_id, challenge, redirect_uri=redirect_uri, **extra)
                return await http.get("/authorize", params=query)

            other_port = await ask("http://127.0.0.1:50123/callback", scope="admin gateway:publish")
            pending_id = pending_id_of(other_port)
            kept = in_ledger(lambda: grants.pending(pending_id))
            assert kept.redirect_uri == "http://127.0.0.1:50123/callback"
            assert kept.scopes == [grants.TOOL_SCOPE]  # clamped, not refused
            assert kept.resource == RESOURCE
            no_resource = pending_id_of(await ask(CALLBACK, resource=None))
            assert in_ledger(lambda: grants.pending(no_resource)).resource == RESOURCE
            for refused in (
                "http://127.0.0.1:50123/callback/other",
                "http://127.0.0.1:50123/",
                "http://127.0.0.2.example:33418/callback",
                "https://127.0.0.1:50123/callback",
                "http://localhost:33418/callback",
            ):
                answer = await ask(refused)
                assert answer.status_code == 400 and "location" not in answer.headers, refused

    anyio.run(main)


def test_pkce_the_redirect_uri_and_the_resource_are_checked_at_token(ledger):
    server = Server()

    async def main():
        async with server.client() as http:
            client_id = await public_client(http)
            verifier, challenge = pkce()
            code = await code_for(http, client_id, challenge)
            base = {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": CALLBACK,
                "client_id": client_id,
                "code_verifier": verifier,
                "resource": RESOURCE,
            }
            wrong = [
                ({"code_verifier": pkce()[0]}, "invalid_grant"),
                ({"redirect_uri": "http://127.0.0.1:33419/callback"}, "invalid_request"),
                ({"resource": "https://other.example/mcp"}, "invalid_target"),
            ]
            for change, error in wrong:
                answer = await token(http, **{**base, **change})
                assert (answer.status_code, answer.json()["error"]) == (400, error), change
                assert "access_token" not in answer.text
            multipart = await http.post(
                "/token", files={"resource": (None, "https://other.example/mcp")}, data=base
            )
            assert multipart.json()["error"] == "invalid_request"  # form-urlencoded only
            other_client = await public_client(http)
            answer = await token(http, **{**base, "client_id": other_client})
            assert answer.json()["error"] == "invalid_grant"
            assert grant_row().revoked_at is None  # refusals before redemption revoke nothing
            good = await token(http, **base)
            assert good.status_code == 200, good.text
            assert good.headers["cache-control"] == "no-store"

    anyio.run(main)


def test_the_resource_as_clients_spell_it_signs_in_and_another_servers_is_refused(ledger):
    """Claude Code appends a slash to ``resource`` (anthropics/claude-code#52871) and a client
    that read the root metadata names the origin: both sign in, the grant keeps the
    canonical resource; another server's resource (another listener's origin, a query, another
    path) and a resource with a fragment stay ``invalid_target``."""
    server = Server()

    async def main():
        async with server.client() as http:
            client_id = await public_client(http)
            others = ("http://127.0.0.1:8766/", f"{RESOURCE}?x=1", f"{ISSUER}/other/")
            for other in (*others, f"{RESOURCE}#f"):  # RFC 8707 §2: no fragment
                _, challenge = pkce()
                query = authorize_query(client_id, challenge, resource=other)
                answer = await http.get("/authorize", params=query)
                assert answer.json()["error"] == "invalid_target", other
            verifier, challenge = pkce()
            code = await code_for(http, client_id, challenge, resource=f"{RESOURCE}/")
            form = {"client_id": client_id, "resource": f"{ISSUER}/"}
            exchange = {"code": code, "redirect_uri": CALLBACK, "code_verifier": verifier}
            first = await token(http, grant_type="authorization_code", **form, **exchange)
            assert first.status_code == 200, first.text
            refresh = first.json()["refresh_token"]
            other = await token(
                http, grant_type="refresh_token", client_id=client_id, refresh_token=refresh,
                resource="http://127.0.0.1:8766/mcp/",
            )  # fmt: skip
            assert other.json()["error"] == "invalid_target"
            second = await token(http, grant_type="refresh_token", **form, refresh_token=refresh)
            bearer = {"Authorization": f"Bearer {second.json()['access_token']}"}
            assert (await http.get("/mcp", headers=bearer)).status_code == 200

    anyio.run(main)
    assert grant_row().resource == RESOURCE  # the canonical one is stored
    below = GatewayProvider(settings(), "https://gw.example/tools", CONSENT)
    assert below.names_resource("https://gw.example/tools/mcp/")
    assert not below.names_resource("https://gw.example/")  # the origin is not only ours


def test_a_reused_code_is_refused_and_revokes_the_grant(ledger):
    server = Server()

    async def main():
        async with server.client() as http:
            client_id = await public_client(http)
            verifier, challenge = pkce()
            code = await code_for(http, client_id, challenge)
            form = {
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": CALLBACK,
                "client_id": client_id,
                "code_verifier": verifier,
            }
            first = await token(http, **form)
            assert first.status_code == 200
            again = await token(http, **form)
            assert (again.status_code, again.json()["error"]) == (400, "invalid_grant")
            bearer = {"Authorization": f"Bearer {first.json()['access_token']}"}
            assert (await http.get("/mcp", headers=bearer)).status_code == 401

    anyio.run(main)
    assert grant_row().revoked_why == "code-reused"


def test_a_refresh_rotates_and_a_reused_refresh_token_revokes_the_family(ledger):
    server = Server(oauth_refresh_grace_seconds=0)  # every reuse, as after the window

    async def main():
        async with server.client() as http:
            client_id, first = await signed_in(http)
            form = {"grant_type": "refresh_token", "client_id": client_id, "resource": RESOURCE}
            rotated = await token(http, **form, refresh_token=first["refresh_token"])
            assert rotated.status_code == 200, rotated.text
            second = rotated.json()
            assert second["refresh_token"] != first["refresh_token"]
            bearer = {"Authorization": f"Bearer {second['access_token']}"}
            assert (await http.get("/mcp", headers=bearer)).status_code == 200
            other = await token(
                http,
                grant_type="refresh_token",
                client_id=client_id,
                refresh_token=second["refresh_token"],
                resource="https://other.example/mcp",
            )
            assert other.json()["error"] == "invalid_target"  # refused before any rotation
            # the client whose answer was lost presents the used token again: the family ends
            reused = await token(http, **form, refresh_token=first["refresh_token"])
            assert (reused.status_code, reused.json()["error"]) == (400, "invalid_grant")
            assert (await http.get("/mcp", headers=bearer)).status_code == 401
            latest = await token(http, **form, refresh_token=second["refresh_token"])
            assert latest.json()["error"] == "invalid_grant"

    anyio.run(main)
    assert grant_row().revoked_why == "refresh-reused"


def test_two_nodes_refreshing_at_once_both_get_a_pair_and_the_grant_lives(ledger):
    """claude.ai's two egress nodes present the same refresh token at once
    (PrefectHQ/fastmcp#4264): within ``GATEWAY_OAUTH_REFRESH_GRACE_SECONDS`` (30 s by
    default) both answers are 200 and either pair works at /mcp."""
    server = Server()

    async def main():
        async with server.client() as http:
            client_id, first = await signed_in(http)
            form = {"grant_type": "refresh_token", "client_id": client_id, "resource": RESOURCE}
            answers = []

            async def refresh():
                answers.append(await token(http, **form, refresh_token=first["refresh_token"]))

            async with anyio.create_task_group() as nodes:
                nodes.start_soon(refresh)
                nodes.start_soon(refresh)
            assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
            for answer in answers:
                bearer = {"Authorization": f"Bearer {answer.json()['access_token']}"}
                assert (await http.get("/mcp", headers=bearer)).status_code == 200
            kept = answers[1].json()["refresh_token"]
            assert (await token(http, **form, refresh_token=kept)).status_code == 200

    anyio.run(main)
    assert grant_row().revoked_at is None


def test_revocation_by_the_client_ends_the_family(ledger):
    server = Server()

    async def main():
        async with server.client() as http:
            client_id, tokens = await signed_in(http)
            bearer = {"Authorization": f"Bearer {tokens['access_token']}"}
            assert (await http.get("/mcp", headers=bearer)).status_code == 200
            other_client = await public_client(http)
            ignored = await http.post(
                "/revoke", data={"token": tokens["access_token"], "client_id": other_client}
            )
            assert ignored.status_code == 200  # RFC 7009 §2.2, and nothing revoked
            assert (await http.get("/mcp", headers=bearer)).status_code == 200
            revoked = await http.post(
                "/revoke", data={"token": tokens["access_token"], "client_id": client_id}
            )
            assert revoked.status_code == 200
            assert (await http.get("/mcp", headers=bearer)).status_code == 401
            refresh = await token(
                http,
                grant_type="refresh_token",
                client_id=client_id,
                refresh_token=tokens["refresh_token"],
            )
            assert refresh.json()["error"] == "invalid_grant"

    anyio.run(main)
    assert grant_row().revoked_why == "client-revoked"


def test_a_token_for_another_resource_is_refused_at_mcp(ledger):
    """A grant bound to another resource (the public URL changed): its token is refused by
    ``validate_token_resource`` at ``/mcp`` and its refresh is ``invalid_target``."""
    server = Server()

    async def main():
        async with server.client() as http:
            client_id, tokens = await signed_in(http)
            in_ledger(lambda: OAuthGrant.update(resource="https://old.example/mcp").execute())
            bearer = {"Authorization": f"Bearer {tokens['access_token']}"}
            assert (await http.get("/mcp", headers=bearer)).status_code == 401
            with database.connection_context():
                assert server.provider.principal_for(tokens["access_token"], RESOURCE) is None
                assert server.provider.principal_for(tokens["access_token"]) is not None
            refresh = await token(
                http,
                grant_type="refresh_token",
                client_id=client_id,
                refresh_token=tokens["refresh_token"],
            )
            assert refresh.json()["error"] == "invalid_target"

    anyio.run(main)


def test_the_consent_redirect_carries_iss_and_a_denial_carries_access_denied(ledger):
    decision = grants.Decision("http://127.0.0.1:1/cb?x=1", None, "s")
    query = parse_qs(urlsplit(client_redirect(decision, ISSUER + "/")).query)
    assert query == {"x": ["1"], "error": ["access_denied"], "state": ["s"], "iss": [ISSUER]}


BAD_REDIRECTS = [
    "javascript:alert(1)",
    "data:text/html,hi",
    "http://evil.example/cb",
    "http://localhost.evil.example/cb",
    "https://evil.example/cb#frag",
    "https://user:pw@app.example/cb",
    "file:///etc/passwd",
]


def test_a_registration_with_a_redirect_a_browser_must_not_follow_is_refused(ledger):
    """Only https, loopback http and reverse-domain private-use schemes (OAuth 2.1 §2.3.1,
    RFC 8252 §7): a javascript:, data: or foreign http redirect would take the editor's
    browser, and the code, anywhere. Nothing is registered."""
    server = Server()
    good = ["https://app.example/cb", "http://127.0.0.1/cb", "http://[::1]:9/cb", "com.app.x:/cb"]

    async def main():
        async with server.client() as http:
            for uri in BAD_REDIRECTS:
                answer = await register(
                    http, token_endpoint_auth_method="none", redirect_uris=[uri]
                )
                assert answer.status_code == 400, (uri, answer.text)
                assert answer.json()["error"] == "invalid_redirect_uri", uri
            fine = await register(http, token_endpoint_auth_method="none", redirect_uris=good)
            assert fine.status_code == 201, fine.text

    anyio.run(main)
    assert in_ledger(lambda: OAuthClient.select().count()) == 1


def test_a_client_document_with_a_javascript_redirect_is_refused():
    url = "https://app.example/client.json"
    document = {"client_id": url, "token_endpoint_auth_method": "none"}
    for uri in BAD_REDIRECTS:
        with pytest.raises(client_documents.DocumentRefused, match="redirect_uris"):
            client_documents.check(url, {**document, "redirect_uris": [uri]})


# --------------------------------------------------------------------------- refused refreshes

#: RFC 6749 §5.2: an ``error_description`` is printable ASCII without ``"`` and ``\``.
DESCRIPTION_CHARS = re.compile(r"[\x20\x21\x23-\x5b\x5d-\x7e]+")


async def refresh(http: httpx2.AsyncClient, client_id: str, refresh_token: str, **extra):
    form = {"grant_type": "refresh_token", "client_id": client_id, "resource": RESOURCE}
    return await token(http, **form, refresh_token=refresh_token, **extra)


def refused(answer: httpx2.Response) -> str:
    """The ``error_description`` of an ``invalid_grant`` answer (checked: 400, no token, no
    store, RFC 6749's characters)."""
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert body["error"] == "invalid_grant" and "access_token" not in body, body
    assert answer.headers["cache-control"] == "no-store"
    assert DESCRIPTION_CHARS.fullmatch(body["error_description"]), body
    return body["error_description"]


def grant_of(client_id: str) -> OAuthGrant:
    return in_ledger(lambda: OAuthGrant.get(OAuthGrant.client_id == client_id))


def utc(at: dt.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def token_row(secret: str) -> OAuthToken:
    return in_ledger(lambda: OAuthToken.get(OAuthToken.token_hash == sha256_hex(secret)))


def rotated_at(refresh_token: str) -> dt.datetime:
    """When the refresh token was used (rotated), as the ledger has it."""
    return token_row(refresh_token).used_at


def test_an_expired_or_retired_refresh_token_says_so_and_when(ledger):
    """Expired: the time it expired. Retired: two refreshes of one token ran in parallel
    (claude.ai's two nodes) and the other answer's refresh token was used first; it revokes
    nothing (docs/security.md)."""
    server = Server()

    async def main():
        async with server.client() as http:
            client_id, tokens = await signed_in(http)
            row = token_row(tokens["refresh_token"])
            later = row.expires_at + dt.timedelta(seconds=1)
            server.provider.clock = lambda: later
            answer = await refresh(http, client_id, tokens["refresh_token"])
            expected = f"the refresh token expired at {utc(row.expires_at)}; sign in again"
            assert refused(answer) == expected
            server.provider.clock = db.utcnow

            client_id, first = await signed_in(http)
            forks = [await refresh(http, client_id, first["refresh_token"]) for _ in range(2)]
            assert [f.status_code for f in forks] == [200, 200]
            kept = await refresh(http, client_id, forks[0].json()["refresh_token"])
            assert kept.status_code == 200, kept.text
            retired_at = rotated_at(forks[0].json()["refresh_token"])
            said = refused(await refresh(http, client_id, forks[1].json()["refresh_token"]))
            assert said.startswith(f"the refresh token was retired at {utc(retired_at)}: "), said
            assert "refreshed twice in parallel" in said
            assert grant_of(client_id).revoked_at is None

    anyio.run(main)


def test_a_revoked_grant_says_when_and_what_kind_of_revocation(ledger):
    """An editor or administrator, the approver's access revoked, the client itself (RFC
    7009), an authorization code presented twice: each its own words, with no name in them."""
    server = Server()

    async def main():
        async with server.client() as http:
            revocations = {
                "editor": lambda grant: grants.revoke_for_tenant("acme", grant.id),
                "approver": lambda grant: grants.revoke_approved_by("acme", grant.approved_by),
            }
            for kind, revoke in revocations.items():
                client_id, tokens = await signed_in(http)
                in_ledger(lambda: revoke(grant_of(client_id)))  # noqa: B023 - called at once
                said = refused(await refresh(http, client_id, tokens["refresh_token"]))
                when = utc(grant_of(client_id).revoked_at)
                cause = {
                    "editor": "an editor or administrator of the site revoked it",
                    "approver": "the access of the editor who approved it was revoked",
                }[kind]
                assert said == f"the grant was revoked at {when}: {cause}; sign in again"
                assert "editor-1" not in said and "acme" not in said and "blog" not in said

            client_id, tokens = await signed_in(http)
            await http.post(
                "/revoke", data={"token": tokens["access_token"], "client_id": client_id}
            )
            said = refused(await refresh(http, client_id, tokens["refresh_token"]))
            assert said.endswith(
                ": the client revoked it (token revocation, RFC 7009); sign in again"
            )

            client_id = await public_client(http)
            verifier, challenge = pkce()
            form = {
                "grant_type": "authorization_code",
                "code": await code_for(http, client_id, challenge),
                "redirect_uri": CALLBACK,
                "client_id": client_id,
                "code_verifier": verifier,
            }
            first = await token(http, **form)
            assert (await token(http, **form)).status_code == 400
            said = refused(await refresh(http, client_id, first.json()["refresh_token"]))
            assert said.endswith(": its authorization code was presented twice; sign in again")

    anyio.run(main)


def test_a_reused_refresh_token_says_used_already_and_the_family_says_reuse_revoked_it(ledger):
    """The used token presented again (no grace window): "used already" (the grant is
    revoked now); the family's newest refresh token after it: revoked by reuse detection."""
    server = Server(oauth_refresh_grace_seconds=0)

    async def main():
        async with server.client() as http:
            client_id, first = await signed_in(http)
            second = (await refresh(http, client_id, first["refresh_token"])).json()
            used_at = rotated_at(first["refresh_token"])
            said = refused(await refresh(http, client_id, first["refresh_token"]))
            assert said.startswith(f"the refresh token was used already, at {utc(used_at)}: ")
            assert "reuse detection" in said
            when = utc(grant_of(client_id).revoked_at)
            said = refused(await refresh(http, client_id, second["refresh_token"]))
            assert said == (
                f"the grant was revoked at {when}: one of its refresh tokens was presented "
                "again after it had been rotated (reuse detection); sign in again"
            )

    anyio.run(main)
    assert grant_row().revoked_why == "refresh-reused"


def test_an_unknown_token_and_another_clients_answer_alike_and_the_log_says_which(ledger, caplog):
    """A caller cannot probe another client's tokens: an unknown token, another client's live
    token and another client's revoked token get the same answer, with a scope or without
    (the stand-in's scopes are the server's, not the grant's). The log names the real cause
    and the grant, never the token. The other client's live token still works after."""
    caplog.set_level(logging.INFO, logger="gateway")
    server = Server()
    scopes = (None, grants.TOOL_SCOPE, "admin")

    async def main():
        async with server.client() as http:
            owner, live = await signed_in(http)
            ended_client, ended = await signed_in(http)
            in_ledger(lambda: grants.revoke_for_tenant("acme", grant_of(ended_client).id))
            caller = await public_client(http)
            presented = {
                "unknown": secrets.token_urlsafe(32),
                "live": live["refresh_token"],
                "revoked": ended["refresh_token"],
            }
            answers = {}
            for name, refresh_token in presented.items():
                for scope in scopes:
                    answer = await refresh(http, caller, refresh_token, scope=scope)
                    answers[name, scope] = (answer.status_code, answer.json())
            for scope in scopes:
                assert answers["unknown", scope] == answers["live", scope], scope
                assert answers["unknown", scope] == answers["revoked", scope], scope
            assert answers["unknown", None][1]["error_description"] == (
                "the refresh token is not valid for this client; sign in again"
            )
            assert answers["unknown", "admin"][1]["error"] == "invalid_scope"
            assert (await refresh(http, owner, live["refresh_token"])).status_code == 200
            return owner, ended_client, [live["refresh_token"], ended["refresh_token"]]

    owner, ended_client, tokens = anyio.run(main)
    lines = [r.getMessage() for r in caplog.records if "OAuth refresh refused" in r.getMessage()]
    live_grant, ended_grant = grant_of(owner).id, grant_of(ended_client).id
    assert any(line.endswith(": an unknown refresh token") for line in lines), lines
    assert any(f"grant {live_grant}: a live refresh token of another client" in x for x in lines)
    assert any(
        f"grant {ended_grant}: a refresh token of another client, revoked at" in x for x in lines
    )
    for secret in tokens:
        assert secret not in caplog.text


def test_revoking_with_the_refresh_token_hint_still_finds_access_tokens_only_the_callers(ledger):
    """RFC 7009 with ``token_type_hint=refresh_token``: the SDK asks for a refresh token
    first, and a refused one is a stand-in: an access token is still revoked, another
    client's or an expired refresh token still revokes nothing."""
    server = Server()

    async def main():
        async with server.client() as http:
            client_id, tokens = await signed_in(http)
            other = await public_client(http)
            hint = {"token_type_hint": "refresh_token"}
            for presented, by in (
                (tokens["refresh_token"], other),
                (tokens["access_token"], other),
            ):
                await http.post("/revoke", data={"token": presented, "client_id": by, **hint})
            assert grant_of(client_id).revoked_at is None
            later = db.utcnow() + dt.timedelta(days=31)
            server.provider.clock = lambda: later
            await http.post(
                "/revoke", data={"token": tokens["refresh_token"], "client_id": client_id, **hint}
            )
            server.provider.clock = db.utcnow
            assert grant_of(client_id).revoked_at is None  # an expired token is no longer its
            answer = await http.post(
                "/revoke", data={"token": tokens["access_token"], "client_id": client_id, **hint}
            )
            assert answer.status_code == 200
            assert grant_of(client_id).revoked_why == "client-revoked"

    anyio.run(main)


def test_every_refusal_is_documented_in_the_words_it_is_said():
    """docs/mcp.md's table of refused refreshes holds each description as the token endpoint
    says it (the time written ``<time>``), and each keeps to RFC 6749 §5.2's characters."""
    written = (ROOT / "docs" / "mcp.md").read_text()
    at = dt.datetime(2026, 12, 6, 12, 0, 0)
    causes = [(c, None) for c in (oauth_tokens.EXPIRED, oauth_tokens.RETIRED, oauth_tokens.REUSED)]
    causes += [(oauth_tokens.REVOKED, why) for why in refusals.REVOKED_BY]
    said = [refusals.describe(oauth_tokens.Refusal(oauth_tokens.UNKNOWN), "c").description]
    for cause, why in causes:
        refusal = oauth_tokens.Refusal(cause, 1, "c", at, why)
        said.append(refusals.describe(refusal, "c").description)
    for description in said:
        assert DESCRIPTION_CHARS.fullmatch(description), description
        assert description.replace(utc(at), "<time>") in written, description
