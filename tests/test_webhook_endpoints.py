"""Webhook endpoints and their signed deliveries (issue 57).

A workflow subscribes through the API; a local HTTP receiver (on loopback, allowed by
GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS) keeps every POST's raw bytes and headers and verifies
each with the receivers' own library, ``standardwebhooks.Webhook(secret).verify``. Events are
decided as the gateway decides them (:func:`gateway.actions.notifications.decide`, what an
approval calls) or through the API; deliveries go out by the delivery pass the worker's
thread and the sweep run.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer

import pytest
from n8n_support import wait_for
from standardwebhooks import Webhook
from standardwebhooks import WebhookVerificationError
from support import SECRET_KEY
from support import TENANT
from support import gateway_cli
from support import gateway_cli_ok
from support import new_job_id
from support import problem_slug

from gateway.actions import deliveries
from gateway.actions import notifications
from gateway.actions import webhook_endpoints
from gateway.core import event_ids
from gateway.core import states
from gateway.jobs import events
from gateway.jobs import records
from gateway.jobs import timeline
from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import RequestKey
from gateway.ledger.models import WebhookDelivery
from gateway.ledger.models import WebhookEndpoint

ENDPOINTS = "/v1/webhook-endpoints"
SECOND = dt.timedelta(seconds=1)


class Receiver:
    """A workflow's webhook URL: keeps each POST as ``(headers, raw body)`` and answers with
    the next of ``statuses`` (200 once they are used up)."""

    def __init__(self, statuses: list[int] | None = None, path: str = "/hook") -> None:
        self.posts: list[tuple[dict, bytes]] = []
        self.statuses = list(statuses or [])
        self.path = path
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                receiver.posts.append(({k.lower(): v for k, v in self.headers.items()}, raw))
                self.send_response(receiver.statuses.pop(0) if receiver.statuses else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}{self.path}"

    def verified(self, secret: str) -> list[dict]:
        """Every POST verified with ``secret`` (raises WebhookVerificationError otherwise)."""
        return [Webhook(secret).verify(raw, headers) for headers, raw in self.posts]

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def in_ledger(gw, function, *args):
    with gw.app.app_context(), database.connection_context():
        return function(*args)


def allow(gw, *receivers: Receiver) -> None:
    """List the receivers' ``host:port`` in GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS."""
    listed = frozenset(r.url.split("/")[2] for r in receivers)
    config = gw.app.config["GATEWAY"]
    gw.app.config["GATEWAY"] = config.with_overrides(notification_url_allow_hosts=listed)


def subscribe(gw, url: str, event_types, token=None, **extra):
    body = {"url": url, "event_types": event_types, **extra}
    return gw.client.post(ENDPOINTS, json=body, headers=gw.headers(token))


def decide(gw, job_id: str, event: str, reason: str | None = "by editor@example.com"):
    """Decide ``event`` for the job as the gateway does (the approval's own call)."""

    def run():
        job = records.get_job(TENANT, job_id)
        entry = None
        if event in states.PER_ENTRY_EVENTS:  # an approval's own timeline entry
            entry = timeline.record(job, event, "editor@example.com").id
        return notifications.decide(job, event, reason, entry)[0]

    return in_ledger(gw, run)


def deliver(gw) -> dict:
    """One delivery pass, as the worker's thread and the sweep make it."""
    return in_ledger(gw, deliveries.resend_pending, gw.app.config["GATEWAY"])


def a_job(gw, phase: str = "approval_pending") -> str:
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201

    def advance():
        records.advance_phase(records.get_job(TENANT, job_id), phase, post_id=7)

    in_ledger(gw, advance)
    return job_id


def test_an_approval_is_delivered_once_signed_with_one_id_across_a_retry(offline_gw):
    gw = offline_gw
    job_id = a_job(gw)
    with Receiver(statuses=[500]) as workflow:
        allow(gw, workflow)
        made = subscribe(gw, workflow.url, ["approved"], description="publish on approval")
        assert made.status_code == 201, made.get_json()
        endpoint = made.get_json()
        assert made.headers["Location"] == f"{ENDPOINTS}/{endpoint['id']}"
        assert endpoint["id"].startswith("ep_") and endpoint["secret"].startswith("whsec_")
        assert endpoint["event_types"] == ["approved"]

        made_at = dt.datetime.now(dt.UTC)
        event = decide(gw, job_id, "approved")
        assert deliver(gw) == {"delivered": 0, "pending": 1}  # the receiver answered 500
        backoffs_over(gw)  # its 2 s
        assert deliver(gw) == {"delivered": 1, "pending": 0}
        assert deliver(gw) == {"delivered": 0, "pending": 0}  # never twice

        bodies = workflow.verified(endpoint["secret"])
        assert len(bodies) == 2
        first, second = (headers for headers, _ in workflow.posts)
        assert first["webhook-id"] == second["webhook-id"] == event_ids.event_id(event.key)
        assert first["webhook-id"].startswith("evt_") and len(first["webhook-id"]) == 36
        assert second["idempotency-key"] == event.key
        assert event.key.startswith(f"{TENANT}/{job_id}/v1/notify/approved/")
        body = bodies[1]
        assert body["type"] == "approved"
        decided = dt.datetime.fromisoformat(body["timestamp"])
        assert decided.utcoffset() == dt.timedelta(0) and abs(decided - made_at) < SECOND
        assert body["data"]["event_id"] == first["webhook-id"]
        assert body["data"]["job_id"] == job_id and body["data"]["task_version"] == 1
        assert body["data"]["post_id"] == 7 and body["data"]["site"] == "blog"
        assert body["data"]["reason"] == "by editor@example.com"
        with pytest.raises(WebhookVerificationError):  # anyone else's POST does not verify
            Webhook(webhook_endpoints.new_secret()).verify(workflow.posts[1][1], second)

        listed = gw.client.get(f"/v1/jobs/{job_id}/notifications", headers=gw.headers())
        [approved] = [n for n in listed.get_json()["notifications"] if n["event"] == "approved"]
        assert approved["state"] == "DELIVERED" and approved["attempts"] == 2
        (delivery,) = approved["deliveries"]
        assert delivery["endpoint_id"] == endpoint["id"] and delivery["state"] == "DELIVERED"


def test_each_endpoint_gets_its_own_signed_copy_and_an_unsubscribed_one_nothing(offline_gw):
    gw = offline_gw
    job_id = a_job(gw)
    with Receiver() as one, Receiver() as two, Receiver() as other:
        allow(gw, one, two, other)
        first = subscribe(gw, one.url, ["approved", "changes_requested"]).get_json()
        second = subscribe(gw, two.url, ["*"]).get_json()
        third = subscribe(gw, other.url, ["published"]).get_json()
        assert len({first["secret"], second["secret"], third["secret"]}) == 3
        decide(gw, job_id, "approved")
        assert deliver(gw) == {"delivered": 2, "pending": 0}
        assert [b["type"] for b in one.verified(first["secret"])] == ["approved"]
        assert [b["type"] for b in two.verified(second["secret"])] == ["approved"]
        with pytest.raises(WebhookVerificationError):  # signed with its own secret only
            one.verified(second["secret"])
        assert other.posts == []


def test_an_endpoint_gets_only_the_events_decided_after_it_was_made(offline_gw):
    gw = offline_gw
    job_id = a_job(gw)
    decide(gw, job_id, "approved")
    with Receiver() as workflow:
        allow(gw, workflow)
        assert subscribe(gw, workflow.url, ["*"]).status_code == 201
        assert deliver(gw) == {"delivered": 0, "pending": 0}
        decide(gw, job_id, "needs_attention", "the run stopped")
        assert deliver(gw) == {"delivered": 1, "pending": 0}
        assert [json.loads(raw)["type"] for _, raw in workflow.posts] == ["needs_attention"]


def test_another_tenant_can_neither_see_nor_delete_an_endpoint(offline_gw):
    gw = offline_gw
    with Receiver() as workflow:
        allow(gw, workflow)
        endpoint = subscribe(gw, workflow.url, ["approved"]).get_json()
        rival = gw.make_token("workflow", tenant="rival")
        path = f"{ENDPOINTS}/{endpoint['id']}"
        assert gw.client.get(ENDPOINTS, headers=gw.headers(rival)).get_json() == {"endpoints": []}
        for answer in (
            gw.client.get(path, headers=gw.headers(rival)),
            gw.client.delete(path, headers=gw.headers(rival)),
            gw.client.post(f"{path}/secret", headers=gw.headers(rival)),
        ):
            assert answer.status_code == 404 and problem_slug(answer) == "not-found"
        editor = gw.make_token("editor")
        assert gw.client.get(ENDPOINTS, headers=gw.headers(editor)).status_code == 403
        mine = gw.client.get(path, headers=gw.headers()).get_json()
        assert mine["id"] == endpoint["id"] and mine["url"] == workflow.url


def test_a_rotated_secret_signs_beside_the_new_one(offline_gw):
    gw = offline_gw
    job_id = a_job(gw)
    with Receiver() as workflow:
        allow(gw, workflow)
        endpoint = subscribe(gw, workflow.url, ["approved", "changes_requested"]).get_json()
        rotated = gw.client.post(f"{ENDPOINTS}/{endpoint['id']}/secret", headers=gw.headers())
        assert rotated.status_code == 200
        new = rotated.get_json()
        assert new["secret"].startswith("whsec_") and new["secret"] != endpoint["secret"]
        assert new["secret_rotated_at"] is not None
        decide(gw, job_id, "approved")
        assert deliver(gw) == {"delivered": 1, "pending": 0}
        (headers, _raw) = workflow.posts[0]
        assert len(headers["webhook-signature"].split(" ")) == 2
        assert workflow.verified(endpoint["secret"]) == workflow.verified(new["secret"])

        def overlap_over():  # the 24 hours have passed (moved in the ledger, not slept)
            WebhookEndpoint.update(previous_secret_expires_at=db.utcnow()).execute()

        in_ledger(gw, overlap_over)
        decide(gw, job_id, "changes_requested", "shorter title")
        assert deliver(gw) == {"delivered": 1, "pending": 0}
        (headers, raw) = workflow.posts[1]
        assert len(headers["webhook-signature"].split(" ")) == 1
        assert Webhook(new["secret"]).verify(raw, headers)["type"] == "changes_requested"
        with pytest.raises(WebhookVerificationError):
            Webhook(endpoint["secret"]).verify(raw, headers)


def test_a_deleted_endpoint_gets_nothing_more_and_its_pending_deliveries_stop(offline_gw):
    gw = offline_gw
    job_id = a_job(gw)
    with Receiver(statuses=[503]) as workflow:
        allow(gw, workflow)
        endpoint = subscribe(gw, workflow.url, ["*"]).get_json()
        decide(gw, job_id, "approved")
        assert deliver(gw) == {"delivered": 0, "pending": 1}  # 503: retried later
        path = f"{ENDPOINTS}/{endpoint['id']}"
        assert gw.client.delete(path, headers=gw.headers()).status_code == 204
        assert gw.client.get(path, headers=gw.headers()).status_code == 404
        assert gw.client.delete(path, headers=gw.headers()).status_code == 404
        decide(gw, job_id, "needs_attention", "the run stopped")
        assert deliver(gw) == {"delivered": 0, "pending": 0}
        assert len(workflow.posts) == 1  # only the attempt before the delete
        (row,) = in_ledger(gw, lambda: list(WebhookDelivery.select()))
        assert row.state == "REFUSED" and "deleted" in row.last_error


def test_a_bad_url_or_event_type_is_a_problem_and_makes_no_endpoint(offline_gw):
    gw = offline_gw
    cases = [
        ({"url": "http://127.0.0.1:9/hook", "event_types": ["approved"]}, "/url"),
        ({"url": "ftp://example.com/x", "event_types": ["approved"]}, "/url"),
        ({"url": "https://example.com/x", "event_types": ["approve"]}, "/event_types/0"),
        ({"url": "https://example.com/x", "event_types": ["*", "approved"]}, "/event_types"),
        ({"url": "https://example.com/x", "event_types": []}, "/event_types"),
        ({"url": "https://example.com/x", "event_types": ["approved"], "x": 1}, ""),
    ]
    for body, pointer in cases:
        answer = gw.client.post(ENDPOINTS, json=body, headers=gw.headers())
        assert answer.status_code == 422, (body, answer.get_json())
        problem = answer.get_json()
        assert answer.mimetype == "application/problem+json" and problem["detail"]
        assert any(e["pointer"].startswith(pointer) for e in problem["errors"]), problem
        if pointer == "/url":  # the URL named as what it is (issue 57)
            assert problem["detail"].startswith("the webhook URL is not allowed"), problem
    assert in_ledger(gw, WebhookEndpoint.select().count) == 0


def test_past_the_tenants_cap_an_endpoint_is_refused(offline_gw):
    gw = offline_gw
    config = gw.app.config["GATEWAY"]
    gw.app.config["GATEWAY"] = config.with_overrides(webhook_endpoints_per_tenant=2)
    with Receiver() as workflow:
        allow(gw, workflow)
        gw.app.config["GATEWAY"] = gw.app.config["GATEWAY"].with_overrides(
            webhook_endpoints_per_tenant=2
        )
        assert [subscribe(gw, workflow.url, ["*"]).status_code for _ in range(2)] == [201, 201]
        refused = subscribe(gw, workflow.url, ["*"])
        assert refused.status_code == 409 and problem_slug(refused) == "webhook-endpoint-limit"
        assert in_ledger(gw, WebhookEndpoint.select().count) == 2


def test_the_secret_is_shown_once_and_never_kept_logged_or_replayed(offline_gw, caplog):
    gw = offline_gw
    caplog.set_level(logging.DEBUG)
    with Receiver() as workflow:
        allow(gw, workflow)
        headers = {**gw.headers(), "Idempotency-Key": "subscribe-1"}
        body = {"url": workflow.url, "event_types": ["approved"]}
        made = gw.client.post(ENDPOINTS, json=body, headers=headers)
        secret = made.get_json()["secret"]
        replay = gw.client.post(ENDPOINTS, json=body, headers=headers)
        assert replay.status_code == 201 and replay.headers["Idempotent-Replayed"] == "true"
        assert replay.get_json()["id"] == made.get_json()["id"]
        assert replay.get_json()["secret"] is None and replay.get_json()["secret_detail"]
        path = f"{ENDPOINTS}/{made.get_json()['id']}"
        rotated = gw.client.post(f"{path}/secret", headers=gw.headers()).get_json()["secret"]
        answers = [
            gw.client.get(ENDPOINTS, headers=gw.headers()),
            gw.client.get(path, headers=gw.headers()),
        ]
        for answer in answers:
            assert "secret" not in json.dumps(answer.get_json()).replace("secret_rotated_at", "")

        def stored() -> str:
            rows = [*WebhookEndpoint.select().dicts(), *RequestKey.select().dicts()]
            return json.dumps(rows, default=str)

        kept = in_ledger(gw, stored)
        logged = caplog.text
        for shown in (secret, rotated):
            plain = shown.removeprefix("whsec_")
            assert plain not in kept and plain not in logged


def test_two_delivery_passes_racing_post_once(offline_gw):
    gw = offline_gw
    job_id = a_job(gw)
    with Receiver() as workflow:
        allow(gw, workflow)
        endpoint = subscribe(gw, workflow.url, ["approved"]).get_json()
        decide(gw, job_id, "approved")
        barrier = threading.Barrier(2)
        results = []

        def race():
            barrier.wait()
            results.append(deliver(gw))

        threads = [threading.Thread(target=race) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sum(r["delivered"] for r in results) == 1, results
        assert len(workflow.verified(endpoint["secret"])) == 1
        assert in_ledger(gw, WebhookDelivery.select().count) == 1


def test_a_decision_wakes_the_workers_delivery_thread_at_once(offline_gw):
    """The worker's delivery thread polls every 60 s here; a decision in the same process
    (an API call) wakes it, so the workflow hears it within seconds, not a poll later."""
    gw = offline_gw
    job_id = a_job(gw)
    with Receiver() as workflow:
        allow(gw, workflow)
        endpoint = subscribe(gw, workflow.url, ["needs_attention"]).get_json()
        config = gw.app.config["GATEWAY"].with_overrides(notification_poll_interval=60.0)
        stop = threading.Event()
        worker = threading.Thread(target=deliveries.deliver_forever, args=(config, stop))
        worker.start()
        try:
            decided = gw.client.post(
                f"/v1/jobs/{job_id}/notifications",
                json={"event": "needs_attention", "reason": "the draft does not verify"},
                headers=gw.headers(),
            )
            assert decided.status_code == 201
            wait_for(lambda: workflow.posts, 5, "the decision did not wake the delivery thread")
        finally:
            stop.set()
            events.wake.set()  # the thread's wait ends now
            worker.join(10)
        assert [b["type"] for b in workflow.verified(endpoint["secret"])] == ["needs_attention"]


def test_a_refused_delivery_is_listed_and_sent_again_on_request_under_its_id(offline_gw):
    gw = offline_gw
    config = gw.app.config["GATEWAY"]
    gw.app.config["GATEWAY"] = config.with_overrides(notification_max_refusals=1)
    job_id = a_job(gw)
    with Receiver(statuses=[410]) as workflow:
        allow(gw, workflow)
        endpoint = subscribe(gw, workflow.url, ["approved"]).get_json()
        path = f"{ENDPOINTS}/{endpoint['id']}/deliveries"
        event = decide(gw, job_id, "approved")
        assert deliver(gw) == {"delivered": 0, "pending": 0}  # 410, the one refusal allowed
        (refused,) = gw.client.get(path, headers=gw.headers()).get_json()["deliveries"]
        evt = event_ids.event_id(event.key)
        assert (refused["event_id"], refused["type"], refused["state"]) == (
            evt,
            "approved",
            "REFUSED",
        )
        assert "HTTP 410" in refused["last_error"]
        assert deliver(gw) == {"delivered": 0, "pending": 0}  # REFUSED: never by itself

        rival = gw.make_token("workflow", tenant="rival")
        again = f"{path}/{evt}/redeliver"
        assert gw.client.post(again, headers=gw.headers(rival)).status_code == 404
        unknown = f"{path}/evt_{'0' * 32}/redeliver"
        assert gw.client.post(unknown, headers=gw.headers()).status_code == 404
        answer = gw.client.post(again, headers=gw.headers())
        assert answer.status_code == 200 and answer.get_json()["state"] == "PENDING"
        assert deliver(gw) == {"delivered": 1, "pending": 0}
        first, second = workflow.posts
        assert first[0]["webhook-id"] == second[0]["webhook-id"] == evt
        assert len(workflow.verified(endpoint["secret"])) == 2
        twice = gw.client.post(again, headers=gw.headers())
        assert twice.status_code == 409 and problem_slug(twice) == "delivery-not-refused"
        (delivered,) = gw.client.get(path, headers=gw.headers()).get_json()["deliveries"]
        assert delivered["state"] == "DELIVERED" and delivered["attempts"] == 2


def test_the_notification_url_is_the_tenants_legacy_endpoint_listed_without_a_secret(
    offline_gw, ledger_url
):
    """``gateway notifications set-url`` makes (then updates) the tenant's legacy endpoint:
    listed by the API and by ``gateway webhooks list``, every event, the flat body, never a
    secret; a workflow's own endpoint beside it gets the signed shape."""
    gw = offline_gw
    job_id = a_job(gw)
    with Receiver(path="/editors") as editors, Receiver() as workflow:
        hosts = ",".join(r.url.split("/")[2] for r in (editors, workflow))
        env = {
            "GATEWAY_DATABASE_URL": ledger_url,
            "GATEWAY_SECRET_KEY": SECRET_KEY,
            "GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS": hosts,
        }
        set_url = ["notifications", "set-url", "--tenant", TENANT, "--url", editors.url]
        legacy_id = json.loads(gateway_cli_ok(set_url, env))["endpoint_id"]
        assert json.loads(gateway_cli_ok(set_url, env))["endpoint_id"] == legacy_id  # updated
        allow(gw, editors, workflow)
        mine = subscribe(gw, workflow.url, ["approved"]).get_json()
        listed = gw.client.get(ENDPOINTS, headers=gw.headers()).get_json()["endpoints"]
        assert [(e["id"], e["legacy"], e["event_types"]) for e in listed] == [
            (legacy_id, True, ["*"]),
            (mine["id"], False, ["approved"]),
        ]
        printed = gateway_cli_ok(["webhooks", "list", "--tenant", TENANT], env)
        assert [e["id"] for e in json.loads(printed)["endpoints"]] == [legacy_id, mine["id"]]
        assert "whsec_" not in printed and mine["secret"] not in printed

        event = decide(gw, job_id, "approved")
        # the URL also gets the approval_pending decided before it was set, as it always did
        assert deliver(gw)["delivered"] == 3
        [_, (headers, raw)] = editors.posts
        assert json.loads(editors.posts[0][1])["event"] == "approval_pending"
        assert json.loads(raw) == event.payload  # the flat body of before
        assert headers["idempotency-key"] == event.key and "webhook-signature" not in headers
        assert [b["type"] for b in workflow.verified(mine["secret"])] == ["approved"]


def test_the_cli_rotates_the_notification_urls_secret_and_its_deliveries_are_signed(
    offline_gw, ledger_url
):
    """``gateway webhooks rotate-secret --tenant T`` gives the tenant's notification URL (its
    legacy endpoint, unsigned until then) a secret, printed once: the next delivery there
    verifies with it (Standard Webhooks), ``webhooks list`` never shows it; a tenant without a
    notification URL, or an endpoint id it does not have, is exit 2 with the reason."""
    gw = offline_gw
    job_id = a_job(gw)
    with Receiver(path="/editors") as editors:
        env = {
            "GATEWAY_DATABASE_URL": ledger_url,
            "GATEWAY_SECRET_KEY": SECRET_KEY,
            "GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS": editors.url.split("/")[2],
        }
        rotate = ["webhooks", "rotate-secret", "--tenant", TENANT]
        refused = gateway_cli(rotate, env)
        assert refused.exit_code == 2 and "has no notification URL" in refused.output
        set_url = ["notifications", "set-url", "--tenant", TENANT, "--url", editors.url]
        made = gateway_cli(set_url, env)
        assert made.exit_code == 0 and json.loads(made.stdout)["signed"] is False
        assert f"gateway webhooks rotate-secret --tenant {TENANT}" in made.stderr
        legacy_id = json.loads(made.stdout)["endpoint_id"]
        allow(gw, editors)
        deliver(gw)  # the approval_pending decided before the URL: unsigned, as before
        assert "webhook-signature" not in editors.posts[-1][0]

        printed = json.loads(gateway_cli_ok(rotate, env))
        assert printed["endpoint_id"] == legacy_id and printed["secret"].startswith("whsec_")
        assert printed["previous_secret_expires_at"] is None  # there was no secret before
        listed = gateway_cli_ok(["webhooks", "list", "--tenant", TENANT], env)
        assert printed["secret"] not in listed and "whsec_" not in listed

        event = decide(gw, job_id, "approved")
        assert deliver(gw)["delivered"] == 1
        assert Webhook(printed["secret"]).verify(editors.posts[-1][1], editors.posts[-1][0]) == (
            event.payload
        )  # the flat body of before, now signed
        assert json.loads(gateway_cli_ok(set_url, env))["signed"] is True  # kept on a new URL
        again = json.loads(gateway_cli_ok([*rotate, "--endpoint", legacy_id], env))
        assert again["secret"] != printed["secret"] and again["previous_secret_expires_at"]
        unknown = gateway_cli([*rotate, "--endpoint", "ep_not-this-tenants"], env)
        assert unknown.exit_code == 2 and "no live webhook endpoint" in unknown.output
        assert f"gateway webhooks list --tenant {TENANT}" in unknown.output


def backoffs_over(gw) -> None:
    """Time passes: every delivery's back-off is over (its ``claimed_until`` in the past)."""

    def expire():
        past = db.db_now() - dt.timedelta(seconds=1)
        WebhookDelivery.update(claimed_until=past).where(
            WebhookDelivery.claimed_until.is_null(False)
        ).execute()

    in_ledger(gw, expire)


def held_for(gw, receiver_id: str) -> float:
    """Seconds the endpoint's only PENDING delivery waits before its next attempt."""

    def seconds():
        endpoint = WebhookEndpoint.get(WebhookEndpoint.public_id == receiver_id)
        row = WebhookDelivery.get(WebhookDelivery.endpoint_id == endpoint.id)
        return (row.claimed_until - db.db_now()).total_seconds()

    return in_ledger(gw, seconds)


def test_a_failing_endpoint_delays_only_its_own_deliveries_not_its_tenants_others(offline_gw):
    """Issue 57: each endpoint is a queue of its own. One endpoint answering 500 to its first
    delivery does not hold back the same tenant's other endpoint, which gets all of its own
    in the same pass."""
    gw = offline_gw
    jobs = [a_job(gw) for _ in range(3)]
    with Receiver(statuses=[500]) as broken, Receiver() as healthy:
        allow(gw, broken, healthy)
        assert subscribe(gw, broken.url, ["approved"]).status_code == 201
        assert subscribe(gw, healthy.url, ["approved"]).status_code == 201
        for job_id in jobs:
            decide(gw, job_id, "approved")
        counts = deliver(gw)
        assert len(healthy.posts) == 3  # all of its own, in this pass
        assert len(broken.posts) == 1  # left the pass at its first failure
        assert counts == {"delivered": 3, "pending": 3}


def test_a_receiver_answering_500_is_retried_with_a_growing_backoff_never_refused(offline_gw):
    """Issue 57: a retryable failure (5xx) waits 2 s, then 4 s, 8 s ... (at most 10 minutes)
    before the next attempt; passes in between send nothing; it stays PENDING however often
    it fails (never REFUSED for it), and is delivered once the receiver answers."""
    gw = offline_gw
    job_id = a_job(gw)
    failures = 8  # beyond GATEWAY_NOTIFICATION_MAX_REFUSALS (5)
    with Receiver(statuses=[500] * failures) as workflow:
        allow(gw, workflow)
        endpoint = subscribe(gw, workflow.url, ["approved"]).get_json()
        decide(gw, job_id, "approved")
        waits = []
        for attempt in range(1, failures + 1):
            assert deliver(gw) == {"delivered": 0, "pending": 1}
            assert len(workflow.posts) == attempt
            for _ in range(3):  # passes during the back-off POST nothing
                assert deliver(gw) == {"delivered": 0, "pending": 1}
            assert len(workflow.posts) == attempt
            waits.append(held_for(gw, endpoint["id"]))
            backoffs_over(gw)
        expected = [2, 4, 8, 16, 32, 64, 128, 256]
        assert [round(w) for w in waits] == expected, waits
        assert deliveries.retry_after(20) == 600  # at most 10 minutes
        path = f"{ENDPOINTS}/{endpoint['id']}/deliveries"
        (listed,) = gw.client.get(path, headers=gw.headers()).get_json()["deliveries"]
        assert listed["state"] == "PENDING" and "HTTP 500" in listed["last_error"]
        assert deliver(gw) == {"delivered": 1, "pending": 0}
        assert len(workflow.posts) == failures + 1
        assert len({h["webhook-id"] for h, _ in workflow.posts}) == 1


def test_set_url_on_a_tenant_with_endpoints_replays_no_history(offline_gw, ledger_url):
    """Issue 57: a notification URL set while the tenant has a workflow's endpoint gets only
    the events decided after it, not the tenant's history (as every endpoint)."""
    gw = offline_gw
    old_jobs = [a_job(gw) for _ in range(3)]  # three approval_pending events before
    with Receiver(path="/editors") as editors, Receiver() as workflow:
        allow(gw, editors, workflow)
        assert subscribe(gw, workflow.url, ["*"]).status_code == 201
        env = {
            "GATEWAY_DATABASE_URL": ledger_url,
            "GATEWAY_SECRET_KEY": SECRET_KEY,
            "GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS": ",".join(
                r.url.split("/")[2] for r in (editors, workflow)
            ),
        }
        gateway_cli_ok(["notifications", "set-url", "--tenant", TENANT, "--url", editors.url], env)
        assert deliver(gw) == {"delivered": 0, "pending": 0}
        assert editors.posts == []  # no replay of the old events
        event = decide(gw, old_jobs[0], "approved")
        assert deliver(gw) == {"delivered": 2, "pending": 0}
        assert [json.loads(raw)["idempotency_key"] for _, raw in editors.posts] == [event.key]
