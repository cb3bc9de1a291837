"""Identical requests racing through several gateway processes: exactly one WordPress write.

Runs on the ledger the suite is configured with (SQLite, or PostgreSQL when
``GATEWAY_TEST_DATABASE_URL`` is set: CI runs both)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from servers import Server
from support import SITE_NAME
from support import draft_body
from support import new_job_id
from support import op_key
from support import png_bytes

pytestmark = pytest.mark.wordpress
POSTS = r"^/wp-json/wp/v2/posts/?$"
MEDIA = r"^/wp-json/wp/v2/media/?$"


@pytest.fixture
def servers(wp_site, ledger_url, tmp_path, proxy):
    started: list[Server] = []

    def start(workers: int = 4) -> Server:
        server = Server(wp_site, ledger_url, tmp_path, site_url=proxy.url).start(workers=workers)
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()


def _race(calls: list, n: int) -> list[int]:
    with ThreadPoolExecutor(max_workers=n) as pool:
        return [f.result().status_code for f in [pool.submit(call) for call in calls]]


def test_50_identical_drafts_against_4_workers_make_one_write(servers, proxy, gw):
    server = servers(workers=4)
    job_id = new_job_id()
    assert (
        server.call(
            "PUT", f"/v1/jobs/{job_id}", json={"site": SITE_NAME, "task_version": 1}
        ).status_code
        == 201
    )
    body = draft_body(title=f"Race {job_id}")
    statuses = _race([lambda: server.call("PUT", f"/v1/jobs/{job_id}/draft", json=body)] * 50, 50)
    assert set(statuses) <= {200, 201, 409}, statuses
    assert statuses.count(201) == 1
    assert proxy.count(method="POST", path=POSTS, forwarded=True) == 1
    assert gw.count_objects(op_key(job_id, "draft")) == 1


def test_identical_requests_through_two_instances_on_one_ledger(servers, proxy, gw):
    first, second = servers(workers=2), servers(workers=2)
    job_id = new_job_id()
    assert (
        first.call(
            "PUT", f"/v1/jobs/{job_id}", json={"site": SITE_NAME, "task_version": 1}
        ).status_code
        == 201
    )
    image = png_bytes((1, 2, 3), 4)

    def upload(server: Server):
        return lambda: server.call(
            "PUT", f"/v1/jobs/{job_id}/media/hero", files={"file": ("hero.png", image)}
        )

    statuses = _race([upload(first), upload(second)] * 15, 30)
    assert set(statuses) <= {200, 201, 409}, statuses
    assert proxy.count(method="POST", path=MEDIA, forwarded=True) == 1
    assert gw.count_objects(op_key(job_id, "media", "hero")) == 1
    body = draft_body(title=f"Two instances {job_id}", featured_media={"slot": "hero"})
    statuses = _race(
        [
            lambda: first.call("PUT", f"/v1/jobs/{job_id}/draft", json=body),
            lambda: second.call("PUT", f"/v1/jobs/{job_id}/draft", json=body),
        ]
        * 10,
        20,
    )
    assert set(statuses) <= {200, 201, 409}, statuses
    assert proxy.count(method="POST", path=POSTS, forwarded=True) == 1
    assert gw.count_objects(op_key(job_id, "draft")) == 1
