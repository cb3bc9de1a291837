"""Editorial control endpoints (docs/api.md, "Editorial control"): checkpoints, leases,
cancel, repair, blocks, approval requests, approvals and publishing.

Side-effect views get their target from :func:`gateway.api.common.side_effect_target`; the
domain checks cancellation and fencing before any ledger claim or WordPress call. Editor
actions, cancel and the lease calls are never fenced.
"""

from __future__ import annotations

from flask import Blueprint
from flask import g
from flask import request

from gateway.actions import blocks
from gateway.actions import publishing
from gateway.actions import repair
from gateway.actions import scheduling
from gateway.agents import stops
from gateway.api import job_views
from gateway.api.answers import repair_body
from gateway.api.common import action_answer
from gateway.api.common import answer
from gateway.api.common import job_of_path as _job
from gateway.api.common import side_effect_target
from gateway.api.http import config
from gateway.api.http import json_body
from gateway.api.http import roles
from gateway.core import exceptions as exc
from gateway.core import validation
from gateway.editorial import approvals
from gateway.editorial import decisions
from gateway.jobs import checkpoints
from gateway.jobs import leases
from gateway.jobs import records
from gateway.jobs import timeline
from gateway.operations.target import target_for
from gateway.recovery import retries

bp = Blueprint("editorial", __name__, url_prefix="/v1")


@bp.post("/jobs/<job_id>/checkpoints")
@roles("workflow")
def post_checkpoint(job_id: str):
    """Record a client phase with its artifacts (201 first, 200 same again)."""
    job = _job(job_id)
    body = json_body("checkpoint")
    checkpoint, created = checkpoints.post_checkpoint(side_effect_target(job), body)
    return checkpoints.checkpoint_view(job, checkpoint), 201 if created else 200


@bp.post("/jobs/<job_id>/lease")
@roles("workflow")
def acquire_lease(job_id: str):
    """Grant or renew the job's lease: ``{"owner", "fencing_token", "expires_at"}``."""
    job = _job(job_id)
    body = json_body("lease")
    return leases.lease_view(leases.acquire(job, body["owner"], body["ttl_seconds"]))


@bp.delete("/jobs/<job_id>/lease")
@roles("workflow")
def release_lease(job_id: str):
    """Release the lease held by ``owner`` under ``fencing_token``."""
    job = _job(job_id)
    body = json_body("lease_release")
    return leases.release(job, body["owner"], body["fencing_token"])


@bp.post("/jobs/<job_id>/cancel")
@roles("workflow", "editor")
def cancel(job_id: str):
    """Cancel the job; every later side-effect call is 409 ``job-cancelled``."""
    job = _job(job_id)
    body = json_body("cancel")
    if not job.cancelled:  # a scheduled post goes back to draft first (its own operation)
        scheduling.unschedule(target_for(config(), job), "job cancelled")
    job = records.cancel_job(job, body["reason"], g.principal.name)
    stops.request_cancel(config(), job)  # never fails the cancel: the worker retries
    return job_views.job_view(job, with_rows=False)


@bp.post("/jobs/<job_id>/repair")
@roles("workflow")
def repair_job(job_id: str):
    """Write back only the fields verification found missing or drifted."""
    job = _job(job_id)
    json_body("empty")
    done = repair.repair_job(side_effect_target(job))
    return answer(repair_body(job, done), done.outcome)


@bp.put("/jobs/<job_id>/blocks/<name>")
@roles("workflow")
def put_block(job_id: str, name: str):
    """Insert (or replace in place) a named HTML block in the job's post, exactly once."""
    validation.check_identifier(name, validation.SLOT, "/name", "block name")
    job = _job(job_id)
    body = json_body("block")
    outcome = blocks.put_block(
        side_effect_target(job), name, body["html"], body.get("position", "end")
    )
    return action_answer(blocks.ACTION, outcome)


@bp.post("/jobs/<job_id>/approval-requests")
@roles("workflow")
def request_approval(job_id: str):
    """Put a verified job in front of editors (phase ``approval_pending``)."""
    job = _job(job_id)
    json_body("empty")
    requested = approvals.request_approval(side_effect_target(job), g.principal.name)
    return approvals.request_view(job, requested), 201 if requested.created else 200


@bp.post("/jobs/<job_id>/approvals")
@roles("editor")
def approve(job_id: str):
    """An editor approves this version, digest and post until ``expires_at``."""
    job = _job(job_id)
    body = json_body("approval")
    approval, unchecked = approvals.approve(target_for(config(), job), body, g.principal.name)
    return {**approvals.approval_view(approval), "unchecked_fields": unchecked}, 201


@bp.post("/jobs/<job_id>/changes-requests")
@roles("editor")
def request_changes(job_id: str):
    """An editor sends this draft version back with a note (issue 56)."""
    body = json_body("changes_request")
    return decisions.request_changes(_job(job_id), body, g.principal.name), 201


@bp.post("/jobs/<job_id>/comments")
@roles("editor")
def comment(job_id: str):
    """An editor's comment on the job's current version."""
    body = json_body("comment")
    return decisions.comment(_job(job_id), body, g.principal.name), 201


@bp.get("/jobs/<job_id>/timeline")
@roles("workflow", "editor", "admin")
def job_timeline(job_id: str):
    """The job's timeline, oldest first, ``?after=`` an entry id (pages of 200)."""
    after = validation.parse_int(request.args.get("after"), "/after", default=0)
    if not 0 <= after <= validation.MAX_DB_INT:
        raise exc.ValidationFailed(
            "invalid query", errors=[{"pointer": "/after", "message": "after 0..2147483647"}]
        )
    job = _job(job_id)
    entries = timeline.entries(job, after)
    more = len(entries) == timeline.PAGE
    return {
        "job_id": job.job_id,
        "entries": entries,
        "next_after": entries[-1]["id"] if more else None,
    }


@bp.delete("/jobs/<job_id>/approvals/<int:approval_id>")
@roles("editor")
def revoke(job_id: str, approval_id: int):
    """Revoke an approval (repeat-safe)."""
    job = _job(job_id)
    target = target_for(config(), job)
    return approvals.approval_view(approvals.revoke(job, approval_id, g.principal.name, target))


@bp.post("/jobs/<job_id>/publish")
@roles("workflow", "editor")
def publish(job_id: str):
    """Publish under a valid approval; a replay after success makes no WordPress write."""
    job = _job(job_id)
    json_body("empty")
    outcome = publishing.publish(side_effect_target(job), g.principal.name)
    return action_answer(publishing.ACTION, outcome)


@bp.post("/jobs/<job_id>/operations/retry")
@roles("editor", "admin")
def retry_operation(job_id: str):
    """Let a FAILED operation be sent again by its next identical request (after
    reconciling): ``{"operation_key", "reason"}``; 409 ``operation-not-failed`` otherwise."""
    body = json_body("operation_retry")
    return retries.retry_failed(_job(job_id), body["operation_key"], body["reason"], g.principal)
