"""The agent worker (``gateway worker``; ``gateway serve`` runs one per server, like the
sweep): processes stored webhook events, polls sessions whose news may have been lost, and
resends session inputs not yet accepted.

For a session it never acts on an event's content alone: it retrieves the current session
(``GET /v1/agents/sessions/{id}``), takes the job's lease (fencing token on every WordPress
write), reconciles the job's unproven operations, and handles the required actions
(:mod:`gateway.agents.required_actions`). A stored event is claimed by a conditional UPDATE
(one processing per event, even with several workers on one PostgreSQL ledger); a claim left
by a crashed worker is taken over once the job lease it worked under has expired
(``GATEWAY_AGENT_LEASE_SECONDS``).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading

import openai

from gateway.agents import required_actions
from gateway.agents import sessions
from gateway.agents import stops
from gateway.agents import submissions
from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.jobs import leases
from gateway.jobs import records as jobs
from gateway.ledger import db
from gateway.ledger.models import AgentSession
from gateway.ledger.models import Job
from gateway.ledger.models import WebhookEvent
from gateway.operations.target import target_for
from gateway.recovery import reconciliation
from gateway.tenancy import site_slots

log = logging.getLogger(__name__)
RESEND_AFTER = 5.0


def owner() -> str:
    """This worker's lease owner name."""
    return f"agent-worker:{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def run_once(config: Config, oai: openai.OpenAI | None = None) -> dict:
    """One pass: stored events, stale sessions, unsettled inputs. Returns counts."""
    oai = oai or sessions.client(config)
    counts = {
        "events": 0,
        "sessions": 0,
        "answered": 0,
        "resent": 0,
        "review": 0,
        "later": 0,
        "stopped": 0,
        "busy": 0,
    }
    for event in _pending_events():
        if not _claim(event, config.agent_lease_seconds):
            continue
        counts["events"] += 1
        done = _process_event(config, oai, event, counts)
        WebhookEvent.update(status=done, processed_at=db.utcnow()).where(
            WebhookEvent.id == event.id
        ).execute()
    for row in _stale_sessions(config):
        _process_session(config, oai, row, counts)
    _resend_unsettled(config, oai, counts)
    return counts


def run_forever(config: Config, interval: float, stop: threading.Event) -> None:
    """Run passes every ``interval`` seconds until ``stop`` is set (OpenAI or ledger trouble
    is logged; the next pass tries again)."""
    while not stop.is_set():
        try:
            with db.database.connection_context():
                counts = run_once(config)
            if any(counts.values()):
                log.info("agent worker: %s", counts)
        except Exception:  # one failing pass must not end the worker
            log.exception("agent worker pass failed")
        stop.wait(interval)


def _pending_events() -> list[WebhookEvent]:
    return list(
        WebhookEvent.select()
        .where(WebhookEvent.status.in_(("pending", "processing")))
        .order_by(WebhookEvent.id)
    )


def _claim(event: WebhookEvent, timeout: float) -> bool:
    """Take the event for this worker: pending, or claimed ``timeout`` seconds ago by a
    worker that never finished it."""
    now = db.utcnow()
    stale = now - dt.timedelta(seconds=timeout)
    claimable = (WebhookEvent.status == "pending") | (
        (WebhookEvent.status == "processing") & (WebhookEvent.claimed_at < stale)
    )
    return (
        WebhookEvent.update(status="processing", claimed_at=now, attempts=event.attempts + 1)
        .where(WebhookEvent.id == event.id, WebhookEvent.attempts == event.attempts, claimable)
        .execute()
        == 1
    )


def _process_event(config: Config, oai, event: WebhookEvent, counts: dict) -> str:
    row = AgentSession.get_or_none(AgentSession.session_id == event.session_id)
    if row is None:
        log.info("webhook %s: session %s is bound to no job", event.event_id, event.session_id)
        return "ignored"
    _process_session(config, oai, row, counts)
    return "done"


def _stale_sessions(config: Config) -> list[AgentSession]:
    """Current sessions waiting for an action (or never checked) with no news for
    ``agent_stale_after`` seconds: the poll that covers lost webhooks."""
    rows = (
        AgentSession.select()
        .join(Job, on=(Job.session_id == AgentSession.session_id))
        .where(
            Job.cancelled == False,  # noqa: E712 (peewee expression)
            AgentSession.stopped_reason.is_null(),
            AgentSession.status.is_null() | (AgentSession.status == "requires_action"),
        )
    )
    return [
        r
        for r in rows
        if r.checked_at is None
        or (db.utcnow() - r.checked_at).total_seconds() >= config.agent_stale_after
    ]


def _process_session(config: Config, oai, row: AgentSession, counts: dict) -> None:
    job = jobs.get_job(row.tenant, row.job_id)
    if job.session_id != row.session_id:
        return  # an old session of the job: its pending actions are never answered
    if job.cancelled:
        _send_cancel(config, oai, job, counts)
        return
    if stops.still_stopped(row, job):
        counts["stopped"] += 1
        return
    reason = stops.limit_reached(config, row)
    if reason:
        stops.stop(row, f"limit: {reason}")
        counts["stopped"] += 1
        return
    try:
        lease = leases.acquire(job, owner(), config.agent_lease_seconds)
    except exc.LeaseHeld:
        counts["busy"] += 1
        return
    try:
        with site_slots.scope():  # the site's concurrency slot, as for any caller
            _under_lease(config, oai, job, row, lease.fencing_token, counts)
    except exc.AgentUnavailable as error:
        log.warning("job_id=%s: %s", job.job_id, error.detail)
        counts["later"] += 1
    except exc.SiteBusy:  # back off: the call stays unanswered until the next pass
        log.info("job_id=%s: the site is busy (GATEWAY_SITE_CONCURRENCY); next pass", job.job_id)
        counts["later"] += 1
    finally:
        try:
            leases.release(job, lease.owner, lease.fencing_token)
        except exc.StaleFencingToken:
            pass  # the lease expired and went to someone else meanwhile


def _under_lease(config: Config, oai, job: Job, row: AgentSession, token: int, counts) -> None:
    session = sessions.retrieve(oai, row.session_id)
    sessions.record_seen(row, session)
    counts["sessions"] += 1
    if not session.required_actions:
        return
    target = target_for(config, job, fencing_token=token, fenced=True)  # under the lease
    reconciliation.recover_job(target)  # unproven WordPress operations first, by lookup
    ctx = required_actions.Context(config, oai, job, target, AgentSession.get_by_id(row.id))
    outcomes = []
    for action in session.required_actions:
        outcomes.append(required_actions.handle(ctx, action))
        counts[outcomes[-1]] = counts.get(outcomes[-1], 0) + 1
        if outcomes[-1] == "stopped":
            break
    if "answered" in outcomes or "resent" in outcomes:
        # A resume = a pass that moved the session on (waiting for a person is not one).
        stops.count_resume(row)


def _send_cancel(config: Config, oai, job: Job, counts: dict) -> None:
    row = submissions.find(job, submissions.CANCEL, job.session_id)
    if row is None:
        row = submissions.claim(
            job,
            submissions.CANCEL,
            job.session_id,
            job.session_id,
            {"type": "agent.session.input.cancel"},
        )
    try:
        stops.settle_cancel(config, oai, row)
    except exc.AgentUnavailable:
        counts["later"] += 1


def _resend_unsettled(config: Config, oai, counts: dict) -> None:
    for row in submissions.unsettled(RESEND_AFTER):
        job = Job.get_or_none(Job.tenant == row.tenant, Job.job_id == row.job_id)
        if job is None or job.session_id != row.intent["session_id"]:
            continue  # the session was replaced: never answered
        try:
            if row.action == submissions.CANCEL:
                stops.settle_cancel(config, oai, row)
            elif not job.cancelled:
                submissions.send(config, oai, row)
            counts["resent"] += 1
        except exc.AgentUnavailable:
            counts["later"] += 1
