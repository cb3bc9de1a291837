"""Editors' notifications decided once by the gateway, and resuming a stopped job.

Notifications are delivered to a local HTTP receiver (the tenant's notification URL) that
counts POSTs and records their ``Idempotency-Key``; resumes are decided from a real ledger with
a real upload in the test WordPress. "A while ago" is made by moving the job's timestamps back
in the ledger, never by sleeping.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from n8n_support import Receiver
from n8n_support import wait_for
from servers import Server
from support import OFFLINE_SITE
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from support import gateway_cli_ok
from support import gateway_cli_process
from support import new_job_id
from support import png_bytes
from support import problem_slug

from gateway.actions import deliveries
from gateway.actions import fan_out
from gateway.actions import notifications
from gateway.actions import webhook_endpoints
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import Checkpoint
from gateway.ledger.models import Job
from gateway.ledger.models import Notification
from gateway.ledger.models import Operation
from gateway.ledger.models import ResumePoint
from gateway.ledger.models import WebhookDelivery
from gateway.operations import transitions
from gateway.recovery import reconciliation

FIXTURES = Path(__file__).parent / "fixtures"


def in_ledger(gw, function, *args):
    with gw.app.app_context(), database.connection_context():
        return function(*args)


def set_phase(gw, job_id: str, phase: str, post_id: int = 7) -> None:
    def advance():
        records.advance_phase(records.get_job(TENANT, job_id), phase, post_id=post_id)

    in_ledger(gw, advance)


def a_while_ago(gw, job_id: str, seconds: float = 3600) -> None:
    """Set every timestamp of the job to ``seconds`` ago (its last request was that long
    ago)."""

    def move():
        past = db.utcnow() - dt.timedelta(seconds=seconds)
        mine = {"tenant": TENANT, "job_id": job_id}
        for model, field in (
            (Job, Job.updated_at),
            (Job, Job.last_request_at),
            (Operation, Operation.updated_at),
            (Checkpoint, Checkpoint.created_at),
            (ResumePoint, ResumePoint.updated_at),
        ):
            model.update({field: past}).where(
                *(getattr(model, k) == v for k, v in mine.items())
            ).execute()

    in_ledger(gw, move)


def receive_at(gw, receiver) -> None:
    """Make ``receiver`` (on loopback, listed in GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS) the
    tenant's notification URL."""
    config = gw.app.config["GATEWAY"]
    listed = receiver.url.split("/")[2]
    config = config.with_overrides(notification_url_allow_hosts=frozenset({listed}))
    gw.app.config["GATEWAY"] = config
    in_ledger(gw, webhook_endpoints.set_legacy_url, config, TENANT, receiver.url)


def deliver(gw) -> dict:
    """One delivery pass, as the worker's delivery thread and the sweep make it."""
    return in_ledger(gw, deliveries.resend_pending, gw.app.config["GATEWAY"])


def delivery_of(key: str) -> WebhookDelivery:
    """The delivery of the notification ``key`` to the tenant's notification URL (since
    schema version 18 a delivery row holds the state, claim and refusals)."""
    return (
        WebhookDelivery.select()
        .join(Notification, on=WebhookDelivery.event_id == Notification.id)
        .where(Notification.key == key)
        .get()
    )


def notify(gw, job_id: str, event: str, reason: str | None = None, client=None):
    body = {"event": event, **({"reason": reason} if reason else {})}
    return (client or gw.client).post(
        f"/v1/jobs/{job_id}/notifications", json=body, headers=gw.headers()
    )


def test_ready_is_decided_once_and_delivered_once_under_one_key(offline_gw):
    gw = offline_gw
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    with Receiver() as editors:
        receive_at(gw, editors)
        early = notify(gw, job_id, "ready_for_approval")
        assert early.status_code == 409 and problem_slug(early) == "notification-not-due"
        set_phase(gw, job_id, "approval_pending")  # the gateway decides the event (issue 57)

        # a re-run, a retry and four racing executions all ask for the same notification
        answers = [notify(gw, job_id, "ready_for_approval") for _ in range(2)]
        racing = []

        def ask():
            racing.append(notify(gw, job_id, "ready_for_approval", client=gw.app.test_client()))

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        statuses = sorted(a.status_code for a in answers + racing)
        assert statuses == [200] * 6, statuses  # decided by the phase move, before any of them
        key = f"{TENANT}/{job_id}/v1/notify/ready_for_approval"
        # decided, not delivered: no request waits for the receiver (issue 29)
        assert editors.messages == []
        assert {a.get_json()["state"] for a in answers + racing} == {"PENDING"}
        assert deliver(gw) == {"delivered": 1, "pending": 0}  # the worker's delivery pass
        assert len(editors.messages) == 1, editors.messages
        assert editors.keys() == [key]
        assert editors.messages[0]["event"] == "approval_pending"  # the vocabulary's name
        assert editors.messages[0]["post_id"] == 7 and "authorization" not in editors.headers[0]
        assert deliver(gw) == {"delivered": 0, "pending": 0}  # nothing left to resend
        again = notify(gw, job_id, "ready_for_approval")
        assert again.status_code == 200 and again.get_json()["state"] == "DELIVERED"
        listed = gw.client.get(f"/v1/jobs/{job_id}/notifications", headers=gw.headers())
        assert [n["idempotency_key"] for n in listed.get_json()["notifications"]] == [key]


@pytest.mark.parametrize(
    ("phase", "told"),
    [
        ("approval_pending", "Draft 7 of job {} (version 1) is verified and waits for approval."),
        ("scheduled", "Post 7 of job {} (version 1) was approved and is scheduled to publish."),
        ("published", "Post 7 of job {} (version 1) was approved and is published already."),
    ],
    ids=["approval_pending", "scheduled", "published"],
)
def test_ready_for_approval_says_where_the_job_is(offline_gw, phase, told):
    """A late or repeated ``ready_for_approval`` (a workflow re-run after the post went
    live) is decided, but its text never says that a live post waits for approval."""
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    set_phase(offline_gw, job_id, phase)
    answer = notify(offline_gw, job_id, "ready_for_approval")
    # approval_pending was decided by the phase move itself; a job moved straight on was not
    assert answer.status_code == (200 if phase == "approval_pending" else 201), answer.get_json()
    assert answer.get_json()["event"] == "approval_pending"
    assert answer.get_json()["text"] == told.format(job_id)


def test_a_definitely_refused_notification_backs_off_and_stops_after_the_bound(offline_gw):
    """A receiver's 404 is a definite refusal: counted, the next pass waits out the back-off
    (nothing sent), and the GATEWAY_NOTIFICATION_MAX_REFUSALS-th refusal makes it REFUSED:
    never sent again. A 503 before it was not counted (an answer that may change)."""
    gw = offline_gw
    job_id = new_job_id()
    gw.put_job(job_id)
    set_phase(gw, job_id, "published")  # decides the event published (issue 57)
    assert notify(gw, job_id, "published").status_code == 200
    config = gw.app.config["GATEWAY"]
    gw.app.config["GATEWAY"] = config.with_overrides(notification_max_refusals=2)
    key = f"{TENANT}/{job_id}/v1/notify/published"

    def stored() -> WebhookDelivery:
        return in_ledger(gw, delivery_of, key)

    def back_off_passed() -> None:  # the back-off's time, passed
        in_ledger(
            gw,
            lambda: (
                WebhookDelivery.update(claimed_until=None)
                .where(WebhookDelivery.id == delivery_of(key).id)
                .execute()
            ),
        )

    with Receiver(statuses=[503, 404, 410, 200]) as editors:
        receive_at(gw, editors)
        assert deliver(gw) == {"delivered": 0, "pending": 1}  # 503: resent after 2 s
        retry = stored()
        wait = (retry.claimed_until - in_ledger(gw, db.db_now)).total_seconds()
        assert retry.refusals == 0 and 0 < wait <= deliveries.RETRY_SECONDS  # not counted
        assert deliver(gw) == {"delivered": 0, "pending": 1}  # backing off: nothing sent
        assert len(editors.messages) == 1
        back_off_passed()
        assert deliver(gw) == {"delivered": 0, "pending": 1}  # 404: refused once
        first = stored()
        assert (first.state, first.refusals) == ("PENDING", 1) and "HTTP 404" in first.last_error
        wait = (first.claimed_until - in_ledger(gw, db.db_now)).total_seconds()
        assert deliveries.BACKOFF_SECONDS - 5 < wait <= deliveries.BACKOFF_SECONDS
        assert deliver(gw) == {"delivered": 0, "pending": 1}  # backing off: nothing sent
        assert len(editors.messages) == 2
        back_off_passed()
        assert deliver(gw) == {"delivered": 0, "pending": 0}  # 410: the second refusal
        assert len(editors.messages) == 3
        back_off_passed()
        assert deliver(gw) == {"delivered": 0, "pending": 0}  # REFUSED: never resent
        assert len(editors.messages) == 3 and editors.keys() == [key] * 3
    again = notify(gw, job_id, "published")
    assert again.status_code == 200
    view = again.get_json()
    assert (view["state"], view["attempts"]) == ("REFUSED", 3) and "HTTP 410" in view["last_error"]


def test_an_undelivered_notification_is_resent_by_the_sweep_with_the_same_key(offline_gw):
    gw = offline_gw
    job_id = new_job_id()
    gw.put_job(job_id)
    set_phase(gw, job_id, "published")
    first = notify(gw, job_id, "published")  # no URL set yet: decided, not delivered
    assert first.status_code == 200  # decided by the phase move (issue 57)
    assert first.get_json()["state"] == "PENDING"
    assert deliver(gw) == {"delivered": 0, "pending": 0}  # no delivery row: nowhere to go
    listed = gw.client.get(f"/v1/jobs/{job_id}/notifications", headers=gw.headers())
    assert "notifications set-url" in listed.get_json()["notifications"][0]["last_error"]
    with Receiver(statuses=[503]) as editors:
        receive_at(gw, editors)
        assert deliver(gw) == {"delivered": 0, "pending": 1}
        in_ledger(  # the 503's back-off (2 s), passed
            gw,
            lambda: WebhookDelivery.update(claimed_until=None).execute(),
        )
        # the sweep resends through the action registry's ``notify`` entry (its sweep_pass)
        counts = in_ledger(gw, reconciliation.sweep, gw.app.config["GATEWAY"], 0)
        assert counts["notifications"] == {"delivered": 1, "pending": 0, "attention_decided": 0}
        again = notify(gw, job_id, "published")
        assert again.status_code == 200 and again.get_json()["state"] == "DELIVERED"
        assert again.get_json()["attempts"] == 2  # attempts count sends to the URL only
        key = f"{TENANT}/{job_id}/v1/notify/published"
        assert editors.keys() == [key, key]
        assert editors.messages[0] == editors.messages[1]  # the same body: a resend


def test_needs_attention_keeps_its_first_reason_and_idle_jobs_get_it_from_the_sweep(offline_gw):
    gw = offline_gw
    told, idle = new_job_id(), new_job_id()
    gw.put_job(told)
    gw.put_job(idle)
    no_reason = notify(gw, told, "needs_attention")
    assert no_reason.status_code == 422
    with Receiver() as editors:
        receive_at(gw, editors)
        assert notify(gw, told, "needs_attention", "the draft does not verify").status_code == 201
        assert deliver(gw)["delivered"] == 1
        second = notify(gw, told, "needs_attention", "another reason")
        assert second.status_code == 200
        assert second.get_json()["reason"] == "the draft does not verify"

        config = gw.app.config["GATEWAY"]
        idle_for = config.attention_after
        assert in_ledger(gw, notifications.attention_for_idle_jobs, config, idle_for) == 0
        a_while_ago(gw, idle, config.attention_after + 60)
        assert in_ledger(gw, notifications.attention_for_idle_jobs, config, idle_for) == 1
        assert in_ledger(gw, notifications.attention_for_idle_jobs, config, idle_for) == 0
        assert deliver(gw)["delivered"] == 1  # the sweep's delivery pass that follows
        events = [(m["job_id"], m["event"]) for m in editors.messages]
        assert events == [(told, "needs_attention"), (idle, "needs_attention")]
        assert "no request for" in editors.messages[1]["reason"]


def resume(gw, job_id: str):
    answer = gw.client.post(f"/v1/jobs/{job_id}/resume", json={}, headers=gw.headers())
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json()


def put_resume_point(gw, job_id: str, images: list[dict]):
    article = {"title": "Resumable", "content": "<p>x</p>\n{{media:diagram}}"}
    return gw.client.put(
        f"/v1/jobs/{job_id}/resume-point",
        json={"article": article, "images": images},
        headers=gw.headers(),
    )


def test_resume_point_refuses_image_bytes_and_oversize(offline_gw):
    gw = offline_gw
    job_id = new_job_id()
    gw.put_job(job_id)
    with_bytes = put_resume_point(gw, job_id, [{"slot": "hero", "content_base64": "iVBORw0K"}])
    assert with_bytes.status_code == 422 and problem_slug(with_bytes) == "validation-failed"
    many = [{"slot": f"s{i}", "alt_text": "x" * 1000, "title": "y" * 1000} for i in range(50)]
    assert put_resume_point(gw, job_id, many).status_code == 201  # 50 x 2 kB: within the cap
    bigger = gw.client.put(
        f"/v1/jobs/{job_id}/resume-point",
        json={"article": {"title": "t", "content": "c" * 300_000}, "images": []},
        headers=gw.headers(),
    )
    assert bigger.status_code == 413 and problem_slug(bigger) == "payload-too-large"


@pytest.mark.wordpress
def test_resume_within_the_budget_then_editors_are_told_once(gw):
    job_id = new_job_id()
    gw.put_job(job_id)
    image = png_bytes((10, 120, 200), size=4)
    with Receiver() as editors:
        receive_at(gw, editors)
        images = [
            {"slot": "hero", "url": "http://127.0.0.1:9/hero.png", "alt_text": "Hero"},
            {"slot": "diagram", "filename": "diagram.png"},  # sent as base64
        ]
        assert put_resume_point(gw, job_id, images).status_code == 201
        assert resume(gw, job_id)["action"] == "wait"  # a request just ran

        # the base64 image was never uploaded: only a person can send it again
        a_while_ago(gw, job_id)
        refused = resume(gw, job_id)
        assert refused["action"] == "needs_person" and "'diagram'" in refused["reason"]
        assert refused["notification"]["event"] == "needs_attention"
        assert refused["notification"]["state"] == "PENDING" and editors.messages == []
        assert deliver(gw) == {"delivered": 1, "pending": 0}
        assert len(editors.messages) == 1

    other = new_job_id()
    gw.put_job(other)
    with Receiver() as editors:
        assert gw.put_media(other, "diagram", image, "diagram.png").status_code == 201
        assert put_resume_point(gw, other, images).status_code == 201
        budget = gw.app.config["GATEWAY"].resume_budget
        for attempt in range(1, budget + 1):
            a_while_ago(gw, other)
            answer = resume(gw, other)
            assert answer["action"] == "resume" and answer["attempts"] == attempt, answer
            diagram = answer["input"]["images"][1]
            assert diagram["uploaded"] is True
            assert diagram["content_sha256"] == hashlib.sha256(image).hexdigest()
            assert answer["input"]["images"][0]["url"] == images[0]["url"]
            assert answer["input"]["article"]["title"] == "Resumable"
        receive_at(gw, editors)
        for _ in range(2):
            a_while_ago(gw, other)
            past = resume(gw, other)
            assert past["action"] == "needs_person" and f"resumed {budget} times" in past["reason"]
        deliver(gw)
        assert [m["job_id"] for m in editors.messages] == [other]  # told once


def test_a_release_0_1_0_ledger_migrates_and_takes_a_notification_url(tmp_path):
    path = tmp_path / "ledger-0.1.0.db"
    with sqlite3.connect(path) as connection:
        connection.executescript((FIXTURES / "ledger-0.1.0.sql").read_text())
    env = {
        **os.environ,
        "GATEWAY_DATABASE_URL": f"sqlite:///{path}",
        "GATEWAY_SECRET_KEY": SECRET_KEY,
    }

    def cli(*args):
        return gateway_cli_process(list(args), env)  # in-process: the answer is the point

    assert cli("init-db").returncode == 0
    # loopback passes the address guard only when listed (issue 29)
    refused = cli("notifications", "set-url", "--tenant", "acme", "--url", "http://127.0.0.1:9/n")
    assert refused.returncode == 2 and "127.0.0.1 is not a public address" in refused.stderr
    env["GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS"] = "127.0.0.1:9"
    done = cli("notifications", "set-url", "--tenant", "acme", "--url", "http://127.0.0.1:9/n")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["tenant"] == "acme" and answer["url"] == "http://127.0.0.1:9/n"
    assert answer["endpoint_id"].startswith("ep_")  # the tenant's legacy webhook endpoint
    counts = json.loads(cli("reconcile").stdout)
    # the fixture's job is verified without an approval request, untouched for long: not
    # done, so the sweep decides "needs attention" for it (issue 30), once, and its delivery
    # pass tries it (the URL is down)
    assert counts["notifications"] == {"delivered": 0, "pending": 1, "attention_decided": 1}
    again = json.loads(cli("reconcile").stdout)  # resent (the URL is down), not decided again
    assert again["notifications"] == {"delivered": 0, "pending": 1, "attention_decided": 0}


def test_the_address_guard_runs_again_at_send_time_and_errors_name_no_path(offline_gw):
    """Issue 29: a notification URL passes the address guard when it is set and again at
    every send (the connection pinned to the address checked). Set while its loopback
    ``host:port`` was listed, it is refused once the allow-list no longer names it: nothing is
    sent, and ``last_error`` names the origin only (a chat webhook's path is its secret)."""
    gw = offline_gw
    job_id = new_job_id()
    gw.put_job(job_id)
    with Receiver() as editors:
        receive_at(gw, editors)
        gw.app.config["GATEWAY"] = gw.app.config["GATEWAY"].with_overrides(
            notification_url_allow_hosts=frozenset()
        )
        assert notify(gw, job_id, "needs_attention", "stuck").status_code == 201
        assert deliver(gw) == {"delivered": 0, "pending": 1}
        assert editors.messages == []
        listed = gw.client.get(f"/v1/jobs/{job_id}/notifications", headers=gw.headers())
        error = listed.get_json()["notifications"][0]["last_error"]
        assert "127.0.0.1 is not a public address" in error and "/editors" not in error


def _pending(tenant: str, n: int) -> None:
    """``n`` PENDING notifications of ``tenant``, decided as :func:`notifications.decide`
    leaves them (the deliveries are what this test watches)."""
    for i in range(n):
        job_id = new_job_id()
        Notification.create(
            key=f"{tenant}/{job_id}/v1/notify/ready_for_approval",
            tenant=tenant,
            job_id=job_id,
            task_version=1,
            event="ready_for_approval",
            payload={"event": "ready_for_approval", "job_id": job_id, "n": i},
        )


def test_a_slow_receiver_delays_only_its_own_tenant_and_a_held_row_stops_no_one(offline_gw):
    """Issue 40, row 5 and the dead sender: rival's receiver answers 200 after 1 s; rival
    has 6 notifications pending, acme 1 after them. One pass gives the tenants turns: acme's
    arrives within the pass's first two seconds (before: after all of rival's, 6 s), rival
    stops after its slice (GATEWAY_NOTIFICATION_TIMEOUT, 3 s here) and goes on next pass. A
    row another sender holds is passed over and the tenant's other rows go on; the pass
    counts only what it delivered."""
    gw = offline_gw
    with Receiver(delay=1.0) as slow, Receiver() as quick:
        hosts = frozenset(r.url.split("/")[2] for r in (slow, quick))
        config = gw.app.config["GATEWAY"].with_overrides(
            notification_url_allow_hosts=hosts, notification_timeout=3.0
        )
        in_ledger(gw, webhook_endpoints.set_legacy_url, config, "rival", slow.url)
        in_ledger(gw, webhook_endpoints.set_legacy_url, config, TENANT, quick.url)
        in_ledger(gw, _pending, "rival", 6)
        in_ledger(gw, _pending, TENANT, 2)
        in_ledger(gw, fan_out.fan_out_all)  # their delivery rows, as a pass makes them
        held = in_ledger(gw, lambda: WebhookDelivery.get(WebhookDelivery.tenant == TENANT))
        held_key = in_ledger(gw, lambda: Notification.get_by_id(held.event_id).key)
        # another sender claimed acme's first row and died holding it
        assert in_ledger(gw, transitions.claim_delivery, held, 60)
        started = time.monotonic()
        counts = in_ledger(gw, deliveries.resend_pending, config)
        assert len(quick.messages) == 1 and quick.arrivals[0] - started < 2.0, quick.arrivals
        assert quick.keys() != [held_key]  # the held row was passed over, the other sent
        assert 3 <= len(slow.messages) <= 4  # rival's slice: about 3 s of 1 s answers
        assert counts == {
            "delivered": 1 + len(slow.messages),
            "pending": 8 - 1 - len(slow.messages),
        }
        again = in_ledger(gw, deliveries.resend_pending, config)
        assert again["delivered"] >= 1 and len(quick.messages) == 1  # acme's held row waits


def test_a_row_claimed_after_the_pass_listed_it_is_passed_over_and_the_rest_go_on(offline_gw):
    """Issue 40, the dead sender's race: another sender claims acme's oldest row after the
    pass listed it (while the pass waits 2 s on rival's older one) and dies holding it. The
    pass meets the claim, passes the row over and delivers acme's two others (before: it took
    the lost claim for acme's receiver failing and left them for the next pass); it counts
    only what it delivered."""
    gw = offline_gw
    with Receiver(delay=2.0) as slow, Receiver() as quick:
        hosts = frozenset(r.url.split("/")[2] for r in (slow, quick))
        config = gw.app.config["GATEWAY"].with_overrides(notification_url_allow_hosts=hosts)
        in_ledger(gw, webhook_endpoints.set_legacy_url, config, "rival", slow.url)
        in_ledger(gw, webhook_endpoints.set_legacy_url, config, TENANT, quick.url)
        in_ledger(gw, _pending, "rival", 1)
        in_ledger(gw, _pending, TENANT, 3)
        in_ledger(gw, fan_out.fan_out_all)  # their delivery rows, as a pass makes them
        rows = in_ledger(gw, lambda: list(Notification.select().order_by(Notification.id)))
        acme = rows[1:]  # after rival's
        held = in_ledger(gw, delivery_of, acme[0].key)
        with ThreadPoolExecutor(1) as pool:
            delivery = pool.submit(in_ledger, gw, deliveries.resend_pending, config)
            wait_for(lambda: slow.arrivals, 10, "the pass did not start", interval=0.02)
            assert in_ledger(gw, transitions.claim_delivery, held, 60)
            counts = delivery.result(timeout=30)
        assert len(slow.messages) == 1 and sorted(quick.keys()) == sorted(n.key for n in acme[1:])
        assert counts == {"delivered": 3, "pending": 1}


@pytest.mark.postgresql_pass  # three gateway processes share one ledger only on PostgreSQL
def test_a_sender_killed_holding_a_claim_stops_none_of_its_tenants_other_notifications(
    ledger_url, tmp_path
):
    """Issue 40, the dead sender, as deployed: three ``gateway serve`` processes (one worker
    each) on one PostgreSQL ledger. acme's receiver never answers the first delivery; the
    process sending it is SIGKILLed with it in flight, so its claim on acme's oldest PENDING
    notification stays in the ledger for 30 s (GATEWAY_NOTIFICATION_TIMEOUT + 20). Six more
    notifications of acme, decided through the two survivors, all arrive while that claim
    holds; once it has run out (moved into the past in the ledger, not slept for) a survivor
    delivers the held one, answered once. (A pass before the fix, d312f3e, also skipped a
    row already held when it listed it, so this held there too; the race it lost, a claim
    landing after the listing, is the test above.)"""
    with Receiver(hang=1) as editors:
        servers = [Server(OFFLINE_SITE, ledger_url, tmp_path) for _ in range(3)]
        try:
            for server in servers:
                server.env["GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS"] = editors.url.split("/")[2]
            with ThreadPoolExecutor(3) as pool:
                list(pool.map(lambda server: server.start(workers=1), servers))
            set_url = ["notifications", "set-url", "--tenant", TENANT, "--url", editors.url]
            gateway_cli_ok(set_url, servers[0].env)
            jobs = [new_job_id() for _ in range(7)]
            for job_id in jobs:
                job = {"site": SITE_NAME, "task_version": 1}
                assert servers[0].call("PUT", f"/v1/jobs/{job_id}", json=job).status_code == 201
            held_key = _needs_attention(servers[0], jobs[0])
            [(key, port)] = wait_for(lambda: editors.hung, 30, "no sender took the first one")
            [sender] = [s for s in servers if s.has_connection_from(port)]
            sender.kill()  # with the delivery in flight: its claim stays
            survivors = [s for s in servers if s is not sender]
            db.bind(ledger_url)
            held = _row(held_key)
            assert key == held_key and (held.state, held.attempts) == ("PENDING", 1)
            assert held.last_error is None  # the attempt never ended: its sender died in it
            assert (held.claimed_until - _ledger(db.db_now)).total_seconds() > 20

            keys = [_needs_attention(survivors[i % 2], j) for i, j in enumerate(jobs[1:])]
            wait_for(lambda: set(keys) <= set(editors.keys()), 10, f"{editors.keys()} of {keys}")
            held = _row(held_key)
            left = (held.claimed_until - _ledger(db.db_now)).total_seconds()
            assert held.state == "PENDING" and left > 15, left  # well before the claim ran out

            _ledger(  # the dead sender's 30 s have run out
                lambda: (
                    WebhookDelivery.update(claimed_until=db.db_now() - dt.timedelta(seconds=1))
                    .where(WebhookDelivery.id == delivery_of(held_key).id)
                    .execute()
                )
            )
            wait_for(lambda: _row(held_key).state == "DELIVERED", 15, "the held one waits on")
            listed = survivors[0].call("GET", f"/v1/jobs/{jobs[0]}/notifications").json()
            assert [(n["state"], n["attempts"]) for n in listed["notifications"]] == [
                ("DELIVERED", 2)  # the dead sender's attempt and the survivor's
            ]
        finally:
            for server in servers:
                server.kill()
        assert editors.hung == [(held_key, port)]
        assert sorted(editors.keys()) == sorted([held_key, *keys])  # each answered once
        assert _ledger(lambda: {d.state for d in WebhookDelivery.select()}) == {"DELIVERED"}


def _needs_attention(server: Server, job_id: str) -> str:
    """Decide ``needs_attention`` for ``job_id`` through ``server``; its key."""
    body = {"event": "needs_attention", "reason": "the draft does not verify"}
    answer = server.call("POST", f"/v1/jobs/{job_id}/notifications", json=body)
    assert answer.status_code == 201 and answer.json()["state"] == "PENDING", answer.text
    return answer.json()["idempotency_key"]


def _ledger(function):
    with database.connection_context():
        return function()


def _row(key: str) -> WebhookDelivery:
    return _ledger(lambda: delivery_of(key))
