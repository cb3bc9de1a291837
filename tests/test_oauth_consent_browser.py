"""The OAuth consent page (issue 43) in a real headless Chromium against a real ``gateway
serve``: the editor follows the consent link, signs in, lands back on the consent page, reads
the client's host and the scope, ticks a site, approves, and the browser follows the 303 to the
client's loopback redirect URI (RFC 8252 §7.3), served here by a tiny HTTP server, with the
code. Chromium enforces the CSP ``form-action`` on the redirect after a POST: the page must
allow the redirect's origin, or the browser stays on the gateway.

Needs Debian's ``chromium`` and ``chromium-driver`` (``scripts/setup.sh`` installs them) and
``selenium``; without them the test fails (no skip). The screenshot is kept as
``test-artifacts/review-oauth-consent.png`` (beside the review page's). About 5 s on the
project's 2-core machine, most of it starting ``gateway serve`` and Chromium.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import threading
import time
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs
from urllib.parse import urlsplit

import pytest
from servers import Server
from support import CHROMEDRIVER
from support import CHROMIUM
from support import OFFLINE_SITE
from support import ROOT
from support import TENANT
from support import chromium_driver

from gateway.ledger import db
from gateway.ledger.db import database
from gateway.tenancy import grants
from gateway.tenancy import oauth_clients
from gateway.tenancy import oauth_tokens

ARTIFACTS = ROOT / "test-artifacts"
CLIENT_ID = "https://claude.example/oauth/client.json"
VERIFIER = "w" * 64
CHALLENGE = base64.urlsafe_b64encode(hashlib.sha256(VERIFIER.encode()).digest()).rstrip(b"=")


class Receiver:
    """The client's loopback redirect URI: keeps the query of every GET of ``/callback``."""

    def __init__(self):
        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                if self.path.startswith("/callback"):  # not Chromium's /favicon.ico
                    seen.append(self.path)
                body = b"<!doctype html><title>connected</title><h1>App connected</h1>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):  # no stderr lines (they would hold the code)
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self.server.server_address[1]}/callback"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def chromium(tmp_path):
    """A headless Chromium through ``/usr/bin/chromedriver``, a fresh profile."""
    for program in (CHROMIUM, CHROMEDRIVER):
        assert Path(program).exists(), f"{program} missing: bash scripts/setup.sh installs it"
    with chromium_driver(tmp_path / "chromium-profile", window="1100,1400") as driver:
        yield driver


@pytest.fixture
def served(ledger_url, tmp_path):
    instance = Server(OFFLINE_SITE, ledger_url, tmp_path)  # no WordPress is called
    instance.start(workers=1)
    yield instance
    instance.kill()


def test_an_editor_approves_in_chromium_and_the_browser_reaches_the_loopback_redirect(
    chromium, served, ledger_url
):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    started = time.monotonic()
    editor = served._cli("tokens", "create", "--tenant", TENANT, "--role", "editor", "--name", "ed")
    editor = editor.strip().splitlines()[-1]
    receiver = Receiver()
    db.bind(ledger_url)
    try:
        with database.connection_context():
            oauth_clients.remember_document(
                CLIENT_ID,
                {"client_id": CLIENT_ID, "client_name": "Claude", "redirect_uris": [receiver.uri]},
                dt.timedelta(minutes=5),
            )
            pending_id = grants.open_pending(
                CLIENT_ID,
                receiver.uri,
                True,
                CHALLENGE.decode(),
                served.url + "/mcp",
                ["gateway:tools"],
                "browser-state",
                dt.timedelta(minutes=15),
            )

        chromium.get(f"{served.url}/review/oauth?request={pending_id}")
        assert chromium.current_url == served.url + "/review/login"  # the id left the URL
        chromium.find_element(By.ID, "token").send_keys(editor)
        chromium.find_element(By.ID, "sign-in").click()
        WebDriverWait(chromium, 30).until(lambda d: d.find_elements(By.ID, "consent"))
        assert chromium.current_url == served.url + "/review/oauth"
        text = chromium.find_element(By.TAG_NAME, "main").text
        assert "claude.example" in text and "verified" in text
        assert "gateway:tools" in text and "write drafts" in text and "publish" in text
        assert "an app on this computer" in text and pending_id not in chromium.page_source
        chromium.find_element(By.CSS_SELECTOR, "input.site[value='blog']").click()
        ARTIFACTS.mkdir(exist_ok=True)
        chromium.save_screenshot(str(ARTIFACTS / "review-oauth-consent.png"))
        chromium.find_element(By.ID, "approve").click()
        WebDriverWait(chromium, 30).until(lambda d: receiver.seen)
        WebDriverWait(chromium, 30).until(lambda d: d.current_url.startswith(receiver.uri))

        (path,) = receiver.seen
        query = parse_qs(urlsplit(path).query)
        assert query["state"] == ["browser-state"] and query["iss"] == [served.url]
        with database.connection_context():
            view = oauth_tokens.code_view(query["code"][0])
            assert (view.client_id, view.redirect_uri) == (CLIENT_ID, receiver.uri)
            issued = oauth_tokens.redeem_code(
                query["code"][0],
                oauth_tokens.Lifetimes(dt.timedelta(minutes=5), dt.timedelta(days=1)),
            )
            seen = oauth_tokens.access(issued.access_token)
            assert (seen.tenant, seen.sites) == (TENANT, frozenset({"blog"}))
        log = "".join(p.read_text(errors="replace") for p in served.workdir.glob("serve-*.log"))
        assert pending_id not in log and query["code"][0] not in log
    finally:
        receiver.close()
        db.close_all()
    print(f"consent in Chromium: {time.monotonic() - started:.1f} s")
