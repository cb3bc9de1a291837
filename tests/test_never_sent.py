"""A PREPARED row left by a request that died before sending (issue 51 item 5): the sweep
settles it FAILED ``never-sent`` once the in-flight window passed (by the database's clock),
leaves a fresh one and the agent worker's queued inputs alone, and the same request then sends
it exactly once; a late request racing the sweep sends it once whichever wins
(:mod:`gateway.recovery.never_sent`, docs/api.md "The ledger").

Time passing is the row's ``updated_at`` moved back in the ledger, never slept for. Every test
here runs in the PostgreSQL pass too (tests/passes.py: the module is not in ``NOT_DIALECT``):
the window is a comparison with the database's clock, and the race is decided by conditional
UPDATEs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading

import pytest
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from support import Gateway
from support import draft_body
from support import in_thread
from support import new_job_id
from support import op_key
from support import png_bytes

import gateway
from gateway.agents import submissions
from gateway.core import states
from gateway.editorial import previews
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.operations import crashes
from gateway.operations import perform
from gateway.operations import transitions
from gateway.operations.crashes import SimulatedCrash
from gateway.operations.effects import Effect
from gateway.operations.target import target_for
from gateway.operator import retention
from gateway.operator import site_removal
from gateway.recovery import never_sent
from gateway.recovery import reconciliation
from gateway.tenancy import sites

WINDOW = 60.0  # GATEWAY_INFLIGHT_WINDOW of these tests: a fresh row stays inside it however slow


def _ago(row_id: int, seconds: float) -> None:
    """Time passes for one row: its ``updated_at`` moved back by ``seconds``."""
    row = Operation.get_by_id(row_id)
    moved = row.updated_at - dt.timedelta(seconds=seconds)
    Operation.update(updated_at=moved).where(Operation.id == row_id).execute()


def _config(app):
    return dataclasses.replace(app.config["GATEWAY"], inflight_window=WINDOW)


# --------------------------------------------------------------------------- a dead request


def _request(action: str, job_id: str):
    if action == "media":
        return lambda gw: gw.put_media(job_id, "hero", png_bytes((30, 160, 90), 3))
    return lambda gw: gw.put_draft(job_id, draft_body(title=f"Never sent {job_id}"))


@pytest.mark.wordpress
@pytest.mark.parametrize("action", ["draft", "media"])
def test_a_request_dead_before_sending_is_settled_and_its_retry_sends_once(
    wp_site, ledger_url, action
):
    """The request dies right after storing its intent (the named crash point
    ``after_prepared``, in process); the job says ``in_progress`` with nobody working on it.
    One sweep after the window settles the row FAILED never sent without asking WordPress;
    the job says ``failed``; the same request then sends it: one object in WordPress."""
    settings = {
        "database_url": ledger_url,
        "secret_key": SECRET_KEY,
        "wp_timeout": 20.0,
        "inflight_window": WINDOW,
    }
    job_id = new_job_id()
    slot = "hero" if action == "media" else None
    key = op_key(job_id, action, slot)
    send = _request(action, job_id)
    crashes.simulate()
    try:
        app = gateway.create_app({**settings, "crash_points": frozenset({"after_prepared"})})
        gw = Gateway(app, app.test_client(), wp_site)
        assert gw.put_job(job_id).status_code == 201
        with pytest.raises(SimulatedCrash, match="after_prepared"):
            in_thread(send, gw)
        crashes.stop()  # a new process on the same ledger, without the crash point
        db.close_all()
        sites.forget_companion()
        gw.app = gateway.create_app(settings)
        gw.client = gw.app.test_client()
    finally:
        crashes.stop()
    job = gw.job(job_id).get_json()
    assert job["status"] == "in_progress"
    assert [r["state"] for r in job["operations"]] == ["PREPARED"]
    config = gw.app.config["GATEWAY"]
    with gw.app.app_context(), database.connection_context():
        assert reconciliation.sweep(config)["never_sent"] == 0  # inside the window
        _ago(Operation.get(Operation.operation_key == key).id, WINDOW + 1)
        assert reconciliation.sweep(config)["never_sent"] == 1
    job = gw.job(job_id).get_json()
    (row,) = job["operations"]
    assert job["status"] == "failed", job
    assert (row["state"], row["attempts"], row["problem"]["reason"]) == ("FAILED", 0, "never-sent")
    assert gw.count_objects(key) == 0  # nothing was sent
    recover = gw.client.post(f"/v1/jobs/{job_id}/recover", headers=gw.headers()).get_json()
    assert [e["problem"] for e in recover["failed"]] == ["never-sent"]
    step = "create_draft" if action == "draft" else "upload_media"
    assert step in recover["next_allowed_actions"], recover
    first = send(gw)
    assert first.status_code == 201, first.get_json()
    again = send(gw)
    assert again.status_code == 200 and again.headers.get("Idempotent-Replayed") == "true"
    assert gw.count_objects(key) == 1
    job = gw.job(job_id).get_json()
    (row,) = job["operations"]
    assert (row["state"], row["attempts"], row["problem"]) == ("CONFIRMED", 1, None)
    # no longer failed: the draft is written and verified, the image waits for its draft
    assert job["status"] == ("completed" if action == "draft" else "in_progress"), job


# --------------------------------------------------------------------------- which rows


def test_only_a_stale_prepared_row_of_a_request_is_settled(app, offline_gw):
    """A stale PREPARED row is settled once; a fresh one (inside the window) and an agent
    input queued for the worker (PREPARED by design, however old) are left alone; the sweep's
    ``older_than`` (for SENT/UNKNOWN rows) does not shorten the window."""
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    config = _config(app)
    with app.app_context(), database.connection_context():
        job = records.get_job(TENANT, job_id)
        target = target_for(config, job)
        stale = perform.claim(target, op_key(job_id, "draft"), "d1", "draft")
        fresh = perform.claim(target, op_key(job_id, "media", "hero"), "d2", "media", "hero")
        queued = submissions.claim(job, "tool_result", "call_1", "sess_1", {"type": "x"})
        _ago(stale.id, WINDOW + 1)
        _ago(queued.id, WINDOW * 100)
        assert reconciliation.sweep(config, older_than=0)["never_sent"] == 1
        assert reconciliation.sweep(config, older_than=0)["never_sent"] == 0  # settled once
        after = {r.id: r for r in Operation.select()}
    assert after[stale.id].state == states.FAILED
    assert after[stale.id].problem["reason"] == states.NEVER_SENT
    assert (after[fresh.id].state, after[queued.id].state) == ("PREPARED", "PREPARED")
    job = offline_gw.job(job_id).get_json()
    assert job["status"] == "failed"
    # failed only by a write never sent: its run still has work on it (a person need not)
    listed = offline_gw.client.get("/v1/jobs?unfinished=true", headers=offline_gw.headers())
    assert [j["job_id"] for j in listed.get_json()["jobs"]] == [job_id]
    with app.app_context(), database.connection_context():
        site = sites.get_site(TENANT, SITE_NAME)
        assert site_removal.unfinished_jobs(site) == [job_id]


# --------------------------------------------------------------------------- the race


class Sends:
    """A stand-in for one WordPress write: counts the sends it is asked for."""

    def __init__(self, during=None):
        self.count = 0
        self.lock = threading.Lock()
        self.during = during  # called while the write is under way (the row SENT)

    def effect(self) -> Effect:
        def send():
            with self.lock:
                self.count += 1
            if self.during is not None:
                self.during()
            return {"id": 4242}

        return Effect(
            action="draft",
            send=send,
            find=lambda: [],
            read_back=lambda object_id, _sent: {"post_id": object_id},
        )


def _stale_prepared(app, job_id: str) -> Operation:
    with app.app_context(), database.connection_context():
        target = target_for(_config(app), records.get_job(TENANT, job_id))
        row = perform.claim(target, op_key(job_id, "draft"), "digest", "draft")
        _ago(row.id, WINDOW + 1)
        return Operation.get_by_id(row.id)


def _perform(app, job_id: str, sends: Sends):
    target = target_for(_config(app), records.get_job(TENANT, job_id))
    return perform.perform(target, op_key(job_id, "draft"), "digest", sends.effect())


def test_the_sweep_first_then_the_late_request_sends_once(app, offline_gw):
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    late = _stale_prepared(app, job_id)  # the request read its row PREPARED, then slept
    sends = Sends()
    with app.app_context(), database.connection_context():
        cutoff = db.db_now() - dt.timedelta(seconds=WINDOW)
        assert never_sent.settle_row(Operation.get_by_id(late.id), cutoff) is True
        # the late request's send claim (perform._claim_send's move) loses ...
        assert not transitions.move(late, states.SENT, same_attempt=True, attempts=1)
        # ... it reads the row again (perform's next round): FAILED never sent, so it sends
        assert perform.never_sent(Operation.get_by_id(late.id))
        outcome = _perform(app, job_id, sends)
        assert (outcome.created, sends.count) == (True, 1)
        assert _perform(app, job_id, sends).replayed and sends.count == 1
        row = Operation.get_by_id(late.id)
    assert (row.state, row.attempts, row.remote_id) == ("CONFIRMED", 1, 4242)


def test_the_late_request_first_then_the_sweep_changes_nothing(app, offline_gw):
    """The sweep read the row PREPARED; the request woke and claimed the send first: while
    its write is under way (the row SENT) and after it, the sweep's move loses."""
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    read = _stale_prepared(app, job_id)  # the sweep read it PREPARED, then the request woke
    swept = []

    def sweep_meanwhile():
        cutoff = db.db_now() - dt.timedelta(seconds=WINDOW)
        swept.append((never_sent.settle_row(read, cutoff), never_sent.settle(_config(app))))

    sends = Sends(during=sweep_meanwhile)
    with app.app_context(), database.connection_context():
        assert _perform(app, job_id, sends).created and sends.count == 1
        cutoff = db.db_now() - dt.timedelta(seconds=WINDOW)
        assert never_sent.settle_row(read, cutoff) is False
        row = Operation.get_by_id(read.id)
    assert swept == [(False, {"never_sent": 0})]
    assert (row.state, row.attempts, row.problem) == ("CONFIRMED", 1, None)


def _race(app, job_id: str) -> tuple[dict, int, Operation]:
    """One round: the sweep's pass and the dead request's retry over one stale PREPARED row,
    each on its own thread and connection, started together by a barrier. Returns what each
    answered (``sweep``: rows settled, ``request``: the Outcome), the sends made and the row
    as stored afterwards."""
    row = _stale_prepared(app, job_id)
    sends, barrier, results, errors = Sends(), threading.Barrier(2), {}, []

    def sweep():
        results["sweep"] = never_sent.settle(_config(app))["never_sent"]

    def request():
        results["request"] = _perform(app, job_id, sends)

    def run(function):
        try:
            with app.app_context(), database.connection_context():
                barrier.wait(timeout=10)
                function()
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(f,)) for f in (sweep, request)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [], errors
    with app.app_context(), database.connection_context():
        return results, sends.count, Operation.get_by_id(row.id)


def test_a_sweep_racing_a_late_request_one_wins_and_it_is_sent_once(app, offline_gw):
    """Rounds of the race (:func:`_race`): whichever conditional UPDATE comes first, the
    write is sent exactly once and the row ends CONFIRMED after one attempt; the sweep settled
    it at most once."""
    job_ids = [new_job_id() for _ in range(6)]
    for job_id in job_ids:
        assert offline_gw.put_job(job_id).status_code == 201
    for job_id in job_ids:
        results, sent, stored = _race(app, job_id)
        assert results["sweep"] in (0, 1) and results["request"].created, results
        assert sent == 1, (job_id, results)
        assert (stored.state, stored.attempts) == ("CONFIRMED", 1), (job_id, results)


# --------------------------------------------------------------------------- what else reads it


def test_a_row_never_sent_keeps_its_intent_through_pruning_and_is_told_as_such(app, offline_gw):
    """``gateway prune`` keeps the intent of a FAILED row never sent (the same request may
    still send it, and a lookup after that send needs it), while a refused row of the same
    finished job loses it; the review page says it was never sent, not refused."""
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    config = _config(app)
    with app.app_context(), database.connection_context():
        target = target_for(config, records.get_job(TENANT, job_id))
        intent = {"title": "kept"}
        never = perform.claim(target, op_key(job_id, "draft"), "d1", "draft", intent=intent)
        refused = perform.claim(target, op_key(job_id, "media", "hero"), "d2", "media", "hero")
        assert transitions.move(refused, states.SENT, attempts=1, sent_at=db.utcnow())
        assert transitions.move(refused, states.FAILED, problem={"detail": "WordPress refused"})
        _ago(never.id, WINDOW + 1)
        assert never_sent.settle(config) == {"never_sent": 1}
        Job.update(cancelled=True).where(Job.job_id == job_id).execute()  # finished
        later = db.utcnow() + dt.timedelta(days=30)
        assert retention.prune(older_than_days=1, now=later)["operations"] == 1
        kept, pruned = Operation.get_by_id(never.id), Operation.get_by_id(refused.id)
    assert (kept.intent, kept.pruned_at) == (intent, None)
    assert pruned.intent is None and pruned.pruned_at is not None
    words = previews.problem_in_words(kept.as_dict())
    assert words["summary"] == (
        "The request for the post ended before it was sent: nothing reached WordPress."
    )
    assert "same request sends it" in words["next"]


@pytest.mark.wordpress
def test_an_attach_step_never_sent_is_sent_by_the_sweep(wp_site, ledger_url):
    """The soak's finding: a draft answers 201 while its attach step could not reach
    WordPress (the call never left the gateway: the row goes back to PREPARED, the image has
    no parent). No client repeats an attach, so the sweep settles such a row UNKNOWN (not
    FAILED, which would wait for a client that never comes and leave the job ``failed`` after
    2xx answers), and its next pass finds it absent and sends it: the image is attached once."""
    settings = {
        "database_url": ledger_url,
        "secret_key": SECRET_KEY,
        "wp_timeout": 20.0,
        "inflight_window": WINDOW,
    }
    app = gateway.create_app(settings)
    gw = Gateway(app, app.test_client(), wp_site)
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    assert gw.put_media(job_id, "hero", png_bytes((11, 12, 13), 2)).status_code == 201
    body = draft_body(title=f"Never attached {job_id}", featured_media={"slot": "hero"})
    drafted = gw.put_draft(job_id, body)
    assert drafted.status_code == 201, drafted.get_json()
    post_id = drafted.get_json()["post_id"]
    key = op_key(job_id, "attach", "hero")
    rows = {r["operation_key"]: r for r in gw.operations(job_id)}
    media_id = rows[op_key(job_id, "media", "hero")]["remote_id"]
    # What perform._not_sent leaves when the attach call never left the gateway.
    detached = gw.wp.post(f"{gw.wp_url}/wp-json/wp/v2/media/{media_id}", json={"post": 0})
    assert detached.status_code == 200 and not gw.wp_media(media_id)["post"]
    with app.app_context(), database.connection_context():
        Operation.update(
            state=states.PREPARED, remote_id=None, receipt=None, sent_at=None, attempts=0
        ).where(Operation.operation_key == key).execute()
        config = app.config["GATEWAY"]
        row_id = Operation.get(Operation.operation_key == key).id
        _ago(row_id, WINDOW + 1)
        assert reconciliation.sweep(config)["never_sent"] == 1
        row = Operation.get_by_id(row_id)
        assert (row.state, row.problem["reason"]) == (states.UNKNOWN, states.NEVER_SENT)
        assert not gw.wp_media(media_id)["post"]  # settled, nothing sent yet
        _ago(row_id, WINDOW + 1)
        counts = reconciliation.sweep(config)
        assert counts["confirmed"] == 1, counts
    rows = {r["operation_key"]: r for r in gw.operations(job_id)}
    assert rows[key]["state"] == "CONFIRMED", rows[key]
    assert gw.wp_media(media_id)["post"] == post_id
    assert gw.job(job_id).get_json()["status"] == "completed"
