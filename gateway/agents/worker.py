"""The agent worker (``gateway worker``; ``gateway serve`` runs one per server, like the
sweep): processes stored webhook events, polls every unfinished session on a schedule, and
resends session inputs not yet accepted.

For a session it never acts on an event's content alone: it retrieves the current session
(``GET /v1/agents/sessions/{id}``), takes the job's lease (fencing token on every WordPress
write), re-checks the permission the session was bound with and the site's credentials
(:mod:`gateway.agents.permissions`), checks the session's saved items against the job's
checkpoints (:mod:`gateway.agents.evidence`), reconciles the job's unproven operations, and
handles the required actions (:mod:`gateway.agents.required_actions`).

* **Events**: a stored event is claimed by a conditional UPDATE (one processing per event, even
  with several workers on one PostgreSQL ledger); a claim left by a crashed worker is taken
  over once the job lease it worked under has expired (``GATEWAY_AGENT_LEASE_SECONDS``). An
  event is marked ``done`` only when its session was actually handled; one that could not be
  (OpenAI or the site unreachable, the job's lease held, the site busy) goes back to
  ``pending`` and is claimed again after a backoff (``next_attempt_at``,
  :func:`gateway.agents.polling.retry_delay`).
* **Poll**: :mod:`gateway.agents.polling` (every unfinished session, backoff and jitter, at most
  ``GATEWAY_AGENT_POLL_BATCH`` per pass, shared round robin between tenants).
* **Turns**: :mod:`gateway.agents.turns` - the tenants take turns within a pass, one event or
  session each, and a tenant leaves the pass after ``GATEWAY_AGENT_TENANT_SLICE`` seconds of
  its work; what it leaves is not claimed and waits for the next pass.
* **Lost authorisation**: a revoked binding, a cancelled job or a removed site stops the session
  with its reason and cancels its turn at OpenAI; a 404 for the session stops it; an OpenAI
  401/403 pauses every worker holding this key (:mod:`gateway.agents.openai_key`) - a paused
  worker makes no OpenAI call until the key changes.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading

from gateway.agents import environments
from gateway.agents import evidence
from gateway.agents import openai_key
from gateway.agents import permissions
from gateway.agents import polling
from gateway.agents import required_actions
from gateway.agents import sessions
from gateway.agents import stops
from gateway.agents import submissions
from gateway.agents import turns
from gateway.agents.openai_sdk import openai
from gateway.core import exceptions as exc
from gateway.core import rounds
from gateway.core.config import Config
from gateway.core.states import EVENT_DONE
from gateway.core.states import EVENT_IGNORED
from gateway.core.states import EVENT_PENDING
from gateway.core.states import EVENT_PROCESSING
from gateway.jobs import leases
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger import moves
from gateway.ledger.models import WEBHOOK_EVENT_STATUS
from gateway.ledger.models import AgentSession
from gateway.ledger.models import Job
from gateway.ledger.models import WebhookEvent
from gateway.operations.target import target_for
from gateway.recovery import reconciliation
from gateway.tenancy import site_slots

log = logging.getLogger(__name__)
RESEND_AFTER = submissions.IN_FLIGHT_SECONDS
GONE = "the session no longer exists at OpenAI (404 on retrieve)"
# Failures after which a session's work waits for a later pass (nothing is lost: the call
# stays unanswered, the event pending, the session due again after a backoff).
_LATER = (exc.AgentUnavailable, exc.SiteBusy, exc.WordPressUnavailable)


def owner() -> str:
    """This worker's lease owner name."""
    return f"agent-worker:{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def run_once(config: Config, oai: openai.OpenAI | None = None) -> dict:
    """One pass: stored events and due sessions, the tenants taking turns
    (:mod:`gateway.agents.turns`), then unsettled inputs. Returns counts (``paused: 1`` when
    OpenAI refused this key, now or before: nothing was asked then; ``deferred``: events and
    sessions of tenants that used their slice, left unclaimed for the next pass)."""
    counts = dict.fromkeys(
        ("events", "sessions", "answered", "resent", "review", "later", "stopped", "busy"), 0
    )
    counts.update(deferred=0, paused=0, connected=0, refused=0)
    if openai_key.paused(config) is not None:
        counts["paused"] = 1
        return counts
    oai = oai or sessions.client(config)
    try:
        queues = turns.lanes(_pending_events(), polling.due(config))
        counts["deferred"] = rounds.take_turns(
            queues,
            lambda item: _take_turn(config, oai, item, counts),
            config.agent_tenant_slice,
            name="agent worker",
        )
        _resend_unsettled(config, oai, counts)
    except exc.AgentKeyRefused as error:
        openai_key.refused(config, error.extensions.get("openai_status") or 401, error.detail)
    if openai_key.paused(config) is not None:
        counts["paused"] = 1
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


def _take_turn(config: Config, oai, item: turns.Item, counts: dict) -> None:
    """Claim and handle one event or due session (another worker's claim: nothing to do).

    Raises:
        AgentKeyRefused: OpenAI refused the key (the pass ends; every worker pauses).
    """
    if item.kind == "event":
        if _claim(item.row, config.agent_lease_seconds):
            counts["events"] += 1
            _finish(config, item.row, _process_event(config, oai, item.row, counts))
    elif polling.claim(config, item.row):
        # read again: the pass's list may be minutes old (a stop or a failure meanwhile)
        row = AgentSession.get_or_none(AgentSession.id == item.row.id)
        if row is not None:
            _process_session(config, oai, row, counts)


def _pending_events() -> list[WebhookEvent]:
    now = db.utcnow()
    due = (WebhookEvent.status == EVENT_PENDING) & (
        WebhookEvent.next_attempt_at.is_null() | (WebhookEvent.next_attempt_at <= now)
    )
    return list(
        WebhookEvent.select()
        .where(due | (WebhookEvent.status == EVENT_PROCESSING))
        .order_by(WebhookEvent.id)
    )


def _claim(event: WebhookEvent, timeout: float) -> bool:
    """Take the event for this worker: pending, or claimed ``timeout`` seconds ago by a
    worker that never finished it. The claim is the event's ``attempts`` as counted by this
    worker's UPDATE: every finish names it (:func:`_finish`)."""
    now = db.utcnow()
    stale = now - dt.timedelta(seconds=timeout)
    claimable = (WebhookEvent.status == EVENT_PENDING) | (WebhookEvent.claimed_at < stale)
    claimed = moves.move(
        WEBHOOK_EVENT_STATUS,
        {"id": event.id, "attempts": event.attempts},
        EVENT_PROCESSING,
        (EVENT_PENDING, EVENT_PROCESSING),
        when=(claimable,),
        claimed_at=now,
        attempts=event.attempts + 1,
    )
    if claimed:
        event.attempts += 1
    return claimed == 1


def _finish(config: Config, event: WebhookEvent, outcome: str | None) -> bool:
    """Finish the claim this worker holds on ``event`` (its ``attempts`` as claimed):
    ``done``/``ignored`` are final; None (not handled yet) puts the event back for a later
    pass. False when the claim was taken over meanwhile (a worker that stalled past the
    lease): the other worker's outcome stands."""
    held = {"id": event.id, "attempts": event.attempts}
    if outcome is None:
        wait = polling.retry_delay(config, max(event.attempts, 1))
        later = db.utcnow() + dt.timedelta(seconds=wait)
        finished = moves.move(
            WEBHOOK_EVENT_STATUS, held, EVENT_PENDING, EVENT_PROCESSING, next_attempt_at=later
        )
        log.info("webhook %s not handled yet (attempt %s)", event.event_id, event.attempts)
    else:
        finished = moves.move(
            WEBHOOK_EVENT_STATUS, held, outcome, EVENT_PROCESSING, processed_at=db.utcnow()
        )
    if not finished:
        log.warning("webhook %s: claim %s was taken over", event.event_id, event.attempts)
    return finished == 1


def _process_event(config: Config, oai, event: WebhookEvent, counts: dict) -> str | None:
    """``done`` (its session was handled), ``ignored`` (nothing of ours), None (later)."""
    if event.event_type.startswith("agent.environment."):
        data = (event.payload or {}).get("data") or {}
        handled = environments.on_event(event.event_type, data.get("id"))
        return EVENT_DONE if handled else EVENT_IGNORED
    row = AgentSession.get_or_none(AgentSession.session_id == event.session_id)
    if row is None:
        log.info("webhook %s: session %s is bound to no job", event.event_id, event.session_id)
        return EVENT_IGNORED
    try:
        return EVENT_DONE if _process_session(config, oai, row, counts) else None
    except exc.AgentKeyRefused:
        _finish(config, event, None)  # handled after the pause, with the new key
        raise


def _process_session(config: Config, oai, row: AgentSession, counts: dict) -> bool:
    """Handle one session now; True when it was handled (or needs nothing: stopped, an old
    session of its job), False when its work waits for a later pass.

    Raises:
        AgentKeyRefused: OpenAI refused the key (the caller pauses every worker).
    """
    job = records.get_job(row.tenant, row.job_id)
    if job.session_id != row.session_id:
        return True  # an old session of the job: its pending actions are never answered
    if job.cancelled:
        return _send_cancel(config, oai, job, counts)
    if stops.still_stopped(row, job):
        counts["stopped"] += 1
        return True
    reason = stops.limit_reached(config, row)
    if reason:
        stops.stop(row, f"limit: {reason}")
        counts["stopped"] += 1
        return True
    try:
        lease = leases.acquire(job, owner(), config.agent_lease_seconds)
    except exc.LeaseHeld:
        counts["busy"] += 1
        polling.failed(config, row)
        return False
    try:
        with site_slots.scope():  # the site's concurrency slot, as for any caller
            handled = _under_lease(config, oai, job, row, lease.fencing_token, counts)
    except exc.AgentSessionGone:
        stops.stop(row, GONE)
        counts["stopped"] += 1
        return True
    except exc.AgentKeyRefused:
        polling.due_now(row)  # due again at the first pass with a working key
        raise
    except _LATER as error:  # back off: the call stays unanswered until a later pass
        log.warning("job_id=%s: %s; a later pass tries again", job.job_id, error.detail)
        counts["later"] += 1
        polling.failed(config, row)
        return False
    finally:
        try:
            leases.release(job, lease.owner, lease.fencing_token)
        except exc.StaleFencingToken:
            pass  # the lease expired and went to someone else meanwhile
    if not handled:
        polling.failed(config, row)
    return handled


def _under_lease(config: Config, oai, job: Job, row: AgentSession, token: int, counts) -> bool:
    session = sessions.retrieve(oai, row.session_id)
    news = session.status != row.status
    sessions.record_seen(row, session)
    counts["sessions"] += 1
    if session.status == "failed":
        stops.stop(row, f"the session failed at OpenAI: {session.error or 'no error given'}")
        counts["stopped"] += 1
        return True
    if not session.required_actions:
        polling.seen(config, row, news)
        return True
    row = AgentSession.get_by_id(row.id)
    target = target_for(config, job, fencing_token=token, fenced=True)  # under the lease
    refusal = permissions.check(job, row, target)
    if refusal is not None:
        _stop_refused(config, oai, job, row, refusal, target)
        counts["stopped"] += 1
        return True
    if not evidence.check_resume(config, oai, job, row):
        counts["stopped"] += 1
        return True
    reconciliation.recover_job(target)  # unproven WordPress operations first, by lookup
    ctx = required_actions.Context(config, oai, job, target, row, session)
    outcomes = []
    for action in session.required_actions:
        outcomes.append(required_actions.handle(ctx, action))
        counts[outcomes[-1]] = counts.get(outcomes[-1], 0) + 1
        if outcomes[-1] == "stopped":
            break
    moved = "answered" in outcomes or "resent" in outcomes
    if moved:  # a resume = a pass that moved the session on (waiting for a person is not one)
        stops.count_resume(row)
    if "later" in outcomes:
        return False
    polling.seen(config, row, news or moved)
    return True


def _stop_refused(config, oai, job: Job, row: AgentSession, refusal, target) -> None:
    """Stop a session whose permission no longer holds. Lost authorisation (not a credentials
    refusal, which lifts itself once the credentials were updated) also cancels the session's
    turn at OpenAI, once, through the ledger (``.../session_cancel/{session_id}``)."""
    stops.stop(row, refusal.reason, target if refusal.credentials else None)
    if refusal.credentials:
        return
    event = {"type": "agent.session.input.cancel"}
    cancel = submissions.claim(job, submissions.CANCEL, row.session_id, row.session_id, event)
    try:
        stops.settle_cancel(config, oai, cancel)
    except exc.AgentUnavailable:
        pass  # claimed: the worker resends it (same key) at a later pass


def _send_cancel(config: Config, oai, job: Job, counts: dict) -> bool:
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
        return False
    return True


def _refusal(row) -> bool:
    """True for a tool result that refuses its call (``success: false``, e.g. a call refused
    for an artifact digest mismatch as the session was stopped): resent even to a stopped
    session, since it writes nothing and ends the call's wait."""
    event = (row.intent or {}).get("event") or {}
    return event.get("type") == "agent.session.input.tool_result" and event.get("success") is False


def _resend_unsettled(config: Config, oai, counts: dict) -> None:
    for row in submissions.unsettled(RESEND_AFTER):
        job = Job.get_or_none(Job.tenant == row.tenant, Job.job_id == row.job_id)
        if job is None or job.session_id != row.intent["session_id"]:
            continue  # the session was replaced: never answered
        session = AgentSession.get_or_none(AgentSession.session_id == job.session_id)
        stopped = session is not None and session.stopped_reason is not None
        try:
            if row.action == submissions.CANCEL:
                stops.settle_cancel(config, oai, row)
            elif job.cancelled or (stopped and not _refusal(row)):
                continue  # a stopped session is answered only after a person's decision
            else:
                submissions.send(config, oai, row)
            counts["resent"] += 1
        except exc.AgentUnavailable:
            counts["later"] += 1
        if openai_key.paused(config) is not None:
            return
