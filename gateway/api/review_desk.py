"""The editors' desk on the review page (issue 56): send a waiting draft back with a note,
comment on a job's version, and read a job's timeline (published and cancelled jobs stay
findable by id, and the latest of them are listed). Its routes join the review page's
blueprint (:mod:`gateway.api.review_page`: sign-in, CSRF, security headers and problems as
flash messages are that module's) and call the same domain functions as the JSON API
(:mod:`gateway.editorial.decisions`, :mod:`gateway.jobs.timeline`). Anchor: GitHub's
pull-request review (request changes with a comment; a timeline of every decision).
"""

from __future__ import annotations

from flask import flash
from flask import g
from flask import redirect
from flask import render_template
from flask import request
from flask import url_for

from gateway.api.common import job_of_path as _job
from gateway.api.http import roles
from gateway.api.review_page import bp
from gateway.core import exceptions as exc
from gateway.core import validation
from gateway.editorial import decisions
from gateway.jobs import timeline


# a decision's name in the page's words
def _back():
    return redirect(url_for("review_page.index"), 303)


def _note() -> str:
    return request.form.get("note", "").strip()


def _version() -> int:
    value = validation.parse_int(request.form.get("task_version"), "/task_version")
    if value is None:
        raise exc.ValidationFailed(
            "task_version is required", errors=[{"pointer": "/task_version", "message": "missing"}]
        )
    return value


@bp.post("/jobs/<job_id>/changes")
@roles("editor")
def request_changes(job_id: str):
    """Send the draft version the page showed back with a note (form ``task_version``,
    ``note``); of two editors at once the second is told which decision stands."""
    body = {"task_version": _version(), "note": _note()}
    validation.validate("changes_request", body)
    job = _job(job_id)
    try:
        decisions.request_changes(job, body, g.principal.name)
    except exc.DecisionStands as error:
        flash(f"Job {job_id} was not changed: {_standing(error)}.", "error")
        return _back()
    flash(f"Job {job_id} v{job.task_version} sent back with your note.", "info")
    return _back()


def _standing(error: exc.DecisionStands) -> str:
    """What stands, in the page's words (:func:`gateway.editorial.decisions.in_words`)."""
    return decisions.in_words(error.extensions.get("decision"), error.detail)


@bp.post("/jobs/<job_id>/comments")
@roles("editor")
def comment(job_id: str):
    """An editor's comment on the job's current version (form ``note``)."""
    body = {"note": _note()}
    validation.validate("comment", body)
    decisions.comment(_job(job_id), body, g.principal.name)
    flash(f"Comment added to job {job_id}.", "info")
    return _back()


@bp.get("/jobs/<job_id>/timeline")
@roles("editor", "admin")
def job_timeline(job_id: str):
    """The job's timeline page: every decision and event, who, when, version and digest,
    200 a page (:func:`gateway.jobs.timeline.window`): the first, or those after entry
    ``?after=`` (newer), or before entry ``?before=`` (older); both at once, or a bad id:
    the problem's page, 422."""
    after, before = _entry_id("after"), _entry_id("before")
    if after is not None and before is not None:
        raise exc.ValidationFailed(
            "after and before cannot be combined",
            errors=[{"pointer": "/before", "message": "give after or before, not both"}],
        )
    job = _job(job_id)
    return render_template(
        "review_timeline.html",
        principal=g.principal,
        job=job,
        decision=decisions.decision_view(job),
        page=timeline.window(job, after, before, timeline.PAGE),
    )


def _entry_id(name: str) -> int | None:
    """An entry id from the query (0..2147483647), or None when absent.

    Raises:
        ValidationFailed: not a decimal integer in range (pointer ``/{name}``).
    """
    return validation.parse_int(request.args.get(name), f"/{name}")


@bp.get("/timeline")
@roles("editor", "admin")
def find_timeline():
    """Find a job's timeline by id (``?job_id=``), or list the latest published and cancelled
    jobs, each with a link to its timeline."""
    job_id = (request.args.get("job_id") or "").strip()
    if job_id:
        validation.check_identifier(job_id, validation.JOB_ID, "/job_id", "job_id")
        return redirect(url_for("review_page.job_timeline", job_id=job_id), 303)
    return render_template(
        "review_history.html",
        principal=g.principal,
        finished=timeline.finished_jobs(g.principal.tenant),
    )
