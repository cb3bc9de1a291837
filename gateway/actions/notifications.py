"""Notifications to editors: ``ready_for_approval``, ``needs_attention``, ``published``; and
the editors' decisions on a version, ``approved`` and ``changes_requested`` (issue 56: decided
by the gateway itself when the decision is taken, the note as ``reason``).

A notification is a side effect like a WordPress write, kept in the ledger (``notification``):

* **decided once** per job version and event. Its key
  ``{tenant}/{job_id}/v{task_version}/notify/{event}`` is unique, so a re-run, a retry or two
  racing executions find the decision already made (the INSERT's unique constraint decides);
  "needs attention" keeps the first reason.
* **delivered outside any API request** (:mod:`gateway.actions.deliveries`, since schema
  version 18): the API call (and a resume's "needs a person") only records the decision and
  wakes the worker's delivery thread (:data:`_wake`); each webhook endpoint of the tenant
  subscribed to the event gets one delivery (the tenant's notification URL, an admin's
  setting ``gateway notifications set-url``, is its legacy endpoint: every event, the flat
  body of before), signed, retried, refused and guarded as that module says. A client learns
  it from ``GET /v1/jobs/{id}/notifications`` (``state``, ``delivered_at``, ``deliveries``).
* **guarded**: :func:`check_url` is the address guard of every endpoint URL, when it is set
  and again at every send.

The sweep also decides ``needs_attention`` for a job no request has touched for
``GATEWAY_ATTENTION_AFTER`` seconds (:func:`attention_for_idle_jobs`). Source: docs/api.md,
"Notifications".
"""

from __future__ import annotations

import logging
import threading

from gateway.actions import egress
from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.core.states import APPROVAL_PENDING
from gateway.core.states import APPROVED
from gateway.core.states import CHANGES_REQUESTED
from gateway.core.states import NEEDS_ATTENTION
from gateway.core.states import PUBLISHED
from gateway.core.states import READY_FOR_APPROVAL
from gateway.core.states import SCHEDULED
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger import unique
from gateway.ledger.models import Job
from gateway.ledger.models import Notification
from gateway.operations import perform

log = logging.getLogger(__name__)

ACTION = "notify"  # the action part of the key (registered by gateway.actions.deliveries)
SCHEMES = frozenset({"http", "https"})
ALLOW_SETTING = "GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS"
_wake = threading.Event()  # set when this process decides a notification
# The phase a job must have reached for the event to be true: ready for approval once in front
# of editors, and still after (a late or repeated call, e.g. a re-run of a workflow whose post
# was approved and published meanwhile: its text then says where the job is, :func:`_text`).
DUE_PHASES = {
    READY_FOR_APPROVAL: (APPROVAL_PENDING, SCHEDULED, PUBLISHED),
    PUBLISHED: (PUBLISHED,),
}


def check_url(config: Config, url: str) -> egress.Resolved:
    """The address guard of :mod:`gateway.actions.egress` for a notification URL: http(s),
    no credentials, every address it resolves to public unless its ``host:port`` is in
    ``GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS`` (then loopback and private pass).

    Raises:
        ValidationFailed (422, pointer ``/url``): refused, or the host cannot be resolved.
    """
    if len(url) > 2048 or not url.isprintable():
        raise _bad_url(url, "not a printable URL of at most 2048 characters")
    try:
        return egress.resolve(url, SCHEMES, config.notification_url_allow_hosts, ALLOW_SETTING)
    except (egress.Refused, egress.ResolverUnavailable) as refusal:
        raise _bad_url(url, str(refusal)) from None


def _bad_url(url: str, why: str) -> exc.GatewayError:
    return exc.ValidationFailed(
        f"the notification URL is not allowed: {why} ({url[:80]!r})",
        errors=[{"pointer": "/url", "message": why}],
    )


def key_of(job: Job, event: str) -> str:
    """``{tenant}/{job_id}/v{task_version}/notify/{event}`` (an operation key's shape)."""
    return perform.operation_key(job, ACTION, event)


def _text(job: Job, event: str, reason: str | None) -> str:
    """The sentence editors read, true for the job's phase when the event is decided."""
    version = f"job {job.job_id} (version {job.task_version})"
    if event == READY_FOR_APPROVAL and job.phase == SCHEDULED:
        return f"Post {job.post_id} of {version} was approved and is scheduled to publish."
    if event == READY_FOR_APPROVAL and job.phase == PUBLISHED:
        return f"Post {job.post_id} of {version} was approved and is published already."
    if event == READY_FOR_APPROVAL:
        return f"Draft {job.post_id} of {version} is verified and waits for approval."
    if event == PUBLISHED:
        return f"Post {job.post_id} of {version} is published."
    if event == APPROVED:
        return f"Draft {job.post_id} of {version} was approved ({reason})."
    if event == CHANGES_REQUESTED:
        return f"An editor requested changes to {version}: {reason}"
    return f"{version[0].upper()}{version[1:]} needs attention: {reason}"


def decide(job: Job, event: str, reason: str | None = None) -> tuple[Notification, bool]:
    """Decide ``event`` for the job's current version, once.

    Args:
        event: one of :data:`gateway.core.states.NOTIFICATION_EVENTS`.
        reason: why (required for ``needs_attention``; kept from the first decision).

    Returns ``(row, decided_now)``.

    Raises:
        NotificationNotDue (409): the job has not reached the phase the event announces.
        ValidationFailed: ``needs_attention`` without a reason.
    """
    due = DUE_PHASES.get(event)
    if due is not None and job.phase not in due:
        raise exc.NotificationNotDue(
            f"job {job.job_id} is in phase {job.phase!r}; {event!r} needs {' or '.join(due)}",
            phase=job.phase,
        )
    if event == NEEDS_ATTENTION and not (reason or "").strip():
        raise exc.ValidationFailed("needs_attention needs a reason editors can act on")
    key = key_of(job, event)
    payload = {
        "event": event,
        "job_id": job.job_id,
        "task_version": job.task_version,
        "post_id": job.post_id,
        "reason": reason,
        "text": _text(job, event, reason),
        "idempotency_key": key,
    }
    row, created = unique.insert_or_get(
        lambda: Notification.create(
            key=key,
            tenant=job.tenant,
            job_id=job.job_id,
            task_version=job.task_version,
            event=event,
            payload=payload,
        ),
        lambda: Notification.get(Notification.key == key),
    )
    if created:
        log.info("job_id=%s: notification %s decided", job.job_id, key)
        _wake.set()
    return row, created


def notify(job: Job, event: str, reason: str | None = None) -> tuple[Notification, bool]:
    """:func:`decide` only: the delivery happens outside the request (:func:`deliver_forever`
    in the worker, woken at once, and the sweep). Returns ``(row, decided_now)``; raises what
    :func:`decide` raises."""
    return decide(job, event, reason)


def attention_for_idle_jobs(config: Config, idle_seconds: float) -> int:
    """Decide ``needs_attention`` for every unfinished job (status ``in_progress`` or
    ``unknown``, or verified without an approval request: :func:`records.run_unfinished`) no
    client has asked anything of for ``idle_seconds`` (:func:`records.idle_seconds`: what the
    sweep itself writes does not count); returns how many were decided now (a job already
    told about for its version counts once, ever)."""
    decided = 0
    for job in Job.select().where(Job.cancelled == False):  # noqa: E712 (peewee expression)
        if not records.run_unfinished(job):
            continue
        idle = records.idle_seconds(job)
        if idle < idle_seconds:
            continue
        reason = (
            f"no request for {int(idle // 60)} min in phase {job.phase or 'none'}: the run "
            "stopped and was not resumed; resume it (recover_job) or send the article again"
        )
        _row, now = decide(job, NEEDS_ATTENTION, reason)
        decided += now  # delivered by the sweep's delivery pass that follows
    return decided


def notifications_of(job: Job) -> list[Notification]:
    """Every notification decided for the job (all versions), oldest first."""
    return list(
        Notification.select()
        .where(Notification.tenant == job.tenant, Notification.job_id == job.job_id)
        .order_by(Notification.id)
    )


def notification_view(
    row: Notification, decided_now: bool | None = None, deliveries: dict | None = None
) -> dict:
    """The API's shape of a notification (docs/api.md, "Notifications"); ``deliveries``:
    what its deliveries say (:func:`gateway.actions.deliveries.summary`: ``state``,
    ``attempts``, ``last_error``, ``delivered_at`` and the list ``deliveries``), which
    replaces the row's own columns (frozen since schema version 18)."""
    view = {
        "idempotency_key": row.key,
        "job_id": row.job_id,
        "task_version": row.task_version,
        "event": row.event,
        "reason": row.payload.get("reason"),
        "text": row.payload.get("text"),
        "state": row.state,
        "attempts": row.attempts,
        "last_error": row.last_error,
        "decided_at": db.rfc3339(row.created_at),
        "delivered_at": db.rfc3339(row.delivered_at),
    }
    if deliveries is not None:
        view.update(deliveries)
    if decided_now is not None:
        view["decided_now"] = decided_now
    return view


def send_request(target, request: dict) -> tuple[Notification, bool]:
    """Registry ``send``: ``request`` is the notification body (``event``, ``reason``);
    returns what :func:`notify` returns."""
    return notify(target.job, request["event"], request.get("reason"))
