"""The registry's other recovery kinds and scopes, with a real ledger and no WordPress (the
kinds no shipped action uses yet: agent tool results and notifications will). Each test
registers an action of its own whose ``send`` records what it was given."""

from __future__ import annotations

import pytest
from support import TENANT
from support import new_job_id
from support import op_key

from gateway.jobs import records
from gateway.ledger.db import database
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Operation
from gateway.ledger.models import Review
from gateway.operations import registry
from gateway.operations.effects import Effect
from gateway.recovery import reconciliation


@pytest.fixture
def registered():
    """Register test actions; ``sent`` collects the operation keys their sends carried."""
    sent: list[str] = []
    names: list[str] = []

    def register(name: str, recovery: str, scope: str = registry.JOB) -> None:
        def rebuild(target, row, found=None, prefetched=None) -> Effect:
            def send() -> dict:
                sent.append(row.operation_key)  # the idempotency key the receiver dedupes by
                return {"id": 900 + len(sent)}

            return Effect(
                action=name,
                send=send,
                find=lambda: [],
                read_back=lambda object_id, _sent: {"delivered": object_id, **row.intent},
                creates=False,
                intent=row.intent,
            )

        registry.register(
            registry.Action(
                name, recovery, send=None, rebuild=rebuild, step=f"send_{name}", scope=scope
            )
        )
        names.append(name)

    yield register, sent
    for name in names:
        registry.unregister(name)


def _unknown_row(offline_gw, name: str) -> tuple[str, str]:
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    key = op_key(job_id, name, "call-1")
    with offline_gw.app.app_context(), database.connection_context():
        Operation.create(
            operation_key=key,
            tenant=TENANT,
            job_id=job_id,
            task_version=1,
            action=name,
            slot="call-1",
            request_hash="h",
            state=UNKNOWN,
            intent={"call_id": "call-1"},
            attempts=1,
        )
    return job_id, key


def _recover(offline_gw, job_id: str) -> dict:
    answer = offline_gw.recover(job_id)
    assert answer.status_code == 200
    return answer.get_json()


def test_idempotent_resend_is_sent_again_with_the_same_key(offline_gw, registered):
    register, sent = registered
    register("tool_result_t", registry.RESEND)
    job_id, key = _unknown_row(offline_gw, "tool_result_t")
    report = _recover(offline_gw, job_id)
    assert sent == [key]
    [done] = report["completed"]
    assert done["operation_key"] == key and done["remote_id"] == 901
    [row] = offline_gw.operations(job_id)
    assert row["state"] == "CONFIRMED" and row["attempts"] == 2
    assert row["receipt"]["call_id"] == "call-1"
    assert _recover(offline_gw, job_id)["completed"][0]["operation_key"] == key
    assert sent == [key]  # CONFIRMED: nothing is sent again


def test_idempotent_resend_never_sends_for_a_cancelled_job(offline_gw, registered):
    register, sent = registered
    register("notify_t", registry.RESEND)
    job_id, key = _unknown_row(offline_gw, "notify_t")
    cancel = offline_gw.client.post(
        f"/v1/jobs/{job_id}/cancel", json={"reason": "stop"}, headers=offline_gw.headers()
    )
    assert cancel.status_code == 200
    report = _recover(offline_gw, job_id)
    assert sent == [] and report["next_allowed_actions"] == ["none"]
    [entry] = report["unknown"]
    assert entry["operation_key"] == key and "cancelled" in entry["reason"]


def test_a_person_decides_opens_a_review_and_sends_nothing(offline_gw, registered):
    register, sent = registered
    register("mcp_approval_t", registry.PERSON)
    job_id, key = _unknown_row(offline_gw, "mcp_approval_t")
    report = _recover(offline_gw, job_id)
    assert sent == []
    [entry] = report["needs_review"]
    assert entry["operation_key"] == key and entry["review_id"]
    assert report["status"] == "needs_review"
    assert report["next_allowed_actions"] == ["editor_review"]
    with offline_gw.app.app_context(), database.connection_context():
        review = Review.get_by_id(entry["review_id"])
    assert review.kind == registry.PERSON and review.operation_key == key


def test_site_scoped_operations_are_left_to_the_sweep(offline_gw, registered):
    register, sent = registered
    register("term_t", registry.RESEND, scope=registry.SITE)
    job_id, key = _unknown_row(offline_gw, "term_t")
    report = _recover(offline_gw, job_id)
    assert sent == [] and report["completed"] == [] and report["unknown"] == []
    with offline_gw.app.app_context(), database.connection_context():
        counts = reconciliation.sweep(offline_gw.app.config["GATEWAY"], older_than=0)
        state = Operation.get(Operation.operation_key == key).state
    assert counts == {
        "never_sent": 0,
        "examined": 1,
        "confirmed": 1,
        "absent": 0,
        "needs_review": 0,
        "unreachable": 0,
        "refused": 0,
        "site_busy": 0,
        "unscheduled": 0,  # the registry's sweep counts: unschedule rows, scheduled posts,
        "published": 0,
        "missed": 0,
        "notifications": {"delivered": 0, "pending": 0, "attention_decided": 0},  # resends
    }
    assert sent == [key] and state == "CONFIRMED"


def test_a_row_of_an_unregistered_action_is_reported_not_crashed(offline_gw):
    job_id, key = _unknown_row(offline_gw, "from_the_future")
    report = _recover(offline_gw, job_id)
    [entry] = report["unknown"]
    assert entry["operation_key"] == key and "no registered action" in entry["reason"]
    assert report["next_allowed_actions"] == ["retry_later"]
    with offline_gw.app.app_context(), database.connection_context():
        job = records.get_job(TENANT, job_id)
        assert records.status_of(job) == "unknown"


def test_a_row_whose_intent_cannot_be_rebuilt_stays_unknown_with_its_reason(offline_gw):
    job_id, key = _unknown_row(offline_gw, "block")
    with offline_gw.app.app_context(), database.connection_context():
        Operation.update(intent=None).where(Operation.operation_key == key).execute()
    [entry] = _recover(offline_gw, job_id)["unknown"]
    assert entry["operation_key"] == key and "ledger row" in entry["reason"]
