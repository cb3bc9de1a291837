"""The REST client's network path (issue 32, item 3): requests' adapter pool, urllib3 underneath,
no retry at the pool, errors classified by exception type, the environment's proxy and CA
settings kept.

Each failure class goes through the real fault proxy in front of the real test WordPress: a
refused connection and a connect timeout are definite (nothing sent: ``sent`` False, nothing
created), a reset after sending and a read timeout are UNKNOWN (the write happened, once).
"""

from __future__ import annotations

import socketserver
import threading
import uuid
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st
from support import draft_body
from support import new_job_id
from support import problem_slug
from support import serve_tls

from gateway.wordpress import client as client_module
from gateway.wordpress import http_session
from gateway.wordpress.client import WordPressClient
from gateway.wordpress.errors import WordPressOutcomeUnknown
from gateway.wordpress.errors import WordPressUnavailable
from gateway_tools.fault_proxy import Fault
from gateway_tools.fault_proxy import FaultProxy

POSTS = r"^/wp-json/wp/v2/posts/?$"
TIMEOUT = 1.0  # seconds per call in the client-level tests


def _client(wp_site: dict, url: str, timeout: float = TIMEOUT) -> WordPressClient:
    author = wp_site["users"]["author"]
    return WordPressClient(url, author["username"], author["app_password"], timeout=timeout)


def _titled(wp_site: dict, title: str) -> list[int]:
    """Ids of the posts WordPress holds with exactly ``title`` (asked directly, no proxy)."""
    found = _client(wp_site, wp_site["url"], timeout=30).find_posts_by_title(title)
    return [p["id"] for p in found if p["title"]["raw"] == title]


def _title() -> str:
    return f"Network {uuid.uuid4().hex[:12]}"


@pytest.fixture
def fresh_sessions(monkeypatch):
    """This thread starts without kept sessions (each caches the environment per host)."""
    monkeypatch.setattr(client_module._local, "sessions", {}, raising=False)


# --------------------------------------------------------------------------- failure classes


@pytest.mark.wordpress
def test_connection_refused_is_definite_and_nothing_is_sent(wp_site):
    proxy = FaultProxy(upstream=wp_site["url"]).start()
    url = proxy.url
    proxy.stop()  # nothing listens on the port any more
    title = _title()
    with pytest.raises(WordPressUnavailable) as raised:
        _client(wp_site, url).create_post({"title": title, "status": "draft"})
    error = raised.value
    assert (error.sent, error.origin, error.message) == (False, "network", "connection refused")
    assert proxy.requests == [] and _titled(wp_site, title) == []


@pytest.mark.wordpress
def test_connect_timeout_is_definite_and_nothing_is_sent(wp_site, proxy):
    title = _title()
    # The reads before and after take 60 s if they need it (a loaded machine: 5 s timed out
    # on CI); the write's client gives up on the connect that nothing answers after 5 s.
    # Both share the process's one session per site and user (its keep-alive pool).
    reader = _client(wp_site, proxy.url, timeout=60)
    client = _client(wp_site, proxy.url, timeout=5)
    assert reader.me()["id"]  # a kept-alive connection the proxy then closes
    with proxy.unanswered_connects(), pytest.raises(WordPressUnavailable) as raised:
        client.create_post({"title": title, "status": "draft"})
    error = raised.value
    assert (error.sent, error.origin) == (False, "network")
    assert error.message.startswith("connect timeout: ")
    assert proxy.count(method="POST") == 0 and _titled(wp_site, title) == []
    assert reader.me()["id"]  # the proxy serves again afterwards


@pytest.mark.wordpress
def test_reset_after_sending_is_unknown_and_the_pool_does_not_resend(wp_site, proxy):
    title = _title()
    client = _client(wp_site, proxy.url, timeout=30)
    assert client.me()["id"]  # the write then goes over a reused keep-alive connection
    proxy.add_fault(Fault(kind="drop_response", method="POST", path=POSTS))
    with pytest.raises(WordPressOutcomeUnknown) as raised:
        client.create_post({"title": title, "status": "draft"})
    error = raised.value
    assert not isinstance(error, WordPressUnavailable)
    assert (error.sent, error.origin, error.definite) == (True, "network", False)
    assert error.message.startswith("connection lost: ")
    assert proxy.count(method="POST", path=POSTS) == 1  # sent once, never again by the pool
    assert len(_titled(wp_site, title)) == 1  # WordPress did create it


@pytest.mark.wordpress
def test_read_timeout_is_unknown_and_sent_once(wp_site, proxy):
    title = _title()
    proxy.add_fault(Fault(kind="delay", method="POST", path=POSTS, seconds=TIMEOUT + 1.5))
    with pytest.raises(WordPressOutcomeUnknown) as raised:
        _client(wp_site, proxy.url).create_post({"title": title, "status": "draft"})
    error = raised.value
    assert not isinstance(error, WordPressUnavailable)
    assert (error.sent, error.origin, error.message) == (True, "network", "read timeout")
    assert proxy.count(method="POST", path=POSTS, forwarded=True) == 1
    assert len(_titled(wp_site, title)) == 1


def test_a_host_name_without_address_is_definite_and_names_the_host(wp_site):
    """``.invalid`` never resolves (RFC 6761): urllib3's ``NameResolutionError``."""
    with pytest.raises(WordPressUnavailable) as raised:
        _client(wp_site, "http://gateway-test.invalid").create_post({"title": _title()})
    assert (raised.value.sent, raised.value.origin) == (False, "network")
    assert "cannot resolve the host name 'gateway-test.invalid'" in raised.value.message


class _CutShort(socketserver.StreamRequestHandler):
    """Answers any request with a 200 whose body ends long before its ``Content-Length``."""

    def handle(self):
        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            b'{"id": '
        )


def test_a_body_cut_short_is_unknown(wp_site):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _CutShort)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = _client(wp_site, f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(WordPressOutcomeUnknown) as raised:
            client.create_post({"title": _title()})
    finally:
        server.shutdown()
        server.server_close()
    assert (raised.value.sent, raised.value.origin) == (True, "network")
    assert raised.value.message.startswith("connection lost: ")


def test_the_adapters_never_retry():
    """urllib3 makes one attempt: no new connection after a failed one, no resend after a
    reset or timeout (requests' ``HTTPAdapter`` default, stated in ``http_session``)."""
    session = http_session.Session()
    for url in ("http://example.test/", "https://example.test/"):
        retries = session.get_adapter(url).max_retries
        assert (retries.total, retries.connect, retries.read) == (0, None, False)


# --------------------------------------------------------------------------- through the gateway


@pytest.mark.wordpress
def test_a_connect_timeout_leaves_the_row_prepared_and_the_next_request_sends(gwp, proxy):
    """Not sent: 503 ``wordpress-unavailable`` with the row back to PREPARED, and the next
    identical request creates the post at once (no reconciliation, no in-flight wait)."""
    # the connect timeout is the point: GATEWAY_WP_TIMEOUT shortened for this test only
    gwp.app.config["GATEWAY"] = gwp.app.config["GATEWAY"].with_overrides(wp_timeout=5.0)
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    body = draft_body(title=f"Stalled {job_id}")
    with proxy.unanswered_connects():
        first = gwp.put_draft(job_id, body)
    assert first.status_code == 503 and problem_slug(first) == "wordpress-unavailable"
    assert first.get_json()["ledger_state"] == "PREPARED", first.get_json()
    assert proxy.count(method="POST", path=POSTS) == 0
    again = gwp.put_draft(job_id, body)
    assert again.status_code == 201, again.get_json()
    assert proxy.count(method="POST", path=POSTS) == 1
    assert [p["id"] for p in gwp.posts_titled(body["title"])] == [again.get_json()["post_id"]]


# --------------------------------------------------------------------------- environment


@pytest.mark.wordpress
def test_the_environments_http_proxy_is_used_and_no_proxy_bypasses_it(
    wp_site, proxy, monkeypatch, fresh_sessions
):
    """``HTTP_PROXY`` (read once per host by ``http_session``) sends the call through the
    fault proxy as a forward proxy; ``NO_PROXY`` naming the host goes straight to WordPress."""
    for name in ("NO_PROXY", "no_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    client = _client(wp_site, wp_site["url"], timeout=30)
    assert client.me()["id"]
    assert proxy.count(method="GET", path=r"^/wp-json/wp/v2/users/me$") == 1

    client_module._local.sessions = {}
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert client.me()["id"]
    assert proxy.count(method="GET") == 1  # not through the proxy this time


class _Me(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"id": 7, "name": "tls"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def tls_site(tmp_path):
    """An HTTPS server with a self-signed certificate for ``localhost``: (URL, cert path)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Me)
    cert = serve_tls(server, tmp_path)
    yield f"https://localhost:{server.server_address[1]}", cert
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("variable", ["REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"])
def test_the_environments_ca_bundle_verifies_the_site(
    tls_site, monkeypatch, fresh_sessions, variable
):
    url, cert = tls_site
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    client = WordPressClient(url, "author", "secret", timeout=5)
    with pytest.raises(WordPressOutcomeUnknown) as raised:  # the certificate is not trusted
        client.me()
    assert isinstance(raised.value.__cause__, requests.exceptions.SSLError)

    client_module._local.sessions = {}
    monkeypatch.setenv(variable, cert)
    assert client.me() == {"id": 7, "name": "tls"}


# --------------------------------------------------------------------------- the query string

_values = st.one_of(
    st.none(), st.text(max_size=12), st.integers(), st.booleans(), st.binary(max_size=6)
)


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=10),
        st.one_of(_values, st.lists(_values, max_size=3)),
        max_size=5,
    )
)
def test_query_string_is_the_one_requests_writes(params):
    ours = requests.PreparedRequest()
    query = http_session.query_string(params)
    ours.prepare_url("http://h.test/wp-json/wp/v2/posts" + (f"?{query}" if query else ""), None)
    theirs = requests.PreparedRequest()
    theirs.prepare_url("http://h.test/wp-json/wp/v2/posts", params)
    assert ours.url == theirs.url
