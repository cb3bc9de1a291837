"""The editor's consent page for MCP clients signing in with OAuth (issue 43), driven by Flask's
test client as a browser would: the pending id leaves the URL into the session and survives the
sign-in, the first editor who opens a request is the only one who can decide it, the approve
redirect carries a code the token endpoint accepts, and a request that cannot be decided is an
error page, never a redirect. Grants are listed and revoked on the page and with ``gateway
tokens``. Requests and clients are made directly in the ledger (``/authorize`` is the
provider's, tested with it).

The headless-Chromium run of the same page is ``test_oauth_consent_browser.py``."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import logging
import re
from urllib.parse import parse_qs
from urllib.parse import urlsplit

from markupsafe import escape as html_escape
from support import SECRET_KEY
from support import TENANT
from support import all_ledger_rows
from support import gateway_cli

from gateway.ledger.db import database
from gateway.ledger.db import utcnow
from gateway.ledger.oauth_models import OAuthGrant
from gateway.oauth import consent
from gateway.tenancy import grants
from gateway.tenancy import oauth_clients
from gateway.tenancy import oauth_tokens
from gateway.tenancy import sites

CLIENT_ID = "https://claude.example/oauth/client.json"
REDIRECT = "http://127.0.0.1:45678/callback"
RESOURCE = "http://localhost/mcp"
VERIFIER = "v" * 64
CHALLENGE = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).rstrip(b"=")
LIFETIMES = oauth_tokens.Lifetimes(access=dt.timedelta(minutes=10), refresh=dt.timedelta(days=1))


def _csrf(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def _form_of(html: str) -> dict:
    """The hidden fields a page's form posts: the CSRF token, and the consent page's name
    for the request it shows when the page is one."""
    shown = re.search(r'name="request_ref" value="([^"]+)"', html)
    return {"csrf_token": _csrf(html), **({"request_ref": shown.group(1)} if shown else {})}


class Browser:
    """A Flask test client that keeps every response it got (status, headers, body)."""

    def __init__(self, app):
        self.client = app.test_client()
        self.seen: list[str] = []

    def _keep(self, answer):
        headers = "\n".join(f"{k}: {v}" for k, v in answer.headers.items())
        self.seen.append(f"{answer.status}\n{headers}\n\n{answer.get_data(as_text=True)}")
        return answer

    def get(self, path: str):
        return self._keep(self.client.get(path))

    def post(self, path: str, data: dict, page: str = "/review/oauth"):
        form = {**data, **_form_of(self.client.get(page).get_data(as_text=True))}
        return self._keep(self.client.post(path, data=form))

    def sign_in(self, token: str):
        return self.post("/review/login", {"token": token}, page="/review/login")


def _client(app, name: str = "Claude", redirect: str = REDIRECT, dynamic: bool = False) -> str:
    with app.app_context(), database.connection_context():
        metadata = {
            "client_name": name,
            "redirect_uris": [redirect],
            "logo_uri": "https://logo.example/logo.png",
        }
        if dynamic:
            return oauth_clients.register(metadata, dt.timedelta(hours=24))
        oauth_clients.remember_document(
            CLIENT_ID, {**metadata, "client_id": CLIENT_ID}, dt.timedelta(minutes=5)
        )
        return CLIENT_ID


def _pending(app, client_id: str = CLIENT_ID, redirect: str = REDIRECT, minutes: float = 15, ago=0):
    with app.app_context(), database.connection_context():
        return grants.open_pending(
            client_id,
            redirect,
            True,
            CHALLENGE.decode(),
            RESOURCE,
            ["gateway:tools"],
            "state-1",
            dt.timedelta(minutes=minutes),
            now=utcnow() - dt.timedelta(minutes=ago),
        )


def _second_site(offline_gw, tenant: str, name: str) -> None:
    with offline_gw.app.app_context(), database.connection_context():
        sites.add_site(SECRET_KEY, tenant, name, "http://127.0.0.1:9", "author", "x" * 24)


def _consent(app, editor: str, pending_id: str) -> tuple[Browser, str]:
    """An editor follows the consent link before signing in: the id leaves the URL, the
    sign-in lands back on the consent page. Returns the browser and the page's HTML."""
    browser = Browser(app)
    first = browser.get(f"/review/oauth?request={pending_id}")
    assert first.status_code == 303 and first.headers["Location"] == "/review/oauth"
    assert browser.get("/review/oauth").headers["Location"] == "/review/login"
    signed_in = browser.sign_in(editor)
    assert signed_in.status_code == 303 and signed_in.headers["Location"] == "/review/oauth"
    page = browser.get("/review/oauth")
    assert page.status_code == 200, page.get_data(as_text=True)
    return browser, page.get_data(as_text=True)


def test_an_editor_approves_and_the_client_gets_a_code_the_token_endpoint_accepts(
    offline_gw, caplog
):
    caplog.set_level(logging.DEBUG)
    _second_site(offline_gw, TENANT, "shop")
    _client(offline_gw.app, name="Claude\u202e edoc\u200b\n Desktop")
    pending_id = _pending(offline_gw.app)
    browser, html = _consent(offline_gw.app, offline_gw.make_token("editor"), pending_id)
    page = browser.seen[-1]
    assert "claude.example" in html and "verified" in html
    assert "an app on this computer (port 45678)" in html
    assert "Claude edoc Desktop" in html and "\u202e" not in html and "\u200b" not in html
    for words in (*consent.CAN, *consent.CANNOT, "gateway:tools", "blog", "shop"):
        assert str(html_escape(words)) in html, words
    assert "logo.example" not in html and "<img" not in html  # never the client's logo
    policy = page.split("Content-Security-Policy: ", 1)[1].split("\n", 1)[0]
    assert "form-action 'self' http://127.0.0.1:45678;" in policy
    assert "img-src 'self' data:;" in policy  # unchanged

    approved = browser.post("/review/oauth/approve", {"sites": ["blog"]})
    approved_seen = browser.seen[-1]
    assert approved.status_code == 303
    location = approved.headers["Location"]
    assert location.startswith(REDIRECT + "?")
    query = parse_qs(urlsplit(location).query)
    assert query["state"] == ["state-1"] and query["iss"] == ["http://localhost"]
    assert "http://127.0.0.1:45678" in approved.headers["Content-Security-Policy"]
    code = query["code"][0]
    with offline_gw.app.app_context(), database.connection_context():
        view = oauth_tokens.code_view(code)
        assert (view.client_id, view.redirect_uri, view.resource) == (CLIENT_ID, REDIRECT, RESOURCE)
        assert view.code_challenge == CHALLENGE.decode()
        grant = OAuthGrant.get()
        assert (grant.tenant, grant.sites, grant.approved_by) == (TENANT, ["blog"], "test-editor")
        assert grant.client_name == "Claude edoc Desktop"
        assert oauth_clients.known(CLIENT_ID).last_used_at is not None
        rows = all_ledger_rows()
    assert pending_id not in rows and code not in rows

    # decided: the same link, or the page again, is an error page, never a redirect
    again = browser.get(f"/review/oauth?request={pending_id}")
    assert again.headers["Location"] == "/review/oauth"
    gone = browser.get("/review/oauth")
    assert gone.status_code == 404 and "Location" not in gone.headers
    assert "already decided" in gone.get_data(as_text=True)
    late = browser.post("/review/oauth/approve", {"sites": ["blog"]}, page="/review")
    assert late.status_code == 404 and "Location" not in late.headers

    # the pending id: in no log line, no response (its own first URL aside); the code only
    # in the approve response's Location
    assert pending_id not in caplog.text and code not in caplog.text
    for seen in browser.seen:
        assert pending_id not in seen
    assert [s for s in browser.seen if code in s] == [approved_seen]


def test_another_editor_a_workflow_token_and_an_admin_cannot_decide_a_claimed_request(
    offline_gw,
):
    _second_site(offline_gw, "rival", "rivalblog")
    _client(offline_gw.app)
    pending_id = _pending(offline_gw.app)
    app = offline_gw.app

    # an admin signs in but may not open it (and so claims nothing)
    admin = Browser(app)
    admin.get(f"/review/oauth?request={pending_id}")
    assert admin.sign_in(offline_gw.make_token("admin")).headers["Location"] == "/review/oauth"
    assert admin.get("/review/oauth").status_code == 403

    # a workflow token cannot sign in at all
    workflow = Browser(app)
    workflow.get(f"/review/oauth?request={pending_id}")
    assert workflow.sign_in(offline_gw.token).status_code == 403
    assert workflow.get("/review/oauth").headers["Location"] == "/review/login"

    # the first editor claims it
    first, html = _consent(app, offline_gw.make_token("editor"), pending_id)
    assert "claude.example" in html

    # another tenant's editor, and another editor of this tenant: an error page, no redirect
    for tenant in ("rival", TENANT):
        other, _ = Browser(app), None
        other.get(f"/review/oauth?request={pending_id}")
        other.sign_in(offline_gw.make_token("editor", tenant=tenant))
        refused = other.get("/review/oauth")
        assert refused.status_code == 404 and "Location" not in refused.headers
        for path in ("/review/oauth/approve", "/review/oauth/deny"):
            answer = other.post(path, {"sites": ["rivalblog", "blog"]}, page="/review")
            assert answer.status_code == 404 and "Location" not in answer.headers
    with app.app_context(), database.connection_context():
        assert OAuthGrant.select().count() == 0
        assert grants.pending(pending_id) is not None  # still the first editor's to decide
    assert first.post("/review/oauth/approve", {"sites": ["blog"]}).status_code == 303


def test_a_request_swapped_into_the_session_while_the_page_is_open_is_refused(offline_gw):
    """The security review's finding: with the consent page open, one top-level navigation
    to ``/review/oauth?request=<theirs>`` (the cookie is ``SameSite=Lax``) swapped the held
    request, and Approve sent the code to the attacker's redirect. The form names the
    request it shows; the swapped one is refused and nothing is granted."""
    app = offline_gw.app
    _client(app)
    mine = _pending(app)
    evil_client = _client(app, "Evil", redirect="https://attacker.example/cb", dynamic=True)
    theirs = _pending(app, client_id=evil_client, redirect="https://attacker.example/cb")
    browser, html = _consent(app, offline_gw.make_token("editor"), mine)
    assert browser.get(f"/review/oauth?request={theirs}").status_code == 303  # the navigation
    assert browser.get("/review/oauth").status_code == 200
    statuses = []
    for path in ("/review/oauth/approve", "/review/oauth/deny"):
        answer = browser.client.post(path, data={"sites": ["blog"], **_form_of(html)})
        assert "Location" not in answer.headers, answer.headers["Location"]
        statuses.append(answer.status_code)
    assert statuses == [409, 404]  # the refusal dropped the swapped request from the session
    with app.app_context(), database.connection_context():
        assert OAuthGrant.select().count() == 0
        assert grants.pending(theirs) is not None and grants.pending(mine) is not None


def test_only_the_tenants_own_sites_and_at_least_one(offline_gw):
    _second_site(offline_gw, "rival", "rivalblog")
    _client(offline_gw.app)
    pending_id = _pending(offline_gw.app)
    browser, html = _consent(offline_gw.app, offline_gw.make_token("editor"), pending_id)
    assert "rivalblog" not in html
    for chosen in ([], ["rivalblog"], ["blog", "rivalblog"], ["nope"]):
        answer = browser.post("/review/oauth/approve", {"sites": chosen})
        assert answer.headers["Location"] == "/review/oauth", chosen  # back to the page
        assert "Tick at least one of this tenant" in browser.get("/review/oauth").get_data(
            as_text=True
        )
    with offline_gw.app.app_context(), database.connection_context():
        assert OAuthGrant.select().count() == 0
    assert browser.post("/review/oauth/approve", {"sites": ["blog"]}).status_code == 303


def test_deny_redirects_with_access_denied_and_an_expired_request_is_an_error_page(offline_gw):
    client_id = _client(
        offline_gw.app, name="Some tool", dynamic=True, redirect="https://x.example/cb?k=1"
    )
    pending_id = _pending(offline_gw.app, client_id=client_id, redirect="https://x.example/cb?k=1")
    editor = offline_gw.make_token("editor")
    browser, html = _consent(offline_gw.app, editor, pending_id)
    assert consent.UNVERIFIED in html and "cannot be checked" in html and "x.example" in html
    denied = browser.post("/review/oauth/deny", {})
    query = parse_qs(urlsplit(denied.headers["Location"]).query)
    assert denied.status_code == 303 and denied.headers["Location"].startswith(
        "https://x.example/cb?k=1&"
    )
    assert query["error"] == ["access_denied"] and query["state"] == ["state-1"]
    assert "code" not in query
    assert "form-action 'self' https://x.example;" in denied.headers["Content-Security-Policy"]
    assert browser.get("/review/oauth").status_code == 404

    _client(offline_gw.app)
    expired = _pending(offline_gw.app, minutes=15, ago=16)
    late = Browser(offline_gw.app)
    late.get(f"/review/oauth?request={expired}")
    late.sign_in(editor)
    page = late.get("/review/oauth")
    assert page.status_code == 404 and "Location" not in page.headers
    unknown = Browser(offline_gw.app)
    unknown.get("/review/oauth?request=not-a-request")
    unknown.sign_in(editor)
    assert unknown.get("/review/oauth").status_code == 404
    assert unknown.get("/review/oauth").status_code == 404  # nothing held any more


def test_a_foreign_host_redirect_is_flagged(offline_gw):
    _client(offline_gw.app, redirect="https://elsewhere.example/cb")
    pending_id = _pending(offline_gw.app, redirect="https://elsewhere.example/cb")
    _browser, html = _consent(offline_gw.app, offline_gw.make_token("editor"), pending_id)
    assert "elsewhere.example" in html and "not the app's host" in html


def _access_token(offline_gw, pending_id: str) -> tuple[int, str]:
    browser, _html = _consent(offline_gw.app, offline_gw.make_token("editor"), pending_id)
    answer = browser.post("/review/oauth/approve", {"sites": ["blog"]})
    code = parse_qs(urlsplit(answer.headers["Location"]).query)["code"][0]
    with offline_gw.app.app_context(), database.connection_context():
        issued = oauth_tokens.redeem_code(code, LIFETIMES)
        assert oauth_tokens.access(issued.access_token) is not None
    return issued.grant_id, issued.access_token


def test_the_review_page_lists_grants_and_revoking_one_refuses_its_next_call(offline_gw):
    _client(offline_gw.app)
    grant_id, access = _access_token(offline_gw, _pending(offline_gw.app))
    editor = Browser(offline_gw.app)
    editor.sign_in(offline_gw.make_token("editor"))
    html = editor.get("/review").get_data(as_text=True)
    listed = html.split('id="grants"', 1)[1]
    assert f"#{grant_id}" in listed and "Claude" in listed and "claude.example" in listed
    assert "blog" in listed and access not in html
    # another tenant's editor revokes nothing
    rival = Browser(offline_gw.app)
    rival.sign_in(offline_gw.make_token("editor", tenant="rival"))
    assert 'id="grants"' not in rival.get("/review").get_data(as_text=True)
    answer = rival.post(f"/review/oauth/grants/{grant_id}/revoke", {}, page="/review")
    assert answer.status_code == 303
    with offline_gw.app.app_context(), database.connection_context():
        assert oauth_tokens.access(access) is not None
    # without the CSRF token: refused
    refused = editor.client.post(f"/review/oauth/grants/{grant_id}/revoke")
    assert refused.status_code == 400
    answer = editor.post(f"/review/oauth/grants/{grant_id}/revoke", {}, page="/review")
    assert answer.status_code == 303
    with offline_gw.app.app_context(), database.connection_context():
        assert oauth_tokens.access(access) is None
    assert "revoked" in editor.get("/review").get_data(as_text=True).split('id="grants"', 1)[1]


def test_gateway_tokens_lists_grants_and_revokes_one(offline_gw, ledger_url):
    _client(offline_gw.app)
    grant_id, access = _access_token(offline_gw, _pending(offline_gw.app))
    env = {"GATEWAY_DATABASE_URL": ledger_url}
    listed = gateway_cli(["tokens", "list", "--tenant", TENANT], env)
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert {r["kind"] for r in rows} == {"token", "grant"}
    (grant,) = [r for r in rows if r["kind"] == "grant"]
    assert grant["grant_id"] == grant_id and grant["tenant"] == TENANT
    assert (grant["client_name"], grant["client_host"]) == ("Claude", "claude.example")
    assert grant["client_id"] == CLIENT_ID  # two apps of one name differ by it
    assert grant["sites"] == ["blog"] and grant["approved_by"] == "test-editor"
    assert grant["last_used_at"] and grant["revoked_at"] is None
    assert access not in listed.stdout and "hash" not in listed.stdout

    wrong = gateway_cli(["tokens", "revoke", "--tenant", "rival", "--grant", str(grant_id)], env)
    assert wrong.exit_code == 2  # rival is no tenant here: nothing revoked
    both = gateway_cli(["tokens", "revoke", "--tenant", TENANT, "--name", "x", "--grant", "1"], env)
    assert both.exit_code == 2 and "exactly one" in both.output
    missing = gateway_cli(["tokens", "revoke", "--tenant", TENANT, "--grant", "999"], env)
    assert missing.exit_code == 2 and "no OAuth grant 999" in missing.output
    done = gateway_cli(["tokens", "revoke", "--tenant", TENANT, "--grant", str(grant_id)], env)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"tenant": TENANT, "grant": grant_id, "revoked": 1}
    with offline_gw.app.app_context(), database.connection_context():
        assert oauth_tokens.access(access) is None
    rows = json.loads(gateway_cli(["tokens", "list"], env).stdout)
    assert [r["revoked_at"] is not None for r in rows if r["kind"] == "grant"] == [True]


def test_revoking_an_editors_token_revokes_the_grants_they_approved(offline_gw, ledger_url):
    """The security review: the grant an editor approved kept working after their token was
    revoked. Now it ends with the token, and ``gateway tokens revoke`` names it."""
    _client(offline_gw.app)
    grant_id, access = _access_token(offline_gw, _pending(offline_gw.app))
    env = {"GATEWAY_DATABASE_URL": ledger_url}
    done = gateway_cli(["tokens", "revoke", "--tenant", TENANT, "--name", "test-editor"], env)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["grants"] == [grant_id]
    with offline_gw.app.app_context(), database.connection_context():
        assert oauth_tokens.access(access) is None
        assert OAuthGrant.get_by_id(grant_id).revoked_why == "approver-revoked"


def test_what_the_page_says_of_hosts_names_and_redirects():
    assert consent.clean_name("a\u202eb\u2066c\u200fd\x07e\u2028f") == "abcde f"
    assert consent.clean_name("x" * 200) == "x" * 79 + "…"
    assert consent.clean_name(None) == consent.clean_name(" \u200b ") == "(no name)"
    assert consent.client_host("https://App.Example:8443/c.json") == "app.example:8443"
    assert consent.client_host("https://пример.example/c.json") == "xn--e1afmkfd.example"
    assert consent.client_host("dcr-abc") is None
    same = consent.describe(CLIENT_ID, {}, "https://claude.example/api/cb")
    assert (same.redirect_kind, same.redirect_flagged) == ("same", False)
    other = consent.describe(CLIENT_ID, {}, "https://claude.example.evil/cb")
    assert (other.redirect_kind, other.redirect_flagged) == ("other", True)
    for loopback in ("http://127.0.0.1:1/cb", "http://[::1]:2/cb", "http://localhost:3/cb"):
        assert consent.describe(CLIENT_ID, {}, loopback).redirect_kind == "loopback"
    app_link = consent.describe(CLIENT_ID, {}, "com.example.app:/cb")
    assert (app_link.redirect_host, app_link.redirect_flagged) == (
        "an app's own link (com.example.app:)",
        True,
    )
    assert consent.redirect_origin("http://[::1]:2/cb") == "http://[::1]:2"
    assert consent.redirect_origin("https://u:p@a.example/cb") == "https://a.example"
    assert consent.redirect_origin("com.example.app:/cb") == "com.example.app:"
    sealed = consent.seal("key", "the-id")
    assert "the-id" not in sealed and consent.unseal("key", sealed, 60) == "the-id"
    assert consent.unseal("other-key", sealed, 60) is None and consent.unseal("key", 5, 60) is None
