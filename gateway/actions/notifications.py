"""Notifications: the events of the vocabulary (:data:`gateway.core.states.WORKFLOW_EVENTS`,
issue 57) told to the tenant's receivers. The gateway decides each itself when the change
happens (:mod:`gateway.jobs.events`, in the change's transaction); a client may post
``approval_pending`` (alias ``ready_for_approval``), ``published`` or ``needs_attention`` too.

A notification is a side effect like a WordPress write, kept in the ledger (``notification``):

* **decided once** per job version and event (``commented``, ``revoked``: per timeline entry).
  Its key ``{tenant}/{job_id}/v{task_version}/notify/{event}`` is unique, so a re-run, a retry
  or two racing executions find the decision already made (the INSERT's unique constraint
  decides); "needs attention" keeps the first reason.
* **delivered outside any API request**: the API call (and a resume's "needs a person") only
  records the decision, PENDING, and wakes the worker's delivery thread
  (:func:`deliver_forever`, one per ``gateway serve`` worker, started by
  :mod:`gateway.server`); the sweep (``gateway reconcile``) delivers too. A delivery is a JSON
  POST to the tenant's notification URL (an admin's setting: ``gateway notifications
  set-url``) carrying the key as ``Idempotency-Key`` (the header of the IETF draft "The
  Idempotency-Key HTTP Header Field"); 2xx is DELIVERED. A client learns it from ``GET
  /v1/jobs/{id}/notifications`` (``state``, ``delivered_at``).
* **guarded and bounded**: the URL passes the same address guard as an image's
  ``source_url`` (:mod:`gateway.actions.egress`) when it is set and again at every send, the
  connection pinned to the address checked; each delivery ends by
  ``GATEWAY_NOTIFICATION_TIMEOUT`` seconds in all, however slowly the receiver answers, and
  reads at most ``GATEWAY_NOTIFICATION_MAX_BYTES`` of its answer.
* **recovered by an idempotent resend**: a delivery that failed or whose outcome is unknown
  (deadline, 5xx, 408/409/425/429, connection lost) stays PENDING and is sent again, same key and
  same body, by the next pass; the receiver deduplicates on the key. A definite refusal
  (:func:`gateway.core.answers.is_definite`: a 3xx, any other 4xx) is counted (``refusals``): the
  row waits out a back-off (:func:`backoff`) before the next attempt, and after
  ``GATEWAY_NOTIFICATION_MAX_REFUSALS`` of them it is REFUSED and never resent. One sender at a
  time: a conditional UPDATE of ``claimed_until`` decides who sends, judged by the database's clock.
  Every state change goes through :mod:`gateway.operations.transitions`. A pass gives each tenant's
  receiver one failure at most, so one slow receiver cannot hold up the other tenants'
  notifications.

The sweep also decides ``needs_attention`` for a job no request has touched for
``GATEWAY_ATTENTION_AFTER`` seconds (:func:`attention_for_idle_jobs`). Source: docs/api.md,
"Notifications".
"""

from __future__ import annotations

import collections
import json
import logging
import threading
import time
from urllib.parse import urlsplit

from gateway.actions import egress
from gateway.core import answers
from gateway.core import event_ids
from gateway.core import exceptions as exc
from gateway.core import rounds
from gateway.core.config import Config
from gateway.core.states import APPROVAL_PENDING
from gateway.core.states import DELIVERED
from gateway.core.states import NEEDS_ATTENTION
from gateway.core.states import PENDING
from gateway.core.states import PUBLISHED
from gateway.core.states import SCHEDULED
from gateway.jobs import events
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.models import NOTIFICATION_STATE
from gateway.ledger.models import Job
from gateway.ledger.models import Notification
from gateway.ledger.models import NotificationTarget
from gateway.operations import registry
from gateway.operations import transitions

log = logging.getLogger(__name__)

BACKOFF_SECONDS = 30.0  # after the first definite refusal; doubled after each, up to an hour
ACTION = events.ACTION  # the action part of the key; its registry entry is at the end
SCHEMES = frozenset({"http", "https"})
ALLOW_SETTING = "GATEWAY_NOTIFICATION_URL_ALLOW_HOSTS"
_wake = events.wake  # set when this process decides an event (gateway.jobs.events)
# The phase a job must have reached for the event to be true: ready for approval once in front
# of editors, and still after (a late or repeated call, e.g. a re-run of a workflow whose post
# was approved and published meanwhile: its text then says where the job is, :func:`_text`).
DUE_PHASES = {
    APPROVAL_PENDING: (APPROVAL_PENDING, SCHEDULED, PUBLISHED),
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


def set_url(config: Config, tenant: str, url: str) -> NotificationTarget:
    """Set (or replace) the tenant's notification URL after :func:`check_url`; pending
    notifications go there next.

    Raises:
        ValidationFailed: the URL is refused (:func:`check_url`).
    """
    check_url(config, url)
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


def key_of(job: Job, event: str, entry_id: int | None = None) -> str:
    """``{tenant}/{job_id}/v{task_version}/notify/{event}[/{entry_id}]`` (an operation key's
    shape; :func:`gateway.jobs.events.key_of`)."""
    return events.key_of(job, event, entry_id)


def _text(job: Job, event: str, reason: str | None) -> str:
    """The sentence editors read, true for the job's phase when the event is decided
    (:func:`gateway.jobs.events.text_of`)."""
    return events.text_of(job, event, reason)


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


def wake() -> None:
    """Wake this process's delivery threads (:func:`deliver_forever`): call it after the
    transaction that decided an event committed, so the pass finds the row at once."""
    _wake.set()


def _claim(config: Config, row: Notification) -> bool:
    """Take the row for one delivery attempt (:func:`gateway.operations.transitions.
    claim_delivery`, the database's clock); False when it is settled, another sender holds
    it or it waits out a back-off."""
    return transitions.claim_delivery(row, config.notification_timeout + 20)


def backoff(refusals: int) -> float:
    """Seconds a notification waits after its ``refusals``-th definite refusal:
    :data:`BACKOFF_SECONDS` doubled after each, at most an hour."""
    return min(3600.0, BACKOFF_SECONDS * 2 ** max(0, refusals - 1))


def deliver(config: Config, row: Notification) -> Notification:
    """One delivery attempt of a PENDING row (no-op when DELIVERED or claimed by another
    sender): POST the stored payload to the tenant's URL with ``Idempotency-Key``, the URL
    checked again now and the connection pinned to the address checked, all of it within
    ``notification_timeout`` seconds and at most ``notification_max_bytes`` of the answer
    read. Never called inside an API request.

    Returns the row as stored afterwards (DELIVERED; PENDING with ``last_error``; REFUSED
    after the last definite refusal allowed). Never raises for the receiver's trouble."""
    if row.state != PENDING or not _claim(config, row):
        return Notification.get_by_id(row.id)
    return _send_claimed(config, row)


def _send_claimed(config: Config, row: Notification) -> Notification:
    """The attempt of :func:`deliver` on a row this sender has claimed."""
    error, refused = _send(config, row)
    if error is None:
        transitions.move(
            row,
            DELIVERED,
            PENDING,
            column=NOTIFICATION_STATE,
            delivered_at=db.utcnow(),
            claimed_until=None,
            last_error=None,
        )
        log.info("job_id=%s: notification %s delivered", row.job_id, row.key)
    else:
        state = transitions.release_delivery(
            row, error, refused, config.notification_max_refusals, backoff(row.refusals + 1)
        )
        log.warning(
            "job_id=%s: notification %s not delivered (%s): %s", row.job_id, row.key, state, error
        )
    return Notification.get_by_id(row.id)


def _send(config: Config, row: Notification) -> tuple[str | None, bool]:
    """``(why the delivery did not take place, whether that is a definite refusal)``;
    ``(None, False)`` when the receiver answered 2xx. Whether an answer is a definite refusal
    is :func:`gateway.core.answers.is_definite`'s verdict for a receiver (RFC 9110: the same
    request would be refused again); an unreachable receiver, a 5xx, a missing or refused URL
    are not."""
    error = _attempt(config, row)
    if isinstance(error, int):
        url = _origin(url_of(row.tenant) or "")
        definite = answers.is_definite(answers.RECEIVER, error)
        return f"{url} answered HTTP {error}", definite
    return error, False


def _attempt(config: Config, row: Notification) -> str | int | None:
    """Why the delivery did not take place (the receiver's HTTP status for a non-2xx answer),
    or None when the receiver answered 2xx."""
    url = url_of(row.tenant)
    if url is None:
        return f"no notification URL is set for tenant {row.tenant} (gateway notifications set-url)"
    try:
        where = check_url(config, url)
    except exc.ValidationFailed as refusal:
        return f"{_origin(url)} is refused: {refusal.extensions['errors'][0]['message']}"
    body = json.dumps(row.payload, ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json", "Idempotency-Key": row.key}
    deadline = time.monotonic() + config.notification_timeout
    try:
        answer = egress.request(
            where, "POST", deadline, config.notification_max_bytes, headers, body
        )
    except egress.TooLarge:
        return f"{_origin(url)} answered with more than {config.notification_max_bytes} bytes"
    except egress.Failed as failure:
        return (
            f"{_origin(url)} could not be reached within {config.notification_timeout:g} s: "
            f"{failure}"
        )
    if not 200 <= answer.status < 300:
        return answer.status
    return None


def _origin(url: str) -> str:
    """``scheme://host:port`` of ``url``: what errors and logs name (the path of a chat
    webhook URL is often its secret)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rsplit('@', 1)[-1]}"


def notify(job: Job, event: str, reason: str | None = None) -> tuple[Notification, bool]:
    """:func:`decide` only: the delivery happens outside the request (:func:`deliver_forever`
    in the worker, woken at once, and the sweep). Returns ``(row, decided_now)``; raises what
    :func:`decide` raises."""
    return decide(job, event, reason)


def resend_pending(config: Config, limit: int = 200) -> dict:
    """One delivery pass over the PENDING notifications not held by a sender: the tenants
    take turns, one attempt each, oldest row first within a tenant, so one tenant's many
    rows or slow receiver delay only its own (issue 40). A tenant leaves the pass at its first
    failure, or once its attempts in the pass took ``notification_timeout`` seconds (a slow
    but successful receiver); its other rows wait for the next pass. A row another sender
    claimed first is passed over: it is that sender's, not the receiver's failure, and the
    tenant's other rows go on. Returns ``{"delivered", "pending"}``: the rows this pass
    delivered, and those left pending (held, backing off, not reached or failed; a row
    refused for the last time in the pass is neither)."""
    counts = {"delivered": 0, "pending": 0}
    rows = Notification.select().where(Notification.state == PENDING).order_by(Notification.id)
    now = db.db_now()
    queues: dict[str, collections.deque] = {}
    for row in rows.limit(limit):
        if row.claimed_until is not None and row.claimed_until > now:  # held, or backing off
            counts["pending"] += 1
        else:
            queues.setdefault(row.tenant, collections.deque()).append(row)

    def attempt(row: Notification) -> bool:
        """One attempt; False (the tenant leaves the pass) when this sender's failed."""
        if not _claim(config, row):  # another sender took it since the select: not a failure
            state, mine = Notification.get_by_id(row.id).state, False
        else:
            state, mine = _send_claimed(config, row).state, True
        if mine and state == DELIVERED:
            counts["delivered"] += 1
        elif state == PENDING:
            counts["pending"] += 1
        return not mine or state == DELIVERED

    left = rounds.take_turns(
        queues, attempt, config.notification_timeout, name="notification delivery"
    )
    counts["pending"] += left  # the next pass goes on
    return counts


def deliver_forever(config: Config, stop: threading.Event) -> None:
    """A worker's delivery thread: a pass (:func:`resend_pending`) whenever this process
    decided a notification, else every ``notification_poll_interval`` seconds, until ``stop``.
    Each pass on its own ledger connection; a failing pass is logged, never fatal."""
    while not stop.is_set():
        _wake.wait(config.notification_poll_interval)
        _wake.clear()
        try:
            with db.database.connection_context():
                resend_pending(config)
        except Exception:  # noqa: BLE001 - the thread must outlive a ledger hiccup
            log.exception("notification delivery pass failed; the next pass retries")


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
        row, now = decide(job, NEEDS_ATTENTION, reason)
        deliver(config, row)  # the sweep's own process: no API request waits for it
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
    if decided_now is not None:
        view["decided_now"] = decided_now
    return view


def sweep_pass(config) -> dict:
    """The sweep's part (registry ``sweep_pass``): resend pending notifications
    (:func:`resend_pending`) and decide ``needs_attention`` for idle jobs
    (:func:`attention_for_idle_jobs`, ``GATEWAY_ATTENTION_AFTER``). Returns
    ``{"notifications": {"delivered", "pending", "attention_decided"}}``."""
    counts = resend_pending(config)
    counts["attention_decided"] = attention_for_idle_jobs(config, config.attention_after)
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


registry.register(
    registry.Action(
        name=ACTION,
        recovery=registry.RESEND,  # same key, same body; the receiver deduplicates
        send=send_request,
        rebuild=_resent_by_the_sweep,
        step="none",
        scope=registry.SITE,  # no job's recover sends it; the sweep does
        sweep_pass=sweep_pass,
        binds=None,  # a POST to the tenant's URL: no WordPress object
    )
)
