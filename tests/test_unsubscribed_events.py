"""Events no webhook endpoint will ever receive say so (``UNSUBSCRIBED``), never ``PENDING``
forever: an event of a type no live endpoint subscribes to, one decided before the endpoints
that subscribe to its type were made, one of a tenant whose every endpoint was deleted. An
event a live endpoint still owes stays ``PENDING`` until its delivery, and a tenant that never
had an endpoint keeps its events ``PENDING`` for its first notification URL. Checked as a
workflow reads them (``GET /v1/jobs/{id}/notifications``, the answer of ``POST``), with a local
receiver as in :mod:`test_webhook_endpoints`; what the view costs is counted at the database
driver. Source: docs/api.md, "Notification" (``state``).
"""

from __future__ import annotations

from support import TENANT
from support import DriverStatements
from test_webhook_endpoints import ENDPOINTS
from test_webhook_endpoints import Receiver
from test_webhook_endpoints import a_job
from test_webhook_endpoints import allow
from test_webhook_endpoints import decide
from test_webhook_endpoints import deliver
from test_webhook_endpoints import in_ledger
from test_webhook_endpoints import subscribe

from gateway.actions import delivery_views
from gateway.actions import fan_out
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.models import Notification
from gateway.ledger.models import WebhookEndpoint


def views_of(gw, job_id: str) -> dict[str, dict]:
    """The job's notifications as a workflow lists them, by event type."""
    answer = gw.client.get(f"/v1/jobs/{job_id}/notifications", headers=gw.headers())
    assert answer.status_code == 200, answer.get_json()
    return {view["event"]: view for view in answer.get_json()["notifications"]}


def test_an_event_no_endpoint_subscribes_to_is_unsubscribed_and_says_how_to_subscribe(
    offline_gw,
):
    gw = offline_gw
    with Receiver() as workflow:
        allow(gw, workflow)
        endpoint = subscribe(gw, workflow.url, ["published"]).get_json()
        job_id = a_job(gw)  # approval_pending, decided after the endpoint: not its type
        decide(gw, job_id, "approved")
        assert deliver(gw) == {"delivered": 0, "pending": 0}  # the fan-out passed them by
        for event in ("approval_pending", "approved"):
            view = views_of(gw, job_id)[event]
            assert (view["state"], view["attempts"], view["deliveries"]) == ("UNSUBSCRIBED", 0, [])
            assert view["delivered_at"] is None
            assert (
                f"no webhook endpoint of tenant {TENANT} subscribes to {event} events"
                in (view["last_error"])
            )
            assert f'POST /v1/webhook-endpoints with event_types ["{event}"]' in view["last_error"]
        # the answer of the POST that decides one says so at once: nothing will come
        posted = gw.client.post(
            f"/v1/jobs/{job_id}/notifications",
            json={"event": "needs_attention", "reason": "the run stopped"},
            headers=gw.headers(),
        )
        assert posted.status_code == 201
        assert posted.get_json()["state"] == "UNSUBSCRIBED"
        assert "subscribes to needs_attention events" in posted.get_json()["last_error"]
        assert workflow.posts == []

        # the type it subscribed to: PENDING until the pass delivers it, then DELIVERED
        in_ledger(gw, lambda: _advance(job_id, "published"))
        pending = views_of(gw, job_id)["published"]
        assert (pending["state"], pending["last_error"], pending["deliveries"]) == (
            "PENDING",
            None,
            [],
        )
        assert deliver(gw) == {"delivered": 1, "pending": 0}
        delivered = views_of(gw, job_id)["published"]
        assert (delivered["state"], delivered["attempts"], delivered["last_error"]) == (
            "DELIVERED",
            1,
            None,
        )
        assert delivered["delivered_at"] is not None
        assert [d["endpoint_id"] for d in delivered["deliveries"]] == [endpoint["id"]]
        assert len(workflow.posts) == 1
        assert views_of(gw, job_id)["approved"]["state"] == "UNSUBSCRIBED"  # still


def _advance(job_id: str, phase: str) -> None:
    records.advance_phase(records.get_job(TENANT, job_id), phase, post_id=7)


def test_an_event_decided_before_the_endpoint_was_made_is_unsubscribed_not_pending(offline_gw):
    gw = offline_gw
    job_id = a_job(gw)  # approval_pending, while the tenant has no endpoint at all
    before = views_of(gw, job_id)["approval_pending"]
    assert before["state"] == "PENDING"  # its first notification URL would still get it
    assert "gateway notifications set-url" in before["last_error"]
    with Receiver() as workflow:
        allow(gw, workflow)
        assert subscribe(gw, workflow.url, ["*"]).status_code == 201
        for _ in range(2):  # before the fan-out pass and after it
            view = views_of(gw, job_id)["approval_pending"]
            assert (view["state"], view["deliveries"]) == ("UNSUBSCRIBED", [])
            assert view["last_error"] == (
                "this approval_pending event was decided before the webhook endpoints of "
                f"tenant {TENANT} that subscribe to approval_pending events were made: an "
                "endpoint receives only the events decided after it was made; a workflow "
                "reads the events it missed with GET /v1/job-changes (the changes feed) or "
                f"GET /v1/jobs/{job_id}/notifications"
            )
            assert deliver(gw) == {"delivered": 0, "pending": 0}
        decide(gw, job_id, "approved")  # a later one is owed: PENDING, then DELIVERED
        assert views_of(gw, job_id)["approved"]["state"] == "PENDING"
        assert deliver(gw) == {"delivered": 1, "pending": 0}
        assert views_of(gw, job_id)["approved"]["state"] == "DELIVERED"
        assert views_of(gw, job_id)["approval_pending"]["state"] == "UNSUBSCRIBED"
        assert len(workflow.posts) == 1


def test_once_every_endpoint_is_deleted_an_undelivered_event_is_unsubscribed(offline_gw):
    gw = offline_gw
    with Receiver() as workflow:
        allow(gw, workflow)
        made = subscribe(gw, workflow.url, ["approved"]).get_json()
        job_id = a_job(gw)
        decide(gw, job_id, "approved")
        assert views_of(gw, job_id)["approved"]["state"] == "PENDING"  # owed, not yet made
        gone = gw.client.delete(f"{ENDPOINTS}/{made['id']}", headers=gw.headers())
        assert gone.status_code == 204
        view = views_of(gw, job_id)["approved"]
        assert view["state"] == "UNSUBSCRIBED"
        assert f"every webhook endpoint of tenant {TENANT} was deleted" in view["last_error"]
        assert deliver(gw) == {"delivered": 0, "pending": 0}
        assert workflow.posts == []


def test_a_subscription_is_matched_on_the_whole_name_not_a_like_pattern(offline_gw):
    """The endpoints' ``event_types`` are compared in SQL with LIKE; its ``_`` wildcard is
    escaped, so a (planted) list naming ``approvalXpending`` does not subscribe to
    ``approval_pending``, and ``approved`` does not match ``approved_by``."""
    gw = offline_gw
    job_id = a_job(gw)

    def reach_with(event_types: list[str]) -> fan_out.Reach:
        WebhookEndpoint.delete().execute()
        WebhookEndpoint.create(
            public_id=f"ep_{len(event_types)}",
            tenant=TENANT,
            url="http://x.test/",
            event_types=event_types,
        )
        event = Notification.get(Notification.job_id == job_id)
        return fan_out.reach(event)

    def counts(event_types):
        found = in_ledger(gw, reach_with, event_types)
        return found.live, found.subscribed, found.owing

    assert counts(["approvalXpending", "approved_by"]) == (1, 0, 0)
    assert counts(["approval_pending"]) == (1, 1, 1)
    assert counts(["*"]) == (1, 1, 1)


def test_the_view_of_an_event_costs_one_query_with_deliveries_two_without(offline_gw, ledger_url):
    """The view is on hot paths (the job's notifications, a POST's answer, a resume): its
    statements, counted at the database driver, do not grow with the tenant's endpoints."""
    gw = offline_gw
    with Receiver() as one, Receiver() as two, Receiver() as three:
        allow(gw, one, two, three)
        made = [
            subscribe(gw, receiver.url, types).get_json()["id"]
            for receiver, types in ((one, ["published"]), (two, ["approved"]), (three, ["*"]))
        ]
        job_id = a_job(gw)
        decide(gw, job_id, "approved")
        driver = DriverStatements()
        db.bind(ledger_url, **driver.options(ledger_url))  # the same ledger, counted

        def statements(event: str) -> tuple[str, int]:
            row = Notification.get(Notification.job_id == job_id, Notification.event == event)
            driver.clear()
            state = delivery_views.summary(row)["state"]
            return state, len(driver.data())

        assert in_ledger(gw, statements, "approved") == ("PENDING", 2)  # owed, none made yet
        assert deliver(gw) == {"delivered": 3, "pending": 0}  # two approved, one approval_pending
        assert in_ledger(gw, statements, "approved") == ("DELIVERED", 1)
        for endpoint_id in made:
            gone = gw.client.delete(f"{ENDPOINTS}/{endpoint_id}", headers=gw.headers())
            assert gone.status_code == 204
        decide(gw, job_id, "commented")
        assert in_ledger(gw, statements, "commented") == ("UNSUBSCRIBED", 2)
