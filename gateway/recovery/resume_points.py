"""Resume points: what a workflow needs to finish a job version whose run stopped mid-way.

The n8n pipeline saves one per job version before it downloads or uploads any image
(``PUT /v1/jobs/{id}/resume-point``): the article JSON and each image's URL; an image sent as
base64 is kept as its slot alone, because the gateway never stores image bytes - it can be
resumed only from its upload already in the ledger (a CONFIRMED media row, whose SHA-256 the
answer names). The saved JSON is capped at :data:`MAX_BYTES`.

``POST /v1/jobs/{id}/resume`` (:func:`resume`) decides what the caller (``recover_job``) does:

* ``resume``: run the pipeline again with ``input`` (uploaded images marked ``uploaded``);
  counts one attempt of the version's budget (``GATEWAY_RESUME_BUDGET``);
* ``wait``: a client asked something of the job less than ``GATEWAY_RESUME_AFTER`` seconds ago
  (a run is probably still going; :func:`gateway.jobs.records.idle_seconds`: reconciliation,
  the sweep and the recovery workflow's own ``/recover`` and ``/resume`` do not count);
* ``none``: nothing to finish (the job reached approval, or waits for a person: failed,
  cancelled and needs-review jobs);
* ``needs_person``: the gateway refused this version's content (:func:`record_refusal`: the
  same article would be refused again), past the budget, no resume point, or a base64 image
  never uploaded: the gateway decides ``needs_attention`` (editors told once, with the
  reason) and answers it.

A job still in progress or unknown, or ``completed`` in phase ``verified`` without an
approval request (:func:`gateway.jobs.records.run_unfinished`), has something to finish.

Source: docs/api.md, "Resuming a stopped job".
"""

from __future__ import annotations

from peewee import IntegrityError

from gateway.actions import delivery_views
from gateway.actions import notifications
from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core.config import Config
from gateway.core.digests import canonical_json
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.models import Job
from gateway.ledger.models import ResumePoint

MAX_BYTES = 256 * 1024  # the article and image references; images themselves are never kept


def _point(job: Job) -> ResumePoint | None:
    return ResumePoint.get_or_none(
        ResumePoint.tenant == job.tenant,
        ResumePoint.job_id == job.job_id,
        ResumePoint.task_version == job.task_version,
    )


def save(job: Job, body: dict) -> tuple[ResumePoint, bool]:
    """Keep ``body`` (validated ``schemas/resume_point.json``) as the current version's resume
    point; a later save replaces the payload, keeps the attempt count and forgets a refusal
    of the earlier payload (:func:`record_refusal`).

    Returns ``(row, created)``.

    Raises:
        PayloadTooLarge (413): the canonical JSON exceeds :data:`MAX_BYTES`.
    """
    size = len(canonical_json(body).encode("utf-8"))
    if size > MAX_BYTES:
        raise exc.PayloadTooLarge(
            f"a resume point holds at most {MAX_BYTES} bytes of JSON (this one: {size}); keep "
            "images as URLs, never their bytes"
        )
    try:
        with db.atomic():
            row = ResumePoint.create(
                tenant=job.tenant,
                job_id=job.job_id,
                task_version=job.task_version,
                payload=body,
            )
        return row, True
    except IntegrityError:
        pass
    row = _point(job)
    ResumePoint.update(payload=body, refusal=None, updated_at=db.utcnow()).where(
        ResumePoint.id == row.id
    ).execute()
    return ResumePoint.get_by_id(row.id), False


def record_refusal(tenant: str, job_id: str, problem: dict) -> None:
    """Keep ``problem`` (``{"route", "status", "type", "title", "detail", "errors"}``: the
    gateway's 413, 415 or 422 answer to the job's media or draft) on the resume point of the
    job's current version, if it has one: its content was refused, so :func:`resume` sends the
    job to a person instead of running the same content again. One UPDATE; no-op without a
    resume point."""
    job = Job.get_or_none(Job.tenant == tenant, Job.job_id == job_id)
    if job is None:
        return
    ResumePoint.update(refusal=problem).where(
        ResumePoint.tenant == tenant,
        ResumePoint.job_id == job_id,
        ResumePoint.task_version == job.task_version,
    ).execute()


def _refusal_reason(refusal: dict) -> str:
    errors = "; ".join(
        f"{e.get('pointer', '')}: {e.get('message', '')}"
        for e in refusal.get("errors") or []
        if isinstance(e, dict)
    )
    return (
        f"the gateway refused this article's content ({refusal.get('route')}: HTTP "
        f"{refusal.get('status')} {refusal.get('title', '')}: {refusal.get('detail', '')}"
        + (f" [{errors}]" if errors else "")
        + "); resuming would send the same content again: correct it and send the article "
        "again (a new task_version to change a draft already written)"
    )


def _input(job: Job, point: ResumePoint) -> tuple[dict | None, str | None]:
    """The pipeline's input rebuilt from the resume point and the ledger, or the reason it
    cannot be."""
    confirmed = records.confirmed_media(job)
    images = []
    for image in point.payload["images"]:
        row = confirmed.get(image["slot"])
        if row is not None:
            sha256 = (row.intent or {}).get("sha256")
            images.append({**image, "uploaded": True, "content_sha256": sha256})
        elif image.get("url"):
            images.append(image)
        else:
            return None, (
                f"image slot {image['slot']!r} was sent as base64 and was not uploaded before "
                "the run stopped; the gateway keeps no image bytes: send the article again"
            )
    body = {
        "job_id": job.job_id,
        "site": job.site,
        "task_version": job.task_version,
        "article": point.payload["article"],
        "images": images,
        "resumed": True,
    }
    return body, None


def _needs_person(job: Job, reason: str, answer: dict) -> dict:
    row, _ = notifications.notify(job, states.NEEDS_ATTENTION, reason)
    return {
        **answer,
        "action": "needs_person",
        "reason": reason,
        "notification": notifications.notification_view(row, None, delivery_views.summary(row)),
    }


def resume(config: Config, job: Job) -> dict:
    """Decide whether and how a stopped job is resumed (see the module docstring).

    Returns ``{"job_id", "task_version", "action", "reason", "attempts", "budget",
    "input"?, "retry_after"?, "notification"?}``. Two racing callers never both get
    ``resume`` for the same attempt (a conditional UPDATE on the attempt count decides).
    """
    point = _point(job)
    answer = {
        "job_id": job.job_id,
        "task_version": job.task_version,
        "attempts": point.attempts if point else 0,
        "budget": config.resume_budget,
    }
    status = records.status_of(job)
    if job.phase in states.RUN_DONE_PHASES or not records.run_unfinished(job, status):
        reason = f"nothing to resume: the job is {status} in phase {job.phase or 'none'}"
        return {**answer, "action": "none", "reason": reason}
    if point is not None and point.refusal:
        return _needs_person(job, _refusal_reason(point.refusal), answer)
    idle = records.idle_seconds(job)
    if idle < config.resume_after:
        wait = max(1, int(config.resume_after - idle))
        reason = f"a client asked something of this job {int(idle)} s ago; a run may still be going"
        return {**answer, "action": "wait", "reason": reason, "retry_after": wait}
    if point is None:
        reason = (
            "the run stopped before it saved what a resume needs (the article and image "
            "URLs); send the article again"
        )
        return _needs_person(job, reason, answer)
    if point.attempts >= config.resume_budget:
        reason = (
            f"resumed {point.attempts} times without reaching approval (budget "
            f"{config.resume_budget}); the failed runs' errors are in n8n's executions"
        )
        return _needs_person(job, reason, answer)
    body, refusal = _input(job, point)
    if refusal:
        return _needs_person(job, refusal, answer)
    now = db.utcnow()
    won = (
        ResumePoint.update(attempts=point.attempts + 1, last_attempt_at=now, updated_at=now)
        .where(ResumePoint.id == point.id, ResumePoint.attempts == point.attempts)
        .execute()
    )
    if not won:
        reason = "another caller resumed this job a moment ago"
        return {**answer, "action": "wait", "reason": reason, "retry_after": 1}
    answer["attempts"] = point.attempts + 1
    reason = f"resumed from phase {job.phase or 'none'} (attempt {answer['attempts']})"
    return {**answer, "action": "resume", "reason": reason, "input": body}
