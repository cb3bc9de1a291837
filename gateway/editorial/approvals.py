"""Approvals: a draft becomes public only through an approval an editor gave for exactly this
task version, this content and this post, still valid now (publishing under it:
:mod:`gateway.actions.publishing`).

* ``request_approval`` (workflow): verification must be ok, live; phase ``approval_pending``.
* ``approve`` (editor): bound to ``task_version``, ``content_sha256`` (the digest of the live
  read-back, :func:`verification.content_digest`), ``post_id`` and ``expires_at``; recorded
  with the editor token's name.
* ``revoke`` (editor).

Expiry is judged by the database clock (:func:`gateway.ledger.db.db_now`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from dataclasses import dataclass

from peewee import IntegrityError

from gateway.actions import drafts
from gateway.actions import publishing
from gateway.actions import scheduling
from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core import validation
from gateway.editorial import decisions
from gateway.jobs import events
from gateway.jobs import guards
from gateway.jobs import records
from gateway.jobs import timeline
from gateway.ledger import db
from gateway.ledger import moves
from gateway.ledger.models import APPROVAL_REVOKED
from gateway.ledger.models import Approval
from gateway.ledger.models import ApprovalRequest
from gateway.ledger.models import Job
from gateway.operations import verification
from gateway.operations.target import Target

log = logging.getLogger(__name__)


@dataclass
class Request:
    """The outcome of :func:`request_approval`: the post and digest put in front of editors,
    the live verification, whether this call created the request, and the fields this site
    cannot check (``ok: null``; they do not block)."""

    post_id: int
    content_sha256: str
    verification: dict
    created: bool
    unchecked_fields: list[str] = dataclasses.field(default_factory=list)


def request_view(job: Job, requested: Request) -> dict:
    """An approval request as JSON, the answer to requesting one (the HTTP call and the
    agents' ``request_approval`` tool; docs/api.md, "Response shapes"):
    ``{"job_id", "task_version", "post_id", "content_sha256", "phase", "unchecked_fields",
    "verification"}``."""
    return {
        "job_id": job.job_id,
        "task_version": job.task_version,
        "post_id": requested.post_id,
        "content_sha256": requested.content_sha256,
        "phase": job.phase,
        "unchecked_fields": requested.unchecked_fields,
        "verification": requested.verification,
    }


def request_approval(target: Target, requested_by: str) -> Request:
    """Put a verified job in front of editors (repeat-safe: one request per task version).

    Raises:
        VerificationFailed (409): the live post does not verify; NotFound: no draft yet.
    """
    guards.check_writable(target)
    job = target.job
    result = drafts.verify_job(target)
    unchecked = _evidence(result)
    values = {"post_id": result["post_id"], "content_sha256": result["content_sha256"]}
    try:
        with db.atomic():
            timeline.record(job, states.APPROVAL_REQUESTED, requested_by, values["content_sha256"])
            ApprovalRequest.create(
                tenant=job.tenant,
                job_id=job.job_id,
                task_version=job.task_version,
                requested_by=requested_by,
                **values,
            )
        created = True
    except IntegrityError:
        ApprovalRequest.update(updated_at=db.utcnow(), **values).where(
            ApprovalRequest.tenant == job.tenant,
            ApprovalRequest.job_id == job.job_id,
            ApprovalRequest.task_version == job.task_version,
        ).execute()
        created = False
    records.advance_phase(job, states.APPROVAL_PENDING)
    return Request(values["post_id"], values["content_sha256"], result, created, unchecked)


def _evidence(result: dict) -> list[str]:
    """The read-back evidence an approval needs: no field of ``result`` (a
    :func:`verification.compare` body) failed. Returns the fields that cannot be checked on
    this site (``ok: null``, e.g. Rank Math fields without the companion plugin): they do not
    block and are listed.

    Raises:
        VerificationFailed (409): with ``failed_fields`` and ``unchecked_fields``.
    """
    # Reported but not failing (verification.compare leaves them out of the overall ok).
    counted = {k: f for k, f in result["fields"].items() if f.get("reason") != "made-unique"}
    failed = sorted(k for k, f in counted.items() if f["ok"] is False)
    unchecked = sorted(k for k, f in counted.items() if f["ok"] is None)
    if failed:
        raise exc.VerificationFailed(
            "the post does not verify; repair it first",
            failed_fields=failed,
            unchecked_fields=unchecked,
        )
    return unchecked


def parse_expiry(value: str, max_days: float) -> dt.datetime:
    """An RFC 3339 timestamp with an offset, as naive UTC.

    Raises:
        ValidationFailed: not RFC 3339 with an offset, not in the future, or more than
            ``max_days`` days ahead (database clock).
    """
    moment = validation.utc_moment(value, "expires_at", "2026-11-29T12:00:00+00:00")
    now = db.db_now()
    if moment <= now:
        raise exc.ValidationFailed(
            "expires_at is in the past",
            errors=[{"pointer": "/expires_at", "message": "must be in the future"}],
        )
    if moment > now + dt.timedelta(days=max_days):
        raise exc.ValidationFailed(
            f"expires_at is more than {max_days:g} days ahead",
            errors=[{"pointer": "/expires_at", "message": f"at most {max_days:g} days from now"}],
        )
    return moment


def approve(target: Target, body: dict, editor: str) -> tuple[Approval, list[str]]:
    """Record an editor's approval after checking it against the live read-back, which must
    verify (read-back evidence of exactly this version).

    Args:
        body: validated ``{"task_version", "content_sha256", "post_id", "expires_at"}``.
        editor: the editor token's name (audit; unique per tenant).

    Returns ``(approval, unchecked_fields)``: the fields the site cannot check.

    Raises:
        ApprovalStale (409): version, post or digest differ from the job and the live post.
        VerificationFailed (409): the live post does not verify (``failed_fields``).
        ForeignObject (409): another job or tenant holds the post too.
        ValidationFailed (422): ``expires_at`` malformed, past, or beyond the configured cap
            (``GATEWAY_APPROVAL_MAX_DAYS``).
        DecisionStands (409): changes were requested on this version (issue 56), or a new
            version came meanwhile.
    """
    guards.check_writable(target)
    job = target.job
    expires = parse_expiry(body["expires_at"], target.config.approval_max_days)
    publish_at = scheduling.parse_publish_at(body.get("publish_at"))
    if body["task_version"] != job.task_version:
        raise exc.ApprovalStale(
            f"the job is at task_version {job.task_version}", task_version=job.task_version
        )
    draft, live = publishing.live_draft(target)
    post_id, digest = draft.remote_id, publishing.live_digest(live)
    if body["post_id"] != post_id or body["content_sha256"] != digest:
        raise exc.ApprovalStale(
            "the live post differs from what was approved; read the verification again",
            post_id=post_id,
            content_sha256=digest,
        )
    expected = "publish" if job.phase == states.PUBLISHED else "draft"
    unchecked = _evidence(
        verification.compare(draft.receipt, live, target.companion.present, expected)
    )
    with db.atomic():
        # from none first: only the approval that moves the decision decides the event
        moved = decisions.try_take(job, states.APPROVED, (None,))
        if not moved:
            decisions.take(job, states.APPROVED, (states.APPROVED,))
        approval = Approval.create(
            tenant=job.tenant,
            job_id=job.job_id,
            task_version=job.task_version,
            post_id=post_id,
            content_sha256=digest,
            expires_at=expires,
            approved_by=editor,
            publish_at=publish_at,
        )
        entry = timeline.record(job, states.APPROVED, editor, digest)
        if moved:  # the event, same transaction, once per approval that decided the version
            events.decide(job, states.APPROVED, f"by {editor}", entry_id=entry.id)
    events.wake.set()  # committed: the delivery threads find the row
    log.info("job_id=%s approved by %s (approval %s)", job.job_id, editor, approval.id)
    return approval, unchecked


def revoke(job: Job, approval_id: int, editor: str, target: Target | None = None) -> Approval:
    """Revoke an approval (repeat-safe; the first revocation is kept and decides the event
    ``revoked``, once per revocation, in its transaction). When the post was
    scheduled under it and its time has not come, ``target`` moves it back to draft
    (:func:`scheduling.unschedule`).

    Raises:
        NotFound: no such approval for this job.
    """
    approval = Approval.get_or_none(
        Approval.id == approval_id, Approval.tenant == job.tenant, Approval.job_id == job.job_id
    )
    if approval is None:
        raise exc.NotFound(f"no approval {approval_id} for job {job.job_id}")
    with db.atomic():
        where = {"id": approval.id}
        if moves.move(APPROVAL_REVOKED, where, db.utcnow(), None, revoked_by=editor):
            entry = timeline.record(job, states.REVOKED, editor, approval.content_sha256)
            decisions.release_approval(job)
            reason = f"approval {approval.id} revoked by {editor}"
            events.decide(job, states.REVOKED, reason, entry_id=entry.id)
    events.wake.set()  # committed: the delivery threads find the row
    scheduled = scheduling.scheduled_publish(job)
    if target is not None and scheduled and scheduled.receipt.get("approval_id") == approval.id:
        scheduling.unschedule(target, f"approval {approval.id} revoked")
    return Approval.get_by_id(approval.id)


def approval_view(approval: Approval) -> dict:
    """An approval as JSON."""
    return {
        "approval_id": approval.id,
        "job_id": approval.job_id,
        "task_version": approval.task_version,
        "post_id": approval.post_id,
        "content_sha256": approval.content_sha256,
        "expires_at": db.rfc3339(approval.expires_at),
        "approved_by": approval.approved_by,
        "publish_at": db.rfc3339(approval.publish_at),
        "created_at": db.rfc3339(approval.created_at),
        "revoked_at": db.rfc3339(approval.revoked_at),
        "revoked_by": approval.revoked_by,
    }
