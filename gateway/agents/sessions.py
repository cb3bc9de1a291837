"""Agent sessions: the job <-> session mapping, the OpenAI client, and the state rebuild.

* :func:`bind` - ``PUT /v1/jobs/{id}`` with ``session_id``: one session belongs to one job in
  the whole gateway (unique, across tenants: 409 ``session-bound``); a job's session changes
  only with a task-version bump (409 ``session-change-needs-version-bump``). The token that
  bound it is remembered (:mod:`gateway.agents.permissions`).
* :func:`client` - ``openai.OpenAI`` for the gateway's one OpenAI project. The key comes from
  :class:`gateway.core.config.Config` and goes nowhere else: not the ledger, not a log line, not a
  response, not a tool result.
* :func:`rebuild` - ``POST /v1/jobs/{id}/recover`` for a job with a session: retrieve the
  session (``GET /v1/agents/sessions/{id}``), page through ALL saved items
  (``GET /v1/agents/sessions/{id}/items?order=asc&limit=100``) keeping only what names
  gateway tools and the last turn's outcome, join with the ledger, store the summary.
  A finished turn or an idle session is not business success: only read-back verification is.
"""

from __future__ import annotations

import datetime as dt
import logging
from functools import lru_cache

from gateway.agents import openai_key
from gateway.agents import permissions
from gateway.agents import tools
from gateway.agents.openai_sdk import openai
from gateway.core import answers
from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core.config import Config
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger import unique
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import FAILED
from gateway.ledger.models import AgentSession
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.ledger.models import Review
from gateway.tenancy import tenant_shares

log = logging.getLogger(__name__)
ACTIVE = ("in_progress", "requires_action")


@lru_cache(maxsize=4)
def client_for(api_key: str, base_url: str | None) -> openai.OpenAI:
    """One SDK client per key and base URL in this process (connection reuse)."""
    return openai.OpenAI(api_key=api_key, base_url=base_url, max_retries=1, timeout=30.0)


def client(config: Config) -> openai.OpenAI:
    """The OpenAI client of this gateway (one per process and configuration).

    Inside a request, the caller's tenant takes its request share first
    (:func:`gateway.tenancy.tenant_shares.enter_noted`): an OpenAI call waits on another
    server.

    Raises:
        AgentNotConfigured (503): ``GATEWAY_OPENAI_API_KEY`` is not set.
        TenantBusy (429): the caller's tenant is at its request share in this worker.
    """
    if not config.openai_api_key:
        raise exc.AgentNotConfigured("set GATEWAY_OPENAI_API_KEY to connect agent sessions")
    tenant_shares.enter_noted(config)
    return client_for(config.openai_api_key, config.openai_base_url)


def current(job: Job) -> AgentSession | None:
    """The job's current session row (None when the job has no session)."""
    if not job.session_id:
        return None
    return AgentSession.get_or_none(AgentSession.session_id == job.session_id)


def check_free(tenant: str, job_id: str, session_id: str) -> None:
    """Refuse early a session bound to another job (before a job is created for it).

    Raises:
        SessionBound (409).
    """
    owner = AgentSession.get_or_none(AgentSession.session_id == session_id)
    if owner is not None and (owner.tenant, owner.job_id) != (tenant, job_id):
        raise exc.SessionBound("this agent session belongs to another job", session_id=session_id)


def bind(config: Config, job: Job, session_id: str, token_hash: str | None = None) -> Job:
    """Bind ``session_id`` to ``job`` (repeat-safe for the same pair), remembering the SHA-256
    of the token that bound it (``token_hash``); the same pair again records the token of a
    session bound before schema version 10 (:func:`gateway.agents.permissions.adopt`).

    Raises:
        SessionBound (409): another job (of any tenant) holds the session, or it is an
            earlier session of this job.
        SessionChangeNeedsBump (409): the job has another session bound at its current
            task version.
    """
    check_free(job.tenant, job.job_id, session_id)
    if job.session_id == session_id:
        row = current(job)
        if row is not None and token_hash and permissions.adopt(row, token_hash):
            log.info("job_id=%s: binding of session %s recorded", job.job_id, session_id)
        return job
    if AgentSession.get_or_none(AgentSession.session_id == session_id) is not None:
        raise exc.SessionBound("this session was replaced for this job", session_id=session_id)
    now_bound = current(job)
    if now_bound is not None and now_bound.task_version >= job.task_version:
        raise exc.SessionChangeNeedsBump(
            f"job {job.job_id} has session {now_bound.session_id} at task_version "
            f"{job.task_version}; send a higher task_version with the new session",
            task_version=job.task_version,
        )
    deadline = db.utcnow() + dt.timedelta(hours=config.agent_deadline_hours)

    def insert() -> AgentSession:
        row = AgentSession.create(
            session_id=session_id,
            tenant=job.tenant,
            job_id=job.job_id,
            task_version=job.task_version,
            deadline_at=deadline,
            bound_token_hash=token_hash,
        )
        records.touch(job, session_id=session_id)
        return row

    _row, created = unique.insert_or_get(insert)
    if not created:  # a racing bind of the same session: judge again
        check_free(job.tenant, job.job_id, session_id)
        return Job.get_by_id(job.id)
    log.info("job_id=%s bound to session %s", job.job_id, session_id)
    return job


def agent_view(job: Job) -> dict | None:
    """The agent part of ``GET /v1/jobs/{id}``: the session row as last seen, who bound it,
    its environment, the poll's next retrieve, the workers' pause, the last stored summary
    (docs/api.md, "Agent")."""
    row = current(job)
    if row is None:
        return None
    return {
        "session_id": row.session_id,
        "status": row.status,
        "stopped_reason": row.stopped_reason,
        "binding": permissions.binding_view(row),
        "environment": row.environment,
        "next_poll_at": db.rfc3339(row.next_poll_at),
        "worker": openai_key.view(),
        "counters": {
            "resume_attempts": row.resume_attempts,
            "tool_calls_answered": row.tool_calls_answered,
            "tokens_used": row.tokens_used,
        },
        "deadline_at": db.rfc3339(row.deadline_at),
        "checked_at": db.rfc3339(row.checked_at),
        "summary": row.summary,
        "summary_at": db.rfc3339(row.summary_at),
    }


def openai_error(error: openai.APIError, what: str) -> exc.GatewayError:
    """The gateway's error for an OpenAI failure while doing ``what``: 401/403
    :class:`AgentKeyRefused` (the key: every session at once), 404 :class:`AgentSessionGone`
    (this session), anything else :class:`AgentUnavailable` (try again later). The message
    names the SDK's error class and status only: never a header, never the key."""
    status = getattr(error, "status_code", None)
    if answers.verdict(answers.OPENAI, status) == answers.KEY_REFUSED:
        detail = getattr(error, "message", "") or type(error).__name__
        return exc.AgentKeyRefused(f"{what}: {detail}"[:500], openai_status=status)
    if status == 404:
        return exc.AgentSessionGone(f"{what}: 404 from OpenAI", openai_status=status)
    return exc.AgentUnavailable(
        f"{what}: {type(error).__name__}" + (f" ({status})" if status else ""), retry_after=5
    )


def retrieve(oai: openai.OpenAI, session_id: str):
    """``GET /v1/agents/sessions/{id}`` as the SDK's ``AgentSession``.

    Raises:
        AgentKeyRefused (503): OpenAI refused the key (401/403).
        AgentSessionGone (409): no such session any more (404).
        AgentUnavailable (503): OpenAI cannot be asked now.
    """
    try:
        return oai.beta.agents.sessions.retrieve(session_id)
    except openai.APIError as error:
        raise openai_error(error, f"cannot retrieve session {session_id}") from None


def record_seen(row: AgentSession, session) -> None:
    """Store what a retrieve showed: status, best-effort token usage, the environment's id
    and type, when."""
    tokens_used = session.usage.total_tokens if session.usage else row.tokens_used
    fields = {"status": session.status, "tokens_used": tokens_used, "checked_at": db.utcnow()}
    environment = session.environment
    env_id = getattr(environment, "id", None)
    if env_id and env_id != row.environment_id:
        fields["environment_id"] = env_id
        fields["environment"] = {
            "id": env_id,
            "type": environment.type,
            "status": None,
            "reason": None,
            "event": None,
            "updated_at": db.rfc3339(db.utcnow()),
        }
    AgentSession.update(**fields).where(AgentSession.id == row.id).execute()


def _scan(oai: openai.OpenAI, session_id: str) -> tuple[dict, dict, int, int]:
    """Stream every saved item once; keep gateway-tool calls and the last turn only."""
    calls: dict[str, dict] = {}
    last: dict = {}
    items = pages = 0
    page = oai.beta.agents.sessions.items.list(session_id, order="asc", limit=100)
    while True:
        pages += 1
        for item in page.data:
            items += 1
            kind = item.type
            if kind == "function_call" and item.name in tools.all_tools():
                calls[item.call_id] = {"name": item.name, "turn_id": item.turn_id}
            elif kind == "function_call_output" and item.call_id in calls:
                calls[item.call_id]["output"] = item.status
            if getattr(item, "turn_id", None) != last.get("turn_id"):
                last = {"turn_id": getattr(item, "turn_id", None), "final_answer": False}
            if kind == "message" and item.role == "assistant" and item.phase == "final_answer":
                last["final_answer"] = True
        if not page.has_next_page():
            break
        page = page.get_next_page()
    return calls, last, items, pages


def rebuild(config: Config, job: Job, oai: openai.OpenAI | None = None) -> dict | None:
    """Rebuild the agent's state from the session's saved items and the ledger, store it on
    the session row and return it (None when the job has no session).

    Returns ``{"session_id", "status", "items_read", "pages", "tool_calls": {"completed",
    "failed", "unknown", "needs_a_person"}, "last_turn", "pending_actions", "business_success",
    "note"}``; each tool call entry names ``call_id``, ``tool`` and ``turn_id``.

    Raises:
        AgentUnavailable (503): the session cannot be read now (nothing is stored).
    """
    row = current(job)
    if row is None:
        return None
    oai = oai or client(config)
    session = retrieve(oai, row.session_id)
    try:
        calls, last, items, pages = _scan(oai, row.session_id)
    except openai.APIError as error:
        raise openai_error(error, "cannot page session items") from None
    results = _tool_results(job)
    sorted_calls = {"completed": [], "failed": [], "unknown": [], "needs_a_person": []}
    for call_id, call in calls.items():
        entry = {"call_id": call_id, "tool": call["name"], "turn_id": call["turn_id"]}
        sorted_calls[_judge(results.get(call_id), call.get("output"))].append(entry)
    for review in _open_agent_reviews(job):
        sorted_calls["needs_a_person"].append(
            {"review_id": review.id, "action": review.detail.get("action", {}).get("type")}
        )
    summary = {
        "session_id": row.session_id,
        "status": session.status,
        "error": session.error,
        "items_read": items,
        "pages": pages,
        "tool_calls": sorted_calls,
        "last_turn": last or None,
        "pending_actions": [a.type for a in session.required_actions],
        "stopped_reason": row.stopped_reason,
        "business_success": job.phase in states.COMPLETED_PHASES,
        "note": "an idle session or a finished turn is not business success; "
        "only read-back verification is",
    }
    record_seen(row, session)
    AgentSession.update(summary=summary, summary_at=db.utcnow()).where(
        AgentSession.id == row.id
    ).execute()
    return summary


def recover_view(config: Config, job: Job) -> dict:
    """The agent part of the recover answer: a fresh rebuild, or - while OpenAI cannot be
    asked - the last stored summary with ``rebuild_error`` (recover answers 200 regardless)."""
    try:
        return rebuild(config, job)
    except exc.GatewayError as error:
        if isinstance(error, exc.AgentKeyRefused):  # the key, for every worker: pause them
            openai_key.refused(config, error.extensions.get("openai_status") or 401, error.detail)
        log.warning("job_id=%s: session state not rebuilt: %s", job.job_id, error.detail)
        row = current(job)
        return {"summary": row.summary if row else None, "rebuild_error": error.detail}


def _tool_results(job: Job) -> dict[str, Operation]:
    query = Operation.select().where(
        Operation.tenant == job.tenant,
        Operation.job_id == job.job_id,
        Operation.action == "tool_result",
    )
    return {r.slot: r for r in query}


def _judge(result: Operation | None, output_status: str | None) -> str:
    """Sort one gateway-tool call by the ledger first, the session's saved output second."""
    if result is not None:
        if result.state == FAILED:
            return "failed"
        if result.state != CONFIRMED:
            return "unknown"
        return "completed" if result.intent["event"]["success"] else "failed"
    if output_status == "completed":
        return "completed"
    if output_status == "failed":
        return "failed"
    return "unknown"


def _open_agent_reviews(job: Job) -> list[Review]:
    return list(
        Review.select().where(
            Review.tenant == job.tenant,
            Review.job_id == job.job_id,
            Review.kind == "agent_action",
            Review.status.in_(states.REVIEW_UNRESOLVED),
        )
    )
