"""What follows a run (docs/api.md, "Events", "Notifications" and "Resuming a stopped job"):
the event vocabulary, editors' notifications decided once by the gateway, and resuming a job
whose run stopped."""

from __future__ import annotations

from flask import Blueprint

from gateway.actions import delivery_views
from gateway.actions import notifications
from gateway.api.common import job_of_path as _job
from gateway.api.http import config
from gateway.api.http import json_body
from gateway.api.http import roles
from gateway.core import states
from gateway.recovery import resume_points

bp = Blueprint("follow_up", __name__, url_prefix="/v1")


@bp.post("/jobs/<job_id>/notifications")
@roles("workflow", "editor")
def notify(job_id: str):
    """Decide ``event`` for the job's version once and deliver it (201 decided now, 200
    decided before; ``state`` says whether the tenant's URL has taken it)."""
    job = _job(job_id)
    body = json_body("notification")
    row, decided_now = notifications.notify(job, body["event"], body.get("reason"))
    view = notifications.notification_view(row, decided_now, delivery_views.summary(row))
    return view, 201 if decided_now else 200


@bp.get("/event-types")
@roles("workflow", "editor", "admin")
def event_types():
    """The event vocabulary, in its order: ``{"event_types": [{"type", "description"}]}``."""
    described = states.WORKFLOW_EVENT_DESCRIPTIONS
    return {"event_types": [{"type": t, "description": described[t]} for t in described]}


@bp.get("/jobs/<job_id>/notifications")
@roles("workflow", "editor", "admin")
def list_notifications(job_id: str):
    """Every notification decided for the job, oldest first."""
    rows = notifications.notifications_of(_job(job_id))
    views = [notifications.notification_view(r, None, delivery_views.summary(r)) for r in rows]
    return {"notifications": views}


@bp.put("/jobs/<job_id>/resume-point")
@roles("workflow")
def put_resume_point(job_id: str):
    """Keep what a resume of this job version needs (article, image URLs; no image bytes)."""
    job = _job(job_id)
    _, created = resume_points.save(job, json_body("resume_point"))
    return {"job_id": job.job_id, "task_version": job.task_version}, 201 if created else 200


@bp.post("/jobs/<job_id>/resume")
@roles("workflow")
def resume(job_id: str):
    """Whether and how a stopped job is resumed: ``action`` resume / wait / none /
    needs_person (editors told once, with the reason)."""
    job = _job(job_id)
    json_body("empty")
    return resume_points.resume(config(), job)
