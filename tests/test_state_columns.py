"""The state columns other than an operation's and a notification's (issue 51): each moves
by :func:`gateway.ledger.moves.move`, and of two callers racing for one move exactly one wins.

Races are real: each caller in its own thread with its own ledger connection, released
together by a barrier; where the bug was a read followed by a write, a second barrier after
the read makes both callers read before either writes (the interleaving that let both win).
Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL (``GATEWAY_TEST_DATABASE_URL``).
The clock is injected where the module takes one; nothing waits for time to pass.
"""

from __future__ import annotations

import datetime as dt
import threading
from types import SimpleNamespace

import pytest

from gateway.agents import openai_key
from gateway.agents import stops
from gateway.agents import worker
from gateway.core import exceptions as exc
from gateway.core import states
from gateway.editorial import approvals
from gateway.jobs import leases
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger import migrations
from gateway.ledger import moves
from gateway.ledger.db import database
from gateway.ledger.models import AGENT_STOP
from gateway.ledger.models import JOB_CANCELLED
from gateway.ledger.models import LEASE_OWNER
from gateway.ledger.models import AgentSession
from gateway.ledger.models import AgentWorkerState
from gateway.ledger.models import Approval
from gateway.ledger.models import Job
from gateway.ledger.models import Lease
from gateway.ledger.models import RequestKey
from gateway.ledger.models import Token
from gateway.ledger.models import WebhookEvent
from gateway.ledger.oauth_models import OAuthGrant
from gateway.ledger.oauth_models import OAuthPending
from gateway.tenancy import grants
from gateway.tenancy import request_keys
from gateway.tenancy import tokens

T0 = dt.datetime(2026, 12, 5, 12, 0, 0)


@pytest.fixture
def ledger(ledger_url):
    db.bind(ledger_url)
    migrations.migrate()
    with database.connection_context():
        yield ledger_url
    db.close_all()


def race(*calls) -> list:
    """Run ``calls`` at once, each in its own thread with its own ledger connection: each
    result, or the exception it raised."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(i, call):
        try:
            with database.connection_context():
                barrier.wait(timeout=10)
                results[i] = call()
        except Exception as error:  # noqa: BLE001 - the caller judges it
            results[i] = error

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def _job(job_id: str = "j") -> Job:
    return Job.create(tenant="acme", job_id=job_id, site="blog")


# --------------------------------------------------------------------------- the mover


def test_an_undeclared_move_is_refused_before_any_statement(ledger):
    job = _job()
    records.cancel_job(job, "first")
    with pytest.raises(moves.IllegalMove):  # a cancel is never lifted
        moves.move(JOB_CANCELLED, {"id": job.id}, False, True)
    with pytest.raises(moves.IllegalMove):  # a stop is lifted from a reason, never from NULL
        moves.move(AGENT_STOP, {"id": 1}, None, None)
    with pytest.raises(moves.IllegalMove):  # the placeholder of "any value" is never written
        moves.move(LEASE_OWNER, {"id": 1}, states.SET, None)
    assert Job.get_by_id(job.id).cancelled is True


# --------------------------------------------------------------------------- webhook events


def _event() -> WebhookEvent:
    return WebhookEvent.create(event_id="evt_1", event_type="agent.session.updated", payload={})


def test_racing_workers_claim_an_event_once(ledger):
    event_id = _event().id
    readers = [WebhookEvent.get_by_id(event_id) for _ in range(2)]
    won = race(*(lambda r=r: worker._claim(r, timeout=60) for r in readers))
    assert sorted(won) == [False, True], won
    stored = WebhookEvent.get_by_id(event_id)
    assert (stored.status, stored.attempts) == (states.EVENT_PROCESSING, 1)


def test_a_finish_names_its_claim_so_a_taken_over_claim_is_not_overwritten(ledger):
    """Worker A stalls past the lease, worker B takes the event over and ignores it; A's late
    ``done`` changes nothing (before issue 51 it overwrote B's outcome, finished by id)."""
    first = _event()
    assert worker._claim(first, timeout=60)
    second = WebhookEvent.get_by_id(first.id)
    assert worker._claim(second, timeout=0)  # A's claim is stale: taken over
    assert worker._finish(None, first, states.EVENT_DONE) is False
    assert WebhookEvent.get_by_id(first.id).status == states.EVENT_PROCESSING
    assert worker._finish(None, second, states.EVENT_IGNORED) is True
    assert WebhookEvent.get_by_id(first.id).status == states.EVENT_IGNORED
    assert worker._claim(WebhookEvent.get_by_id(first.id), timeout=0) is False  # final


# --------------------------------------------------------------------------- request keys


def test_two_requests_taking_over_a_dead_claim_one_wins(ledger, monkeypatch):
    held = request_keys.claim("t", "k", "fp", lease_seconds=10, retention_hours=1, now=T0)
    assert isinstance(held, request_keys.Claim)
    later = T0 + dt.timedelta(seconds=30)  # the holder died: its claim is past its time
    read, both_read = RequestKey.get_or_none, threading.Barrier(2)

    def read_then_wait(*args, **kwargs):  # both requests read the row before either writes
        row = read(*args, **kwargs)
        both_read.wait(timeout=10)
        return row

    monkeypatch.setattr(RequestKey, "get_or_none", read_then_wait)
    again = lambda: request_keys.claim("t", "k", "fp", 10, 1, now=later)  # noqa: E731
    results = race(again, again)
    monkeypatch.undo()
    claims = [r for r in results if isinstance(r, request_keys.Claim)]
    busy = [r for r in results if isinstance(r, exc.RequestKeyInProgress)]
    assert (len(claims), len(busy)) == (1, 1), results
    # the dead holder's late answer changes nothing; the new holder's is the one stored
    request_keys.finish(held, 201, {"from": "the dead holder"})
    assert RequestKey.get().state == states.KEY_IN_PROGRESS
    request_keys.finish(claims[0], 201, {"from": "the holder"})
    stored = RequestKey.get()
    assert (stored.state, stored.body) == (states.KEY_DONE, {"from": "the holder"})
    assert request_keys.claim("t", "k", "fp", 10, 1, now=later) == request_keys.Stored(
        201, {"from": "the holder"}
    )


def test_two_retries_of_an_open_key_one_runs(ledger):
    held = request_keys.claim("t", "k", "fp", lease_seconds=10, retention_hours=1, now=T0)
    request_keys.finish(held, 502, None)
    assert RequestKey.get().state == states.KEY_OPEN
    again = lambda: request_keys.claim("t", "k", "fp", 10, 1, now=T0)  # noqa: E731
    results = race(again, again)
    assert sorted(type(r).__name__ for r in results) == ["Claim", "RequestKeyInProgress"]


# --------------------------------------------------------------------------- leases


def test_two_owners_acquiring_a_free_lease_one_is_granted(ledger):
    job = _job()
    first = leases.acquire(job, "a", 60)
    leases.release(job, "a", first.fencing_token)
    results = race(lambda: leases.acquire(job, "b", 60), lambda: leases.acquire(job, "c", 60))
    granted = [r for r in results if isinstance(r, Lease)]
    refused = [r for r in results if isinstance(r, exc.LeaseHeld)]
    assert (len(granted), len(refused)) == (1, 1), results
    stored = Lease.get()
    assert (stored.owner, stored.fencing_token) == (granted[0].owner, 2)


def test_a_release_under_a_stale_token_leaves_the_next_owner_holding(ledger):
    job = _job()
    old = leases.acquire(job, "a", 0)  # expires at once (by the database's clock)
    new = leases.acquire(job, "b", 60)
    assert new.fencing_token == old.fencing_token + 1
    with pytest.raises(exc.StaleFencingToken):
        leases.release(job, "a", old.fencing_token)
    assert (Lease.get().owner, Lease.get().fencing_token) == ("b", new.fencing_token)
    assert leases.release(job, "b", new.fencing_token)["released"] is True
    assert Lease.get().owner is None


# --------------------------------------------------------------------------- cancel, stops


def test_two_cancels_of_a_job_one_reason_is_kept(ledger):
    job = _job()
    won = race(*(lambda why=why: moves.move(JOB_CANCELLED, {"id": job.id}, True, False,
                                            cancel_reason=why) for why in ("a", "b")))  # fmt: skip
    assert sorted(won) == [0, 1], won
    kept = Job.get_by_id(job.id).cancel_reason
    assert records.cancel_job(job, "c").cancel_reason == kept  # repeat-safe: the first kept


def _session() -> AgentSession:
    return AgentSession.create(session_id="sess_1", tenant="acme", job_id="j", task_version=1)


def test_two_stops_one_reason_is_kept_and_a_stale_lift_leaves_a_new_stop(ledger):
    row = _session()
    race(lambda: stops.stop(row, "limit: deadline passed"), lambda: stops.stop(row, "gone"))
    first = AgentSession.get_by_id(row.id)
    assert first.stopped_reason in ("limit: deadline passed", "gone")
    results = race(lambda: stops.lift(first), lambda: stops.lift(first))
    assert sorted(results) == [False, True], results
    stops.stop(row, "artifact mismatch")
    assert stops.lift(first) is False  # read before the new stop: that one holds
    assert AgentSession.get_by_id(row.id).stopped_reason == "artifact mismatch"


# --------------------------------------------------------------------------- revocations


def test_two_editors_revoking_an_approval_the_first_revocation_is_kept(ledger):
    job = _job()
    approval = Approval.create(
        tenant="acme",
        job_id="j",
        task_version=1,
        post_id=7,
        content_sha256="d",
        expires_at=T0,
        approved_by="ed",
    )
    race(
        lambda: approvals.revoke(job, approval.id, "editor-a"),
        lambda: approvals.revoke(job, approval.id, "editor-b"),
    )
    revoked = Approval.get_by_id(approval.id)
    assert revoked.revoked_by in ("editor-a", "editor-b") and revoked.revoked_at is not None
    again = approvals.revoke(job, approval.id, "editor-c")
    assert (again.revoked_by, again.revoked_at) == (revoked.revoked_by, revoked.revoked_at)


def test_two_revocations_of_an_api_token_count_once(ledger):
    tokens.create_token("acme", "workflow", "n8n")
    counts = race(lambda: tokens.revoke_tokens("acme", "n8n"), lambda: tokens.revoke_tokens(
        "acme", "n8n"))  # fmt: skip
    assert sum(counts) == 1, counts
    assert Token.get().revoked_at is not None


def test_two_editors_opening_a_pending_request_one_claims_it(ledger):
    pending_id = grants.open_pending(
        "c", "https://x/cb", True, "ch", "https://gw/mcp", [], "s", dt.timedelta(minutes=15), T0
    )
    claimed = race(lambda: grants.claim(pending_id, "ed-a", T0), lambda: grants.claim(
        pending_id, "ed-b", T0))  # fmt: skip
    assert sum(r is not None for r in claimed) == 1, claimed
    winner = OAuthPending.get().claimed_by
    decided = race(lambda: grants.deny(pending_id, winner, T0), lambda: grants.deny(
        pending_id, winner, T0))  # fmt: skip
    assert sum(r is not None for r in decided) == 1, decided


def test_two_revocations_of_a_grant_one_is_true(ledger):
    grant = OAuthGrant.create(
        tenant="acme",
        sites=["blog"],
        scopes=[],
        client_id="c",
        client_name="C",
        resource="r",
        approved_by="ed",
        principal_hash="p",
    )
    results = race(lambda: grants.revoke(grant.id, "editor", T0), lambda: grants.revoke(
        grant.id, "client-revoked", T0))  # fmt: skip
    assert sorted(results) == [False, True], results
    assert OAuthGrant.get().revoked_why in ("editor", "client-revoked")


# --------------------------------------------------------------------------- the workers' pause


def test_two_workers_refused_at_once_pause_once_and_another_key_clears_it(ledger):
    one, two = (SimpleNamespace(secret_key="s", openai_api_key=k) for k in ("sk-1", "sk-2"))
    results = race(
        lambda: openai_key.refused(one, 401, "a"), lambda: openai_key.refused(one, 403, "b")
    )
    assert results == [None, None], results  # the loser of the INSERT paused the row all the same
    row = AgentWorkerState.get()
    assert row.paused_status in (401, 403) and openai_key.paused(one).id == row.id
    assert race(lambda: openai_key.paused(two), lambda: openai_key.paused(two)) == [None, None]
    assert AgentWorkerState.get().paused_reason is None  # cleared: the key changed
    assert openai_key.paused(one) is None
