"""The job as the HTTP API shows it (``GET /v1/jobs/{job_id}``, ``PUT /v1/jobs/{job_id}``,
``GET /v1/jobs``, ``GET /v1/job-changes``): identity, phase, derived status, and its ledger
rows and open review items. Shapes: docs/api.md, "Jobs"."""

from __future__ import annotations

import datetime as dt
import re

from peewee import fn

from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core.validation import MAX_DB_INT
from gateway.editorial import decisions
from gateway.jobs import attention
from gateway.jobs import events
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.models import Job
from gateway.ledger.models import JobEvent
from gateway.ledger.models import Notification
from gateway.ledger.models import Operation
from gateway.ledger.models import Review


def job_view(job: Job, with_rows: bool = True, created: bool = False) -> dict:
    """The job as JSON: identity, phase, status and (optionally) its ledger rows.
    ``created``: the job row was inserted by this request, so it has no ledger rows and no
    review items yet (none are read)."""
    rows = [] if created else records.operations_of(job)
    reviews = [] if created else records.open_reviews(job)
    view = {
        "job_id": job.job_id,
        "site": job.site,
        "task_version": job.task_version,
        "session_id": job.session_id,
        "phase": job.phase,
        "post_id": job.post_id,
        "status": records.status_of(job, rows, reviews),
        "cancelled": job.cancelled,
        "cancel_reason": job.cancel_reason,
        "decision": decisions.decision_view(job),
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
        if unfinished and not records.run_unfinished(job, view["status"]):
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


# The changes feed (GET /v1/job-changes): what a poller (the n8n trigger node) needs to see
# the vocabulary's events (approval pending, approved, ...) without paging every job each time.
ATTENTION = frozenset((states.JOB_FAILED, states.JOB_UNKNOWN, states.NEEDS_REVIEW))
NOW = "now"  # the cursor a new poller sends to start from now, not from the first job
_STAMP = r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})~(\d{1,10})"
# "{changed_at}~{id}", and after a page cut short by ``limit`` "~{events since}~{id}" too: where
# the events of the jobs on the next pages start (the first page's cursor), so that a job listed
# only on a later page still lists the events it had before the cut (none is lost).
CURSOR = re.compile(rf"^{_STAMP}(?:~{_STAMP})?$")
BEGINNING = (dt.datetime(1970, 1, 1), 0)  # a carried "since" of a feed read from the first job


def parse_cursor(cursor: str | None) -> tuple[dt.datetime, int] | None:
    """``"{changed_at}~{id}"`` (the feed's ``next_cursor``) as ``(naive UTC, job row id)``;
    None for no cursor. A cursor's carried events start (:data:`CURSOR`) is
    :func:`events_start`'s.

    Raises:
        ValidationFailed: not a cursor this feed gave out (pointer ``/cursor``).
    """
    match = _match(cursor)
    return (dt.datetime.fromisoformat(match.group(1)), int(match.group(2))) if match else None


def events_start(cursor: str | None) -> tuple[dt.datetime, int] | None:
    """Where the events of the jobs listed from ``cursor`` start, ``(naive UTC, job row id)``:
    the start a page cut short by ``limit`` carried in its ``next_cursor``, else the cursor's
    own position (:func:`parse_cursor`); None: every event (no cursor, or a cut first page).

    Raises:
        ValidationFailed: not a cursor this feed gave out (pointer ``/cursor``).
    """
    match = _match(cursor)
    if match is None or match.group(3) is None:
        return parse_cursor(cursor)
    start = dt.datetime.fromisoformat(match.group(3)), int(match.group(4))
    return None if start == BEGINNING else start


def _match(cursor: str | None) -> re.Match | None:
    if not cursor:
        return None
    match = CURSOR.fullmatch(cursor)
    if match is None or any(int(n) > MAX_DB_INT for n in match.groups()[1::2] if n):
        raise exc.ValidationFailed(
            "invalid query",
            errors=[{"pointer": "/cursor", "message": "not a next_cursor of this feed"}],
        )
    return match


def _format_cursor(changed_at: dt.datetime, row_id: int) -> str:
    return f"{changed_at.strftime('%Y-%m-%dT%H:%M:%S.%f')}~{row_id}"


def _changed_since(tenant: str, since: dt.datetime | None) -> dict[str, dt.datetime]:
    """job_id -> the latest change stamp (job row, ledger row or review item) at or after
    ``since``; every job of the tenant when ``since`` is None."""
    stamps: dict[str, dt.datetime] = {}
    sources = (
        (Job, Job.updated_at),
        (Operation, Operation.updated_at),
        (Review, Review.created_at),
        (Review, Review.resolved_at),
        (JobEvent, JobEvent.created_at),  # a decision, a comment (issue 56)
        (Notification, Notification.created_at),  # an event row, a client's too (issue 57)
    )
    for model, column in sources:
        query = model.select(model.job_id, fn.MAX(column).alias("stamp")).where(
            model.tenant == tenant, column.is_null(False)
        )
        if since is not None:
            query = query.where(column >= since)
        for row in query.group_by(model.job_id).namedtuples():
            stamp = _as_datetime(row.stamp)
            if row.job_id not in stamps or stamp > stamps[row.job_id]:
                stamps[row.job_id] = stamp
    return stamps


def _as_datetime(value) -> dt.datetime:
    return dt.datetime.fromisoformat(value) if isinstance(value, str) else value


def _events(
    job: Job,
    after: tuple[dt.datetime, int] | None,
    until: dt.datetime,
    crossed: bool,
    status: str,
) -> list[str]:
    """The feed's events of a changed job: the names of its event rows (``notification``,
    :mod:`gateway.jobs.events`, every version) decided after the cursor ``after``
    (``(changed_at, job row id)``; None: all of them) and at or before ``until`` (the page's
    time), plus ``needs_attention`` when its stalled run crossed its attention time in that
    window (``crossed``) or when its ``status`` needs a person (``failed``, ``unknown``,
    ``needs_review``) and a ledger row of it went wrong or a review item opened in that
    window (:func:`_went_wrong`: the moment it started to need one). Each name once, in the
    vocabulary's order (:data:`gateway.core.states.WORKFLOW_EVENTS`; ``ready_for_approval``
    is ``approval_pending``). A row at the cursor's very time counts when this job sorts after the
    cursor's job (it was not listed at that time). So each event appears in the feed once,
    as a delivery does, not again at the job's later changes."""
    query = Notification.select(Notification.event).where(
        Notification.tenant == job.tenant,
        Notification.job_id == job.job_id,
        _newer(Notification.created_at, job, after, until),
    )
    found = {events.name_of(row.event) for row in query.distinct()}
    if crossed or (status in ATTENTION and _went_wrong(job, after, until)):
        found.add(states.NEEDS_ATTENTION)
    return [event for event in states.WORKFLOW_EVENTS if event in found]


def _newer(column, job: Job, after: tuple[dt.datetime, int] | None, until: dt.datetime):
    """``column`` (a time) after the cursor ``after`` and at or before ``until``; a time equal
    to the cursor's counts when ``job`` sorts after the cursor's job (not listed then)."""
    window = column <= until
    if after is not None:
        since, row_id = after
        window &= column >= since if job.id > row_id else column > since
    return window


def _went_wrong(job: Job, after: tuple[dt.datetime, int] | None, until: dt.datetime) -> bool:
    """Whether one of ``job``'s ledger rows became FAILED or UNKNOWN, or a review item of it
    was opened, in the window of :func:`_newer`: when its status started to need a person."""
    rows = Operation.select().where(
        Operation.tenant == job.tenant,
        Operation.job_id == job.job_id,
        Operation.state.in_((states.FAILED, states.UNKNOWN)),
        _newer(Operation.updated_at, job, after, until),
    )
    reviews = Review.select().where(
        Review.tenant == job.tenant,
        Review.job_id == job.job_id,
        _newer(Review.created_at, job, after, until),
    )
    return rows.exists() or reviews.exists()


def list_changes(tenant: str, cursor: str | None, limit: int, attention_after: float) -> dict:
    """Jobs of ``tenant`` changed after ``cursor``, oldest change first, each with the events
    decided for it since the cursor (:func:`_events`): the names of its event rows decided
    after the cursor up to this page's time (every one when ``cursor`` is None), plus
    ``needs_attention`` once for a stalled run whose attention time
    (:func:`gateway.jobs.attention.stalled`) passed since the cursor, or for a status that
    needs a person (``failed``, ``unknown``, ``needs_review``) that began since the cursor;
    the editors' decision on its version stands beside them (``decision``:
    :func:`gateway.editorial.decisions.decision_view`, its note).

    A change is the job row, any of its ledger rows, a review item, a timeline entry or an
    event row being written, or a
    stalled job's attention time (``attention_after`` seconds, ``GATEWAY_ATTENTION_AFTER``,
    after its last client request: :mod:`gateway.jobs.attention`) passing; a job appears
    once, at its latest change, so a cursor past a stalled job's attention time does not
    list it again until something else changes. ``cursor``: a ``next_cursor`` of this feed,
    None (from the tenant's first job) or ``"now"`` (:data:`NOW`: an empty page whose
    ``next_cursor`` is the gateway's clock now, so that a new poller starts from now).
    Returns ``{"changes": [...], "next_cursor": str | None}``: pass ``next_cursor`` as
    ``cursor`` next time (it is the request's cursor when nothing changed).

    Raises:
        ValidationFailed (422, pointer ``/cursor``): a cursor this feed did not give out.
    """
    if cursor == NOW:
        return {"changes": [], "next_cursor": _format_cursor(db.utcnow(), 0)}
    after, start = parse_cursor(cursor), events_start(cursor)
    since, now = (after[0] if after else None), db.utcnow()
    stamps = _changed_since(tenant, since)
    crossing = attention.crossing_between(tenant, since, now, attention_after)
    jobs = Job.select().where(Job.tenant == tenant, Job.job_id.in_(list(set(stamps) | crossing)))
    views, ordered = {}, []
    crossed_now = set()
    for job in jobs:
        changed_at = stamps.get(job.job_id)
        if job.job_id in crossing:  # its attention time passed since the cursor: stalled?
            views[job.job_id] = job_view(job, with_rows=False)
            if attention.stalled(job, views[job.job_id]["status"], attention_after, now):
                crossed = attention.attention_at(job, attention_after)
                changed_at = max(changed_at or crossed, crossed)
                crossed_now.add(job.job_id)
        if changed_at is not None:
            ordered.append((changed_at, job.id, job))
    ordered.sort(key=lambda entry: entry[:2])
    if after is not None:
        ordered = [entry for entry in ordered if entry[:2] > after]
    changes = []
    for changed_at, _row_id, job in ordered[:limit]:
        view = views.get(job.job_id) or job_view(job, with_rows=False)
        found = _events(job, start, now, job.job_id in crossed_now, view["status"])
        changes.append(
            {
                **{k: view[k] for k in ("job_id", "status", "phase", "task_version", "post_id")},
                "decision": view["decision"],
                "changed_at": db.rfc3339(changed_at),
                "events": found,
            }
        )
    last = ordered[:limit][-1] if ordered[:limit] else None
    next_cursor = _format_cursor(last[0], last[1]) if last else cursor
    if last and len(ordered) > limit:  # cut short: the next pages' events start where ours did
        next_cursor += "~" + _format_cursor(*(start or BEGINNING))
    return {"changes": changes, "next_cursor": next_cursor or None}
