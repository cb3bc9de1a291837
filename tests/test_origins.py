"""Who said no: an answer from in front of WordPress (a firewall, CDN, load balancer, proxy or
the web server's own page) is classified by origin in the WordPress client, leaves the
operation UNKNOWN (reason ``upstream-refused``) and answers 502 ``upstream-refused`` with the
facts a person needs; the next identical request reconciles first and then sends, so
WordPress ends with exactly one object."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from email.utils import format_datetime

import pytest
from servers import Server
from support import draft_body
from support import gateway_command
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug

from gateway.wordpress.errors import parse_retry_after
from gateway_tools.fault_proxy import Fault

pytestmark = pytest.mark.wordpress
POSTS = r"^/wp-json/wp/v2/posts/?$"
MEDIA = r"^/wp-json/wp/v2/media/?$"
LOOKUP = r"^/wp-json/publishing-gateway/v1/objects"


def _http_date(seconds: int) -> str:
    return format_datetime(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds), usegmt=True)


# (status, Retry-After header sent, retryable expected)
PAGES = {
    "400": (400, None, False),
    "403": (403, None, False),
    "404": (404, None, False),
    "405": (405, None, False),
    "406": (406, None, False),
    "413": (413, None, False),
    "429-without-retry-after": (429, None, True),
    "429-seconds": (429, "7", True),
    "503-without-retry-after": (503, None, True),
    "503-http-date": (503, "date:40", True),
    "200-html-instead-of-json": (200, None, False),
}


@pytest.mark.parametrize("name", list(PAGES))
def test_upstream_page_is_unknown_then_reconciled_and_sent_once(gwp, proxy, name):
    status, retry_after, retryable = PAGES[name]
    if retry_after and retry_after.startswith("date:"):
        retry_after = _http_date(int(retry_after[5:]))
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    title = f"Blocked {name} | Example CDN"
    proxy.add_fault(
        Fault(
            kind="upstream_page",
            method="POST",
            path=POSTS,
            status=status,
            title=title,
            retry_after_header=retry_after,
        )
    )
    body = draft_body(title=f"Upstream {job_id}")
    first = gwp.put_draft(job_id, body)
    problem = first.get_json()
    assert first.status_code == 502, problem
    assert problem_slug(first) == "upstream-refused"
    assert problem["origin"] == "upstream"
    assert problem["upstream"]["status"] == status
    assert problem["upstream"]["content_type"] == "text/html"
    assert problem["upstream"]["title"] == title
    assert "credential" not in problem["detail"]
    assert problem["retryable"] is retryable
    assert problem["ledger_state"] == "UNKNOWN"
    if retryable:
        seconds = int(first.headers["Retry-After"])
        assert seconds >= 1
        if retry_after and retry_after.isdigit():
            assert seconds == int(retry_after)
        elif retry_after:
            assert 30 <= seconds <= 41  # the HTTP date, turned into seconds
    else:
        assert "Retry-After" not in first.headers
    [row] = gwp.operations(job_id)
    assert row["state"] == "UNKNOWN"
    assert row["problem"]["reason"] == "upstream-refused"
    key = op_key(job_id, "draft")
    assert gwp.count_objects(key) == 0

    proxy.reset_log()
    second = gwp.put_draft(job_id, body)  # the block is lifted (the fault was used once)
    assert second.status_code == 201, second.get_json()
    calls = [(r.method, r.path) for r in proxy.requests]
    lookup = next(i for i, c in enumerate(calls) if c[0] == "GET" and "/objects" in c[1])
    send = next(i for i, c in enumerate(calls) if c[0] == "POST" and c[1].endswith("/posts"))
    assert lookup < send  # reconciled first, then sent
    assert gwp.count_objects(key) == 1
    [row] = gwp.operations(job_id)
    assert row["state"] == "CONFIRMED"


def test_upstream_page_on_media_upload(gwp, proxy):
    job_id = new_job_id()
    gwp.put_job(job_id)
    proxy.add_fault(Fault(kind="upstream_page", method="POST", path=MEDIA, status=413))
    first = gwp.put_media(job_id, "hero", png_bytes((1, 2, 3), 3))
    assert first.status_code == 502 and problem_slug(first) == "upstream-refused"
    assert first.get_json()["upstream"]["title"] == "413 Request Entity Too Large"
    second = gwp.put_media(job_id, "hero", png_bytes((1, 2, 3), 3))
    assert second.status_code == 201, second.get_json()
    assert gwp.count_objects(op_key(job_id, "media", "hero")) == 1


def test_upstream_page_on_the_lookup_is_named_too(gwp, proxy):
    """A reconciliation lookup that meets a firewall page says so (502), sends nothing."""
    job_id = new_job_id()
    gwp.put_job(job_id)
    body = draft_body(title=f"Lookup {job_id}")
    proxy.add_fault(Fault(kind="upstream_page", method="POST", path=POSTS, status=403))
    assert gwp.put_draft(job_id, body).status_code == 502
    proxy.add_fault(Fault(kind="upstream_page", method="GET", path=LOOKUP, status=403))
    again = gwp.put_draft(job_id, body)
    assert again.status_code == 502 and again.get_json()["origin"] == "upstream"
    assert proxy.count(method="POST", path=POSTS, forwarded=True) == 0
    assert gwp.put_draft(job_id, body).status_code == 201
    assert gwp.count_objects(op_key(job_id, "draft")) == 1


def test_wordpress_own_refusal_stays_failed(gwp, proxy):
    """WordPress's JSON 401 is a definite refusal: FAILED, origin wordpress."""
    job_id = new_job_id()
    gwp.put_job(job_id)
    proxy.add_fault(Fault(kind="unauthorized", method="POST", path=POSTS))
    answer = gwp.put_draft(job_id, draft_body())
    assert answer.status_code == 502 and problem_slug(answer) == "wordpress-refused"
    assert gwp.operations(job_id)[0]["state"] == "FAILED"


def test_firewall_403_then_lifted_through_gateway_serve(wp_site, ledger_url, tmp_path, proxy):
    """The issue's first row, through a real ``gateway serve``: a 403 HTML challenge page on
    the draft's create, then the same request once the block is lifted: one post."""
    server = Server(wp_site, ledger_url, tmp_path, site_url=proxy.url).start()
    try:
        job_id = new_job_id()
        assert server.call("PUT", f"/v1/jobs/{job_id}", json={"site": "blog", "task_version": 1})
        title = "Attention Required! | Cloudflare"
        proxy.add_fault(Fault(kind="upstream_page", method="POST", path=POSTS, title=title))
        body = draft_body(title=f"Firewall {job_id}")
        first = server.call("PUT", f"/v1/jobs/{job_id}/draft", json=body)
        problem = first.json()
        assert first.status_code == 502 and problem_slug(first) == "upstream-refused"
        assert problem["upstream"] == {
            "status": 403,
            "content_type": "text/html",
            "title": title,
            "method": "POST",
            "url": proxy.url + "/wp-json/wp/v2/posts",
        }
        assert "credential" not in problem["detail"] and problem["retryable"] is False
        second = server.call("PUT", f"/v1/jobs/{job_id}/draft", json=body)
        assert second.status_code == 201, second.text
        assert len([o for o in _lookup(wp_site, op_key(job_id, "draft"))]) == 1
    finally:
        server.kill()


def _lookup(wp_site, key):
    from support import admin_session

    answer = admin_session(wp_site).get(
        wp_site["url"].rstrip("/") + "/wp-json/publishing-gateway/v1/objects",
        params={"keys": key},
        timeout=30,
    )
    answer.raise_for_status()
    return answer.json()["objects"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("120", 120), ("", None), ("soon", None), ("Wed, 21 Oct 2015 07:28:00 GMT", 0)],
)
def test_retry_after_forms(value, expected):
    assert parse_retry_after(value) == expected


def test_doctor_reports_a_firewall_in_front_of_the_rest_api(wp_site, ledger_url, tmp_path, proxy):
    server = Server(wp_site, ledger_url, tmp_path, site_url=proxy.url)  # init-db, sites add
    title = "Access denied | blog.example used Cloudflare to restrict access"
    proxy.add_fault(
        Fault(kind="upstream_page", path=r"^/wp-json/wp/v2/users/me", title=title, times=None)
    )
    done = subprocess.run(
        [*gateway_command(), "doctor", "--tenant", "acme", "--site", "blog", "--json"],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    checks = {c["check"]: c for c in json.loads(done.stdout)["checks"]}
    check = checks["firewall"]
    assert check["ok"] is False
    assert "403 text/html" in check["detail"] and title in check["detail"]
    assert "password" not in check["detail"]
    # the registry runs on, but nothing that needs WordPress's own answer is judged
    assert [n for n, c in checks.items() if c["ok"] is False] == ["firewall"]
    assert checks["login"]["ok"] is None and "not run" in checks["login"]["detail"]


def test_read_back_behind_a_block_names_it(gwp, proxy):
    """Verification's read-back meeting a firewall page: 502 ``upstream-refused``, not 503."""
    job_id = new_job_id()
    gwp.put_job(job_id)
    assert gwp.put_draft(job_id, draft_body(title=f"Read {job_id}")).status_code == 201
    proxy.add_fault(
        Fault(kind="upstream_page", method="GET", path=r"^/wp-json/wp/v2/posts/\d+", status=406)
    )
    answer = gwp.verification(job_id)
    assert answer.status_code == 502 and problem_slug(answer) == "upstream-refused"
    assert answer.get_json()["upstream"]["status"] == 406
    assert gwp.verification(job_id).status_code == 200  # the block was lifted
