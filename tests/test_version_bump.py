"""A new task version while the earlier version's create is unsettled (issue 51, "an n8n re-run
racing a version bump"): the earlier create is looked up before the new version writes, so a
job carries one post. Real WordPress behind the fault proxy; the XML-RPC cases run in the
SQLite pass only (``support.transport_param``), the SQL being the same on PostgreSQL.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from support import call_count
from support import call_fault
from support import draft_body
from support import hide_companion
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug
from support import xmlrpc_only

from gateway.operations import perform

pytestmark = pytest.mark.wordpress


def job_posts(gw, job_id: str) -> list[dict]:
    """Every post in WordPress (any status) whose title names ``job_id``: how a user counts
    the job's drafts."""
    answer = gw.wp.get(
        f"{gw.wp_url}/wp-json/wp/v2/posts",
        params={"search": job_id, "context": "edit", "status": "any", "per_page": 100},
        timeout=30,
    )
    answer.raise_for_status()
    return [p for p in answer.json() if job_id in p["title"]["raw"]]


def rows_by_key(gw, job_id: str) -> dict[str, dict]:
    return {row["operation_key"]: row for row in gw.operations(job_id)}


def problem_slug_or_none(answer) -> str | None:
    return problem_slug(answer) if answer.status_code >= 400 else None


def until_settled(send, tries: int = 6):
    """Call ``send`` again while it answers 409 ``operation-in-progress`` (the in-flight
    window of a create without the companion plugin's guard), honouring ``Retry-After``."""
    answers = [send()]
    while problem_slug_or_none(answers[-1]) == "operation-in-progress" and len(answers) < tries:
        time.sleep(min(float(answers[-1].headers.get("Retry-After", "1")), 2.0))
        answers.append(send())
    return answers


@xmlrpc_only
def test_a_new_version_updates_the_post_an_unknown_create_made(gwp, proxy, transport):
    """v1's create is written but its answer is lost and its lookup fails: v1 is UNKNOWN.
    After the bump, v2 is refused (503, naming v1's key) while v1 cannot be looked up, and
    nothing reaches WordPress; once it can, v1 is found and v2 updates that post: one post,
    the job's."""
    job_id = new_job_id()
    v1_key, v2_key = op_key(job_id, "draft"), op_key(job_id, "draft", version=2)
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(call_fault(transport, "create_post", "drop_response", times=1))
    proxy.add_fault(call_fault(transport, "lookup", "status_without_forward", times=None))
    v1 = gwp.put_draft(job_id, draft_body(title=f"Bump {job_id} one"))
    assert v1.status_code == 503 and problem_slug(v1) == "outcome-unknown", v1.get_json()
    assert gwp.put_job(job_id, task_version=2).status_code == 200
    v2_body = draft_body(title=f"Bump {job_id} two", content="<p>Version two.</p>")

    refused = gwp.put_draft(job_id, v2_body)
    problem = refused.get_json()
    assert refused.status_code == 503 and problem_slug(refused) == "outcome-unknown", problem
    assert problem["retryable"] is True and refused.headers.get("Retry-After")
    assert problem["operation_key"] == v1_key and problem["ledger_state"] == "UNKNOWN"
    assert "reconciled first" in problem["detail"]
    assert call_count(proxy, transport, "write", forwarded=True) == 1  # v1's create only
    assert v2_key not in rows_by_key(gwp, job_id)  # refused before v2 was claimed

    proxy.clear_faults()
    v2 = gwp.put_draft(job_id, v2_body)
    assert v2.status_code in (200, 201), v2.get_json()
    (post,) = job_posts(gwp, job_id)
    assert v2.get_json()["post_id"] == post["id"]
    assert post["title"]["raw"] == v2_body["title"]  # v2 wrote into v1's post
    assert gwp.job(job_id).get_json()["post_id"] == post["id"]
    rows = rows_by_key(gwp, job_id)
    assert rows[v1_key]["state"] == "CONFIRMED" and rows[v1_key]["remote_id"] == post["id"]
    assert rows[v2_key]["state"] == "CONFIRMED" and rows[v2_key]["remote_id"] == post["id"]
    assert call_count(proxy, transport, "create_post", forwarded=True) == 1


@xmlrpc_only
def test_a_new_version_creates_once_an_earlier_create_is_proven_absent(gwp, proxy, transport):
    """v1's create never reached WordPress (the client saw a 500): v1 is UNKNOWN. After the
    bump, v2 waits out v1's in-flight window (409 naming v1's key), then the lookup proves v1
    absent and v2 creates the job's one post."""
    job_id = new_job_id()
    v1_key, v2_key = op_key(job_id, "draft"), op_key(job_id, "draft", version=2)
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(call_fault(transport, "create_post", "status_without_forward", times=1))
    v1 = gwp.put_draft(job_id, draft_body(title=f"Absent {job_id} one"))
    assert v1.status_code == 503, v1.get_json()
    assert rows_by_key(gwp, job_id)[v1_key]["state"] == "UNKNOWN"
    assert gwp.put_job(job_id, task_version=2).status_code == 200
    v2_body = draft_body(title=f"Absent {job_id} two")

    answers = until_settled(lambda: gwp.put_draft(job_id, v2_body))
    assert all(a.get_json()["operation_key"] == v1_key for a in answers[:-1])
    assert answers[-1].status_code == 201, [a.get_json() for a in answers]
    (post,) = job_posts(gwp, job_id)
    assert answers[-1].get_json()["post_id"] == post["id"]
    assert post["title"]["raw"] == v2_body["title"]
    assert gwp.job(job_id).get_json()["post_id"] == post["id"]
    rows = rows_by_key(gwp, job_id)
    assert rows[v1_key]["state"] == "UNKNOWN" and rows[v1_key]["remote_id"] is None
    assert rows[v2_key]["state"] == "CONFIRMED" and rows[v2_key]["remote_id"] == post["id"]


def test_without_a_lookup_a_same_title_post_waits_for_an_editor(gwp, proxy):
    """REST without the companion plugin: nothing can look v1's create up by its key. Its
    post exists (the answer was lost), so after the in-flight window v2 is refused with a
    review item on v1 (a post with v1's title may be it) instead of creating a second post."""
    hide_companion(proxy)
    job_id = new_job_id()
    v1_key = op_key(job_id, "draft")
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(call_fault("rest", "create_post", "drop_response", times=1))
    v1 = gwp.put_draft(job_id, draft_body(title=f"Lookupless {job_id} one"))
    assert v1.status_code == 503, v1.get_json()
    assert gwp.put_job(job_id, task_version=2).status_code == 200

    answers = until_settled(lambda: gwp.put_draft(job_id, draft_body(title=f"{job_id} two")))
    last = answers[-1]
    assert last.status_code == 409 and problem_slug(last) == "needs-review", last.get_json()
    assert last.get_json()["operation_key"] == v1_key
    assert len(job_posts(gwp, job_id)) == 1
    assert call_count(proxy, "rest", "create_post", forwarded=True) == 1
    (review,) = gwp.job(job_id).get_json()["reviews"]
    assert review["operation_key"] == v1_key and review["kind"] == "suspected_duplicate"


def test_a_request_of_the_old_version_sends_nothing_after_the_bump(gw, monkeypatch):
    """An n8n re-run of v1's draft has claimed its key but not sent when the job is bumped and
    v2's draft runs (real threads, one ledger connection each): v1's send claim finds the job
    at v2 and sends nothing (409 ``stale-task-version``), v2 creates the job's one post."""
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    prepared, go = threading.Event(), threading.Event()
    real = perform.crash_point

    def pause_v1(config, name):  # v1's claim is committed, its send claim not yet made
        if name == "after_prepared" and not prepared.is_set():
            prepared.set()
            assert go.wait(60)
        real(config, name)

    monkeypatch.setattr(perform, "crash_point", pause_v1)
    with ThreadPoolExecutor(1) as pool:
        v1 = pool.submit(gw.put_draft, job_id, draft_body(title=f"Race {job_id} one"))
        assert prepared.wait(60)
        assert gw.put_job(job_id, task_version=2).status_code == 200
        v2 = gw.put_draft(job_id, draft_body(title=f"Race {job_id} two"))
        go.set()
        v1 = v1.result(timeout=60)
    assert v2.status_code == 201, v2.get_json()
    assert v1.status_code == 409 and problem_slug(v1) == "stale-task-version", v1.get_json()
    assert v1.get_json()["task_version"] == 2
    (post,) = job_posts(gw, job_id)
    assert post["id"] == v2.get_json()["post_id"] == gw.job(job_id).get_json()["post_id"]
    rows = rows_by_key(gw, job_id)
    assert rows[op_key(job_id, "draft")]["state"] == "PREPARED"  # never sent


def test_the_same_image_under_a_new_version_reuses_an_unknown_upload(gwp, proxy):
    """v1's upload of slot ``hero`` is written but its answer is lost and its lookup fails.
    After the bump the same bytes are refused (503, naming v1's key) while v1 cannot be looked
    up; once it can, v1's attachment is CONFIRMED and reused: one attachment for the slot."""
    job_id = new_job_id()
    v1_key = op_key(job_id, "media", "hero")
    v2_key = op_key(job_id, "media", "hero", version=2)
    image = png_bytes((3, 140, 60))
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(call_fault("rest", "upload", "drop_response", times=1))
    proxy.add_fault(call_fault("rest", "lookup", "status_without_forward", times=None))
    v1 = gwp.put_media(job_id, "hero", image, "hero.png")
    assert v1.status_code == 503 and problem_slug(v1) == "outcome-unknown", v1.get_json()
    assert gwp.put_job(job_id, task_version=2).status_code == 200

    refused = gwp.put_media(job_id, "hero", image, "hero.png")
    problem = refused.get_json()
    assert refused.status_code == 503 and problem["operation_key"] == v1_key, problem
    assert call_count(proxy, "rest", "upload", forwarded=True) == 1

    proxy.clear_faults()
    v2 = gwp.put_media(job_id, "hero", image, "hero.png")
    assert v2.status_code in (200, 201), v2.get_json()
    assert call_count(proxy, "rest", "upload", forwarded=True) == 1
    (found,) = gwp.lookup([v1_key, v2_key])
    assert found["type"] == "attachment" and v2.get_json()["media_id"] == found["id"]
    rows = rows_by_key(gwp, job_id)
    assert rows[v1_key]["state"] == rows[v2_key]["state"] == "CONFIRMED"
    assert rows[v1_key]["remote_id"] == rows[v2_key]["remote_id"] == found["id"]
