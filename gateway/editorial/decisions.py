"""An editor's decision on a job's task version (issue 56): approved, or changes requested
with a note; and editors' comments. Anchor: GitHub's pull-request review (approve / request
changes with a comment).

A decision is not a phase (phases never move backwards): it is ``job.decision``, moved only by
:func:`gateway.ledger.moves.move` under :data:`gateway.core.states.DECISION_MOVES`, each move
conditional on the task version as read. Of two editors deciding one draft at once, one
conditional UPDATE wins; the other is answered 409 ``decision-stands`` naming what stands (the
review items' pattern, :mod:`gateway.editorial.reviews`). A new task version clears the
decision (:func:`gateway.jobs.records.put_job`). Changes requested makes an approval of that
version impossible. Every decision and comment enters the job's timeline
(:mod:`gateway.jobs.timeline`) in the decision's transaction.
"""

from __future__ import annotations

from gateway.core import exceptions as exc
from gateway.core import states
from gateway.jobs import events
from gateway.jobs import guards
from gateway.jobs import timeline
from gateway.ledger import db
from gateway.ledger import moves
from gateway.ledger.models import JOB_DECISION
from gateway.ledger.models import Approval
from gateway.ledger.models import ApprovalRequest
from gateway.ledger.models import Job
from gateway.ledger.models import JobEvent


def decision_view(job: Job) -> dict | None:
    """The decision on ``job``'s current version as JSON, None when there is none:
    ``{"decision", "task_version", "decided_by", "content_sha256", "note", "at"}`` (the
    timeline entry that made it)."""
    if job.decision is None:
        return None
    row = (
        timeline.of_version(job)
        .where(JobEvent.event == job.decision)
        .order_by(JobEvent.id.desc())
        .first()
    )
    entry = timeline.entry_view(row) if row else {}
    return {
        "decision": job.decision,
        "task_version": job.task_version,
        "decided_by": entry.get("actor"),
        "content_sha256": entry.get("content_sha256"),
        "note": entry.get("note"),
        "at": entry.get("at"),
    }


def stands(job: Job, detail: str | None = None) -> exc.GatewayError:
    """The 409 ``decision-stands`` naming the decision on ``job`` as the ledger holds it now
    (``decision``: :func:`decision_view`, or None; ``task_version``); its default detail says
    which decision stands, by whom and with what note (docs/editors.md)."""
    fresh = Job.get_by_id(job.id)
    standing = decision_view(fresh)
    return exc.DecisionStands(
        detail or f"the decision on task_version {fresh.task_version} is {_said(standing)}",
        decision=standing,
        task_version=fresh.task_version,
    )


def _said(standing: dict | None) -> str:
    """A decision in words: ``changes_requested by ed: "the note"``, or ``none``."""
    if not standing:
        return "none"
    by = f" by {standing['decided_by']}" if standing.get("decided_by") else ""
    note = f': "{standing["note"]}"' if standing.get("note") else ""
    return f"{standing['decision']}{by}{note}"


DECISION_WORDS = {states.APPROVED: "approved", states.CHANGES_REQUESTED: "changes requested"}


def in_words(standing: dict | None, detail: str) -> str:
    """What stands, in the review page's words: the decision (:func:`decision_view`), its
    maker and its note (``changes requested by ed on v1 stands (note: "...")``), or
    ``detail`` when there is none."""
    if not standing:
        return detail
    words = DECISION_WORDS.get(standing["decision"], standing["decision"])
    by = f" by {standing['decided_by']}" if standing.get("decided_by") else ""
    note = f' (note: "{standing["note"]}")' if standing.get("note") else ""
    return f"{words}{by} on v{standing['task_version']} stands{note}"


def try_take(job: Job, decision: str, expect: tuple) -> bool:
    """Move ``job``'s decision to ``decision`` from one of ``expect`` for its task version as
    read (one conditional UPDATE); True when this call moved it, False otherwise (nothing
    raised). Call it inside the transaction that records the decision."""
    where = {"id": job.id, "task_version": job.task_version}
    if not moves.move(JOB_DECISION, where, decision, expect):
        return False
    job.decision = decision
    return True


def take(job: Job, decision: str, expect: tuple) -> None:
    """Move ``job``'s decision to ``decision`` from one of ``expect``, for its task version as
    read. Call it inside the transaction that records the decision.

    Raises:
        DecisionStands (409): another decision stands, or the version moved on.
    """
    where = {"id": job.id, "task_version": job.task_version}
    if not moves.move(JOB_DECISION, where, decision, expect):
        raise stands(job)
    job.decision = decision


def request_changes(job: Job, body: dict, editor: str) -> dict:
    """Send ``job``'s draft version back with a note: ``body`` is validated
    ``{"task_version", "note"}``; ``editor`` is the editor token's name. The digest recorded is
    the one put in front of editors (the version's approval request). Returns the decision
    (:func:`decision_view`).

    Raises:
        JobCancelled (409); ApprovalStale (409): ``task_version`` is not the job's;
        DecisionStands (409): the draft is not waiting for a decision, or another stands
        (an approval: revoke it first).
    """
    guards.refuse_cancelled(job)
    _check_version(job, body["task_version"])
    if job.phase not in states.AWAITING_APPROVAL_PHASES:
        raise stands(job, f"the job is {job.phase or 'drafting'}, not waiting for a decision")
    request = ApprovalRequest.get_or_none(
        ApprovalRequest.tenant == job.tenant,
        ApprovalRequest.job_id == job.job_id,
        ApprovalRequest.task_version == job.task_version,
    )
    digest = request.content_sha256 if request else None
    with db.atomic():
        take(job, states.CHANGES_REQUESTED, (None,))
        timeline.record(job, states.CHANGES_REQUESTED, editor, digest, body["note"])
        events.decide(job, states.CHANGES_REQUESTED, body["note"])
    events.wake.set()  # committed: the delivery threads find the row
    return decision_view(job)


def comment(job: Job, body: dict, editor: str) -> dict:
    """An editor's comment on ``job``'s current version (``body``: validated ``{"note"}``),
    about the digest last known for that version (:func:`gateway.jobs.timeline.known_digest`);
    the workflow reads it beside the decision, and the event ``commented`` is decided for it
    (once per comment) in the same transaction. Returns the timeline entry."""
    with db.atomic():
        digest = timeline.known_digest(job)
        row = timeline.record(job, states.COMMENTED, editor, digest, body["note"])
        events.decide(job, states.COMMENTED, body["note"], entry_id=row.id)
    events.wake.set()  # committed: the delivery threads find the row
    return timeline.entry_view(row)


def release_approval(job: Job) -> None:
    """After a revocation: the decision ``approved`` goes back to none once no approval of
    the job's current version is left unrevoked."""
    live = Approval.select().where(
        Approval.tenant == job.tenant,
        Approval.job_id == job.job_id,
        Approval.task_version == job.task_version,
        Approval.revoked_at.is_null(),
    )
    if not live.exists():
        where = {"id": job.id, "task_version": job.task_version}
        moves.move(JOB_DECISION, where, None, states.APPROVED)


def _check_version(job: Job, task_version: int) -> None:
    if task_version != job.task_version:
        raise exc.ApprovalStale(
            f"the job is at task_version {job.task_version}", task_version=job.task_version
        )
