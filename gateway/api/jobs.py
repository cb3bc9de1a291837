"""Job endpoints (docs/api.md, "Jobs"): jobs, media, draft, verification, recover."""

from __future__ import annotations

from flask import Blueprint
from flask import g
from flask import request

from gateway.actions import drafts
from gateway.actions import media
from gateway.actions import publishing
from gateway.agents import sessions
from gateway.api import grant_limits
from gateway.api import job_views
from gateway.api.common import action_answer
from gateway.api.common import job_of_path as _job
from gateway.api.common import side_effect_target
from gateway.api.http import config
from gateway.api.http import json_body
from gateway.api.http import roles
from gateway.core import exceptions as exc
from gateway.core import media_request
from gateway.core import states
from gateway.core import validation
from gateway.editorial import approvals
from gateway.jobs import budgets
from gateway.jobs import checkpoints
from gateway.jobs import leases
from gateway.jobs import records
from gateway.jobs import timeline
from gateway.operations.target import target_for
from gateway.recovery import reconciliation
from gateway.recovery import retries

bp = Blueprint("jobs", __name__, url_prefix="/v1")
MEDIA_FORM_FIELDS = ("alt_text", "caption", "title")


@bp.get("/jobs")
@roles("workflow", "editor", "admin")
def list_jobs():
    """Cursor-paged jobs: ``?status=a,b&phase=&unfinished=true&limit=&after=``."""
    statuses = [s for s in request.args.get("status", "").split(",") if s]
    unknown = [s for s in statuses if s not in states.STATUSES]
    if unknown:
        raise exc.ValidationFailed(
            "invalid query",
            errors=[{"pointer": "/status", "message": f"unknown status {s!r}"} for s in unknown],
        )
    limit = validation.parse_int(request.args.get("limit"), "/limit", default=50)
    after = validation.parse_int(request.args.get("after"), "/after")
    if not 1 <= limit <= 500:
        raise exc.ValidationFailed(
            "invalid query", errors=[{"pointer": "/limit", "message": "limit 1..500"}]
        )
    unfinished = request.args.get("unfinished", "false")
    if unfinished not in ("true", "false"):
        raise exc.ValidationFailed(
            "invalid query",
            errors=[{"pointer": "/unfinished", "message": "true or false"}],
        )
    return job_views.list_jobs(
        g.principal.tenant,
        statuses,
        request.args.get("phase") or None,
        limit,
        after,
        unfinished=unfinished == "true",
    )


@bp.get("/job-changes")
@roles("workflow", "editor", "admin")
def job_changes():
    """The changes feed: ``?cursor=&limit=``, jobs changed after the cursor with their events
    (``cursor=now``: an empty page whose ``next_cursor`` is now)."""
    limit = validation.parse_int(request.args.get("limit"), "/limit", default=100)
    if not 1 <= limit <= 500:
        raise exc.ValidationFailed(
            "invalid query", errors=[{"pointer": "/limit", "message": "limit 1..500"}]
        )
    cursor = request.args.get("cursor")
    return job_views.list_changes(g.principal.tenant, cursor, limit, config().attention_after)


@bp.put("/jobs/<job_id>")
@roles("workflow")
def put_job(job_id: str):
    """Create the job (201), return it unchanged (200), or bump its task version."""
    validation.check_identifier(job_id, validation.JOB_ID, "/job_id", "job_id")
    body = json_body("job")
    grant_limits.check_site(g.principal, body["site"])
    session_id = body.get("session_id")
    if session_id:
        sessions.check_free(g.principal.tenant, job_id, session_id)
    # task_version is an int even when sent as 1.0 (validation hands on ints)
    job, created = records.put_job(g.principal.tenant, job_id, body["site"], body["task_version"])
    if session_id:
        job = sessions.bind(config(), job, session_id, g.principal.token_hash)
    return job_views.job_view(job, created=created), 201 if created else 200


@bp.get("/jobs/<job_id>")
@roles("workflow", "editor", "admin")
def get_job(job_id: str):
    """The job, its ledger rows, approvals, checkpoints, lease and open review items."""
    job = _job(job_id)
    return {
        **job_views.job_view(job),
        "approvals": [approvals.approval_view(a) for a in publishing.approvals_of(job)],
        "checkpoints": checkpoints.checkpoints_of(job),
        "notes": timeline.notes(job),
        "retries": retries.retries_of(job),
        "lease": leases.active_lease(job),
        "agent": sessions.agent_view(job),
        "budgets": budgets.budgets_of(config(), job.tenant, job.job_id),
    }


@bp.put("/jobs/<job_id>/media/<slot>")
@roles("workflow")
def put_media(job_id: str, slot: str):
    """One image: multipart ``file`` (+ ``alt_text``, ``caption``, ``title``; any other field
    is 422) or JSON with ``content_base64`` or ``source_url``, parsed by the one media request
    parser (:mod:`gateway.core.media_request`) as the agent and MCP tools are."""
    validation.check_identifier(slot, validation.SLOT, "/slot", "slot")
    job = _job(job_id, with_site=True)
    if request.mimetype == "multipart/form-data":
        validation.check_form_fields(request.form, request.files, MEDIA_FORM_FIELDS, ("file",))
        upload = request.files.get("file")
        if upload is None:
            raise exc.ValidationFailed(
                "multipart field 'file' is required",
                errors=[{"pointer": "/file", "message": "missing"}],
            )
        fields = {k: request.form[k] for k in MEDIA_FORM_FIELDS if k in request.form}
        fields = validation.validate("media", {"content_base64": "-", **fields})
        parsed = media_request.parse_upload(upload.read(), upload.filename or None, fields)
    else:
        parsed = media_request.parse(json_body("media"))
    outcome = media.put_request(side_effect_target(job), slot, parsed)
    return action_answer(media.ACTION, outcome)


@bp.put("/jobs/<job_id>/draft")
@roles("workflow")
def put_draft(job_id: str):
    """Create the job's draft once, read it back and verify it."""
    job = _job(job_id, with_site=True)
    body = json_body("draft")
    outcome = drafts.put_draft(side_effect_target(job), body)
    return action_answer(drafts.ACTION, outcome)


@bp.get("/jobs/<job_id>/verification")
@roles("workflow", "editor", "admin")
def verification(job_id: str):
    """Read the post back from WordPress and compare it field by field."""
    job = _job(job_id)
    return drafts.verify_job(target_for(config(), job))


@bp.post("/jobs/<job_id>/recover")
@roles("workflow", "editor", "admin")
def recover(job_id: str):
    """Reconcile every SENT/UNKNOWN row of the job; 200 even when WordPress is down."""
    job = _job(job_id)
    json_body("empty")
    report = reconciliation.recover_job(target_for(config(), job))
    if job.session_id:
        report["agent"] = sessions.recover_view(config(), job)
    return report
