"""Notifications to editors: ``ready_for_approval``, ``needs_attention``, ``published``.

A notification is a side effect like a WordPress write, kept in the ledger (``notification``):

* **decided once** per job version and event. Its key
  ``{tenant}/{job_id}/v{task_version}/notify/{event}`` is unique, so a re-run, a retry or two
  racing executions find the decision already made (the INSERT's unique constraint decides);
  "needs attention" keeps the first reason.
* **delivered** as a JSON POST to the tenant's notification URL (an admin's setting:
  ``gateway notifications set-url``) carrying the key as ``Idempotency-Key`` (the header of the
  IETF draft "The Idempotency-Key HTTP Header Field"); 2xx is DELIVERED.
* **recovered by an idempotent resend**: a delivery that failed or whose outcome is unknown
  (timeout, 5xx, connection lost) stays PENDING and is sent again, same key and same body, by
  the next call for it or by the sweep (``gateway reconcile``); the receiver deduplicates on
  the key. One sender at a time: a conditional UPDATE of ``claimed_until`` decides who sends.

The sweep also decides ``needs_attention`` for a job no request has touched for
``GATEWAY_ATTENTION_AFTER`` seconds (:func:`attention_for_idle_jobs`). Source: docs/api.md,
"Notifications".
"""

from __future__ import annotations

import datetime as dt
import logging

import requests
from peewee import IntegrityError

from gateway.core import exceptions as exc
from gateway.jobs import records as jobs
from gateway.ledger import db
from gateway.ledger.models import Job
from gateway.ledger.models import Notification
from gateway.ledger.models import NotificationTarget
from gateway.operations import perform as operations
from gateway.operations import registry as actions

log = logging.getLogger(__name__)

EVENTS = ("ready_for_approval", "needs_attention", "published")
PENDING = "PENDING"
DELIVERED = "DELIVERED"
ACTION = "notify"  # the action part of the key; its registry entry is at the end
CLAIM_SECONDS = 30  # longer than one delivery attempt (DELIVERY_TIMEOUT)
DELIVERY_TIMEOUT = 10
# The phase a job must have reached for the event to be true.
DUE_PHASES = {
    "ready_for_approval": ("approval_pending", "published"),
    "published": ("published",),
}


def set_url(tenant: str, url: str) -> NotificationTarget:
    """Set (or replace) the tenant's notification URL; pending notifications go there next.

    Raises:
        ValidationFailed: ``url`` is not an http(s) URL.
    """
    if not url.startswith(("http://", "https://")) or len(url) > 2048:
        raise exc.ValidationFailed(f"the notification URL must be http(s): {url[:80]!r}")
    with db.atomic():
        NotificationTarget.insert(tenant=tenant, url=url, updated_at=db.utcnow()).on_conflict(
            conflict_target=[NotificationTarget.tenant],
            update={NotificationTarget.url: url, NotificationTarget.updated_at: db.utcnow()},
        ).execute()
    return NotificationTarget.get(NotificationTarget.tenant == tenant)


def url_of(tenant: str) -> str | None:
    """The tenant's notification URL, or None when no admin set one."""
    row = NotificationTarget.get_or_none(NotificationTarget.tenant == tenant)
    return row.url if row else None


def key_of(job: Job, event: str) -> str:
    """``{tenant}/{job_id}/v{task_version}/notify/{event}`` (an operation key's shape)."""
    return operations.operation_key(job, ACTION, event)


def _text(job: Job, event: str, reason: str | None) -> str:
    version = f"job {job.job_id} (version {job.task_version})"
    if event == "ready_for_approval":
        return f"Draft {job.post_id} of {version} is verified and waits for approval."
    if event == "published":
        return f"Post {job.post_id} of {version} is published."
    return f"{version[0].upper()}{version[1:]} needs attention: {reason}"


def decide(job: Job, event: str, reason: str | None = None) -> tuple[Notification, bool]:
    """Decide ``event`` for the job's current version, once.

    Args:
        event: one of :data:`EVENTS`.
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
    if event == "needs_attention" and not (reason or "").strip():
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
    try:
        with db.atomic():
            row = Notification.create(
                key=key,
                tenant=job.tenant,
                job_id=job.job_id,
                task_version=job.task_version,
                event=event,
                payload=payload,
            )
        log.info("job_id=%s: notification %s decided", job.job_id, key)
        return row, True
    except IntegrityError:
        return Notification.get(Notification.key == key), False


def _claim(row: Notification) -> bool:
    """Take the row for one delivery attempt; False when delivered or another sender holds it."""
    now = db.utcnow()
    claimed = (
        Notification.update(
            claimed_until=now + dt.timedelta(seconds=CLAIM_SECONDS),
            attempts=Notification.attempts + 1,
        )
        .where(
            Notification.id == row.id,
            Notification.state == PENDING,
            (Notification.claimed_until.is_null()) | (Notification.claimed_until < now),
        )
        .execute()
    )
    return claimed == 1


def deliver(row: Notification, session: requests.Session | None = None) -> Notification:
    """One delivery attempt of a PENDING row (no-op when DELIVERED or claimed by another
    sender): POST the stored payload to the tenant's URL with ``Idempotency-Key``.

    Returns the row as stored afterwards (DELIVERED, or PENDING with ``last_error``). Never
    raises for the receiver's trouble."""
    if row.state != PENDING or not _claim(row):
        return Notification.get_by_id(row.id)
    url = url_of(row.tenant)
    error = None
    if url is None:
        error = (
            f"no notification URL is set for tenant {row.tenant} (gateway notifications set-url)"
        )
    else:
        try:
            answer = (session or requests).post(
                url,
                json=row.payload,
                headers={"Idempotency-Key": row.key},
                timeout=DELIVERY_TIMEOUT,
                allow_redirects=False,
            )
            if not 200 <= answer.status_code < 300:
                error = f"{url} answered HTTP {answer.status_code}"
        except requests.RequestException as failure:
            error = f"{url} could not be reached: {type(failure).__name__}"
    if error is None:
        Notification.update(
            state=DELIVERED, delivered_at=db.utcnow(), claimed_until=None, last_error=None
        ).where(Notification.id == row.id).execute()
        log.info("job_id=%s: notification %s delivered", row.job_id, row.key)
    else:
        Notification.update(claimed_until=None, last_error=error).where(
            Notification.id == row.id
        ).execute()
        log.warning("job_id=%s: notification %s not delivered: %s", row.job_id, row.key, error)
    return Notification.get_by_id(row.id)


def notify(job: Job, event: str, reason: str | None = None) -> tuple[Notification, bool]:
    """:func:`decide`, then deliver when still pending (a resend for an earlier decision).

    Returns ``(row, decided_now)``; raises what :func:`decide` raises."""
    row, decided_now = decide(job, event, reason)
    return deliver(row), decided_now


def resend_pending(limit: int = 200) -> dict:
    """The sweep's resend: one delivery attempt for each PENDING notification not held by a
    sender. Returns ``{"delivered", "pending"}`` counts after the pass."""
    counts = {"delivered": 0, "pending": 0}
    rows = Notification.select().where(Notification.state == PENDING).order_by(Notification.id)
    for row in rows.limit(limit):
        counts["delivered" if deliver(row).state == DELIVERED else "pending"] += 1
    return counts


def attention_for_idle_jobs(idle_seconds: float) -> int:
    """Decide ``needs_attention`` for every unfinished job (status ``in_progress`` or
    ``unknown``, or verified without an approval request: :func:`jobs.run_unfinished`) no
    client has asked anything of for ``idle_seconds`` (:func:`jobs.idle_seconds`: what the
    sweep itself writes does not count); returns how many were decided now (a job already
    told about for its version counts once, ever)."""
    decided = 0
    for job in Job.select().where(Job.cancelled == False):  # noqa: E712 (peewee expression)
        if not jobs.run_unfinished(job):
            continue
        idle = jobs.idle_seconds(job)
        if idle < idle_seconds:
            continue
        reason = (
            f"no request for {int(idle // 60)} min in phase {job.phase or 'none'}: the run "
            "stopped and was not resumed; resume it (recover_job) or send the article again"
        )
        row, now = decide(job, "needs_attention", reason)
        deliver(row)
        decided += now
    return decided


def notifications_of(job: Job) -> list[Notification]:
    """Every notification decided for the job (all versions), oldest first."""
    return list(
        Notification.select()
        .where(Notification.tenant == job.tenant, Notification.job_id == job.job_id)
        .order_by(Notification.id)
    )


def notification_view(row: Notification, decided_now: bool | None = None) -> dict:
    """The API's shape of a notification (docs/api.md, "Notifications")."""
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
    if decided_now is not None:
        view["decided_now"] = decided_now
    return view


def sweep_pass(config) -> dict:
    """The sweep's part (registry ``sweep_pass``): resend pending notifications
    (:func:`resend_pending`) and decide ``needs_attention`` for idle jobs
    (:func:`attention_for_idle_jobs`, ``GATEWAY_ATTENTION_AFTER``). Returns
    ``{"notifications": {"delivered", "pending", "attention_decided"}}``."""
    counts = resend_pending()
    counts["attention_decided"] = attention_for_idle_jobs(config.attention_after)
    return {"notifications": counts}


def send_request(target, request: dict) -> tuple[Notification, bool]:
    """Registry ``send``: ``request`` is the notification body (``event``, ``reason``);
    returns what :func:`notify` returns."""
    return notify(target.job, request["event"], request.get("reason"))


def _resent_by_the_sweep(target, row, found=None, prefetched=None):
    raise RuntimeError(
        f"{row.operation_key}: a notification lives in its own table and is resent by the "
        "sweep (sweep_pass), never rebuilt from an operation row"
    )


actions.register(
    actions.Action(
        name=ACTION,
        recovery=actions.RESEND,  # same key, same body; the receiver deduplicates
        send=send_request,
        rebuild=_resent_by_the_sweep,
        step="none",
        scope=actions.SITE,  # no job's recover sends it; the sweep does
        sweep_pass=sweep_pass,
        binds=None,  # a POST to the tenant's URL: no WordPress object
    )
)
