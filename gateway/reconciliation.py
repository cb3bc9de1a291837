"""Reconciliation: finish SENT/UNKNOWN operations by looking them up in WordPress.

UNKNOWN is fixed by lookup, not by retry. Finding the operation's identifier once is
conclusive at any time (CONFIRMED with that id); finding it on two objects opens a review item;
absence leaves the row for the client's next call, which sends again when absence is proven.
``recover_job`` serves ``POST /v1/jobs/{id}/recover``; ``sweep`` serves ``gateway reconcile`` and
the server's periodic sweep, batching many operation keys into each WordPress query.
"""

from __future__ import annotations

import logging

from gateway import attachments
from gateway import db
from gateway import drafts
from gateway import exceptions as exc
from gateway import jobs
from gateway import media
from gateway import media_metadata
from gateway import operations
from gateway import ownership
from gateway import reviews
from gateway import scheduling
from gateway import terms
from gateway.config import Config
from gateway.ledger import CONFIRMED
from gateway.ledger import FAILED
from gateway.ledger import SENT
from gateway.ledger import UNKNOWN
from gateway.ledger import Job
from gateway.ledger import Operation
from gateway.operations import Effect
from gateway.operations import Target
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressNotFound

log = logging.getLogger(__name__)
POST_TYPES = {"draft": "post", "media": "attachment"}


def effect_for_row(
    target: Target,
    row: Operation,
    found: list[dict] | None = None,
    prefetched: dict[int, dict] | None = None,
) -> Effect:
    """An effect that can look ``row`` up and read it back, rebuilt from the row's stored
    intent (the original request body is not needed). ``found`` short-cuts the lookup and
    ``prefetched`` the read-back with the results of batched queries."""
    if row.action == "term":  # a term carries no key of ours: found by name
        return terms.rebuild(target, row)
    if row.action == "unschedule":  # an idempotent update: found by reading the post
        return scheduling.rebuild(target, row)
    if row.action == "media_meta":  # an idempotent update: sent again if absent
        return media_metadata.rebuild(target, row)
    if row.action == "attach":  # an idempotent update: found by reading the attachment
        return attachments.rebuild(target, row)
    prefetched = prefetched or {}
    post_type = POST_TYPES.get(row.action, "post")
    intent = row.intent or {}
    creates = not intent.get("update_of")

    def find() -> list[dict]:
        if found is not None:
            return found
        return drafts.find_by_key(target, row.operation_key, post_type) if creates else []

    def read_back(object_id: int, obj: dict | None) -> dict:
        if row.action == "media":
            return media.reconciled_read_back(
                target, object_id, row.operation_key, intent, prefetched.get(object_id)
            )
        return drafts.read_back(target, object_id, obj, intent, prefetched.get(object_id))

    def send() -> dict:  # never used: reconciliation does not write
        raise RuntimeError("reconciliation never sends")

    return Effect(
        action=row.action, send=send, find=find, read_back=read_back, creates=creates, intent=intent
    )


def _entry(row: Operation, **extra) -> dict:
    return {"operation_key": row.operation_key, "action": row.action, **extra}


def recover_job(target: Target) -> dict:
    """Reconcile every SENT/UNKNOWN row of the job and report (docs/api.md, "Recover").

    Never raises for WordPress trouble: rows it cannot look up stay ``unknown``."""
    job = target.job
    report = {
        "job_id": job.job_id,
        "completed": [],
        "failed": [],
        "unknown": [],
        "needs_review": [],
    }
    for row in jobs.operations_of(job):
        if row.action in operations.RESEND_ACTIONS and row.state != CONFIRMED:
            # An agent-session input: the agent worker resends it with the same key.
            if row.state != FAILED:
                report["unknown"].append(_entry(row, reason="resent by the agent worker"))
            else:
                report["failed"].append(_entry(row, problem="refused-by-openai"))
        elif row.state in (SENT, UNKNOWN):
            _recover_row(target, row, report)
        elif row.state == CONFIRMED:
            report["completed"].append(_entry(row, remote_id=row.remote_id))
        elif row.state == FAILED:
            report["failed"].append(_entry(row, problem="wordpress-refused"))
    if job.post_id is None:  # a draft confirmed by this reconciliation
        draft = drafts.latest_draft(job)
        if draft is not None:
            jobs.touch(job, post_id=draft.remote_id)
    report["status"] = jobs.status_of(job)
    report["next_allowed_actions"] = next_actions(job, report)
    return report


def _recover_row(target: Target, row: Operation, report: dict) -> None:
    effect = effect_for_row(target, row)
    try:
        outcome = operations.reconcile(target, row, effect)
    except exc.NeedsReview as review:
        report["needs_review"].append(_entry(row, review_id=review.extensions["review_id"]))
        return
    except exc.ForeignObject as refusal:
        report["unknown"].append(_entry(row, reason=refusal.detail))
        return
    except exc.GatewayError:
        report["unknown"].append(_entry(row, reason="WordPress could not be asked"))
        return
    if outcome is not None:
        report["completed"].append(_entry(row, remote_id=outcome.row.remote_id, reconciled=True))
        return
    if row.state == SENT and operations.sent_age(row) < operations.in_flight_window(target):
        report["unknown"].append(_entry(row, reason="in flight"))
        return
    # Absent in WordPress: mark UNKNOWN so the client's next identical call sends again.
    Operation.update(state=UNKNOWN, updated_at=db.utcnow()).where(
        Operation.id == row.id, Operation.state == row.state
    ).execute()
    report["unknown"].append(
        _entry(row, reason="not found in WordPress; send the same request again", absent=True)
    )


def next_actions(job: Job, report: dict) -> list[str]:
    """What the automation may do next, from the recover report."""
    if job.cancelled:
        return ["none"]
    if report["needs_review"]:
        return ["editor_review"]
    if any(not e.get("absent") for e in report["unknown"]):
        return ["retry_later"]
    actions = set()
    for entry in report["unknown"]:
        actions.add("upload_media" if entry["action"] == "media" else "create_draft")
    if report["failed"]:
        return sorted(actions) or ["none"]
    done = {e["action"] for e in report["completed"]}
    if "draft" not in done:
        actions.update({"upload_media", "create_draft"})
    elif job.phase in ("draft_confirmed",):
        actions.update({"verify", "repair"})
    elif job.phase == "verified":
        actions.add("request_approval")
    elif job.phase == "approval_pending":
        actions.add("publish")
    return sorted(actions) or ["none"]


def sweep(config: Config, older_than: float | None = None) -> dict:
    """One pass over stale SENT/UNKNOWN rows of every job, looking operation keys up in
    batches (one WordPress query per 50 keys per site).

    Args:
        older_than: seconds since the last update for a row to count as stale
            (default: the in-flight window).

    Returns counts: ``{"examined", "confirmed", "absent", "needs_review", "unreachable",
    "refused"}`` (``refused``: the object found is not provably the operation's).
    """
    older_than = config.inflight_window if older_than is None else older_than
    counts = {
        "examined": 0,
        "confirmed": 0,
        "absent": 0,
        "needs_review": 0,
        "unreachable": 0,
        "refused": 0,
    }
    counts["unscheduled"] = scheduling.finish_unschedules(config)
    counts.update(scheduling.sweep_scheduled(config))
    stale = [
        r
        for r in Operation.select().where(
            Operation.state.in_((SENT, UNKNOWN)), Operation.action.not_in(operations.RESEND_ACTIONS)
        )
        if operations.seconds_since(r.updated_at) >= older_than
    ]
    by_job: dict[tuple, list[Operation]] = {}
    for row in stale:
        by_job.setdefault((row.tenant, row.job_id), []).append(row)
    by_site: dict[tuple, list[tuple[Target, Operation]]] = {}
    for (tenant, job_id), rows in by_job.items():
        target = jobs.target_for(config, jobs.get_job(tenant, job_id))
        for row in rows:
            by_site.setdefault((tenant, target.site.name), []).append((target, row))
    for pairs in by_site.values():
        _sweep_site(pairs, counts)
    return counts


def _sweep_site(pairs: list[tuple[Target, Operation]], counts: dict) -> None:
    counts["examined"] += len(pairs)
    target = pairs[0][0]
    keys = [row.operation_key for _, row in pairs]
    since = min(row.created_at for _, row in pairs)  # a scanning transport stops there
    types = sorted({POST_TYPES.get(row.action, "post") for _, row in pairs})
    try:
        objects = (
            target.client.find_by_operation_keys(keys, since=since, types=types)
            if target.companion.present
            else []
        )
    except WordPressError as error:
        log.warning("sweep: site %s unreachable: %s", target.site.name, error)
        counts["unreachable"] += len(pairs)
        return
    found_by_row = {
        row.id: [
            o
            for o in objects
            if o["operation_key"] == row.operation_key and o["type"] == POST_TYPES.get(row.action)
        ]
        for _, row in pairs
    }
    prefetched = _read_back_many(target, pairs, found_by_row)
    for row_target, row in pairs:
        found = found_by_row[row.id]
        try:
            effect = effect_for_row(row_target, row, found, prefetched)
            outcome = operations.reconcile(row_target, row, effect)
        except exc.NeedsReview:
            counts["needs_review"] += 1
            continue
        except exc.ForeignObject:
            counts["refused"] += 1
            continue
        except exc.GatewayError:
            counts["unreachable"] += 1
            continue
        if outcome is None:
            counts["absent"] += 1
            Operation.update(state=UNKNOWN, updated_at=db.utcnow()).where(
                Operation.id == row.id, Operation.state == row.state
            ).execute()
        else:
            counts["confirmed"] += 1


def _read_back_many(target: Target, pairs, found_by_row: dict) -> dict[int, dict]:
    """Read back every object found exactly once, 100 per query per type, so a sweep of
    1,000 found operations costs a few dozen WordPress queries, not a thousand."""
    ids: dict[str, list[int]] = {"post": [], "attachment": []}
    for _, row in pairs:
        found = found_by_row[row.id]
        if len(found) == 1 and found[0]["type"] in ids:
            ids[found[0]["type"]].append(int(found[0]["id"]))
    routes = {"post": "/wp/v2/posts", "attachment": "/wp/v2/media"}
    prefetched: dict[int, dict] = {}
    for kind, wanted in ids.items():
        if wanted:
            try:
                prefetched.update(target.client.get_many(routes[kind], wanted))
            except WordPressError as error:  # each row then reads itself back
                log.warning("sweep: batched read-back failed: %s", error)
    return prefetched


def resolve_review(
    config: Config,
    tenant: str,
    review_id: int,
    decision: str,
    post_id: int | None,
    editor: str,
    reason: str | None = None,
) -> dict:
    """Apply an editor's decision on a review item.

    ``same_as``: the operation's object is ``post_id``: write the identifier onto it (when
    the companion plugin is present and it lacks one), read it back and record CONFIRMED, so
    the next identical call is a replay. ``distinct``: the suspects are other posts; the
    operation may be sent again (no title check for it from now on). Never deletes anything.
    ``approve``/``deny``/``dismiss`` (with ``reason``) decide an ``agent_action`` item
    (:func:`gateway.agents.required_actions.resolve`).

    Raises:
        NotFound: no open review ``review_id`` for ``tenant``.
        ValidationFailed (422): ``post_id`` is not one of the review item's candidates.
        ForeignObject (409): the object is not provably this operation's
            (:func:`ownership.check_adoptable`); nothing is written, the review stays open.
        WordPressRefused / WordPressUnavailable: the identifier could not be written.
    """
    review = reviews.get_open(tenant, review_id)
    agent_kind = review.kind == "agent_action"
    if agent_kind != (decision in ("approve", "deny", "dismiss")):
        raise exc.ValidationFailed(
            f"decision {decision!r} does not fit a {review.kind} review item",
            errors=[{"pointer": "/decision", "message": f"not allowed for {review.kind}"}],
        )
    if agent_kind:
        from gateway.agents import required_actions  # the agents package builds on this one

        return required_actions.resolve(config, review, decision, reason, editor)
    row = Operation.get(Operation.operation_key == review.operation_key)
    if decision == "same_as":
        reviews.check_candidate(review, post_id)
        target = jobs.target_for(config, jobs.get_job(review.tenant, review.job_id))
        _adopt(target, row, post_id)
    review = reviews.close(review, decision, post_id, editor)
    return {
        "review": reviews.review_view(review),
        "operation": jobs.row_view(Operation.get_by_id(row.id)),
    }


def _adopt(target: Target, row: Operation, object_id: int) -> None:
    """Bind ``object_id`` to ``row`` after :func:`ownership.check_adoptable` on the object
    as WordPress holds it now: write the operation key onto it (companion plugin present and
    the key missing), read it back, record CONFIRMED."""
    effect = effect_for_row(target, row)
    client = target.client
    try:
        obj = (
            client.get_media(object_id)
            if ownership.object_type(row.action) == "attachment"
            else client.get_post(object_id)
        )
    except WordPressNotFound:
        raise exc.ForeignObject(
            f"object {object_id} is not a {ownership.object_type(row.action)} of this site",
            operation_key=row.operation_key,
            ledger_state=row.state,
            object_id=object_id,
        ) from None
    except WordPressError as error:
        raise exc.WordPressUnavailable(
            f"could not read object {object_id}: {error.message}", retry_after=2
        ) from error
    ownership.check_adoptable(target, row, object_id, obj)
    try:
        if target.companion.present and not ownership.facts_of(obj)["operation_key"]:
            client.set_operation_key(
                object_id, row.operation_key, ownership.object_type(row.action)
            )
        operations.confirm(target, row, effect, object_id, reconciled=True, adopted=obj)
    except WordPressError as error:
        raise exc.WordPressUnavailable(
            f"could not adopt object {object_id}: {error.message}", retry_after=2
        ) from error
    if row.action == "draft":
        jobs.advance_phase(target.job, "draft_confirmed", post_id=object_id)
