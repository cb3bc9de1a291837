"""The changes feed ``GET /v1/job-changes`` (issue 33, polled by the n8n trigger node): jobs
changed after a cursor with their ``approval_pending``, ``published`` and ``needs_attention``
events, against the real test WordPress (the fault proxy in front for a lost answer)."""

from __future__ import annotations

from support import call_fault
from support import draft_body
from support import new_job_id
from support import problem_slug


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
