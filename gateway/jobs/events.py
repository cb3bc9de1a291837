"""The events a workflow may wait on (issue 57), decided by the gateway when the change happens.

An event (:data:`gateway.core.states.WORKFLOW_EVENTS`) is an *event row* (the ``notification``
table), written by :func:`decide` inside the transaction of the change it announces (a phase
move, an editor's decision, a comment, a revocation, a cancel), beside that change's timeline
entry (:mod:`gateway.jobs.timeline`). The row is the decision; delivering it is
:mod:`gateway.actions.notifications`' business, woken by :data:`wake`.

* **decided once**: the row's key is unique: ``{tenant}/{job_id}/v{task_version}/notify/
  {event}`` for an event of the version, ``.../notify/{event}/{entry id}`` for one per timeline
  entry (:data:`gateway.core.states.PER_ENTRY_EVENTS`: approved, commented, scheduled,
  revoked: each approval or phase move that decides it again is its own event). A re-run, a retry
  or two racing requests find the row already there (the INSERT's unique constraint decides,
  :func:`gateway.ledger.unique.insert_or_get`; inside a caller's transaction, a savepoint).
* **one name**: ``approval_pending`` keeps the key of the name it had before the vocabulary,
  ``.../notify/ready_for_approval``, so a workflow that posts the old name and the gateway's own
  decision are one row; new rows store the vocabulary name as ``event``, and :func:`name_of`
  reads an old row's ``ready_for_approval`` as ``approval_pending``.

Source: docs/api.md, "Events"; the event id of a row: :func:`gateway.core.event_ids.event_id`.
"""

from __future__ import annotations

import logging
import threading

from gateway.core import states
from gateway.ledger import unique
from gateway.ledger.models import Job
from gateway.ledger.models import Notification

log = logging.getLogger(__name__)

ACTION = "notify"  # the action part of an event row's key
# Set when this process decided an event: the delivery threads
# (gateway.actions.deliveries.deliver_forever) wake on it.
wake = threading.Event()
# The key's last part for a vocabulary name whose key predates the vocabulary.
_KEY_NAMES = {name: alias for alias, name in states.EVENT_ALIASES.items()}


def name_of(event: str) -> str:
    """The vocabulary name of ``event``: an alias (``ready_for_approval``, also the ``event``
    of rows stored before the vocabulary) becomes the name it stands for; others unchanged."""
    return states.EVENT_ALIASES.get(event, event)


def key_of(job: Job, event: str, entry_id: int | None = None) -> str:
    """The event row's key for ``job``'s current task version:
    ``{tenant}/{job_id}/v{task_version}/notify/{event}`` (``approval_pending`` and its alias:
    ``.../notify/ready_for_approval``), with ``/{entry_id}`` for an event per timeline entry."""
    name = name_of(event)
    key = f"{job.tenant}/{job.job_id}/v{job.task_version}/{ACTION}/{_KEY_NAMES.get(name, name)}"
    return f"{key}/{entry_id}" if entry_id is not None else key


def text_of(job: Job, event: str, reason: str | None) -> str:
    """The sentence editors read, true for the job's phase when the event is decided."""
    version = f"job {job.job_id} (version {job.task_version})"
    post = f"Post {job.post_id} of {version}"
    event = name_of(event)
    if event == states.APPROVAL_PENDING and job.phase == states.SCHEDULED:
        return f"{post} was approved and is scheduled to publish."
    if event == states.APPROVAL_PENDING and job.phase == states.PUBLISHED:
        return f"{post} was approved and is published already."
    sentences = {
        states.APPROVAL_PENDING: f"Draft {job.post_id} of {version} is verified and waits for "
        "approval.",
        states.PUBLISHED: f"{post} is published.",
        states.SCHEDULED: f"{post} is approved and scheduled to publish.",
        states.APPROVED: f"Draft {job.post_id} of {version} was approved ({reason}).",
        states.CHANGES_REQUESTED: f"An editor requested changes to {version}: {reason}",
        states.COMMENTED: f"An editor commented on {version}: {reason}",
        states.REVOKED: f"An approval of {version} was revoked ({reason}).",
        states.CANCELLED: f"{version[0].upper()}{version[1:]} was cancelled: {reason}",
    }
    return sentences.get(event, f"{version[0].upper()}{version[1:]} needs attention: {reason}")


def decide(
    job: Job, event: str, reason: str | None = None, entry_id: int | None = None
) -> tuple[Notification, bool]:
    """Write the event row of ``event`` for ``job``'s current task version, once; call it in
    the transaction of the change it announces (or alone). Sets :data:`wake` when decided now.

    Args:
        event: one of :data:`gateway.core.states.WORKFLOW_EVENTS` or an alias.
        reason: why (a note, a comment, who approved); the first decision's is kept.
        entry_id: the timeline entry (``job_event`` id) of an event per entry
            (:data:`gateway.core.states.PER_ENTRY_EVENTS`); None for the others.

    Returns ``(row, decided_now)``.

    Raises:
        ValueError: not an event of the vocabulary, or ``entry_id`` given for an event per
            version or missing for one per entry (a bug in the caller).
    """
    name = name_of(event)
    if name not in states.WORKFLOW_EVENTS:
        raise ValueError(f"{event!r} is not an event of the vocabulary")
    if (entry_id is None) == (name in states.PER_ENTRY_EVENTS):
        raise ValueError(f"{name!r}: a timeline entry id is needed exactly for per-entry events")
    key = key_of(job, name, entry_id)
    payload = {
        "event": name,
        "job_id": job.job_id,
        "task_version": job.task_version,
        "post_id": job.post_id,
        "reason": reason,
        "text": text_of(job, name, reason),
        "idempotency_key": key,
    }
    row, created = unique.insert_or_get(
        lambda: Notification.create(
            key=key,
            tenant=job.tenant,
            job_id=job.job_id,
            task_version=job.task_version,
            event=name,
            payload=payload,
        ),
        lambda: Notification.get(Notification.key == key),
    )
    if created:
        log.info("job_id=%s: event %s decided", job.job_id, key)
        wake.set()
    return row, created
