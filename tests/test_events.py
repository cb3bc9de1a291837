"""One event vocabulary, decided by the gateway at the change (issue 57, item 1).

What a user checks: the event rows in the ledger (``GET /v1/jobs/{id}/notifications``), one per
change however often it is asked for, the changes feed's events and ``GET /v1/event-types``.
The editorial changes that need no WordPress (comments, revocations, cancel, phase moves made
in the ledger) run offline; approving and scheduling run against the real test WordPress.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import threading

import pytest
from support import ROOT
from support import TENANT
from support import new_job_id
from test_editorial import approve
from test_editorial import make_draft
from test_editorial import post

from gateway.actions import notifications
from gateway.core import states
from gateway.jobs import records
from gateway.jobs import timeline
from gateway.ledger.db import database
from gateway.ledger.models import Approval
from gateway.ledger.models import Notification

VOCABULARY = [
    "approval_pending",
    "approved",
    "changes_requested",
    "commented",
    "scheduled",
    "published",
    "needs_attention",
    "revoked",
    "cancelled",
]


def rows(gw, job_id: str) -> list[dict]:
    answer = gw.client.get(f"/v1/jobs/{job_id}/notifications", headers=gw.headers())
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json()["notifications"]


def events(gw, job_id: str) -> list[str]:
    return [row["event"] for row in rows(gw, job_id)]


def key(job_id: str, name: str, version: int = 1) -> str:
    return f"{TENANT}/{job_id}/v{version}/notify/{name}"


def feed(gw, cursor: str | None = None) -> dict:
    query = {"cursor": cursor} if cursor else {}
    answer = gw.client.get("/v1/job-changes", query_string=query, headers=gw.headers())
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json()


def feed_events(page: dict, job_id: str) -> list[list[str]]:
    return [change["events"] for change in page["changes"] if change["job_id"] == job_id]


def in_ledger(gw, function, *args):
    with gw.app.app_context(), database.connection_context():
        return function(*args)


def move_to(gw, job_id: str, phase: str) -> None:
    """The job's phase moved as the gateway moves it on its own evidence (a read-back)."""
    in_ledger(gw, lambda: records.advance_phase(records.get_job(TENANT, job_id), phase, post_id=7))


def test_event_types_are_the_vocabulary_in_order_for_every_role(offline_gw):
    for role in ("workflow", "editor", "admin"):
        answer = offline_gw.client.get(
            "/v1/event-types", headers=offline_gw.headers(offline_gw.make_token(role))
        )
        assert answer.status_code == 200, answer.get_json()
        types = answer.get_json()["event_types"]
        assert [t["type"] for t in types] == VOCABULARY
        assert all(t["description"].strip() for t in types)
    assert offline_gw.client.get("/v1/event-types").status_code == 401
    # a client may post only the events that are not the editors' or the gateway's to decide
    schema = json.loads((ROOT / "gateway" / "schemas" / "notification.json").read_text())
    assert schema["properties"]["event"]["enum"] == list(states.CLIENT_EVENTS)


def test_the_alias_and_the_gateways_own_decision_are_one_event_row(offline_gw):
    gw = offline_gw
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    move_to(gw, job_id, "approval_pending")  # the gateway decides approval_pending itself
    assert events(gw, job_id) == ["approval_pending"]
    for name in ("ready_for_approval", "approval_pending", "ready_for_approval"):
        answer = gw.client.post(
            f"/v1/jobs/{job_id}/notifications", json={"event": name}, headers=gw.headers()
        )
        assert answer.status_code == 200, answer.get_json()
        view = answer.get_json()
        assert (view["event"], view["decided_now"]) == ("approval_pending", False)
        assert view["idempotency_key"] == key(job_id, "ready_for_approval")
    [row] = rows(gw, job_id)
    digest = hashlib.sha256(key(job_id, "ready_for_approval").encode()).hexdigest()
    assert row["event_id"] == "evt_" + digest[:32]
    # a row stored before the vocabulary, as ready_for_approval, reads as approval_pending
    in_ledger(
        gw,
        lambda: (
            Notification.update(event="ready_for_approval")
            .where(Notification.key == key(job_id, "ready_for_approval"))
            .execute()
        ),
    )
    assert events(gw, job_id) == ["approval_pending"]
    refused = gw.client.post(
        f"/v1/jobs/{job_id}/notifications", json={"event": "approved"}, headers=gw.headers()
    )
    assert refused.status_code == 422, refused.get_json()  # the editors' to decide


def test_comments_revocations_and_a_cancel_are_events_and_the_feed_lists_them(offline_gw):
    gw = offline_gw
    editor = gw.make_token("editor")
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    move_to(gw, job_id, "approval_pending")
    cursor = feed(gw)["next_cursor"]

    for note in ("Shorter title?", "Shorter title?"):  # the same words twice: two comments
        answer = post(gw, f"/v1/jobs/{job_id}/comments", {"note": note}, token=editor)
        assert answer.status_code == 201, answer.get_json()
    commented = [r for r in rows(gw, job_id) if r["event"] == "commented"]
    assert len(commented) == 2 and len({r["event_id"] for r in commented}) == 2
    assert all(r["reason"] == "Shorter title?" for r in commented)
    assert all(r["idempotency_key"].startswith(key(job_id, "commented/")) for r in commented)
    page = feed(gw, cursor)
    assert feed_events(page, job_id) == [["commented"]]  # approval_pending was before
    quiet = feed(gw, page["next_cursor"])
    assert feed_events(quiet, job_id) == []  # nothing new after the cursor

    def approval() -> int:
        return Approval.create(
            tenant=TENANT,
            job_id=job_id,
            task_version=1,
            post_id=7,
            content_sha256="0" * 64,
            expires_at=dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(hours=1),
            approved_by="test-editor",
        ).id

    approval_id = in_ledger(gw, approval)
    for _ in range(2):  # repeat-safe: the first revocation is the event
        answer = gw.client.delete(
            f"/v1/jobs/{job_id}/approvals/{approval_id}", headers=gw.headers(editor)
        )
        assert answer.status_code == 200, answer.get_json()
    [revoked] = [r for r in rows(gw, job_id) if r["event"] == "revoked"]
    assert revoked["reason"] == f"approval {approval_id} revoked by test-editor"
    page = feed(gw, page["next_cursor"])
    assert feed_events(page, job_id) == [["revoked"]]

    for _ in range(2):
        answer = post(gw, f"/v1/jobs/{job_id}/cancel", {"reason": "pulled"}, token=editor)
        assert answer.status_code == 200, answer.get_json()
    assert events(gw, job_id) == [
        "approval_pending",
        "commented",
        "commented",
        "revoked",
        "cancelled",
    ]
    assert rows(gw, job_id)[-1]["reason"] == "pulled"
    page = feed(gw, page["next_cursor"])
    assert feed_events(page, job_id) == [["cancelled"]]
    everything = [["approval_pending", "commented", "revoked", "cancelled"]]
    assert feed_events(feed(gw), job_id) == everything  # no cursor: every event row


def test_changes_requested_is_decided_once_with_the_note(offline_gw):
    gw = offline_gw
    editor = gw.make_token("editor")
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    move_to(gw, job_id, "verified")
    body = {"task_version": 1, "note": "Cite the source."}
    assert post(gw, f"/v1/jobs/{job_id}/changes-requests", body, token=editor).status_code == 201
    again = post(gw, f"/v1/jobs/{job_id}/changes-requests", body, token=editor)
    assert again.status_code == 409  # the decision stands
    assert [(r["event"], r["reason"]) for r in rows(gw, job_id)] == [
        ("changes_requested", "Cite the source.")
    ]


@pytest.mark.wordpress
def test_each_event_is_decided_once_at_its_change_through_a_scheduled_publish(gw):
    """approval_pending at the approval request, approved at the approval, scheduled at the
    publish read back as future, revoked at the revocation (which unschedules), published at
    the publish after a new approval: each once, however often the change is asked for."""
    editor = gw.make_token("editor")
    job_id = new_job_id()
    make_draft(gw, job_id)
    for _ in range(2):  # a re-run asks again: one approval request per version
        assert post(gw, f"/v1/jobs/{job_id}/approval-requests").status_code in (200, 201)
    assert events(gw, job_id) == ["approval_pending"]

    later = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)).isoformat()
    check = gw.verification(job_id).get_json()
    body = {
        "task_version": 1,
        "content_sha256": check["content_sha256"],
        "post_id": check["post_id"],
        "expires_at": (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat(),
        "publish_at": later,
    }
    assert post(gw, f"/v1/jobs/{job_id}/approvals", body, token=editor).status_code == 201
    cursor = feed(gw)["next_cursor"]
    scheduled = post(gw, f"/v1/jobs/{job_id}/publish")
    assert scheduled.get_json()["status"] == "future", scheduled.get_json()
    assert events(gw, job_id) == ["approval_pending", "approved", "scheduled"]
    assert feed_events(feed(gw, cursor), job_id) == [["scheduled"]]  # approved: before it

    approval_id = gw.job(job_id).get_json()["approvals"][0]["approval_id"]
    revoked = gw.client.delete(
        f"/v1/jobs/{job_id}/approvals/{approval_id}", headers=gw.headers(editor)
    )
    assert revoked.status_code == 200, revoked.get_json()
    assert gw.job(job_id).get_json()["phase"] == "approval_pending"  # unscheduled
    assert approve(gw, job_id, editor).status_code == 201  # approved again: same version
    published = post(gw, f"/v1/jobs/{job_id}/publish")
    assert published.get_json()["status"] == "publish", published.get_json()
    assert events(gw, job_id) == [
        "approval_pending",
        "approved",
        "scheduled",
        "revoked",
        "approved",  # the re-approval after the revocation decides the version again
        "published",
    ]
    keys = [r["idempotency_key"] for r in rows(gw, job_id)]
    assert keys[0] == key(job_id, "ready_for_approval")
    assert keys[1].startswith(key(job_id, "approved/"))
    assert keys[2].startswith(key(job_id, "scheduled/"))
    assert keys[4].startswith(key(job_id, "approved/")) and keys[4] != keys[1]
    assert keys[-1] == key(job_id, "published")
    assert approve(gw, job_id, editor).status_code == 201  # a second editor: nothing new
    assert events(gw, job_id).count("approved") == 2
    # the workflow's own notification of the publish finds the gateway's decision
    told = gw.client.post(
        f"/v1/jobs/{job_id}/notifications", json={"event": "published"}, headers=gw.headers()
    )
    assert told.status_code == 200 and told.get_json()["decided_now"] is False


@pytest.mark.wordpress
def test_racing_approvals_decide_one_approved_event(gw):
    job_id = new_job_id()
    make_draft(gw, job_id)
    assert post(gw, f"/v1/jobs/{job_id}/approval-requests").status_code == 201
    editors = [gw.make_token("editor") for _ in range(3)]
    answers, start = [], threading.Barrier(len(editors))

    def race(token: str) -> None:
        client = gw.app.test_client()
        check = client.get(f"/v1/jobs/{job_id}/verification", headers=gw.headers()).get_json()
        body = {
            "task_version": 1,
            "content_sha256": check["content_sha256"],
            "post_id": check["post_id"],
            "expires_at": (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat(),
        }
        start.wait()
        answers.append(
            client.post(f"/v1/jobs/{job_id}/approvals", json=body, headers=gw.headers(token))
        )

    threads = [threading.Thread(target=race, args=(token,)) for token in editors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a.status_code for a in answers] == [201] * 3, [a.get_json() for a in answers]
    assert events(gw, job_id) == ["approval_pending", "approved"]


def test_scheduled_is_decided_at_each_move_to_the_phase(offline_gw):
    """Issue 57: a post scheduled, unscheduled (its approval revoked) and scheduled again
    decides ``scheduled`` twice, one event row per move (keyed by its timeline entry)."""
    gw = offline_gw
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    move_to(gw, job_id, "scheduled")
    in_ledger(gw, lambda: records.end_schedule(records.get_job(TENANT, job_id)))
    move_to(gw, job_id, "scheduled")
    move_to(gw, job_id, "scheduled")  # no move: nothing new
    scheduled = [r for r in rows(gw, job_id) if r["event"] == "scheduled"]
    assert len(scheduled) == 2 and len({r["event_id"] for r in scheduled}) == 2
    assert all(r["idempotency_key"].startswith(key(job_id, "scheduled/")) for r in scheduled)


def test_the_feed_lists_each_event_once_not_at_every_later_change(offline_gw):
    """Issues 57: a poller filtering on ``approved`` fires once: a later comment is a change
    whose events are only ``commented``; a client's ``needs_attention`` appears in the feed."""
    gw = offline_gw
    editor = gw.make_token("editor")
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    move_to(gw, job_id, "approval_pending")
    start = feed(gw)
    assert feed_events(start, job_id) == [["approval_pending"]]

    def approved():
        job = records.get_job(TENANT, job_id)
        entry = timeline.record(job, states.APPROVED, "test-editor")
        notifications.decide(job, states.APPROVED, "by test-editor", entry.id)

    in_ledger(gw, approved)
    page = feed(gw, start["next_cursor"])
    assert feed_events(page, job_id) == [["approved"]]
    answer = post(gw, f"/v1/jobs/{job_id}/comments", {"note": "Nice."}, token=editor)
    assert answer.status_code == 201, answer.get_json()
    page = feed(gw, page["next_cursor"])
    assert feed_events(page, job_id) == [["commented"]]  # not "approved" again
    told = gw.client.post(
        f"/v1/jobs/{job_id}/notifications",
        json={"event": "needs_attention", "reason": "the run lost its sources"},
        headers=gw.headers(),
    )
    assert told.status_code == 201, told.get_json()
    page = feed(gw, page["next_cursor"])
    assert feed_events(page, job_id) == [["needs_attention"]]
    assert feed(gw, page["next_cursor"])["changes"] == []


def test_a_page_cut_short_loses_no_event_of_a_job_on_a_later_page(offline_gw):
    """A job listed only on the page after a cut (its latest change after the cut) still lists
    the events it had before the cut: the cut page's ``next_cursor`` carries where the events
    start, so a poller that reads every page hears each event."""
    gw = offline_gw
    editor = gw.make_token("editor")
    cursor = feed(gw, "now")["next_cursor"]
    first, second = new_job_id(), new_job_id()
    for job_id in (first, second):
        assert gw.put_job(job_id).status_code == 201
    move_to(gw, first, "approval_pending")  # before the cut...
    move_to(gw, second, "approval_pending")
    answer = post(gw, f"/v1/jobs/{first}/comments", {"note": "Later."}, token=editor)
    assert answer.status_code == 201, answer.get_json()  # ...and its latest change after it

    def page(at: str) -> dict:
        query = {"cursor": at, "limit": 1}
        answer = gw.client.get("/v1/job-changes", query_string=query, headers=gw.headers())
        assert answer.status_code == 200, answer.get_json()
        return answer.get_json()

    one = page(cursor)
    assert [c["job_id"] for c in one["changes"]] == [second]
    assert feed_events(one, second) == [["approval_pending"]]
    two = page(one["next_cursor"])
    assert [c["job_id"] for c in two["changes"]] == [first]
    assert feed_events(two, first) == [["approval_pending", "commented"]]
    assert page(two["next_cursor"])["changes"] == []
    bad = gw.client.get(
        "/v1/job-changes", query_string={"cursor": one["next_cursor"] + "~1"}, headers=gw.headers()
    )
    assert bad.status_code == 422, bad.get_json()
