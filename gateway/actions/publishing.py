"""Publishing (the ``publish`` action): a draft becomes public only through an approval an
editor gave for exactly this task version, this content and this post, still valid now
(approvals themselves: :mod:`gateway.editorial.approvals`).

``publish`` (workflow, editor) re-reads the post and publishes only with a matching,
unexpired, unrevoked approval, as a ledger operation ``{tenant}/{job_id}/v{n}/publish``
(``POST /wp/v2/posts/{id}`` with ``{"status": "publish"}``, read back as ``publish``), so a
replay after success answers from the ledger with no WordPress write. An approval with a
future ``publish_at`` schedules the post instead (:mod:`gateway.actions.scheduling`).

Expiry is judged by the database clock (:func:`gateway.ledger.db.db_now`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable

from gateway.actions import blocks
from gateway.actions import drafts
from gateway.actions import scheduling
from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core.digests import request_digest
from gateway.jobs import guards
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import Approval
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.operations import ownership
from gateway.operations import perform
from gateway.operations import registry
from gateway.operations import verification
from gateway.operations.effects import Effect
from gateway.operations.effects import Outcome
from gateway.operations.effects import lookup_only
from gateway.operations.target import Target
from gateway.wordpress.errors import WordPressOutcomeUnknown

log = logging.getLogger(__name__)
ACTION = "publish"


def live_draft(target: Target) -> tuple[Operation, dict]:
    """``(draft row, live post)`` of the job's latest draft (``context=edit``).

    Raises:
        ApprovalRequired: the job has no confirmed draft.
        ForeignObject: another job or tenant holds the post too.
        WordPressRefused: the post no longer exists; WordPressUnavailable: it cannot be read.
    """
    draft = drafts.latest_draft(target.job)
    if draft is None:
        raise exc.ApprovalRequired("the job has no confirmed draft to approve or publish")
    ownership.check_job_post(target, draft.remote_id)
    return draft, drafts.read_live(target, draft.remote_id, draft.receipt)


def live_digest(post: dict) -> str:
    """The approval digest of a live post."""
    return verification.content_digest(verification.snapshot(post))


def approvals_of(job: Job) -> list[Approval]:
    """The job's approvals, newest first."""
    return list(
        Approval.select()
        .where(Approval.tenant == job.tenant, Approval.job_id == job.job_id)
        .order_by(Approval.id.desc())
    )


def refusal_for(
    approval: Approval, job: Job, post_id: int, digest: str, now
) -> exc.GatewayError | None:
    """Why ``approval`` does not allow publishing now, or None when it does."""
    facts = {"approval_id": approval.id}
    if approval.revoked_at is not None:
        return exc.ApprovalRevoked("the approval was revoked", **facts)
    if approval.task_version != job.task_version:
        return exc.ApprovalStale(
            f"the approval is for task_version {approval.task_version}; the job is at "
            f"{job.task_version}",
            **facts,
        )
    if approval.expires_at <= now:
        return exc.ApprovalExpired(f"the approval expired at {db.rfc3339(approval.expires_at)}")
    if approval.post_id != post_id or approval.content_sha256 != digest:
        return exc.ApprovalStale("the live post no longer matches the approved digest", **facts)
    return None


def valid_approval(target: Target) -> tuple[Approval, int, dict]:
    """The newest approval valid for the live post now, the post id and the post as read
    back (``context=edit``).

    Raises:
        ApprovalRequired, ApprovalRevoked, ApprovalExpired (403), ApprovalStale (409):
        judged on the newest approval when none is valid.
    """
    job = target.job
    approvals = approvals_of(job)
    if not approvals:
        raise exc.ApprovalRequired("an editor must approve this version before publishing")
    draft, live = live_draft(target)
    post_id, digest, now = draft.remote_id, live_digest(live), db.db_now()
    for approval in approvals:
        if refusal_for(approval, job, post_id, digest, now) is None:
            return approval, post_id, live
    raise refusal_for(approvals[0], job, post_id, digest, now)


def _publish_effect(target: Target, intent: dict, send: Callable[[], dict]) -> Effect:
    """The publish's effect from its ``intent`` (``update_of``, ``approval_id``): it is found
    when the post is published."""
    post_id = intent["update_of"]
    approval = Approval.get_or_none(Approval.id == intent.get("approval_id"))

    def find() -> list[dict]:
        live = blocks.live_post(target.client, post_id)
        published = live is not None and live.get("status") == "publish"
        return [{"id": post_id, "type": "post"}] if published else []

    def read_back(object_id: int, _sent: dict | None) -> dict:
        live = target.client.get_post(object_id)
        if live.get("status") != "publish":
            raise WordPressOutcomeUnknown(f"read-back shows status {live.get('status')!r}")
        return {
            "post_id": object_id,
            "status": "publish",
            "link": live.get("link"),
            "slug": live.get("slug"),
            "approval_id": intent.get("approval_id"),
            "approved_by": approval.approved_by if approval else None,
            "content_sha256": approval.content_sha256 if approval else None,
            "published_by": intent.get("published_by"),
        }

    return Effect(
        action=ACTION, send=send, find=find, read_back=read_back, creates=False, intent=intent
    )


def rebuild(target: Target, row: Operation, found=None, prefetched=None) -> Effect:
    """The publish effect of ``row`` from its stored intent (registry ``rebuild``); a scheduled
    publish (``scheduled_for`` in the intent) is found as ``future`` at that time."""
    intent = row.intent or {}
    if intent.get("scheduled_for"):
        when = dt.datetime.fromisoformat(intent["scheduled_for"]).replace(tzinfo=None)
        approval = Approval.get_or_none(Approval.id == intent.get("approval_id"))
        extra = {
            "approval_id": intent.get("approval_id"),
            "approved_by": approval.approved_by if approval else None,
            "content_sha256": approval.content_sha256 if approval else None,
            "published_by": intent.get("published_by"),
        }
        effect = scheduling.schedule_effect(target, intent["update_of"], when, extra)
        return dataclasses.replace(effect, send=lookup_only)
    return _publish_effect(target, intent, lookup_only)


def settle(target: Target, row: Operation) -> None:
    """A CONFIRMED publish of the current version makes the job ``published`` (``scheduled``
    when WordPress holds it as ``future``)."""
    if row.task_version == target.job.task_version:
        future = (row.receipt or {}).get("status") == "future"
        by = (row.intent or {}).get("published_by") or (row.receipt or {}).get("published_by")
        digest = (row.receipt or {}).get("content_sha256")  # the approved version's
        records.advance_phase(
            target.job, states.SCHEDULED if future else states.PUBLISHED, by, digest
        )


def publish(target: Target, by: str) -> Outcome:
    """Publish the job's post under a valid approval, once per publish round
    (:func:`gateway.actions.scheduling.publish_round`: a new round only after unscheduling
    ended the previous one). A post dated ahead (scheduled once, then unscheduled) is sent
    the current ``date_gmt`` with ``status: publish``, so WordPress publishes it now.

    A CONFIRMED publish of the current round is replayed before anything else (no
    WordPress read or write).

    Raises:
        OperationInProgress (409): the unschedule ending this round is still in flight.
        plus everything :func:`gateway.jobs.guards.check_writable`, :func:`valid_approval` and
        :func:`perform.perform` raise.
    """
    guards.check_writable(target)
    job = target.job
    publish_round = scheduling.publish_round(job)
    scheduling.check_unscheduling(job, publish_round)
    key = scheduling.round_key(job, ACTION, publish_round)
    replayed = perform.replay(key, None)  # published once, whoever asks again
    if replayed is not None:
        # The request that published may have died before it recorded the phase: record it
        # (repeat-safe; no UPDATE when the job has it already).
        settle(target, replayed.row)
        return replayed
    approval, post_id, live = valid_approval(target)
    when = approval.publish_at
    intent = {"update_of": post_id, "approval_id": approval.id, "published_by": by}
    if scheduling.is_future(when):  # scheduled; a time past (or within a minute) publishes now
        gmt = scheduling.wp_gmt(when)
        request_hash = request_digest({"post_id": post_id, "status": "future", "date_gmt": gmt})
        extra = {"approval_id": approval.id, "approved_by": approval.approved_by,
                 "content_sha256": approval.content_sha256, "published_by": by}  # fmt: skip
        effect = scheduling.schedule_effect(target, post_id, when, extra)
    else:
        request_hash = request_digest({"post_id": post_id, "status": "publish"})
        fields = {"status": "publish"}
        if scheduling.dated_ahead(live):  # else WordPress would schedule it at that date
            fields["date_gmt"] = scheduling.wp_gmt(db.utcnow())
        effect = _publish_effect(target, intent, lambda: target.client.update_post(post_id, fields))
    log.info("publishing job_id=%s operation_key=%s approval=%s", job.job_id, key, approval.id)
    outcome = perform.perform(
        target, key, request_hash, effect, slot=scheduling.round_slot(publish_round)
    )
    if outcome.row.state == CONFIRMED:
        settle(target, outcome.row)
    return outcome


registry.register(
    registry.Action(
        name=ACTION,
        recovery=registry.LOOKUP,
        send=lambda target, request: publish(target, request["by"]),
        rebuild=rebuild,
        step="publish",
        phases=frozenset({states.APPROVAL_PENDING}),
        settle=settle,
        sweep_pass=scheduling.sweep_scheduled,
        answer=registry.Answer(
            "post_id", ("status", "link", "slug", "approval_id", "scheduled_for")
        ),
    )
)
