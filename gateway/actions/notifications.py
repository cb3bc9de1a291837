"""Notifications: the events of the vocabulary (:data:`gateway.core.states.WORKFLOW_EVENTS`,
issue 57) told to the tenant's receivers. The gateway decides each itself when the change
happens (:mod:`gateway.jobs.events`, in the change's transaction); a client may post
``approval_pending`` (alias ``ready_for_approval``), ``published`` or ``needs_attention`` too.

A notification is a side effect like a WordPress write, kept in the ledger (``notification``):

* **decided once** per job version and event (``commented``, ``revoked``: per timeline entry).
  Its key ``{tenant}/{job_id}/v{task_version}/notify/{event}`` is unique, so a re-run, a retry
  or two racing executions find the decision already made (the INSERT's unique constraint
  decides); "needs attention" keeps the first reason.
* **delivered outside any API request** (:mod:`gateway.actions.deliveries`, since schema
  version 18): the API call (and a resume's "needs a person") only records the decision and
  wakes the worker's delivery thread (:data:`gateway.jobs.events.wake`); each webhook endpoint
  of the tenant
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

from gateway.actions import egress
from gateway.core import event_ids
from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.core.states import APPROVAL_PENDING
from gateway.core.states import NEEDS_ATTENTION
from gateway.core.states import PUBLISHED
from gateway.core.states import SCHEDULED
from gateway.jobs import events
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.models import Job
from gateway.ledger.models import Notification

log = logging.getLogger(__name__)

ACTION = events.ACTION  # the action part of the key (registered by gateway.actions.deliveries)
SCHEMES = frozenset({"http", "https"})
ALLOW_SETTING = "GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS"
# The phase a job must have reached for the event to be true: ready for approval once in front
# of editors, and still after (a late or repeated call, e.g. a re-run of a workflow whose post
# was approved and published meanwhile: its text then says where the job is,
# :func:`gateway.jobs.events.text_of`).
DUE_PHASES = {
    APPROVAL_PENDING: (APPROVAL_PENDING, SCHEDULED, PUBLISHED),
    PUBLISHED: (PUBLISHED,),
}


def check_url(config: Config, url: str, what: str = "notification URL") -> egress.Resolved:
    """The address guard of :mod:`gateway.actions.egress` for a notification URL or a webhook
    endpoint's (``what`` names it in the error): http(s), no credentials, every address it
    resolves to public unless its ``host:port``, compared literally as written in the URL, is
    in ``GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS`` (then loopback and private pass).

    Raises:
        ValidationFailed (422, pointer ``/url``): refused, or the host cannot be resolved.
    """
    if len(url) > 2048 or not url.isprintable():
        raise _bad_url(url, "not a printable URL of at most 2048 characters", what)
    try:
        return egress.resolve(url, SCHEMES, config.notification_url_allow_hosts, ALLOW_SETTING)
    except (egress.Refused, egress.ResolverUnavailable) as refusal:
        raise _bad_url(url, str(refusal), what) from None


def _bad_url(url: str, why: str, what: str) -> exc.GatewayError:
    return exc.ValidationFailed(
        f"the {what} is not allowed: {why} ({url[:80]!r})",
        errors=[{"pointer": "/url", "message": why}],
    )


def decide(
    job: Job, event: str, reason: str | None = None, entry_id: int | None = None
) -> tuple[Notification, bool]:
    """Decide ``event`` for the job's current version, once (per timeline entry ``entry_id``
    for :data:`gateway.core.states.PER_ENTRY_EVENTS`): the event row of
    :func:`gateway.jobs.events.decide`, after the rules a client's request must pass.

    Args:
        event: one of :data:`gateway.core.states.WORKFLOW_EVENTS`, or an alias of one
            (:data:`gateway.core.states.EVENT_ALIASES`: ``ready_for_approval``, same key).
        reason: why (required for ``needs_attention``; kept from the first decision).

    Returns ``(row, decided_now)``.

    Raises:
        NotificationNotDue (409): the job has not reached the phase the event announces.
        ValidationFailed: ``needs_attention`` without a reason.
    """
    name = events.name_of(event)
    due = DUE_PHASES.get(name)
    if due is not None and job.phase not in due:
        raise exc.NotificationNotDue(
            f"job {job.job_id} is in phase {job.phase!r}; {event!r} needs {' or '.join(due)}",
            phase=job.phase,
        )
    if name == NEEDS_ATTENTION and not (reason or "").strip():
        raise exc.ValidationFailed("needs_attention needs a reason editors can act on")
    return events.decide(job, name, reason, entry_id)


def notify(job: Job, event: str, reason: str | None = None) -> tuple[Notification, bool]:
    """:func:`decide` only: the delivery happens outside the request
    (:func:`gateway.actions.deliveries.deliver_forever` in the worker, woken at once, and the
    sweep). Returns ``(row, decided_now)``; raises what
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
    what its deliveries say (:func:`gateway.actions.delivery_views.summary`: ``state``,
    ``attempts``, ``last_error``, ``delivered_at`` and the list ``deliveries``), which
    replaces the row's own columns (no longer moved since schema version 18)."""
    view = {
        "idempotency_key": row.key,
        "job_id": row.job_id,
        "task_version": row.task_version,
        "event": events.name_of(row.event),  # an old row's ready_for_approval: approval_pending
        "event_id": event_ids.event_id(row.key),
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
