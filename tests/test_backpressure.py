"""Budgets and back-pressure: the per-job write budget (429 ``budget-exhausted``, raised only by
an editor, shown on the review page), the per-site concurrency limit (429 ``site-busy``, slots
in the ledger shared by every worker) and the per-token rate limit (429 ``rate-limited``),
each asserted by what reached WordPress through the fault proxy."""

from __future__ import annotations

import datetime as dt
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from servers import Server
from support import both_transports
from support import call_count
from support import draft_body
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug

from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import Operation
from gateway.ledger.models import Site
from gateway.ledger.models import SiteSlot
from gateway.recovery import reconciliation
from gateway_tools.fault_proxy import Fault

pytestmark = pytest.mark.wordpress
DRAFT_POSTS = dict(method="POST", path=r"^/wp-json/wp/v2/posts/?$")


def _configure(gw, **overrides) -> None:
    gw.app.config["GATEWAY"] = gw.app.config["GATEWAY"].with_overrides(**overrides)


def _sign_in(client, token: str):
    page = client.get("/review/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    return client.post("/review/login", data={"token": token, "csrf_token": csrf})


@both_transports
def test_write_budget_stops_a_job_until_an_editor_raises_it(gwp, proxy, transport):
    _configure(gwp, job_write_budget=2)
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    for slot, colour in (("a", (1, 2, 3)), ("b", (4, 5, 6))):
        assert gwp.put_media(job_id, slot, png_bytes(colour)).status_code == 201
    assert call_count(proxy, transport, "upload") == 2

    refused = gwp.put_media(job_id, "c", png_bytes((7, 8, 9)))
    assert refused.status_code == 429 and problem_slug(refused) == "budget-exhausted"
    problem = refused.get_json()
    assert problem["budget"]["name"] == "write_attempts"
    assert (problem["budget"]["used"], problem["budget"]["limit"]) == (2, 2)
    assert call_count(proxy, transport, "upload") == 2  # no WordPress call

    replay = gwp.put_media(job_id, "a", png_bytes((1, 2, 3)))  # replays do not count
    assert replay.status_code == 200 and replay.headers["Idempotent-Replayed"] == "true"

    editor = gwp.make_token("editor")
    assert _sign_in(gwp.client, editor).status_code == 303
    page = gwp.client.get("/review").get_data(as_text=True)
    assert f'class="over-budget" data-job="{job_id}"' in page

    url = f"/v1/jobs/{job_id}/budgets/write_attempts"
    raised_by_workflow = gwp.client.put(url, json={"limit": 10}, headers=gwp.headers())
    assert raised_by_workflow.status_code == 403
    raised = gwp.client.put(url, json={"limit": 3}, headers=gwp.headers(editor))
    assert raised.status_code == 200, raised.get_json()
    assert raised.get_json() == {
        "name": "write_attempts",
        "used": 2,
        "limit": 3,
        "exhausted": False,
        "raised_by": "test-editor",
    }
    assert gwp.put_media(job_id, "c", png_bytes((7, 8, 9))).status_code == 201
    assert call_count(proxy, transport, "upload") == 3
    budgets = gwp.job(job_id).get_json()["budgets"]
    assert budgets == [dict(raised.get_json(), used=3, exhausted=True)]
    below = gwp.client.put(url, json={"limit": 1}, headers=gwp.headers(editor))
    assert below.status_code == 422


@both_transports
def test_site_busy_when_every_slot_is_held_by_another_worker(gwp, proxy, transport):
    """The slot wraps every WordPress call of the request, over either transport."""
    _configure(gwp, site_concurrency=1)
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    with gwp.app.app_context(), database.connection_context():
        site_id = Site.get(Site.name == "blog").id
        SiteSlot.create(  # another worker is talking to WordPress for this site
            site_id=site_id,
            slot=0,
            holder="other-worker",
            expires_at=db.utcnow() + dt.timedelta(minutes=5),
        )
    busy = gwp.put_draft(job_id, draft_body())
    assert busy.status_code == 429 and problem_slug(busy) == "site-busy"
    assert busy.headers["Retry-After"] == "1"
    assert proxy.count() == 0  # not even a read
    assert gwp.operations(job_id) == []  # refused before the operation was claimed

    with gwp.app.app_context(), database.connection_context():
        # a holder that died: its slot expires and is taken over
        SiteSlot.update(expires_at=db.utcnow() - dt.timedelta(seconds=1)).execute()
    created = gwp.put_draft(job_id, draft_body())
    assert created.status_code == 201, created.get_json()
    assert call_count(proxy, transport, "create_post") == 1
    with gwp.app.app_context(), database.connection_context():
        assert SiteSlot.select().count() == 0  # released when the request ended


def _hold_every_slot(gw) -> SiteSlot:
    """Another caller holds the site's only slot (``GATEWAY_SITE_CONCURRENCY=1``)."""
    with gw.app.app_context(), database.connection_context():
        return SiteSlot.create(
            site_id=Site.get(Site.name == "blog").id,
            slot=0,
            holder="other-worker",
            expires_at=db.utcnow() + dt.timedelta(minutes=5),
        )


@both_transports
def test_the_sweep_backs_off_from_a_busy_site_and_finishes_later(gwp, proxy, transport):
    """The sweep takes the site's slot like any caller: with every slot held it leaves the
    site's rows as they are (``site_busy``, no WordPress call, never a failure) and confirms
    them at the next sweep once a slot is free; it releases its slot when done."""
    _configure(gwp, site_concurrency=1)
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    assert gwp.put_draft(job_id, draft_body(title=f"Busy {job_id}")).status_code == 201
    config = gwp.app.config["GATEWAY"]
    with gwp.app.app_context(), database.connection_context():
        Operation.update(state="UNKNOWN").where(Operation.job_id == job_id).execute()
    held = _hold_every_slot(gwp)
    proxy.reset_log()
    with gwp.app.app_context(), database.connection_context():
        busy = reconciliation.sweep(config, older_than=0)
    assert (busy["site_busy"], busy["confirmed"], busy["examined"]) == (1, 0, 0)
    assert proxy.requests == []
    assert [row["state"] for row in gwp.operations(job_id)] == ["UNKNOWN"]

    with gwp.app.app_context(), database.connection_context():
        SiteSlot.delete().where(SiteSlot.id == held.id).execute()
        done = reconciliation.sweep(config, older_than=0)
        assert SiteSlot.select().count() == 0  # the sweep's own slot, released
    assert (done["site_busy"], done["confirmed"]) == (0, 1)
    assert [row["state"] for row in gwp.operations(job_id)] == ["CONFIRMED"]
    assert gwp.count_objects(op_key(job_id, "draft")) == 1


def test_token_rate_limit_counts_in_the_ledger(offline_gw):
    _configure(offline_gw, token_rate=(3, 3600))
    other = offline_gw.make_token("workflow")
    for _ in range(3):
        assert offline_gw.client.get("/v1/jobs", headers=offline_gw.headers()).status_code == 200
    limited = offline_gw.client.get("/v1/jobs", headers=offline_gw.headers())
    assert limited.status_code == 429 and problem_slug(limited) == "rate-limited"
    assert 1 <= int(limited.headers["Retry-After"]) <= 3600
    assert offline_gw.client.get("/v1/jobs", headers=offline_gw.headers(other)).status_code == 200


def test_site_concurrency_holds_across_the_workers_of_a_real_server(
    wp_site, ledger_url, tmp_path, proxy
):
    server = Server(wp_site, ledger_url, tmp_path, site_url=proxy.url)
    server.env["GATEWAY_SITE_CONCURRENCY"] = "1"
    server.start(workers=2)
    first, second = new_job_id(), new_job_id()
    try:
        for job_id in (first, second):
            assert server.call(
                "PUT", f"/v1/jobs/{job_id}", json={"site": "blog", "task_version": 1}
            ).ok
        proxy.add_fault(Fault(kind="delay", seconds=6, times=1, **DRAFT_POSTS))
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(server.call, "PUT", f"/v1/jobs/{first}/draft", json=draft_body())
            deadline = time.monotonic() + 30
            while proxy.count(**DRAFT_POSTS) == 0 and time.monotonic() < deadline:
                time.sleep(0.1)  # until the first request is inside its WordPress call
            assert proxy.count(**DRAFT_POSTS) == 1
            busy = requests.put(  # a new connection: most likely another worker
                f"{server.url}/v1/jobs/{second}/draft",
                json=draft_body(title="Second"),
                headers=server.headers,
                timeout=30,
            )
            assert busy.status_code == 429 and problem_slug(busy) == "site-busy", busy.text
            assert busy.headers["Retry-After"] == "1"
            # 201, or 200 when the delay outlasted GATEWAY_WP_TIMEOUT and a lookup found it
            assert slow.result(timeout=60).status_code in (200, 201)
        assert proxy.count(**DRAFT_POSTS) == 1  # the refused request never reached WordPress
        done = server.call("PUT", f"/v1/jobs/{second}/draft", json=draft_body(title="Second"))
        assert done.status_code == 201, done.text
    finally:
        server.kill()
