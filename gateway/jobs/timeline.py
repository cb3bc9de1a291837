"""A job's timeline (issue 56): every decision and event with who made it, when, the task
version and the digest it concerns, and an editor's note (``job_event`` rows).

Each entry is written by :func:`record` inside the transaction of the change it records (a
phase move, an approval, a revocation, a request for changes, a comment, a cancel), so the
timeline never tells of a change the ledger does not hold, nor misses one. ``actor`` is the
token's name (an editor, a workflow; the review page's editor); NULL is the gateway itself
(a read-back, the sweep). Events: :data:`gateway.core.states.TIMELINE_EVENTS`. Source:
GitHub's pull-request timeline (who reviewed which commit, when), docs/api.md "Timeline".
"""

from __future__ import annotations

from gateway.core import states
from gateway.ledger import db
from gateway.ledger.models import Job
from gateway.ledger.models import JobEvent

# The workflow hears these on the job's view (``notes``): an editor's words on its version.
NOTE_EVENTS = (states.CHANGES_REQUESTED, states.COMMENTED)
PAGE = 200  # the most entries one answer holds


def record(
    job: Job,
    event: str,
    actor: str | None = None,
    content_sha256: str | None = None,
    note: str | None = None,
) -> JobEvent:
    """Append ``event`` (one of :data:`states.TIMELINE_EVENTS`) to ``job``'s timeline for its
    task version as read. Call it inside the transaction of the change it records.

    Raises:
        ValueError: ``event`` is not a timeline event (a bug in the caller).
    """
    if event not in states.TIMELINE_EVENTS:
        raise ValueError(f"{event!r} is not a timeline event")
    return JobEvent.create(
        tenant=job.tenant,
        job_id=job.job_id,
        task_version=job.task_version,
        event=event,
        actor=actor,
        content_sha256=content_sha256,
        note=note,
    )


def record_all(
    job: Job, events: list[str], actor: str | None = None, content_sha256: str | None = None
) -> None:
    """Append ``events`` (each of :data:`states.TIMELINE_EVENTS`) by ``actor`` about the
    content digest ``content_sha256`` (hex SHA-256, :func:`gateway.operations.verification.
    content_digest`; None: none known) to ``job``'s timeline in one INSERT (a phase move that
    passes two: a draft written and verified at once). Call it inside the transaction of the
    change it records.

    Raises:
        ValueError: an event is not a timeline event (a bug in the caller).
    """
    unknown = [event for event in events if event not in states.TIMELINE_EVENTS]
    if unknown:
        raise ValueError(f"{unknown!r} are not timeline events")
    if events:
        rows = [
            {
                "tenant": job.tenant,
                "job_id": job.job_id,
                "task_version": job.task_version,
                "event": event,
                "actor": actor,
                "content_sha256": content_sha256,
                "created_at": db.utcnow(),
            }
            for event in events
        ]
        JobEvent.insert_many(rows).execute()


def of_version(job: Job):
    """A peewee query of ``job``'s timeline entries for its current task version (narrow it
    with ``.where``, order it as needed)."""
    return JobEvent.select().where(
        JobEvent.tenant == job.tenant,
        JobEvent.job_id == job.job_id,
        JobEvent.task_version == job.task_version,
    )


def known_digest(job: Job) -> str | None:
    """The content digest the gateway last recorded on ``job``'s timeline for its current task
    version (hex SHA-256: a draft's read-back, an approval request, a repair), or None."""
    row = (
        of_version(job)
        .where(JobEvent.content_sha256.is_null(False))
        .order_by(JobEvent.id.desc())
        .first()
    )
    return row.content_sha256 if row else None


def entries(job: Job, after: int = 0, limit: int = PAGE) -> list[dict]:
    """``job``'s timeline, oldest first: entries with ``id > after``, at most ``limit``
    (:func:`entry_view` each)."""
    rows = (
        JobEvent.select()
        .where(JobEvent.tenant == job.tenant, JobEvent.job_id == job.job_id, JobEvent.id > after)
        .order_by(JobEvent.id)
        .limit(limit)
    )
    return [entry_view(row) for row in rows]


def window(
    job: Job, after: int | None = None, before: int | None = None, limit: int = PAGE
) -> dict:
    """One page of ``job``'s timeline for reading, oldest first, keyset by entry id: the
    ``limit`` entries right after entry ``after``, or right before entry ``before``, or (neither)
    the first ``limit``. Returns ``{"entries": [entry_view], "total": int, "first": int,
    "older": id | None, "newer": id | None}``: ``first`` is the 1-based number of the first
    entry shown (0: none shown), ``older`` the ``before`` of the page before (None: none
    older), ``newer`` the ``after`` of the page after (None: none newer). Ids only grow, so a
    page holds still while entries are appended after it."""
    mine = (JobEvent.tenant == job.tenant) & (JobEvent.job_id == job.job_id)
    query = JobEvent.select().where(mine)
    if before is not None:
        rows = list(query.where(JobEvent.id < before).order_by(JobEvent.id.desc()).limit(limit))
        rows.reverse()
        more_newer = JobEvent.select().where(mine, JobEvent.id >= before).exists()
    else:
        rows = list(query.where(JobEvent.id > (after or 0)).order_by(JobEvent.id).limit(limit + 1))
        more_newer = len(rows) > limit
        rows = rows[:limit]
    earlier = query.where(JobEvent.id < rows[0].id).count() if rows else 0
    return {
        "entries": [entry_view(row) for row in rows],
        "total": query.count(),
        "first": earlier + 1 if rows else 0,
        "older": rows[0].id if earlier else None,
        "newer": rows[-1].id if rows and more_newer else None,
    }


def notes(job: Job) -> list[dict]:
    """The editors' notes on ``job``'s current task version (changes requested, comments),
    oldest first: what the workflow reads beside the decision."""
    rows = of_version(job).where(JobEvent.event.in_(NOTE_EVENTS)).order_by(JobEvent.id)
    return [entry_view(row) for row in rows]


def entry_view(row: JobEvent) -> dict:
    """One timeline entry as JSON: ``{"id", "event", "actor", "task_version",
    "content_sha256", "note", "at"}`` (``at``: RFC 3339, UTC)."""
    return {
        "id": row.id,
        "event": row.event,
        "actor": row.actor,
        "task_version": row.task_version,
        "content_sha256": row.content_sha256,
        "note": row.note,
        "at": db.rfc3339(row.created_at),
    }


def finished_jobs(tenant: str, limit: int = 20) -> list[dict]:
    """The latest ``limit`` published or cancelled jobs of ``tenant``, most recently updated
    first: ``[{"job_id", "site", "task_version", "phase", "cancelled", "updated_at"}]`` (the
    review page's history: their timelines stay findable)."""
    query = (
        Job.select()
        .where(Job.tenant == tenant, (Job.phase == states.PUBLISHED) | (Job.cancelled == True))  # noqa: E712
        .order_by(Job.updated_at.desc(), Job.id.desc())
        .limit(limit)
    )
    return [
        {
            "job_id": job.job_id,
            "site": job.site,
            "task_version": job.task_version,
            "phase": job.phase,
            "cancelled": job.cancelled,
            "updated_at": db.rfc3339(job.updated_at),
        }
        for job in query
    ]
