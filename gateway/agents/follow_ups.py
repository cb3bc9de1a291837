"""A checked follow-up (seed, section 4: "确认需要后续Turn后，才发消息"): continuing an agent
session only after checking, with a structured summary of verified facts as its next input.

``POST /v1/jobs/{job_id}/agent/continue`` (and ``gateway jobs continue``) continues

* an idle session - a workflow token may;
* a stopped session - only an editor (an editor's decision lifts the stop, recorded with the
  editor's name and reason);

and only when nothing blocks it (each blocking fact is listed in the 409
``follow-up-refused``; nothing is sent):

* the session's permission holds (:mod:`gateway.agents.permissions`: the binding token, the
  job not cancelled, the site's credentials) and no agent limit is reached;
* the session, retrieved now, is ``idle``: no open required action, no turn in progress (a
  message to a working session would steer its turn, not continue the job);
* no open review item of the job (an agent's request for a person, an artifact mismatch, a
  suspected duplicate);
* reconciliation of the job (:func:`gateway.recovery.reconciliation.recover_job`) leaves no
  operation UNKNOWN or waiting for a review;
* the session's saved items claim no checkpoint the ledger does not hold
  (:mod:`gateway.agents.evidence`).

The input sent is one ``agent.session.input.message`` (OpenAI Agents API, ``POST
/v1/agents/sessions/{id}/events``) whose text states the verified facts - job, task version,
phase, the draft's post id and whether read-back verified it, the confirmed media and their
attachment ids, the checkpoints' digests - and what is not allowed (a second post, new uploads
of confirmed slots, publishing). It is a ledger operation
``{tenant}/{job_id}/v{n}/follow_up/{digest}``: ``digest`` is the SHA-256 (first 24 hex) of the
session id and the facts, and the event's ``Idempotency-Key`` is the SHA-256 of the operation
key (:mod:`gateway.agents.submissions`). The same facts are therefore sent once: asking again
answers the stored operation (200), resending it with the same key while it is not yet
accepted. The facts are context; the gateway's tools still enforce every limit.
"""

from __future__ import annotations

import json
import logging

from gateway.actions import drafts
from gateway.agents import evidence
from gateway.agents import openai_key
from gateway.agents import permissions
from gateway.agents import sessions
from gateway.agents import stops
from gateway.agents import submissions
from gateway.agents.openai_sdk import openai
from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core.config import Config
from gateway.core.digests import canonical_json
from gateway.core.digests import sha256_hex
from gateway.jobs import leases
from gateway.jobs import records
from gateway.jobs import timeline
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import AgentSession
from gateway.ledger.models import Checkpoint
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.operations import perform
from gateway.operations.target import target_for
from gateway.recovery import reconciliation

log = logging.getLogger(__name__)
# Seconds a follow-up that lost the claim to an identical racing one waits for the winner's
# send to settle before answering: at most one SDK call (gateway.agents.sessions.client_for's
# timeout), so both racers answer with the same recorded outcome.
SETTLE_WAIT = 30.0
NOT_ALLOWED = (
    "do not create a second post for this job: the draft above is the job's post",
    "do not upload the confirmed images again",
    "do not publish: only an editor approves and publishes, through the gateway",
    "change content already written only after bump_task_version",
)


def facts(job: Job) -> dict:
    """The verified facts of ``job`` as the ledger holds them now (no WordPress call):
    ``{"job_id", "task_version", "phase", "draft": {"post_id", "verified"} | None, "media":
    [{"slot", "attachment_id"}], "checkpoints": [{"phase", "artifacts": [{"role",
    "sha256"}]}], "decision": "approved" | "changes_requested" | None, "notes": [{"event",
    "by", "note"}], "not_allowed": [...]}``: ``decision`` and ``notes`` are the editors' on
    this version (issue 56, :mod:`gateway.jobs.timeline`)."""
    draft = drafts.latest_draft(job)
    checkpoints = Checkpoint.select().where(
        Checkpoint.tenant == job.tenant,
        Checkpoint.job_id == job.job_id,
        Checkpoint.task_version == job.task_version,
    )
    ordered = sorted(checkpoints, key=lambda c: states.PHASES.index(c.phase))
    return {
        "job_id": job.job_id,
        "task_version": job.task_version,
        "phase": job.phase,
        "draft": None
        if draft is None
        else {"post_id": draft.remote_id, "verified": job.phase in states.COMPLETED_PHASES},
        "media": [
            {"slot": slot, "attachment_id": row.remote_id}
            for slot, row in sorted(records.confirmed_media(job).items())
        ],
        "checkpoints": [
            {
                "phase": c.phase,
                "artifacts": [{"role": a["role"], "sha256": a["sha256"]} for a in c.artifacts],
            }
            for c in ordered
        ],
        "decision": job.decision,
        "notes": [
            {"event": n["event"], "by": n["actor"], "note": n["note"]} for n in timeline.notes(job)
        ],
        "not_allowed": list(NOT_ALLOWED),
    }


def message(found: dict) -> str:
    """The follow-up's text: the facts in words, then as JSON."""
    draft = found["draft"]
    media = [f"{m['slot']} = attachment {m['attachment_id']}" for m in found["media"]]
    lines = [
        f"Verified by the publishing gateway for job {found['job_id']}, task version "
        f"{found['task_version']} (phase {found['phase'] or 'none yet'}):",
        "- draft: "
        + (
            "none yet"
            if draft is None
            else f"post {draft['post_id']} is saved"
            + (", verified by read-back" if draft["verified"] else ", not verified yet")
        ),
        "- media confirmed: " + (", ".join(media) or "none"),
        "- checkpoints: " + (", ".join(c["phase"] for c in found["checkpoints"]) or "none"),
        *_editors(found),
        "Not allowed: " + "; ".join(found["not_allowed"]) + ".",
        "Continue from these facts only. They are context: the gateway's tools enforce the limits.",
        "Facts as JSON: " + json.dumps(found, ensure_ascii=False, sort_keys=True),
    ]
    return "\n".join(lines)


def _editors(found: dict) -> list[str]:
    """The editors' decision and notes in words (none: no line)."""
    lines = [f"- editor {n['by']} ({n['event']}): {n['note']}" for n in found["notes"]]
    if found["decision"] == states.CHANGES_REQUESTED:
        lines.append(
            "- an editor requested changes to this version: make a new task version "
            "(PUT the job with task_version + 1) that addresses the notes above"
        )
    return lines


def _blocking(config: Config, oai, job: Job, row: AgentSession, target, editor: bool) -> list:
    """What blocks a follow-up now (empty: nothing)."""
    found = []
    if row.stopped_reason and not editor:
        found.append(f"stopped: {row.stopped_reason}; only an editor's decision continues it")
    limit = stops.limit_reached(config, row)
    if limit:
        found.append(f"limit: {limit}")
    refusal = permissions.check(job, row, target)
    if refusal is not None:
        found.append(f"permission: {refusal.reason}")
        return found
    session = sessions.retrieve(oai, row.session_id)
    sessions.record_seen(row, session)
    if session.required_actions:
        kinds = ", ".join(sorted({a.type for a in session.required_actions}))
        found.append(f"the session has open required actions ({kinds}): answer them first")
    elif session.status != "idle":
        found.append(f"the session is {session.status}, not idle: a message would not continue")
    reviews = records.open_reviews(job)
    if reviews:
        found.append(f"open review items: {', '.join(r.kind for r in reviews)}")
    report = reconciliation.recover_job(target)
    for entry in report["unknown"]:
        found.append(f"operation {entry['operation_key']} is UNKNOWN")
    for entry in report["needs_review"]:
        found.append(f"operation {entry['operation_key']} waits for a review")
    mismatches = evidence.claim_mismatches(job, evidence.read_items(oai, row))
    if mismatches:
        found.append(f"checkpoints claimed by the session are not the ledger's: {mismatches}")
    return found


def continue_session(
    config: Config,
    job: Job,
    actor: str,
    editor: bool,
    reason: str | None = None,
    oai: openai.OpenAI | None = None,
) -> tuple[dict, bool]:
    """Continue the job's agent session after checking (see the module docstring).

    Args:
        job: the job (of the caller's tenant).
        actor: who asks, e.g. ``editor:alice`` (recorded when a stop is lifted).
        editor: an editor's decision (may continue a stopped session).
        reason: why (required when an editor lifts a stop).

    Returns ``(answer, sent_now)``: ``{"job_id", "session_id", "operation", "replayed",
    "facts", "message", "lifted_stop"}``; ``sent_now`` False for a repeated follow-up.

    Raises:
        FollowUpRefused (409, ``blocking``): something blocks it; nothing was sent.
        JobCancelled (409), LeaseHeld (409): the job is cancelled, or its lease is held.
        ValidationFailed (422): an editor lifting a stop without a reason.
        AgentKeyRefused, AgentSessionGone, AgentUnavailable, WordPressUnavailable, SiteBusy.
    """
    records.ensure_active(job)
    row = sessions.current(job)
    if row is None:
        raise exc.FollowUpRefused(
            "the job has no agent session", blocking=["no agent session is bound to the job"]
        )
    if editor and row.stopped_reason and not reason:
        raise exc.ValidationFailed(
            "lifting a stop needs a reason",
            errors=[{"pointer": "/reason", "message": "required to continue a stopped session"}],
        )
    oai = oai or sessions.client(config)
    lease = leases.acquire(job, f"follow-up:{actor}", config.agent_lease_seconds)
    try:
        return _checked(config, oai, job, row, actor, editor, reason, lease)
    except exc.AgentKeyRefused as error:  # the key, for every worker: pause them
        openai_key.refused(config, error.extensions.get("openai_status") or 401, error.detail)
        raise
    finally:
        try:
            leases.release(job, lease.owner, lease.fencing_token)
        except exc.StaleFencingToken:
            pass


def _checked(config, oai, job: Job, row: AgentSession, actor, editor, reason, lease):
    """The body of :func:`continue_session`, under the job's lease."""
    target = target_for(config, job, fencing_token=lease.fencing_token, fenced=True)
    done = _sent_before(job, row.session_id)
    if done is not None and not row.stopped_reason:  # these facts were followed up before
        sent = submissions.settled(submissions.send(config, oai, done), SETTLE_WAIT)
        return _answer(job, row, sent, True, None), False
    blocking = _blocking(config, oai, job, row, target, editor)
    done = _sent_before(job, row.session_id) if blocking else None
    if done is not None:  # a racing identical follow-up claimed these facts meanwhile
        return _answer(job, row, submissions.settled(done, SETTLE_WAIT), True, None), False
    if blocking:
        log.info("job_id=%s follow-up refused: %s", job.job_id, blocking)
        raise exc.FollowUpRefused(
            "the session cannot be continued yet: " + "; ".join(blocking),
            blocking=blocking,
        )
    job = Job.get_by_id(job.id)
    found = facts(job)
    lifted = _lift(row, actor, reason) if row.stopped_reason else None
    text = {"type": "input_text", "text": message(found)}
    event = {
        "type": "agent.session.input.message",
        "input": [{"role": "user", "content": [text]}],
    }
    before = _sent_before(job, row.session_id)
    slot = _slot(row.session_id, found)
    claimed, created = submissions.claim_new(
        job, submissions.FOLLOW_UP, slot, row.session_id, event, lease.fencing_token
    )
    # whichever racer won the send posts the event; the others (the creator of the row too,
    # when a racer that found it claimed the send first) answer what that send recorded
    sent = submissions.settled(submissions.send(config, oai, claimed), SETTLE_WAIT)
    log.info("job_id=%s follow-up %s: %s", job.job_id, sent.operation_key, sent.state)
    first = before is None and created
    return _answer(job, row, sent, not first, lifted if first else None), first


def _slot(session_id: str, found: dict) -> str:
    return sha256_hex(canonical_json({"session_id": session_id, "facts": found}))[:24]


def _sent_before(job: Job, session_id: str) -> Operation | None:
    """The follow-up of these very facts to this session, if one was claimed before."""
    key = perform.operation_key(job, submissions.FOLLOW_UP, _slot(session_id, facts(job)))
    return Operation.get_or_none(Operation.operation_key == key)


def _lift(row: AgentSession, actor: str, reason: str | None) -> dict:
    lifted = {"stopped_reason": row.stopped_reason, "by": actor, "reason": reason}
    stops.lift(row)  # False: lifted by a racing decision, or a new stop (which holds)
    log.warning(
        "job_id=%s: stop %r lifted by %s: %s", row.job_id, row.stopped_reason, actor, reason
    )
    return lifted


def _answer(job: Job, row: AgentSession, op: Operation, replayed: bool, lifted) -> dict:
    event = op.intent["event"] if op.intent else {}
    text = event.get("input", [{}])[0].get("content", [{}])[0].get("text") if event else None
    found = json.loads(text.rsplit("Facts as JSON: ", 1)[1]) if text else None
    return {
        "job_id": job.job_id,
        "session_id": row.session_id,
        "operation": op.as_dict(),
        "sent": op.state == CONFIRMED,
        "replayed": replayed,
        "facts": found,
        "message": text,
        "lifted_stop": lifted,
    }
