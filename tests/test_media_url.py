"""Images from a URL, downloaded safely by the gateway (issue 14, part 3). A local image server
on 127.0.0.1 counts every connection made to it, so "refused before any connection" is
checked, not assumed."""

from __future__ import annotations

import hashlib
import socket
import threading
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer

import pytest
from support import draft_body
from support import free_port
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug
from support import serve_tls

IMAGE = png_bytes((12, 34, 56), 5)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", self.path.split("to=", 1)[1])
            self.end_headers()
            return
        path = self.path.split("?", 1)[0]
        if path == "/stream.png":  # no Content-Length: the body ends when the connection does
            self.send_response(200)
            self.end_headers()
            self.wfile.write(IMAGE * 100)
            return
        body = {"/img.png": IMAGE, "/big.png": IMAGE * 100, "/note.txt": b"hello"}.get(path)
        self.send_response(200 if body else 404)
        self.send_header("Content-Length", str(len(body or b"")))
        self.end_headers()
        self.wfile.write(body or b"")

    def log_message(self, *args):
        pass


class ImageServer(ThreadingHTTPServer):
    connections = 0

    def get_request(self):
        request = super().get_request()
        self.connections += 1
        return request


@pytest.fixture
def image_server():
    server = ImageServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _configure(gw, **overrides):
    gw.app.config["GATEWAY"] = gw.app.config["GATEWAY"].with_overrides(**overrides)


def _put(gw, job_id: str, url: str, slot: str = "hero", **fields):
    return gw.client.put(
        f"/v1/jobs/{job_id}/media/{slot}", json={"source_url": url, **fields}, headers=gw.headers()
    )


def test_private_addresses_in_every_spelling_are_refused_before_any_connection(
    offline_gw, image_server
):
    gw, port = offline_gw, image_server.server_address[1]
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    assert problem_slug(_put(gw, job_id, f"http://127.0.0.1:{port}/img.png")) == (
        "media-url-refused"  # https only by default
    )
    _configure(gw, media_url_schemes=frozenset({"http", "https"}))
    refused = [
        f"http://127.0.0.1:{port}/img.png",
        f"http://localhost:{port}/img.png",
        f"http://2130706433:{port}/img.png",  # decimal
        f"http://0177.0.0.1:{port}/img.png",  # octal
        f"http://0x7f.0.0.1:{port}/img.png",  # hex
        f"http://0x7f000001:{port}/img.png",
        f"http://127.1:{port}/img.png",
        f"http://[::1]:{port}/img.png",
        f"http://[::ffff:127.0.0.1]:{port}/img.png",  # IPv4-mapped IPv6
        f"http://[::ffff:7f00:1]:{port}/img.png",
        f"http://0.0.0.0:{port}/img.png",
        "http://10.0.0.1/img.png",
        "http://192.168.1.1/img.png",
        "http://100.64.0.1/img.png",
        "http://169.254.169.254/latest/meta-data/",
        "http://[fe80::1]/img.png",
        "http://[fd00:ec2::254]/img.png",
        f"http://user:pw@127.0.0.1:{port}/img.png",
        f"ftp://127.0.0.1:{port}/img.png",
    ]
    for url in refused:
        answer = _put(gw, job_id, url)
        assert answer.status_code == 422, (url, answer.get_json())
        assert problem_slug(answer) == "media-url-refused", url
        assert answer.get_json()["errors"][0]["pointer"] == "/source_url"
    assert image_server.connections == 0
    assert gw.operations(job_id) == []
    # Issue 31: the loopback refusal says how to allow a local image server; link-local and
    # metadata addresses, which no listing allows, get no such hint
    local = _put(gw, job_id, f"http://127.0.0.1:{port}/img.png").get_json()["detail"]
    assert f"add '127.0.0.1:{port}' to GATEWAY_MEDIA_URL_ALLOW_HOSTS" in local, local
    private = _put(gw, job_id, "http://10.0.0.1/img.png").get_json()["detail"]
    assert "add '10.0.0.1:80' to GATEWAY_MEDIA_URL_ALLOW_HOSTS" in private, private
    for never in ("http://169.254.169.254/latest/meta-data/", "http://[fe80::1]/img.png"):
        detail = _put(gw, job_id, never).get_json()["detail"]
        assert "GATEWAY_MEDIA_URL_ALLOW_HOSTS" not in detail, detail
    assert image_server.connections == 0


def test_a_temporary_dns_failure_is_a_retryable_503_a_missing_name_stays_422(
    offline_gw, monkeypatch
):
    """Issue 28: ``EAI_AGAIN`` (the resolver failed for now) is not a property of the URL:
    503 ``media-source-unavailable``, retryable; ``EAI_NONAME`` (no such name) stays 422.
    ``getaddrinfo`` is stubbed for these two names: no lookup leaves the machine."""
    failures = {"flaky.example": socket.EAI_AGAIN, "nowhere.example": socket.EAI_NONAME}
    real, asked = socket.getaddrinfo, []

    def getaddrinfo(host, *args, **kwargs):
        if host in failures:
            asked.append(host)
            raise socket.gaierror(failures[host], f"stubbed failure for {host}")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    gw, job_id = offline_gw, new_job_id()
    assert gw.put_job(job_id).status_code == 201
    flaky = _put(gw, job_id, "https://flaky.example/img.png")
    assert flaky.status_code == 503 and problem_slug(flaky) == "media-source-unavailable"
    assert flaky.get_json()["retryable"] is True and flaky.headers["Retry-After"] == "5"
    assert "flaky.example" in flaky.get_json()["detail"]
    missing = _put(gw, job_id, "https://nowhere.example/img.png", slot="other")
    assert missing.status_code == 422 and problem_slug(missing) == "media-url-refused"
    assert missing.get_json()["retryable"] is False
    assert asked == ["flaky.example", "nowhere.example"]
    assert gw.operations(job_id) == []


@pytest.mark.wordpress
def test_a_listed_local_server_is_downloaded_once_and_other_spellings_stay_refused(
    gw, image_server
):
    port = image_server.server_address[1]
    listed = f"127.0.0.1:{port}"
    _configure(
        gw,
        media_url_schemes=frozenset({"http"}),
        media_url_allow_hosts=frozenset({listed, "169.254.169.254:80"}),
        media_url_max_bytes=len(IMAGE) * 10,
    )
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    url = f"http://{listed}/img.png"
    first = _put(gw, job_id, url, alt_text="From a URL")
    assert first.status_code == 201, first.get_json()
    assert image_server.connections == 1
    # issue 31: source_url stays WordPress's URL of the upload; the URLs sent and downloaded
    # from are their own members
    answer = first.get_json()
    assert answer["requested_url"] == url and answer["downloaded_from"] == url
    assert (
        answer["source_url"].startswith(gw.wp_url)
        and "/wp-content/uploads/" in answer["source_url"]
    ), answer["source_url"]
    assert gw.count_objects(op_key(job_id, "media", "hero"), "attachment") == 1
    row = gw.operations(job_id)[0]
    assert row["receipt"]["sha256"] == hashlib.sha256(IMAGE).hexdigest()
    assert row["receipt"]["downloaded_from"] == url
    again = _put(gw, job_id, url, alt_text="From a URL")
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["media_id"] == first.get_json()["media_id"]
    assert image_server.connections == 1  # the replay downloaded nothing

    for other in (
        f"http://localhost:{port}/img.png",
        f"http://2130706433:{port}/img.png",
        "http://169.254.169.254/latest/meta-data/",  # listed, but metadata never passes
        f"http://{listed}/redirect?to=http://[::1]:{port}/img.png",  # a redirect elsewhere
        f"http://{listed}/redirect?to=http://169.254.169.254/",
    ):
        answer = _put(gw, job_id, other, slot="other")
        assert problem_slug(answer) == "media-url-refused", (other, answer.get_json())
    assert image_server.connections == 3  # only the two redirects themselves
    assert problem_slug(_put(gw, job_id, f"http://{listed}/big.png", slot="big")) == (
        "media-url-refused"
    )
    assert _put(gw, job_id, f"http://{listed}/note.txt", slot="note").status_code == 415
    missing = _put(gw, job_id, f"http://{listed}/missing.png", slot="gone")
    assert missing.status_code == 502 and problem_slug(missing) == "media-download-failed"
    assert [r["slot"] for r in gw.operations(job_id)] == ["hero"]

    # A later version: the same URL and metadata replays; other URL, same bytes: no upload.
    assert gw.put_job(job_id, task_version=2).status_code == 200
    connections = image_server.connections
    same = _put(gw, job_id, url, alt_text="From a URL")
    assert same.get_json()["media_id"] == first.get_json()["media_id"]
    assert image_server.connections == connections  # answered from the ledger
    assert gw.put_job(job_id, task_version=3).status_code == 200
    moved = _put(gw, job_id, url + "?v=3", alt_text="From a URL")
    assert moved.status_code == 200, moved.get_json()
    assert moved.get_json()["media_id"] == first.get_json()["media_id"]
    assert gw.count_objects(op_key(job_id, "media", "hero", version=3)) == 0
    # followed through a redirect: the answer tells the URL sent from the URL downloaded
    hop = f"http://{listed}/redirect?to={url}"
    via = _put(gw, job_id, hop, slot="via")
    assert via.status_code == 201, via.get_json()
    assert via.get_json()["requested_url"] == hop and via.get_json()["downloaded_from"] == url


def test_validate_probes_source_urls_as_the_media_route_downloads_them(offline_gw, image_server):
    """Issue 41: ``POST /v1/articles/validate`` asks each ``media[].source_url`` what the media
    route's download would meet (guard, redirects, status, size, type from the first bytes),
    before any upload and without one; ``media[].url`` keeps its form-only check."""
    gw, port = offline_gw, image_server.server_address[1]
    listed, closed = f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}"
    _configure(
        gw,
        media_url_schemes=frozenset({"http"}),
        media_url_allow_hosts=frozenset({listed, closed}),
        media_url_max_bytes=len(IMAGE) * 10,
    )
    url = f"http://{listed}/img.png"
    images = [
        ("hero", url),
        ("gone", f"http://{listed}/missing.png"),  # 404
        ("big", f"http://{listed}/big.png"),  # Content-Length beyond the limit
        ("stream", f"http://{listed}/stream.png"),  # no Content-Length, longer than the limit
        ("note", f"http://{listed}/note.txt"),
        ("local", f"http://localhost:{port}/img.png"),  # not listed: refused, never connected
        ("down", f"http://{closed}/img.png"),  # nobody listens
    ]
    media = [{"slot": slot, "source_url": u} for slot, u in images]
    media.append({"slot": "later", "url": f"http://{closed}/form-only.png"})  # never fetched
    answer = gw.client.post(
        "/v1/articles/validate",
        json={"draft": draft_body(featured_media={"slot": "hero"}), "media": media},
        headers=gw.headers(),
    )
    problem = answer.get_json()
    assert answer.status_code == 422 and problem_slug(answer) == "validation-failed", problem
    assert [(e["pointer"], e["problem"]) for e in problem["errors"]] == [
        ("/media/1/source_url", "media-download-failed"),
        ("/media/2/source_url", "media-url-refused"),
        ("/media/3/source_url", "media-url-refused"),
        ("/media/4/source_url", "unsupported-media-type"),
        ("/media/5/source_url", "media-url-refused"),
        ("/media/6/source_url", "media-download-failed"),
    ], problem["errors"]
    assert "404" in problem["errors"][0]["message"]
    assert image_server.connections == 5  # hero, gone, big, stream, note: one request each
    # the media route answers the same problems for the same URLs, after its download
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    for (slot, source), entry in zip(images[1:], problem["errors"], strict=True):
        assert problem_slug(_put(gw, job_id, source, slot=slot)) == entry["problem"], slot
    assert gw.operations(job_id) == []

    # a good article: what each image is and where it came from (a redirect followed)
    hop = f"http://{listed}/redirect?to={url}"
    good = {
        "draft": draft_body(featured_media={"slot": "hero"}, body_media=["via"]),
        "media": [{"slot": "hero", "source_url": url}, {"slot": "via", "source_url": hop}],
    }
    answer = gw.client.post("/v1/articles/validate", json=good, headers=gw.headers())
    assert answer.status_code == 200, answer.get_json()
    assert answer.get_json()["media"] == [
        {
            "slot": slot,
            "source": "source_url",
            "mime_type": "image/png",
            "downloaded_from": url,
            "bytes": len(IMAGE),
        }
        for slot in ("hero", "via")
    ]
    assert answer.get_json()["site"] is None  # no category or tag name: no site asked
    assert gw.operations(job_id) == []


@pytest.mark.wordpress
def test_https_download_is_pinned_to_the_checked_address_and_verifies_the_host_name(
    gw, tmp_path, monkeypatch
):
    """A local HTTPS image server with a certificate for ``localhost``: the download connects
    to the resolved loopback address (allowed: ``localhost:PORT`` is listed verbatim) and TLS
    is verified for the name in the URL; the same server under another name fails TLS."""
    from gateway.actions import media_sources

    server = ImageServer(("127.0.0.1", 0), _Handler)
    cert = serve_tls(server, tmp_path)
    try:
        port = server.server_address[1]
        monkeypatch.setattr(media_sources.certifi, "where", lambda: str(cert))
        _configure(gw, media_url_allow_hosts=frozenset({f"localhost:{port}", f"127.0.0.1:{port}"}))
        job_id = new_job_id()
        assert gw.put_job(job_id).status_code == 201
        ok = _put(gw, job_id, f"https://localhost:{port}/img.png")
        assert ok.status_code == 201, ok.get_json()
        wrong_name = _put(gw, job_id, f"https://127.0.0.1:{port}/img.png", slot="other")
        assert wrong_name.status_code == 502 and problem_slug(wrong_name) == (
            "media-download-failed"  # the certificate is not for 127.0.0.1
        )
    finally:
        server.shutdown()
        server.server_close()


# Issue 29: IPv6 spellings that carry an IPv4 address, and multicast. Each goes through
# ``resolve()`` (getaddrinfo of an IP literal asks no server) and through ``download()`` with
# the connection stubbed: nothing is ever sent to any of these addresses.
CARRIERS = [
    ("[64:ff9b::a9fe:a9fe]", "169.254.169.254"),  # NAT64 (RFC 6052) of the metadata address
    ("[64:ff9b::7f00:1]", "127.0.0.1"),
    ("[2002:a9fe:a9fe::1]", "169.254.169.254"),  # 6to4 (RFC 3056)
    ("[2002:7f00:1::1]", "127.0.0.1"),
    ("[::7f00:1]", "127.0.0.1"),  # IPv4-compatible (RFC 4291)
    ("[::a9fe:a9fe]", "169.254.169.254"),
    ("[::ffff:0:7f00:1]", "127.0.0.1"),  # IPv4-translated (RFC 2765)
    ("[::ffff:0:a00:1]", "10.0.0.1"),
    ("[64:ff9b:1::a9fe:a9fe]", "64:ff9b:1::/48"),  # local-use NAT64 (RFC 8215): refused whole
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("[ff02::1]", "multicast"),
    ("[ff05::2]", "multicast"),
    ("[fec0::1]", "not a public address"),  # site-local
]


@pytest.mark.parametrize(("host", "why"), CARRIERS, ids=[h for h, _ in CARRIERS])
def test_ipv6_forms_carrying_ipv4_and_multicast_are_refused_and_never_connected(
    host, why, monkeypatch
):
    from gateway.actions import egress
    from gateway.actions import media_sources
    from gateway.core import exceptions as exc
    from gateway.core.config import Config

    connected = []
    monkeypatch.setattr(egress, "open_connection", lambda *args: connected.append(args))
    config = Config()  # the defaults: https only, no allow-list
    for call in (media_sources.resolve, media_sources.download):
        with pytest.raises(exc.MediaUrlRefused) as refused:
            call(f"https://{host}/x.png", config)
        assert why in refused.value.detail, refused.value.detail
        assert refused.value.extensions["errors"][0]["pointer"] == "/source_url"
    assert connected == []


def test_embedded_public_addresses_still_pass_the_guard():
    """DNS64 networks resolve every IPv4-only host to ``64:ff9b::a.b.c.d``: a public IPv4
    address inside NAT64 or 6to4 is as allowed as the address itself."""
    import ipaddress

    from gateway.actions import egress

    for text in ("64:ff9b::808:808", "2002:808:808::1", "8.8.8.8", "2606:4700::1111"):
        assert egress.check_address(ipaddress.ip_address(text), listed=False) is None, text


def test_a_dripping_image_server_is_cut_off_at_the_deadline(offline_gw):
    """Issue 29, row 2 in one request: a server that sends its headers and then one byte a
    second is cut off by GATEWAY_MEDIA_URL_TIMEOUT, not after a 64 KiB chunk."""
    from test_fairness import Drip

    drip = Drip()
    try:
        _configure(
            offline_gw,
            media_url_schemes=frozenset({"http"}),
            media_url_allow_hosts=frozenset({drip.host_port}),
            media_url_timeout=2.0,
        )
        job_id = new_job_id()
        assert offline_gw.put_job(job_id).status_code == 201
        answer = _put(offline_gw, job_id, f"http://{drip.host_port}/slow.png")
        assert answer.status_code == 502 and problem_slug(answer) == "media-download-failed"
        assert "took longer than 2 s" in answer.get_json()["detail"]
        assert drip.requests == 1 and offline_gw.operations(job_id) == []
    finally:
        drip.close()
