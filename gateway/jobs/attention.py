"""When a stopped run's job needs a person: its **attention time**, ``GATEWAY_ATTENTION_AFTER``
seconds after the job's last client request (:func:`gateway.jobs.records.idle_since`: what
reconciliation, the sweep or a notification write does not count).

A job whose run stopped without an error changes no row: it stays ``in_progress`` (or
``completed`` in phase ``verified``, a draft never sent to editors) and nothing in the ledger
says that it stopped. Its attention time is the one moment it becomes a change anyway: the
changes feed (``GET /v1/job-changes``, :mod:`gateway.api.job_views`) lists it there with the
event ``needs_attention``, once, and the sweep tells editors
(:func:`gateway.actions.notifications.attention_for_idle_jobs`). A client request moves the
attention time later; a job whose status already says "needs attention" (``unknown``,
``failed``, ``needs_review``) had its change when its row changed. Source: docs/api.md,
"GET /v1/job-changes" and "POST /v1/jobs/{job_id}/resume".
"""

from __future__ import annotations

import datetime as dt

from gateway.core.states import JOB_UNKNOWN
from gateway.core.states import RUN_DONE_PHASES
from gateway.jobs import records
from gateway.ledger.models import Job


def attention_at(job: Job, after_seconds: float) -> dt.datetime:
    """The job's attention time (naive UTC): its last client request (its creation when none
    was noted) plus ``after_seconds`` (``config.attention_after``)."""
    return records.idle_since(job) + dt.timedelta(seconds=after_seconds)


def stalled(job: Job, status: str, after_seconds: float, now: dt.datetime) -> bool:
    """Whether the job's run stopped without an error: status ``in_progress`` (or
    ``completed`` in phase ``verified``, :func:`records.run_unfinished`) and its attention
    time (:func:`attention_at`) at or before ``now`` (naive UTC). ``status``: the job's
    derived status (:func:`records.status_of`)."""
    # unknown jobs have their own event (the row that became UNKNOWN is their change)
    quiet = status != JOB_UNKNOWN and records.run_unfinished(job, status)
    return quiet and attention_at(job, after_seconds) <= now


def crossing_between(
    tenant: str, since: dt.datetime | None, until: dt.datetime, after_seconds: float
) -> set[str]:
    """The ids of the tenant's jobs whose attention time lies in ``[since, until]`` (every one
    up to ``until`` when ``since`` is None), cancelled jobs and jobs past their run
    (:data:`gateway.core.states.RUN_DONE_PHASES`) left out: one SELECT of the job table (the
    ``(tenant, job_id)`` index). Their status is not judged here (:func:`stalled`)."""
    span = dt.timedelta(seconds=after_seconds)
    last, created = Job.last_request_at, Job.created_at
    # the attention time is last_request_at + span, or created_at + span before any request
    noted = last.is_null(False) & (last <= until - span)
    never = last.is_null() & (created <= until - span)
    if since is not None:
        # at ``since`` too: the feed's cursor also orders by row id within one instant
        noted &= last >= since - span
        never &= created >= since - span
    query = Job.select(Job.job_id).where(
        Job.tenant == tenant,
        Job.cancelled == False,  # noqa: E712 (peewee expression)
        Job.phase.is_null() | Job.phase.not_in(RUN_DONE_PHASES),
        noted | never,
    )
    return {row.job_id for row in query.namedtuples()}
