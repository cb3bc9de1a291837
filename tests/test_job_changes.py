"""The changes feed ``GET /v1/job-changes`` (issue 33, polled by the n8n trigger node): jobs
changed after a cursor with their ``approval_pending``, ``published`` and ``needs_attention``
events, against the real test WordPress (the fault proxy in front for a lost answer).

Issue 41: a run that stopped without an error (``in_progress``, no row changes) becomes a
change at its attention time, once; ``cursor=now`` starts a new poller from now. "An hour ago"
is made by moving the job's times back in the ledger, never by sleeping.
"""

from __future__ import annotations

import datetime as dt

from support import TENANT
from support import call_fault
from support import draft_body
from support import new_job_id
from support import png_bytes
from support import problem_slug

from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import Job
from gateway.ledger.models import Operation


def changes(gw, cursor: str | None = None, limit: int | None = None):
    query = {k: v for k, v in (("cursor", cursor), ("limit", limit)) if v is not None}
    answer = gw.client.get("/v1/job-changes", query_string=query, headers=gw.headers())
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json()


def events_of(feed: dict, job_id: str) -> list[list[str]]:
    return [c["events"] for c in feed["changes"] if c["job_id"] == job_id]


def test_approval_pending_is_an_event_once_and_a_later_change_comes_again(gw):
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    first = changes(gw)
    assert events_of(first, job_id) == [[]]
    assert gw.put_draft(job_id, draft_body()).status_code == 201
    requested = gw.client.post(
        f"/v1/jobs/{job_id}/approval-requests", json={}, headers=gw.headers()
    )
    assert requested.status_code == 201, requested.get_json()

    second = changes(gw, first["next_cursor"])
    assert events_of(second, job_id) == [["approval_pending"]]
    assert second["changes"][-1]["phase"] == "approval_pending"
    quiet = changes(gw, second["next_cursor"])
    assert quiet == {"changes": [], "next_cursor": second["next_cursor"]}

    cancelled = gw.client.post(
        f"/v1/jobs/{job_id}/cancel", json={"reason": "test"}, headers=gw.headers()
    )
    assert cancelled.status_code == 200, cancelled.get_json()
    again = changes(gw, second["next_cursor"])
    assert [(c["job_id"], c["status"]) for c in again["changes"]] == [(job_id, "cancelled")]


def test_limit_pages_without_losing_a_job(gw):
    made = [new_job_id() for _ in range(3)]
    for job_id in made:
        assert gw.put_job(job_id).status_code == 201
    seen, cursor = [], None
    while True:
        page = changes(gw, cursor, limit=1)
        if not page["changes"]:
            break
        assert len(page["changes"]) == 1
        seen += [c["job_id"] for c in page["changes"]]
        cursor = page["next_cursor"]
    assert [j for j in seen if j in made] == made


def test_an_unknown_outcome_is_needs_attention(gwp, proxy, transport):
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    cursor = changes(gwp)["next_cursor"]
    proxy.add_fault(call_fault(transport, "create_post", "drop_response", times=1))
    proxy.add_fault(call_fault(transport, "lookup", "status_without_forward", status=503, times=1))
    lost = gwp.put_draft(job_id, draft_body(title=f"Lost {job_id}"))
    assert lost.status_code == 503, lost.get_json()
    feed = changes(gwp, cursor)
    assert events_of(feed, job_id) == [["needs_attention"]]
    assert [c["status"] for c in feed["changes"] if c["job_id"] == job_id] == ["unknown"]


def test_a_cursor_the_feed_did_not_give_is_422_with_its_pointer(gw):
    for bad in ("yesterday", "2026-01-01T00:00:00.000000~99999999999", "1~1"):
        answer = gw.client.get(
            "/v1/job-changes", query_string={"cursor": bad}, headers=gw.headers()
        )
        assert answer.status_code == 422, bad
        assert problem_slug(answer) == "validation-failed"
        assert answer.get_json()["errors"][0]["pointer"] == "/cursor"
    answer = gw.client.get("/v1/job-changes?limit=0", headers=gw.headers())
    assert answer.status_code == 422 and answer.get_json()["errors"][0]["pointer"] == "/limit"


def moved_back(gw, job_id: str, seconds: float) -> dt.datetime:
    """Every time of the job and its ledger rows ``seconds`` earlier, as if its run had
    stopped that long ago; returns the job's last client request as stored now."""
    back = dt.timedelta(seconds=seconds)
    with gw.app.app_context(), database.connection_context():
        job = Job.get(Job.tenant == TENANT, Job.job_id == job_id)
        for name in ("created_at", "updated_at", "last_request_at"):
            setattr(job, name, getattr(job, name) - back)
        job.save()
        for row in Operation.select().where(Operation.tenant == TENANT, Operation.job_id == job_id):
            row.created_at, row.updated_at = row.created_at - back, row.updated_at - back
            row.save()
        return job.last_request_at


def test_a_stalled_run_is_needs_attention_once_at_its_attention_time(gw):
    """A run uploaded an image into WordPress and stopped: the job stays ``in_progress`` and
    no row changes. At its attention time (``GATEWAY_ATTENTION_AFTER`` after its last client
    request) it is a change with ``needs_attention``, listed once; a client request moves
    the attention time later."""
    after = gw.app.config["GATEWAY"].attention_after
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    image = png_bytes((90, 20, 160), size=4)
    uploaded = gw.put_media(job_id, "hero", image, "hero.png")
    assert uploaded.status_code == 201, uploaded.get_json()
    assert not gw.wp_media(uploaded.get_json()["media_id"])["post"]  # an orphan in WordPress
    last_request = moved_back(gw, job_id, after + 120)

    feed = changes(gw)
    [entry] = [c for c in feed["changes"] if c["job_id"] == job_id]
    assert (entry["status"], entry["events"]) == ("in_progress", ["needs_attention"])
    crossed = last_request + dt.timedelta(seconds=after)
    assert entry["changed_at"] == db.rfc3339(crossed)  # its place: the attention time
    assert changes(gw, feed["next_cursor"]) == {"changes": [], "next_cursor": feed["next_cursor"]}
    assert changes(gw, feed["next_cursor"])["changes"] == []  # not at every poll

    # a poller whose cursor is past that moment does not see it again
    fresh = new_job_id()
    assert gw.put_job(fresh).status_code == 201
    [later] = changes(gw, feed["next_cursor"])["changes"]
    assert later["job_id"] == fresh and later["events"] == []

    # the run resumes (a client request): no longer stalled, its attention time moves on
    again = gw.put_media(job_id, "hero", image, "hero.png")
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    [resumed] = [c for c in changes(gw)["changes"] if c["job_id"] == job_id]
    assert resumed["events"] == [], resumed


def test_cursor_now_starts_a_new_poller_from_now(offline_gw):
    gw = offline_gw
    before = new_job_id()
    assert gw.put_job(before).status_code == 201
    start = changes(gw, "now")
    assert start["changes"] == [] and start["next_cursor"], start
    assert changes(gw, start["next_cursor"])["changes"] == []  # the history is not listed
    after = new_job_id()
    assert gw.put_job(after).status_code == 201
    assert [c["job_id"] for c in changes(gw, start["next_cursor"])["changes"]] == [after]
    assert [c["job_id"] for c in changes(gw)["changes"]] == [before, after]
