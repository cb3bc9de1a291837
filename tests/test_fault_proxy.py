"""Tests for gateway_tools.fault_proxy against a tiny local upstream (not WordPress)."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import field
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from gateway_tools.fault_proxy import PHP_NOTICE
from gateway_tools.fault_proxy import Fault
from gateway_tools.fault_proxy import FaultProxy

POSTS = r"^/wp-json/wp/v2/posts/?$"
GZIP_BODY = gzip.compress(b'{"compressed": true}' * 50)


@dataclass
class Received:
    """One request as seen by the upstream server."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Upstream:
    """Handle on the running fake upstream."""

    url: str
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def got(self, method: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.method == method]


def _make_handler(upstream: Upstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _record(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            with upstream.lock:
                upstream.received.append(
                    Received(self.command, self.path, dict(self.headers.items()), body)
                )
            return body

        def _send(self, status: int, body: bytes, headers: list[tuple[str, str]]) -> None:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_POST(self) -> None:
            body = self._record()
            with upstream.lock:
                post_id = sum(1 for r in upstream.received if r.method == "POST")
            payload = {"id": post_id, "received": body.decode("utf-8", "replace")}
            self._send(
                201,
                json.dumps(payload).encode(),
                [
                    ("Content-Type", "application/json; charset=UTF-8"),
                    ("Location", f"/wp-json/wp/v2/posts/{post_id}"),
                ],
            )

        def do_GET(self) -> None:
            self._record()
            json_type = ("Content-Type", "application/json; charset=UTF-8")
            if self.path == "/redirect":
                self._send(302, b"", [("Location", "/elsewhere")])
            elif self.path == "/gzip":
                self._send(200, GZIP_BODY, [json_type, ("Content-Encoding", "gzip")])
            elif self.path == "/cookies":
                self._send(200, b"{}", [json_type, ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")])
            elif self.path == "/chunked":
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for part in (b"hello ", b"chunked ", b"world"):
                    self.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            else:
                self._send(200, b'[{"id": 1}]', [json_type])

        do_HEAD = do_GET

    return Handler


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    handle = Upstream(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(handle))
    server.daemon_threads = True
    handle.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield handle
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def proxy(upstream: Upstream) -> Iterator[FaultProxy]:
    with FaultProxy(upstream=upstream.url, timeout=10) as running:
        yield running


def post(proxy: FaultProxy, timeout: float = 5) -> requests.Response:
    """POST a post to the proxy like a client creating a WordPress post would."""
    return requests.post(
        f"{proxy.url}/wp-json/wp/v2/posts", json={"title": "hello"}, timeout=timeout
    )


# --------------------------------------------------------------------------- pass-through


def test_pass_through_forwards_request_and_response(proxy: FaultProxy, upstream: Upstream) -> None:
    resp = requests.post(
        f"{proxy.url}/wp-json/wp/v2/posts?context=edit",
        json={"title": "hello"},
        headers={"Authorization": "Basic dTpw", "X-Custom": "yes"},
        timeout=5,
    )
    assert resp.status_code == 201
    assert resp.json()["id"] == 1
    assert resp.headers["Location"] == "/wp-json/wp/v2/posts/1"
    assert resp.headers["Content-Type"] == "application/json; charset=UTF-8"
    [got] = upstream.got("POST")
    assert got.path == "/wp-json/wp/v2/posts?context=edit"
    assert json.loads(got.body) == {"title": "hello"}
    assert got.headers["Authorization"] == "Basic dTpw"
    assert got.headers["X-Custom"] == "yes"
    assert got.headers["Host"] == upstream.url.removeprefix("http://")
    [rec] = proxy.requests
    assert (rec.method, rec.path, rec.query) == ("POST", "/wp-json/wp/v2/posts", "context=edit")
    assert (rec.status, rec.fault_kind, rec.forwarded) == (201, None, True)
    assert rec.time == pytest.approx(time.time(), abs=5)


def test_redirects_are_not_followed(proxy: FaultProxy, upstream: Upstream) -> None:
    resp = requests.get(f"{proxy.url}/redirect", allow_redirects=False, timeout=5)
    assert resp.status_code == 302
    assert resp.headers["Location"] == "/elsewhere"
    assert [r.path for r in upstream.got("GET")] == ["/redirect"]


def test_encoded_body_is_forwarded_raw(proxy: FaultProxy) -> None:
    resp = requests.get(f"{proxy.url}/gzip", stream=True, timeout=5)
    raw = resp.raw.read(decode_content=False)
    assert raw == GZIP_BODY
    assert resp.headers["Content-Encoding"] == "gzip"
    assert resp.headers["Content-Length"] == str(len(GZIP_BODY))


def test_repeated_set_cookie_headers_are_kept(proxy: FaultProxy) -> None:
    resp = requests.get(f"{proxy.url}/cookies", timeout=5)
    assert resp.raw.headers.getlist("Set-Cookie") == ["a=1", "b=2"]


def test_chunked_response_is_reframed_with_content_length(proxy: FaultProxy) -> None:
    resp = requests.get(f"{proxy.url}/chunked", timeout=5)
    assert resp.text == "hello chunked world"
    assert resp.headers["Content-Length"] == str(len("hello chunked world"))
    assert "Transfer-Encoding" not in resp.headers


def test_chunked_request_body_is_forwarded(proxy: FaultProxy, upstream: Upstream) -> None:
    parts = [b'{"title": ', b'"chunked"}']
    resp = requests.post(f"{proxy.url}/wp-json/wp/v2/posts", data=iter(parts), timeout=5)
    assert resp.status_code == 201
    [got] = upstream.got("POST")
    assert got.body == b'{"title": "chunked"}'
    assert got.headers["Content-Length"] == str(len(got.body))
    assert "Transfer-Encoding" not in got.headers


def test_head_keeps_upstream_content_length(proxy: FaultProxy) -> None:
    resp = requests.head(f"{proxy.url}/wp-json/wp/v2/posts", timeout=5)
    assert resp.status_code == 200
    assert resp.headers["Content-Length"] == str(len(b'[{"id": 1}]'))
    assert resp.content == b""


def test_keep_alive_reuses_client_connection(proxy: FaultProxy) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=5)
    try:
        conn.request("GET", "/wp-json/wp/v2/posts")
        first = conn.getresponse()
        assert first.read() == b'[{"id": 1}]'
        sock = conn.sock
        conn.request("POST", "/wp-json/wp/v2/posts", body=b"{}")
        second = conn.getresponse()
        assert second.status == 201
        second.read()
        assert conn.sock is sock and sock is not None
    finally:
        conn.close()


def test_unreachable_upstream_gives_502() -> None:
    with FaultProxy(upstream="http://127.0.0.1:9", timeout=2) as proxy:
        resp = requests.get(f"{proxy.url}/wp-json/", timeout=5)
        assert resp.status_code == 502
        [rec] = proxy.requests
        assert (rec.status, rec.forwarded) == (502, False)
        assert rec.error is not None


# --------------------------------------------------------------------------- fault kinds


def test_drop_response_commits_upstream_and_resets_client(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.add_fault(Fault(kind="drop_response", method="POST", path=POSTS, times=1))
    with pytest.raises(requests.ConnectionError):
        post(proxy)
    assert len(upstream.got("POST")) == 1
    assert proxy.count(method="POST", path=POSTS, forwarded=True) == 1
    [rec] = proxy.requests
    assert (rec.status, rec.fault_kind, rec.forwarded) == (None, "drop_response", True)

    # times=1: the fault is used up, the retry goes through normally.
    resp = post(proxy)
    assert resp.status_code == 201
    assert resp.json()["id"] == 2
    assert len(upstream.got("POST")) == 2
    assert proxy.count(method="POST", path=POSTS, forwarded=True) == 2
    assert proxy.faults == []


def test_drop_response_on_keep_alive_session(proxy: FaultProxy, upstream: Upstream) -> None:
    with requests.Session() as session:
        assert session.get(f"{proxy.url}/wp-json/wp/v2/posts", timeout=5).status_code == 200
        proxy.add_fault(Fault(kind="drop_response", method="POST"))
        with pytest.raises(requests.ConnectionError):
            session.post(f"{proxy.url}/wp-json/wp/v2/posts", json={}, timeout=5)
        assert session.post(f"{proxy.url}/wp-json/wp/v2/posts", json={}, timeout=5).ok
    assert len(upstream.got("POST")) == 2


def test_delay_exceeds_client_timeout(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.add_fault(Fault(kind="delay", method="POST", path=POSTS, seconds=3))
    started = time.monotonic()
    with pytest.raises(requests.ReadTimeout):
        post(proxy, timeout=0.5)
    assert time.monotonic() - started < 2.5
    assert len(upstream.got("POST")) == 1
    [rec] = proxy.requests
    assert (rec.status, rec.fault_kind, rec.forwarded) == (201, "delay", True)


def test_delay_then_real_response(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.add_fault(Fault(kind="delay", path=POSTS, seconds=0.4))
    started = time.monotonic()
    resp = post(proxy)
    assert time.monotonic() - started >= 0.4
    assert resp.status_code == 201
    assert resp.json()["id"] == 1
    assert len(upstream.got("POST")) == 1


@pytest.mark.parametrize("status", [500, 502])
def test_status_after_forward(proxy: FaultProxy, upstream: Upstream, status: int) -> None:
    proxy.add_fault(Fault(kind="status_after_forward", method="POST", status=status))
    resp = post(proxy)
    assert resp.status_code == status
    assert resp.headers["Content-Type"].startswith("text/html")
    assert str(status) in resp.text
    assert len(upstream.got("POST")) == 1
    assert proxy.count(status=status, forwarded=True, fault_kind="status_after_forward") == 1


def test_status_without_forward(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.add_fault(Fault(kind="status_without_forward", method="POST"))
    resp = post(proxy)
    assert resp.status_code == 500
    assert "500" in resp.text
    assert upstream.got("POST") == []
    assert proxy.count(method="POST", forwarded=True) == 0
    assert proxy.count(method="POST", forwarded=False) == 1


def test_upstream_page_answers_html_with_title_and_optional_retry_after(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.add_fault(Fault(kind="upstream_page", method="POST", title="Just a moment & wait"))
    resp = post(proxy)
    assert resp.status_code == 403
    assert resp.headers["Content-Type"].startswith("text/html")
    assert "<title>Just a moment &amp; wait</title>" in resp.text
    assert "Retry-After" not in resp.headers
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    proxy.add_fault(
        Fault.from_dict({"kind": "upstream_page", "status": 503, "retry_after_header": date})
    )
    resp = post(proxy)
    assert resp.status_code == 503 and resp.headers["Retry-After"] == date
    assert "<title>503 Service Unavailable</title>" in resp.text
    assert upstream.got("POST") == []
    assert proxy.count(fault_kind="upstream_page", forwarded=False) == 2


def test_php_notice_prepended_to_body(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.add_fault(Fault(kind="php_notice", method="POST", path=POSTS))
    resp = post(proxy)
    assert resp.status_code == 201
    assert resp.headers["Content-Type"] == "application/json; charset=UTF-8"
    assert resp.content.startswith(PHP_NOTICE)
    assert resp.content.startswith(b"<br />\n<b>Notice</b>:  Undefined index: foo in ")
    assert json.loads(resp.content[len(PHP_NOTICE) :])["id"] == 1
    assert resp.headers["Content-Length"] == str(len(resp.content))
    with pytest.raises(requests.JSONDecodeError):
        resp.json()
    assert len(upstream.got("POST")) == 1


def test_php_notice_on_compressed_upstream_body(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.add_fault(Fault(kind="php_notice", path="^/gzip$"))
    resp = requests.get(f"{proxy.url}/gzip", timeout=5)
    assert resp.content == PHP_NOTICE + gzip.decompress(GZIP_BODY)
    assert "Content-Encoding" not in resp.headers
    [got] = upstream.got("GET")
    assert got.headers["Accept-Encoding"] == "identity"


def test_unauthorized_without_forward(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.add_fault(Fault(kind="unauthorized", times=None))
    for _ in range(2):
        resp = post(proxy)
        assert resp.status_code == 401
        assert resp.headers["Content-Type"].startswith("application/json")
        assert resp.json() == {
            "code": "incorrect_password",
            "message": "The provided password is an invalid application password.",
            "data": {"status": 401},
        }
    assert upstream.received == []
    assert proxy.count(fault_kind="unauthorized", status=401, forwarded=False) == 2


@pytest.mark.parametrize(
    ("status", "retry_after", "expected_status", "expected_header"),
    [(None, None, 429, "1"), (503, 7, 503, "7")],
)
def test_throttle_without_forward(
    proxy: FaultProxy,
    upstream: Upstream,
    status: int | None,
    retry_after: int | None,
    expected_status: int,
    expected_header: str,
) -> None:
    kwargs: dict[str, int] = {}
    if status is not None:
        kwargs["status"] = status
    if retry_after is not None:
        kwargs["retry_after"] = retry_after
    proxy.add_fault(Fault(kind="throttle", method="POST", **kwargs))
    resp = post(proxy)
    assert resp.status_code == expected_status
    assert resp.headers["Retry-After"] == expected_header
    assert upstream.got("POST") == []
    assert post(proxy).status_code == 201  # times=1 by default
    assert len(upstream.got("POST")) == 1


# --------------------------------------------------------------------------- matching & state


def test_matching_by_method_path_query_and_order(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.add_fault(Fault(kind="status_without_forward", method="GET", status=503, times=None))
    proxy.add_fault(Fault(kind="unauthorized", path=r"/media", query=r"(^|&)page=2(&|$)"))
    proxy.add_fault(Fault(kind="throttle", method="post", path=r"/media", times=2))

    assert requests.get(f"{proxy.url}/wp-json/wp/v2/posts", timeout=5).status_code == 503
    media = f"{proxy.url}/wp-json/wp/v2/media"
    assert requests.post(f"{media}?page=1", data=b"x", timeout=5).status_code == 429
    assert requests.post(f"{media}?page=2", data=b"x", timeout=5).status_code == 401
    assert requests.post(f"{media}?page=2", data=b"x", timeout=5).status_code == 429
    assert requests.post(f"{media}?page=2", data=b"x", timeout=5).status_code == 201
    assert requests.get(f"{proxy.url}/anything", timeout=5).status_code == 503
    assert [(f.kind, left) for f, left in proxy.faults] == [("status_without_forward", None)]
    assert proxy.count(path="/media", forwarded=True) == 1
    assert len(upstream.received) == 1

    proxy.clear_faults()
    assert requests.get(f"{proxy.url}/anything", timeout=5).status_code == 200
    proxy.reset_log()
    assert proxy.requests == []


def test_fault_after_lets_the_first_matching_requests_through(
    proxy: FaultProxy, upstream: Upstream
) -> None:
    proxy.add_fault(Fault(kind="status_without_forward", method="GET", status=503, after=2))
    posts = f"{proxy.url}/wp-json/wp/v2/posts/7"
    assert [requests.get(posts, timeout=5).status_code for _ in range(4)] == [200, 200, 503, 200]
    assert len(upstream.got("GET")) == 3
    with pytest.raises(ValueError):
        Fault(kind="drop_response", after=-1)


def test_fault_times_is_thread_safe(proxy: FaultProxy, upstream: Upstream) -> None:
    proxy.add_fault(Fault(kind="status_without_forward", method="POST", times=5))

    def one(_: int) -> int:
        return post(proxy).status_code

    with ThreadPoolExecutor(max_workers=10) as pool:
        statuses = list(pool.map(one, range(30)))
    assert statuses.count(500) == 5
    assert statuses.count(201) == 25
    assert len(upstream.got("POST")) == 25
    assert proxy.count(method="POST", forwarded=True) == 25
    assert len(proxy.requests) == 30


def test_fault_validation() -> None:
    with pytest.raises(ValueError):
        Fault(kind="explode")
    with pytest.raises(ValueError):
        Fault(kind="delay", times=0)
    with pytest.raises(ValueError):
        Fault(kind="delay", path="(")
    with pytest.raises(ValueError):
        Fault.from_dict({"kind": "delay", "bogus": 1})
    fault = Fault.from_dict({"kind": "throttle", "status": 503, "times": None})
    assert (fault.effective_status, fault.times, fault.retry_after) == (503, None, 1)


def test_stop_closes_listener(upstream: Upstream) -> None:
    proxy = FaultProxy(upstream=upstream.url).start()
    url = proxy.url
    assert requests.get(f"{url}/x", timeout=5).status_code == 200
    proxy.stop()
    proxy.stop()  # idempotent
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/x", timeout=2)
    with pytest.raises(RuntimeError):
        _ = proxy.url


def test_stop_wakes_pending_delay(upstream: Upstream) -> None:
    proxy = FaultProxy(upstream=upstream.url).start()
    proxy.add_fault(Fault(kind="delay", seconds=30))
    result: list[object] = []

    def call() -> None:
        try:
            result.append(requests.get(f"{proxy.url}/x", timeout=10).status_code)
        except requests.RequestException as exc:
            result.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    deadline = time.monotonic() + 5
    while not proxy.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    started = time.monotonic()
    proxy.stop()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert time.monotonic() - started < 5
    assert len(result) == 1


# --------------------------------------------------------------------------- CLI


def test_cli_prints_url_and_applies_faults(upstream: Upstream) -> None:
    repo_root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo_root)}
    fault = json.dumps({"kind": "throttle", "method": "POST", "status": 503, "retry_after": 3})
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway_tools.fault_proxy",
            "--upstream",
            upstream.url,
            "--fault",
            fault,
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=repo_root,
        env=env,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        resp = requests.post(f"{url}/wp-json/wp/v2/posts", json={}, timeout=5)
        assert (resp.status_code, resp.headers["Retry-After"]) == (503, "3")
        assert requests.post(f"{url}/wp-json/wp/v2/posts", json={}, timeout=5).status_code == 201
        assert len(upstream.got("POST")) == 1
    finally:
        process.send_signal(signal.SIGINT)
        try:
            assert process.wait(timeout=30) == 0  # generous: CI machines are busy
        finally:
            if process.poll() is None:
                process.kill()
