"""Scheduled publishing (WordPress REST API, ``POST /wp/v2/posts/{id}`` with ``status:
future`` and ``date_gmt``).

* An approval may carry ``publish_at`` (RFC 3339, any offset; stored as UTC). Publishing then
  sends ``{"status": "future", "date_gmt": "YYYY-MM-DDTHH:MM:SS"}`` - the UTC time only, never
  the site-local ``date``, so a site whose timezone is not UTC cannot shift it - and the
  read-back must show ``future`` at exactly that UTC time; the job's phase is ``scheduled``.
  A ``publish_at`` in the past publishes now, and so does one less than a minute away
  (``wp_insert_post`` turns such a ``future`` post into ``publish`` itself).
* WordPress publishes a scheduled post from its cron. :func:`sweep_scheduled` (part of every
  reconciliation sweep) reads scheduled posts back once their time has come: ``publish``
  moves the job to ``published``; still ``future`` :data:`MISSED_AFTER` seconds later is a
  **missed schedule**, marked on the publish receipt (``missed_schedule: true``) and listed by
  the report and the review page.
* Cancelling the job or revoking the approval before the time moves the post back to
  ``draft`` as a ledger operation of its own, ``{tenant}/{job_id}/v{n}/unschedule`` (the one
  write a cancelled job still makes). When WordPress cannot be reached the row stays
  SENT/UNKNOWN and the sweep finishes it (read back; sent again while the post is still
  ``future``: the update is idempotent).
* **Unscheduling ends the publish operation it undid** (wordpress-mobile/WordPress-Android
  #12086: a scheduled post set back to draft keeps its future date). The publishes of one
  task version are numbered rounds: round 1 is ``…/v{n}/publish``, and each CONFIRMED
  ``unschedule`` of round *r* ends it, so the next approval publishes as round *r + 1*,
  ``…/v{n}/publish/r{r+1}`` (undone by ``…/unschedule/r{r+1}``), instead of replaying the
  old ``future`` receipt; the job goes back to ``approval_pending``. The post keeps the future
  date WordPress gave it, so publishing it now sends the current ``date_gmt`` with the status
  (:func:`dated_ahead`): otherwise ``wp_insert_post`` would schedule it again.
"""

from __future__ import annotations

import datetime as dt
import logging

from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core import validation
from gateway.core.config import Config
from gateway.core.digests import request_digest
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.operations import perform
from gateway.operations import registry
from gateway.operations.effects import Effect
from gateway.operations.target import Target
from gateway.operations.target import target_for
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressOutcomeUnknown

log = logging.getLogger(__name__)
MISSED_AFTER = 300.0  # seconds past the time a post may still be "future" before it is missed
# wp_insert_post publishes a "future" post whose date_gmt is less than a minute away at once.
WORDPRESS_FUTURE_MIN = 60.0


def parse_publish_at(value: str | None) -> dt.datetime | None:
    """``publish_at`` (RFC 3339 with any offset) as naive UTC, or None.

    Raises:
        ValidationFailed: not RFC 3339 with an offset.
    """
    if value is None:
        return None
    moment = validation.utc_moment(value, "publish_at", "2026-12-01T09:00:00-05:00")
    return moment.replace(microsecond=0)


def is_future(when: dt.datetime | None) -> bool:
    """Whether ``when`` (naive UTC) is far enough ahead for WordPress to schedule it
    (:data:`WORDPRESS_FUTURE_MIN`); otherwise publishing happens now."""
    return when is not None and (when - db.utcnow()).total_seconds() >= WORDPRESS_FUTURE_MIN


def wp_gmt(moment: dt.datetime) -> str:
    """A naive-UTC time as WordPress writes ``date_gmt`` (``2026-12-01T14:00:00``)."""
    return moment.replace(microsecond=0).isoformat()


def schedule_effect(target: Target, post_id: int, when: dt.datetime, receipt_extra: dict) -> Effect:
    """The publish effect of a scheduled post: ``status: future`` at ``date_gmt``, read back
    as ``future`` at exactly that UTC time (else the outcome is not proven)."""
    client, gmt = target.client, wp_gmt(when)

    def matches(live: dict) -> bool:
        return live.get("status") == "future" and live.get("date_gmt") == gmt

    def read_back(object_id: int, _sent: dict | None) -> dict:
        live = client.get_post(object_id)
        if not matches(live):
            raise WordPressOutcomeUnknown(
                f"read-back shows {live.get('status')!r} at {live.get('date_gmt')!r}, not "
                f"'future' at {gmt!r}"
            )
        return {
            "post_id": object_id,
            "status": "future",
            "scheduled_for": db.rfc3339(when),
            "date_gmt": live.get("date_gmt"),
            "date": live.get("date"),
            "link": live.get("link"),
            "slug": live.get("slug"),
            **receipt_extra,
        }

    def find() -> list[dict]:
        return [{"id": post_id, "type": "post"}] if matches(client.get_post(post_id)) else []

    return Effect(
        action="publish",
        send=lambda: client.update_post(post_id, {"status": "future", "date_gmt": gmt}),
        find=find,
        read_back=read_back,
        creates=False,
        intent={
            "update_of": post_id,
            "scheduled_for": db.rfc3339(when),
            "approval_id": receipt_extra.get("approval_id"),
            "published_by": receipt_extra.get("published_by"),
        },
    )


def publish_round(job: Job) -> int:
    """The round of the job's current publish operation under its task version: 1, plus one
    for each earlier publish of the version that a CONFIRMED ``unschedule`` ended."""
    ended = (
        Operation.select()
        .where(
            Operation.tenant == job.tenant,
            Operation.job_id == job.job_id,
            Operation.task_version == job.task_version,
            Operation.action == "unschedule",
            Operation.state == CONFIRMED,
        )
        .count()
    )
    return ended + 1


def round_slot(publish_round_number: int) -> str | None:
    """The key slot of a publish round (and of the ``unschedule`` that ends it): none for
    round 1 (``…/publish``), ``r2``, ``r3``... after."""
    return None if publish_round_number <= 1 else f"r{publish_round_number}"


def round_key(job: Job, action: str, publish_round_number: int) -> str:
    """``…/v{n}/publish[/r{k}]`` or ``…/v{n}/unschedule[/r{k}]`` of round ``k``."""
    return perform.operation_key(job, action, round_slot(publish_round_number))


def check_unscheduling(job: Job, publish_round_number: int) -> None:
    """Refuse to publish while the ``unschedule`` ending this round is in flight (SENT or
    UNKNOWN, left for the sweep): its outcome decides whether the post is still scheduled.

    Raises:
        OperationInProgress (409, retryable).
    """
    key = round_key(job, "unschedule", publish_round_number)
    row = Operation.get_or_none(Operation.operation_key == key)
    if row is not None and row.state != CONFIRMED:
        raise exc.OperationInProgress(
            "the post is being moved back to draft (unscheduled); publish after it is done",
            retry_after=2,
            operation_key=key,
            ledger_state=row.state,
        )


def dated_ahead(live: dict) -> bool:
    """Whether the post read back (``context=edit``) carries a ``date_gmt`` later than now:
    a draft that was scheduled once keeps that date, and ``wp_insert_post`` turns a
    ``publish`` dated ahead into ``future``."""
    text = live.get("date_gmt")
    if not text:
        return False
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return False
    return when.replace(tzinfo=None) > db.utcnow()


def scheduled_publish(job: Job) -> Operation | None:
    """The current publish round's CONFIRMED row when it scheduled the post, else None."""
    key = round_key(job, "publish", publish_round(job))
    row = Operation.get_or_none(Operation.operation_key == key)
    if row is None or row.state != CONFIRMED or (row.receipt or {}).get("status") != "future":
        return None
    return row


def _unschedule_effect(target: Target, post_id: int) -> Effect:
    client = target.client

    def find() -> list[dict]:
        status = client.get_post(post_id).get("status")
        return [{"id": post_id, "type": "post"}] if status == "draft" else []

    def read_back(object_id: int, _sent: dict | None) -> dict:
        status = client.get_post(object_id).get("status")
        if status != "draft":
            raise WordPressOutcomeUnknown(f"read-back shows status {status!r}, not 'draft'")
        return {"post_id": object_id, "status": "draft"}

    return Effect(
        action="unschedule",
        send=lambda: client.update_post(post_id, {"status": "draft"}),
        find=find,
        read_back=read_back,
        creates=False,
        intent={"update_of": post_id},
    )


def rebuild(target: Target, row: Operation, found=None, prefetched=None) -> Effect:
    """The effect of an ``unschedule`` row from its intent alone (reconciliation)."""
    return _unschedule_effect(target, (row.intent or {})["update_of"])


def settle(target: Target, row: Operation) -> None:
    """A CONFIRMED ``unschedule`` of the current version ended its publish round: the job,
    ``scheduled`` until now, waits for an approval again (``approval_pending``), so
    verification expects a draft."""
    job = target.job
    if row.task_version == job.task_version:
        records.end_schedule(job)  # only from scheduled, decided in SQL


def unschedule(target: Target, why: str) -> Operation | None:
    """Move the job's scheduled post back to draft before its time, as the ledger operation
    ``…/unschedule``. Called by cancel (before the job is marked cancelled) and by revoking
    the approval the post was scheduled under. Never raises for WordPress trouble: the row is
    left SENT/UNKNOWN for the sweep. Returns the row, or None when nothing was scheduled or
    the time has passed."""
    job = target.job
    publish = scheduled_publish(job)
    if publish is None:
        return None
    when = dt.datetime.fromisoformat(publish.receipt["scheduled_for"]).replace(tzinfo=None)
    if when <= db.utcnow():
        return None
    publish_round_number = publish_round(job)
    key = round_key(job, "unschedule", publish_round_number)
    digest = request_digest({"post_id": publish.remote_id, "status": "draft"})
    effect = _unschedule_effect(target, publish.remote_id)
    log.info("unscheduling job_id=%s operation_key=%s (%s)", job.job_id, key, why)
    try:
        row = perform.perform(
            target, key, digest, effect, slot=round_slot(publish_round_number)
        ).row
        settle(target, row)
        return row
    except exc.GatewayError as error:
        log.warning("job_id=%s operation_key=%s left for the sweep: %s", job.job_id, key, error)
        return Operation.get_or_none(Operation.operation_key == key)


def sweep_scheduled(config: Config) -> dict:
    """Sweep: read back every scheduled post whose time has come. ``publish`` moves the job to
    ``published``; still ``future`` :data:`MISSED_AFTER` seconds after its time marks the
    publish receipt ``missed_schedule``. Returns ``{"published", "missed"}`` counts."""
    counts = {"published": 0, "missed": 0}
    now = db.utcnow()
    for job in Job.select().where(Job.phase == states.SCHEDULED, Job.cancelled == False):  # noqa: E712
        row = scheduled_publish(job)
        if row is None:
            continue
        when = dt.datetime.fromisoformat(row.receipt["scheduled_for"]).replace(tzinfo=None)
        if when > now:
            continue
        try:
            status = target_for(config, job).client.get_post(row.remote_id).get("status")
        except WordPressError as error:
            log.warning("sweep: scheduled job_id=%s unreadable: %s", job.job_id, error)
            continue
        if status == "publish":
            records.advance_phase(job, states.PUBLISHED, digest=row.receipt.get("content_sha256"))
            counts["published"] += 1
        elif (now - when).total_seconds() >= MISSED_AFTER and not row.receipt.get(
            "missed_schedule"
        ):
            receipt = {**row.receipt, "missed_schedule": True, "seen_future_at": db.rfc3339(now)}
            Operation.update(receipt=receipt).where(Operation.id == row.id).execute()
            log.warning("job_id=%s missed its schedule (%s)", job.job_id, row.operation_key)
            counts["missed"] += 1
    return counts


def missed_schedules(tenant: str) -> list[dict]:
    """The tenant's jobs still ``scheduled`` whose publish receipt says the schedule was
    missed: ``[{"job_id", "post_id", "scheduled_for"}]`` (report and review page)."""
    missed = []
    for job in Job.select().where(Job.tenant == tenant, Job.phase == states.SCHEDULED):
        row = scheduled_publish(job)
        if row is not None and row.receipt.get("missed_schedule"):
            missed.append(
                {
                    "job_id": job.job_id,
                    "post_id": row.remote_id,
                    "scheduled_for": row.receipt["scheduled_for"],
                }
            )
    return missed


def _send_request(target: Target, request: dict) -> None:
    """Registry ``send``: ``request`` is ``{"why"?}``; the outcome is the ``unschedule`` row."""
    unschedule(target, request.get("why", "requested"))


registry.register(
    registry.Action(
        name="unschedule",
        recovery=registry.LOOKUP,  # found by reading the post back as draft
        send=lambda target, request: _send_request(target, request),
        rebuild=rebuild,
        step="retry_later",  # a cancel or revoke makes it; the sweep or recover finishes it
        resend_if_absent=True,  # made by a cancel or revoke, which no client repeats
        resend_when_cancelled=True,
        counted_as="unscheduled",
        settle=settle,
    )
)
