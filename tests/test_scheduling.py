"""Scheduled publishing against the real test WordPress (issue 14, part 2). The test site sets
DISABLE_WP_CRON, so the test runs wp-cron.php itself where WordPress would."""

from __future__ import annotations

import datetime as dt

import pytest
from support import both_transports
from support import draft_body
from support import new_job_id
from support import op_key
from test_editorial import post
from test_review_page import _sign_in

from gateway.actions import scheduling
from gateway.ledger.db import database
from gateway.ledger.models import Operation
from gateway.recovery import reconciliation
from gateway_tools.fault_proxy import Fault

pytestmark = pytest.mark.wordpress
UTC_MINUS_5 = dt.timezone(dt.timedelta(hours=-5))


def _approved(gw, editor: str, publish_at: dt.datetime) -> tuple[str, int]:
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    draft = gw.put_draft(job_id, draft_body(title=f"Scheduled {job_id}"))
    assert draft.status_code == 201, draft.get_json()
    assert post(gw, f"/v1/jobs/{job_id}/approval-requests").status_code == 201
    check = gw.verification(job_id).get_json()
    body = {
        "task_version": 1,
        "content_sha256": check["content_sha256"],
        "post_id": check["post_id"],
        "expires_at": (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat(),
        "publish_at": publish_at.isoformat(),
    }
    answer = post(gw, f"/v1/jobs/{job_id}/approvals", body, token=editor)
    assert answer.status_code == 201, answer.get_json()
    return job_id, check["post_id"]


def _sweep(gw) -> dict:
    with gw.app.app_context(), database.connection_context():
        return reconciliation.sweep(gw.app.config["GATEWAY"], older_than=0)


def _settings(gw, **fields) -> dict:
    answer = gw.wp.post(f"{gw.wp_url}/wp-json/wp/v2/settings", json=fields, timeout=30)
    answer.raise_for_status()
    return answer.json()


@pytest.fixture
def utc_minus_5_site(gw):
    assert _settings(gw, timezone="America/Bogota")["timezone"] == "America/Bogota"  # UTC-5
    yield
    _settings(gw, timezone="UTC")


def _shift_schedule_into_the_past(gw, job_id: str) -> None:
    """The gateway's view of time moved past the schedule (WordPress schedules at least a
    minute ahead; the test does not wait for it): the receipt's time, not WordPress's."""
    with gw.app.app_context(), database.connection_context():
        row = Operation.get(Operation.operation_key == op_key(job_id, "publish"))
        past = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)).replace(microsecond=0)
        receipt = {**row.receipt, "scheduled_for": past.isoformat()}
        Operation.update(receipt=receipt).where(Operation.id == row.id).execute()


@both_transports
@pytest.mark.site_exclusive  # the site's timezone changes for the whole site
def test_scheduled_on_a_utc_minus_5_site_then_missed_then_published(
    gw, utc_minus_5_site, monkeypatch
):
    editor = gw.make_token("editor")
    when = (dt.datetime.now(dt.UTC) + dt.timedelta(minutes=10)).replace(microsecond=0)
    job_id, post_id = _approved(gw, editor, when.astimezone(UTC_MINUS_5))
    answer = post(gw, f"/v1/jobs/{job_id}/publish")
    assert answer.status_code == 201, answer.get_json()
    assert answer.get_json()["status"] == "future"
    assert answer.get_json()["scheduled_for"] == when.isoformat()
    live = gw.wp_post(post_id)
    assert live["status"] == "future"
    assert live["date_gmt"] == when.replace(tzinfo=None).isoformat()  # no timezone shift
    assert live["date"] == when.astimezone(UTC_MINUS_5).replace(tzinfo=None).isoformat()
    assert gw.job(job_id).get_json()["phase"] == "scheduled"
    assert gw.verification(job_id).get_json()["fields"]["status"]["ok"] is True
    assert post(gw, f"/v1/jobs/{job_id}/publish").headers["Idempotent-Replayed"] == "true"
    assert _sweep(gw)["missed"] == 0  # its time has not come

    _shift_schedule_into_the_past(gw, job_id)
    monkeypatch.setattr(scheduling, "MISSED_AFTER", 0.0)
    assert _sweep(gw)["missed"] == 1  # still future after its time: no cron ran
    report = gw.client.get("/v1/report", headers=gw.headers(editor)).get_json()
    assert [m["job_id"] for m in report["missed_schedules"]] == [job_id]
    assert _sign_in(gw.client, editor).status_code == 303
    page = gw.client.get("/review").get_data(as_text=True)
    assert "Missed schedules" in page and job_id in page.split('id="missed"')[1]

    now = dt.datetime.now(dt.UTC).replace(microsecond=0, tzinfo=None).isoformat()
    gw.wp_update_post(post_id, {"status": "publish", "date_gmt": now})  # as cron would
    assert _sweep(gw)["published"] == 1
    assert gw.job(job_id).get_json()["phase"] == "published"
    report = gw.client.get("/v1/report", headers=gw.headers(editor)).get_json()
    assert report["missed_schedules"] == []


@both_transports
def test_past_time_publishes_now_and_cancel_or_revoke_unschedule(gw):
    editor = gw.make_token("editor")
    job_id, post_id = _approved(gw, editor, dt.datetime.now(UTC_MINUS_5) - dt.timedelta(hours=1))
    answer = post(gw, f"/v1/jobs/{job_id}/publish")
    assert answer.status_code == 201 and answer.get_json()["status"] == "publish"
    assert gw.wp_post(post_id)["status"] == "publish"

    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    for how in ("cancel", "revoke"):
        job_id, post_id = _approved(gw, editor, later)
        assert post(gw, f"/v1/jobs/{job_id}/publish").status_code == 201
        assert gw.wp_post(post_id)["status"] == "future"
        if how == "cancel":
            done = post(gw, f"/v1/jobs/{job_id}/cancel", {"reason": "pulled"}, token=editor)
        else:
            approval_id = gw.job(job_id).get_json()["approvals"][0]["approval_id"]
            done = gw.client.delete(
                f"/v1/jobs/{job_id}/approvals/{approval_id}", headers=gw.headers(editor)
            )
        assert done.status_code == 200, done.get_json()
        assert gw.wp_post(post_id)["status"] == "draft", how
        rows = {r["operation_key"]: r for r in gw.operations(job_id)}
        assert rows[op_key(job_id, "unschedule")]["state"] == "CONFIRMED", how


def test_cancel_while_wordpress_fails_leaves_the_unschedule_to_the_sweep(gwp, proxy):
    editor = gwp.make_token("editor")
    job_id, post_id = _approved(gwp, editor, dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))
    assert post(gwp, f"/v1/jobs/{job_id}/publish").status_code == 201
    proxy.add_fault(
        Fault(kind="status_without_forward", status=500, method="POST", path=r"/posts/\d+/?$")
    )
    done = post(gwp, f"/v1/jobs/{job_id}/cancel", {"reason": "pulled"}, token=editor)
    assert done.status_code == 200 and done.get_json()["cancelled"] is True
    assert gwp.wp_post(post_id)["status"] == "future"  # WordPress never saw the write
    key = op_key(job_id, "unschedule")
    assert {r["operation_key"]: r["state"] for r in gwp.operations(job_id)}[key] == "UNKNOWN"

    assert _sweep(gwp)["unscheduled"] == 1
    assert gwp.wp_post(post_id)["status"] == "draft"
    assert {r["operation_key"]: r["state"] for r in gwp.operations(job_id)}[key] == "CONFIRMED"


@both_transports
def test_unscheduled_then_approved_without_a_time_publishes_now(gw, transport):
    """Issue 28, wordpress-mobile/WordPress-Android#12086: a scheduled post set back to draft
    keeps its future date. Schedule +3 h, revoke (the post goes back to draft), approve again
    without ``publish_at``, publish: published now (201, a new publish round), not a replay of
    the old ``future`` receipt, and WordPress holds a published post dated now."""
    editor = gw.make_token("editor")
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=3)
    job_id, post_id = _approved(gw, editor, later)
    assert post(gw, f"/v1/jobs/{job_id}/publish").get_json()["status"] == "future"
    approval_id = gw.job(job_id).get_json()["approvals"][0]["approval_id"]
    revoked = gw.client.delete(
        f"/v1/jobs/{job_id}/approvals/{approval_id}", headers=gw.headers(editor)
    )
    assert revoked.status_code == 200, revoked.get_json()
    assert gw.wp_post(post_id)["status"] == "draft"
    assert gw.job(job_id).get_json()["phase"] == "approval_pending"
    check = gw.verification(job_id).get_json()
    assert check["ok"] is True, check  # a draft is what is expected now
    body = {
        "task_version": 1,
        "content_sha256": check["content_sha256"],
        "post_id": post_id,
        "expires_at": (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat(),
    }
    assert post(gw, f"/v1/jobs/{job_id}/approvals", body, token=editor).status_code == 201

    published = post(gw, f"/v1/jobs/{job_id}/publish")
    assert published.status_code == 201, published.get_json()
    assert "Idempotent-Replayed" not in published.headers
    assert published.get_json()["status"] == "publish"
    live = gw.wp_post(post_id)
    assert live["status"] == "publish"
    dated = dt.datetime.fromisoformat(live["date_gmt"]).replace(tzinfo=dt.UTC)
    assert abs((dated - dt.datetime.now(dt.UTC)).total_seconds()) < 600  # now, not +3 h
    assert gw.job(job_id).get_json()["phase"] == "published"
    rows = {r["operation_key"]: r for r in gw.operations(job_id)}
    assert rows[op_key(job_id, "publish")]["receipt"]["status"] == "future"  # round 1, ended
    assert rows[op_key(job_id, "unschedule")]["state"] == "CONFIRMED"
    assert rows[op_key(job_id, "publish", "r2")]["receipt"]["status"] == "publish"
    again = post(gw, f"/v1/jobs/{job_id}/publish")
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["status"] == "publish"
