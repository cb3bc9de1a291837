"""Stops and counters of an agent's work on a job.

A stop is never a retry: a revoked WordPress password, a revoked binding token, a cancelled
job, a removed site, a session that failed or no longer exists at OpenAI, an artifact digest
mismatch, an exhausted limit or a passed deadline leaves the session's actions unanswered (but
a call refused for a digest mismatch, which is answered with the refusal so that the turn ends)
and the job shown with ``agent.stopped_reason`` until a person acts (an editor's checked
follow-up, :mod:`gateway.agents.follow_ups`). A credentials stop lifts itself once the site's
credentials were updated: ``gateway sites add`` bumps ``credential_version``.

Counters (stored with the session row): resume attempts (worker passes that found actions to
answer), tool calls answered, tokens used (the session's best-effort ``usage``), and a deadline.
The general budget mechanism (limits only an editor or admin may raise, 429
``budget-exhausted``) belongs to the operator issue; here the limits are simple settings:
``GATEWAY_AGENT_MAX_RESUMES``, ``GATEWAY_AGENT_MAX_TOOL_CALLS``, ``GATEWAY_AGENT_MAX_TOKENS``,
``GATEWAY_AGENT_DEADLINE_HOURS``.

Cancel: ``POST /v1/jobs/{id}/cancel`` always succeeds locally at once. For a job with a session
it claims the ledger operation ``.../session_cancel/{session_id}`` and tries to send
``agent.session.input.cancel`` once when the session has an active turn; while OpenAI is
unreachable the worker retries (same idempotency key).
"""

from __future__ import annotations

import logging

from gateway.agents import sessions
from gateway.agents import submissions
from gateway.agents.openai_sdk import openai
from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.core.states import SET
from gateway.ledger import db
from gateway.ledger import moves
from gateway.ledger.models import AGENT_STOP
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import AgentSession
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.ledger.models import Site
from gateway.operations import transitions
from gateway.operations.target import Target

log = logging.getLogger(__name__)
ACTIVE = ("in_progress", "requires_action")


def stop(row: AgentSession, reason: str, target: Target | None = None) -> None:
    """Stop the agent's work on the job (the first reason is kept)."""
    version = target.site.credential_version if target is not None else None
    moves.move(AGENT_STOP, {"id": row.id}, reason, None, stopped_credential_version=version)
    log.warning("agent on job_id=%s stopped: %s", row.job_id, reason)


def lift(row: AgentSession) -> bool:
    """Lift the stop read on ``row`` (its reason and credential version as read): False when
    it was lifted meanwhile or another stop replaced it (that one holds)."""
    as_read = {"id": row.id, "stopped_reason": row.stopped_reason}
    same_version = (AgentSession.stopped_credential_version == row.stopped_credential_version,)
    lifted = moves.move(
        AGENT_STOP, as_read, None, SET, when=same_version, stopped_credential_version=None
    )
    return lifted == 1


def still_stopped(row: AgentSession, job: Job) -> bool:
    """True while a stop holds; a credentials stop ends once the site's credentials were
    updated after it."""
    if row.stopped_reason is None:
        return False
    if row.stopped_credential_version is None:
        return True
    site = Site.get_or_none(Site.tenant == job.tenant, Site.name == job.site)
    if site is None or site.credential_version == row.stopped_credential_version:
        return True
    lift(row)  # a racing lift, or a new stop meanwhile: the next pass reads it
    return False


def limit_reached(config: Config, row: AgentSession) -> str | None:
    """Which limit the session's counters reached, or None."""
    if row.deadline_at is not None and row.deadline_at <= db.utcnow():
        return "deadline passed"
    if row.resume_attempts >= config.agent_max_resumes:
        return f"resume attempts reached {config.agent_max_resumes}"
    if row.tool_calls_answered >= config.agent_max_tool_calls:
        return f"tool calls answered reached {config.agent_max_tool_calls}"
    if row.tokens_used >= config.agent_max_tokens:
        return f"tokens used reached {config.agent_max_tokens}"
    return None


def count_resume(row: AgentSession) -> None:
    AgentSession.update(resume_attempts=AgentSession.resume_attempts + 1).where(
        AgentSession.id == row.id
    ).execute()


def count_answer(row: AgentSession) -> None:
    AgentSession.update(tool_calls_answered=AgentSession.tool_calls_answered + 1).where(
        AgentSession.id == row.id
    ).execute()


def request_cancel(config: Config, job: Job) -> Operation | None:
    """After the job was cancelled: claim the session's cancel and try to send it now.

    Never raises for OpenAI trouble or a missing configuration (the cancel has succeeded
    locally; the worker sends the claimed cancel later). Returns the cancel row, or None for
    a job without a session.
    """
    if not job.session_id:
        return None
    event = {"type": "agent.session.input.cancel"}
    row = submissions.claim(job, submissions.CANCEL, job.session_id, job.session_id, event)
    try:
        return settle_cancel(config, sessions.client(config), row)
    except exc.GatewayError as error:
        log.warning("cancel of job_id=%s not sent yet: %s", job.job_id, error.detail)
        return row


def settle_cancel(config: Config, oai: openai.OpenAI, row: Operation) -> Operation:
    """Send a claimed cancel if the session has an active turn; otherwise record that no
    cancel was needed (also when the session no longer exists).

    Raises:
        AgentUnavailable: the session cannot be retrieved now.
        AgentKeyRefused: OpenAI refused the key (the workers pause).
    """
    if row.state == CONFIRMED:
        return row
    session_id = row.intent["session_id"]
    try:
        session = sessions.retrieve(oai, session_id)
    except exc.AgentSessionGone:
        return _confirm_unsent(row, "the session no longer exists at OpenAI: nothing to cancel")
    if session.status in ACTIVE or row.attempts > 0:  # a sent one is resent: same key
        return submissions.send(config, oai, row)
    return _confirm_unsent(row, f"session {session.status}: no active turn")


def _confirm_unsent(row: Operation, reason: str) -> Operation:
    receipt = {"sent": False, "reason": reason}
    transitions.move(row, CONFIRMED, transitions.NOT_CONFIRMED, receipt=receipt)
    return Operation.get_by_id(row.id)
