"""Jobs: one article job per ``(tenant, job_id)``, its task version, phase and status.

Status (docs/api.md, "Job status and phases") is derived from the ledger, never stored twice:
``cancelled`` > ``needs_review`` > ``unknown`` > ``failed`` > ``completed`` > ``in_progress``.
"""

from __future__ import annotations

import datetime as dt

from gateway.core import exceptions as exc
from gateway.core.states import APPROVAL_PENDING
from gateway.core.states import BEFORE_PHASE
from gateway.core.states import CANCELLED
from gateway.core.states import COMPLETED
from gateway.core.states import COMPLETED_PHASES
from gateway.core.states import DECISIONS
from gateway.core.states import DRAFT_CONFIRMED
from gateway.core.states import DRAFTING
from gateway.core.states import GATEWAY_PHASES
from gateway.core.states import IN_PROGRESS
from gateway.core.states import JOB_FAILED
from gateway.core.states import JOB_UNKNOWN
from gateway.core.states import NEEDS_REVIEW
from gateway.core.states import NEVER_SENT
from gateway.core.states import PER_ENTRY_EVENTS
from gateway.core.states import PHASES
from gateway.core.states import PUBLISHED
from gateway.core.states import REVIEW_UNRESOLVED
from gateway.core.states import SCHEDULED
from gateway.core.states import VERIFIED
from gateway.core.states import WORKFLOW_EVENTS
from gateway.jobs import events
from gateway.jobs import guards
from gateway.jobs import timeline
from gateway.ledger import db
from gateway.ledger import hot_sql
from gateway.ledger import moves
from gateway.ledger import unique
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import FAILED
from gateway.ledger.models import JOB_CANCELLED
from gateway.ledger.models import JOB_DECISION
from gateway.ledger.models import JOB_PHASE
from gateway.ledger.models import SENT
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.ledger.models import Review
from gateway.tenancy import sites

EXPECTED_STATUS = {PUBLISHED: "publish", SCHEDULED: "future"}  # post status by phase
# What a job needs next at a stage that is no ledger action (each registered action names its
# own stages: :attr:`gateway.operations.registry.Action.phases`).
STAGE_STEPS = {DRAFT_CONFIRMED: ("verify",), VERIFIED: ("request_approval",)}
ANY_PHASE = (None, *PHASES)  # a new task version resets the phase from any


def get_job(tenant: str, job_id: str, with_site: bool = False) -> Job:
    """The job, or :class:`JobNotFound`. ``with_site``: the job's site row and lease row are
    read in the same statement (a join) as ``job.site_row`` (None when the site was removed)
    and ``job.lease_row`` (None: no lease), for a side-effect call's
    :func:`gateway.operations.target.target_for` and its fencing check in the same request
    (:func:`gateway.jobs.leases.check_fencing` uses the joined lease row once, then reads the
    lease again); that join is plain SQL (:func:`gateway.ledger.hot_sql.job_with_site`,
    whose row is a :data:`gateway.ledger.rows.JobRow`: the same attributes), the job alone a
    peewee query."""
    if with_site:
        job = hot_sql.job_with_site(tenant, job_id)
    else:
        job = Job.get_or_none(Job.tenant == tenant, Job.job_id == job_id)
    if job is None:
        raise exc.JobNotFound(f"no job {job_id!r} for this tenant")
    return job


def held_by_another_tenant(tenant: str, job_id: str) -> bool:
    """True when a tenant other than ``tenant`` has a job ``job_id`` (a refusal to count)."""
    return Job.select().where(Job.job_id == job_id, Job.tenant != tenant).exists()


def put_job(tenant: str, job_id: str, site: str, task_version: int) -> tuple[Job, bool]:
    """Create the job, return it unchanged, or bump its task version.

    Returns ``(job, created)``. A higher ``task_version`` bumps the job (its checkpoints and
    approvals belong to the old version and no longer count). An agent session is bound
    afterwards by :func:`gateway.agents.sessions.bind` (the one path that keeps a session to
    one job).

    Raises:
        SiteNotFound: ``site`` is not configured for ``tenant``.
        StaleTaskVersion: the job already has a higher task version.
    """
    sites.get_site(tenant, site)
    values = {"tenant": tenant, "job_id": job_id, "site": site, "task_version": task_version}
    inserted, created = unique.insert_or_get(lambda: hot_sql.insert_job(values))
    if created:
        return inserted, True
    job = get_job(tenant, job_id)
    if task_version < job.task_version:
        raise exc.StaleTaskVersion(
            f"job {job_id} is at task_version {job.task_version}; {task_version} is stale",
            task_version=job.task_version,
        )
    if task_version > job.task_version:
        # Conditional: of two racing bumps to the same version, one updates, both succeed. The
        # phase goes back to none from any: the declared backward move of a new version; the
        # editors' decision on the old version is cleared with it (issue 56).
        with db.atomic():
            bumped = moves.move(
                JOB_PHASE,
                {"id": job.id},
                None,
                ANY_PHASE,
                when=(Job.task_version < task_version,),
                task_version=task_version,
                updated_at=db.utcnow(),
            )
            if bumped:
                where = {"id": job.id, "task_version": task_version}
                moves.move(JOB_DECISION, where, None, DECISIONS)
        job = Job.get_by_id(job.id)
    return job, False


def stage(job: Job) -> str:
    """The job's stage: its gateway phase, or :data:`DRAFTING` before the draft is confirmed
    (no phase yet, a client phase, or a task version bump)."""
    return job.phase if job.phase in GATEWAY_PHASES else DRAFTING


# The phases a timeline tells of (gateway.jobs.timeline), by the event it records.
PHASE_EVENTS = {DRAFT_CONFIRMED: "draft_written", VERIFIED: VERIFIED}
PHASE_EVENTS.update({SCHEDULED: SCHEDULED, PUBLISHED: PUBLISHED})
# The phases a workflow waits on (gateway.jobs.events): a forward move decides the event.
ANNOUNCED_PHASES = frozenset(PHASES) & frozenset(WORKFLOW_EVENTS)


def advance_phase(
    job: Job, phase: str, actor: str | None = None, digest: str | None = None, **fields
) -> bool:
    """Move the job forward to ``phase`` (never backwards), recording ``fields`` (e.g.
    ``post_id``) in the same UPDATE; no UPDATE when nothing changes.

    One conditional UPDATE (:func:`gateway.ledger.moves.move`) whose ``WHERE`` names the
    phases before ``phase`` and the task version as read: a job that another request moved
    to ``phase`` or beyond meanwhile (published while an approval request waited on
    WordPress), or that a new task version reset, is left as it stands (0 rows). ``job`` is
    then read again, and the ``fields`` it still lacks are recorded by :func:`touch`.
    A move to a phase of :data:`PHASE_EVENTS` enters the job's timeline in the same
    transaction, by ``actor`` (a token's name; None: the gateway), about the content digest
    ``digest`` (the read-back's; published: the approved version's; None: none known). A move
    to a phase of :data:`ANNOUNCED_PHASES` decides its event (:func:`gateway.jobs.events.
    decide`, once per version; ``scheduled`` once per move, keyed by its timeline entry) in
    that transaction too. Returns True when this call moved
    the phase."""
    current = PHASES.index(job.phase) if job.phase in PHASES else -1
    if PHASES.index(phase) > current:
        with db.atomic():
            moved = _move_phase(job, phase, BEFORE_PHASE[phase], **_changed(job, fields))
            if moved:
                entries = _phase_events(current, phase)
                if phase in PER_ENTRY_EVENTS:  # scheduled: its event per move, keyed by entry
                    timeline.record_all(job, entries[:-1], actor, digest)
                    entry = timeline.record(job, entries[-1], actor, digest)
                    events.decide(job, phase, entry_id=entry.id)
                else:
                    timeline.record_all(job, entries, actor, digest)
                    if phase in ANNOUNCED_PHASES:
                        events.decide(job, phase)
        if moved:
            events.wake.set()  # committed now: the delivery threads find the row
            return True
        _read_again(job)
    changed = _changed(job, fields)
    if changed:
        touch(job, **changed)
    return False


def _phase_events(before: int, phase: str) -> list[str]:
    """The timeline events of a forward move from ``PHASES[before]`` (-1: none) to ``phase``:
    a draft confirmed and verified at once was written too (``draft_written``, ``verified``)."""
    drafted = PHASES.index(DRAFT_CONFIRMED)
    events = [PHASE_EVENTS[DRAFT_CONFIRMED]] if before < drafted <= PHASES.index(phase) else []
    if phase in PHASE_EVENTS and phase != DRAFT_CONFIRMED:
        events.append(PHASE_EVENTS[phase])
    return events


def end_schedule(job: Job) -> bool:
    """``scheduled`` -> ``approval_pending`` for the job's task version as read: the declared
    backward move of a CONFIRMED unschedule (:func:`gateway.actions.scheduling.settle`).
    Returns True when this call moved it (0 rows: the job was published or given a new task
    version meanwhile, and stays so)."""
    return _move_phase(job, APPROVAL_PENDING, (SCHEDULED,))


def _changed(job: Job, fields: dict) -> dict:
    return {name: value for name, value in fields.items() if getattr(job, name) != value}


def _move_phase(job: Job, phase: str, expect: tuple, **fields) -> bool:
    where = {"id": job.id, "task_version": job.task_version}
    now = db.utcnow()
    if not moves.move(JOB_PHASE, where, phase, expect, updated_at=now, **fields):
        return False
    for name, value in {"phase": phase, "updated_at": now, **fields}.items():
        setattr(job, name, value)
    return True


def _read_again(job: Job) -> None:
    """Refresh ``job`` in place from the ledger after a move another writer decided."""
    fresh = Job.get_by_id(job.id)
    for name in ("phase", "task_version", "post_id", "updated_at"):
        setattr(job, name, getattr(fresh, name))


def cancel_job(job: Job, reason: str, actor: str | None = None) -> Job:
    """Cancel the job (repeat-safe: the first reason is kept; the first cancel enters the
    timeline, by ``actor``, a token's name, and decides the event ``cancelled``:
    :func:`gateway.jobs.events.decide`). Afterwards every side-effect
    call is refused with 409 ``job-cancelled`` before any ledger claim or WordPress call."""
    now = db.utcnow()
    with db.atomic():
        fields = {"cancel_reason": reason, "updated_at": now}
        if moves.move(JOB_CANCELLED, {"id": job.id}, True, False, **fields):
            timeline.record(job, CANCELLED, actor, note=reason)
            events.decide(job, CANCELLED, reason)
    events.wake.set()
    return Job.get_by_id(job.id)


def ensure_active(job: Job) -> None:
    """Refuse side effects on a cancelled job (:func:`gateway.jobs.guards.refuse_cancelled`).

    Raises:
        JobCancelled (409).
    """
    guards.refuse_cancelled(job)


def touch(job: Job, **fields) -> None:
    """Record ``fields`` (e.g. ``post_id``) on the job and bump ``updated_at``: one plain-SQL
    UPDATE by id (:func:`gateway.ledger.hot_sql.update_job`).

    Raises:
        IllegalMove: ``fields`` names ``phase``, which moves only by :func:`advance_phase`,
            :func:`end_schedule` and :func:`put_job` (before any statement).
    """
    hot_sql.update_job(job.id, {"updated_at": db.utcnow(), **fields})
    for name, value in fields.items():
        setattr(job, name, value)


def operations_of(job: Job) -> list[Operation]:
    """Every ledger row of the job, oldest first."""
    return list(
        Operation.select()
        .where(Operation.tenant == job.tenant, Operation.job_id == job.job_id)
        .order_by(Operation.id)
    )


def open_reviews(job: Job) -> list[Review]:
    """The job's review items not yet resolved (open, or a decision being applied)."""
    return list(
        Review.select().where(
            Review.tenant == job.tenant,
            Review.job_id == job.job_id,
            Review.status.in_(REVIEW_UNRESOLVED),
        )
    )


def status_of(
    job: Job, rows: list[Operation] | None = None, reviews: list[Review] | None = None
) -> str:
    """The job's status, derived from its ledger rows of the current task version."""
    rows = operations_of(job) if rows is None else rows
    reviews = open_reviews(job) if reviews is None else reviews
    current = [r for r in rows if r.task_version == job.task_version]
    if job.cancelled:
        return CANCELLED
    if reviews:
        return NEEDS_REVIEW
    if any(r.state in (UNKNOWN, SENT) for r in current):
        return JOB_UNKNOWN
    if any(r.state == FAILED for r in current):
        return JOB_FAILED
    if job.phase in COMPLETED_PHASES:
        return COMPLETED
    return IN_PROGRESS


def confirmed_media(job: Job) -> dict[str, Operation]:
    """The latest CONFIRMED media row of each slot (any task version), by slot."""
    rows = (
        Operation.select()
        .where(
            Operation.tenant == job.tenant,
            Operation.job_id == job.job_id,
            Operation.action == "media",
            Operation.state == CONFIRMED,
        )
        .order_by(Operation.id)
    )
    return {row.slot: row for row in rows}


def record_request(tenant: str, job_id: str) -> None:
    """Note that a client asked something of the job now (``job.last_request_at``, one
    UPDATE, which changes the row at most once a second:
    :func:`gateway.ledger.hot_sql.note_request`): what :func:`idle_seconds` counts from.
    The API calls it for every request a run makes (:mod:`gateway.api.run_activity`), the
    agent worker for every tool call; lookups made by reconciliation, the sweep or a
    recovery's own ``/recover`` never do."""
    hot_sql.note_request(tenant, job_id, db.utcnow())


def idle_since(job: Job) -> dt.datetime:
    """When a client last asked something of the job (naive UTC): ``job.last_request_at``,
    or its creation for a job no request touched since. What reconciliation, the sweep or a
    notification wrote does not count: a job whose run stopped grows idle even while they
    look its writes up (docs/api.md, "Resuming a stopped job")."""
    return job.last_request_at or job.created_at


def idle_seconds(job: Job) -> float:
    """Seconds since :func:`idle_since`."""
    return (db.utcnow() - idle_since(job)).total_seconds()


def run_unfinished(job: Job, status: str | None = None) -> bool:
    """Whether a run still has work on the job: status ``in_progress`` or ``unknown``, or
    ``completed`` in phase ``verified`` (a verified draft without an approval request: the
    run stopped before asking editors), or ``failed`` only by writes never sent (a request
    died before sending: the same request sends them, :func:`failed_never_sent`).
    ``failed`` by a refusal, ``needs_review`` and ``cancelled`` jobs wait for a person; from
    ``approval_pending`` on, editors and the clock act. ``status``: the job's status when
    already derived (:func:`status_of`)."""
    status = status_of(job) if status is None else status
    if status == JOB_FAILED:
        return failed_never_sent(job)
    return status in (IN_PROGRESS, JOB_UNKNOWN) or (status == COMPLETED and job.phase == VERIFIED)


def failed_never_sent(job: Job) -> bool:
    """True when every FAILED row of the job's current task version was never sent
    (``problem.reason`` :data:`~gateway.core.states.NEVER_SENT`: settled by the sweep after
    its request died, :mod:`gateway.recovery.never_sent`), and there is one."""
    failed = [
        r for r in operations_of(job) if r.task_version == job.task_version and r.state == FAILED
    ]
    return bool(failed) and all((r.problem or {}).get("reason") == NEVER_SENT for r in failed)
