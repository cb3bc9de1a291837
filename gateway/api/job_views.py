"""The job as the HTTP API shows it (``GET /v1/jobs/{job_id}``, ``PUT /v1/jobs/{job_id}``,
``GET /v1/jobs``): identity, phase, derived status, and its ledger rows and open review items.
Shapes: docs/api.md, "Jobs"."""

from __future__ import annotations

from gateway.jobs import records as jobs
from gateway.ledger import db
from gateway.ledger.models import Job


def job_view(job: Job, with_rows: bool = True, created: bool = False) -> dict:
    """The job as JSON: identity, phase, status and (optionally) its ledger rows.
    ``created``: the job row was inserted by this request, so it has no ledger rows and no
    review items yet (none are read)."""
    rows = [] if created else jobs.operations_of(job)
    reviews = [] if created else jobs.open_reviews(job)
    view = {
        "job_id": job.job_id,
        "site": job.site,
        "task_version": job.task_version,
        "session_id": job.session_id,
        "phase": job.phase,
        "post_id": job.post_id,
        "status": jobs.status_of(job, rows, reviews),
        "cancelled": job.cancelled,
        "cancel_reason": job.cancel_reason,
        "created_at": db.rfc3339(job.created_at),
        "updated_at": db.rfc3339(job.updated_at),
    }
    if with_rows:
        view["operations"] = [r.as_dict() for r in rows]
        view["reviews"] = [
            {
                "review_id": r.id,
                "operation_key": r.operation_key,
                "kind": r.kind,
                "detail": r.detail,
            }
            for r in reviews
        ]
    return view


def list_jobs(
    tenant: str,
    statuses: list[str] | None,
    phase: str | None,
    limit: int,
    after: int | None,
    unfinished: bool = False,
) -> dict:
    """Cursor-paged jobs of ``tenant`` (cursor: the job's internal id), filtered by status
    (derived), phase and, with ``unfinished``, to the jobs a run still has work on
    (:func:`gateway.jobs.records.run_unfinished`: in progress or unknown, or verified without
    an approval request). Returns ``{"jobs": [...], "next_after": int | None}``."""
    query = Job.select().where(Job.tenant == tenant).order_by(Job.id)
    if phase:
        query = query.where(Job.phase == phase)
    if after:
        query = query.where(Job.id > after)
    found, last_id = [], None
    for job in query.iterator():
        last_id = job.id
        view = job_view(job, with_rows=False)
        if statuses and view["status"] not in statuses:
            continue
        if unfinished and not jobs.run_unfinished(job, view["status"]):
            continue
        found.append(
            {
                k: view[k]
                for k in ("job_id", "status", "phase", "task_version", "post_id", "updated_at")
            }
        )
        if len(found) >= limit:
            break
    more = (
        last_id is not None and Job.select().where(Job.tenant == tenant, Job.id > last_id).exists()
    )
    return {"jobs": found, "next_after": last_id if len(found) >= limit and more else None}
