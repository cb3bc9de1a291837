"""Review items: what the gateway could not decide alone and shows to an editor.

* ``suspected_duplicate``: no identifier could be looked up (companion plugin absent), and a
  post with the same title by the gateway's user appeared after the operation was sent. A title
  match is only a suspicion: no further automatic write for that operation until an editor
  decides.
* ``multiple_objects``: two or more objects carry one operation key (legacy data). Never an
  automatic delete.
* ``agent_action``: an agent session asks for what only a person decides (an MCP or
  computer-use approval, an unknown tool, an environment reconnection); see
  :mod:`gateway.agents.required_actions`.
"""

from __future__ import annotations

import logging

from gateway.core import exceptions as exc
from gateway.ledger import db
from gateway.ledger.models import Operation
from gateway.ledger.models import Review
from gateway.operations import ownership

log = logging.getLogger(__name__)


def open_review(target, row: Operation, kind: str, detail: dict) -> Review:
    """The open review item of ``row``'s operation key, created on first need."""
    return open_item(row.tenant, row.job_id, row.operation_key, kind, detail)


def open_item(tenant: str, job_id: str, operation_key: str, kind: str, detail: dict) -> Review:
    """The open review item of ``operation_key``, created on first need (also for items
    that have no WordPress operation, such as an agent's request only a person decides)."""
    with db.atomic():
        review = Review.get_or_none(Review.operation_key == operation_key, Review.status == "open")
        if review is None:
            review = Review.create(
                tenant=tenant, job_id=job_id, operation_key=operation_key, kind=kind, detail=detail
            )
            log.warning(
                "review %s opened for %s job_id=%s: %s", review.id, operation_key, job_id, kind
            )
    return review


def decided_distinct(operation_key: str) -> bool:
    """True when an editor decided that the suspects of this operation are distinct posts."""
    return (
        Review.select()
        .where(Review.operation_key == operation_key, Review.decision == "distinct")
        .exists()
    )


def check_suspected_duplicates(target, row: Operation, effect) -> None:
    """Before resending a create without an identifier to look up, search for a post with
    the same title by the gateway's user created after the operation was first sent, and
    not held by another job or tenant in the ledger (that one is provably not this
    operation's: :func:`gateway.operations.ownership.held_elsewhere`).

    Raises:
        NeedsReview: a suspect exists; a review item names it.
    """
    open_item = Review.get_or_none(
        Review.operation_key == row.operation_key, Review.status == "open"
    )
    if open_item is not None:
        raise exc.NeedsReview(
            "an editor has not yet decided on this operation",
            operation_key=row.operation_key,
            ledger_state=row.state,
            review_id=open_item.id,
        )
    if not effect.title or decided_distinct(row.operation_key):
        return
    me = target.client.me()["id"]
    since = db.rfc3339(row.created_at)[:19]
    suspects = [
        {
            "id": post["id"],
            "title": post["title"]["raw"],
            "date_gmt": post["date_gmt"],
            "status": post["status"],
            "link": post.get("link"),
        }
        for post in target.client.find_posts_by_title(effect.title)
        if post["title"]["raw"] == effect.title
        and post["author"] == me
        and (post.get("date_gmt") or "") >= since
        and ownership.held_elsewhere(target, row, post["id"]) is None
    ]
    if suspects:
        review = open_review(
            target, row, "suspected_duplicate", {"title": effect.title, "suspects": suspects}
        )
        raise exc.NeedsReview(
            "a post with the same title exists but carries no operation key: an editor must "
            "decide whether it is this job's post",
            operation_key=row.operation_key,
            ledger_state=row.state,
            review_id=review.id,
        )


def list_open(tenant: str) -> list[dict]:
    """Open review items of ``tenant``, oldest first."""
    return [
        review_view(r)
        for r in Review.select()
        .where(Review.tenant == tenant, Review.status == "open")
        .order_by(Review.id)
    ]


def review_view(review: Review) -> dict:
    """A review item as JSON."""
    return {
        "review_id": review.id,
        "job_id": review.job_id,
        "operation_key": review.operation_key,
        "kind": review.kind,
        "detail": review.detail,
        "status": review.status,
        "decision": review.decision,
        "post_id": review.post_id,
        "resolved_by": review.resolved_by,
        "created_at": db.rfc3339(review.created_at),
        "resolved_at": db.rfc3339(review.resolved_at),
    }


def get_open(tenant: str, review_id: int) -> Review:
    """The open review ``review_id`` of ``tenant``.

    Raises:
        NotFound: no such review for this tenant, or it was already resolved.
    """
    review = Review.get_or_none(Review.id == review_id, Review.tenant == tenant)
    if review is None or review.status != "open":
        raise exc.NotFound(f"no open review {review_id}")
    return review


def candidate_ids(review: Review) -> list[int]:
    """The object ids an editor may choose for ``same_as``: the item's ``suspects``
    (suspected duplicate) or ``objects`` (one key on several objects)."""
    detail = review.detail or {}
    found = detail.get("suspects") or detail.get("objects") or []
    return [int(c["id"]) for c in found if isinstance(c, dict) and c.get("id")]


def check_candidate(review: Review, post_id: int | None) -> None:
    """``same_as`` accepts only one of the review item's candidates.

    Raises:
        ValidationFailed (422, pointer ``/post_id``).
    """
    allowed = candidate_ids(review)
    if post_id not in allowed:
        raise exc.ValidationFailed(
            f"post {post_id} is not one of this review's candidates {allowed}",
            errors=[{"pointer": "/post_id", "message": f"must be one of {allowed}"}],
        )


def close(review: Review, decision: str, post_id: int | None, editor: str) -> Review:
    """Record an editor's decision (``same_as`` or ``distinct``) on ``review``."""
    Review.update(
        status="resolved",
        decision=decision,
        post_id=post_id,
        resolved_by=editor,
        resolved_at=db.utcnow(),
    ).where(Review.id == review.id).execute()
    log.info(
        "review %s resolved as %s by %s (%s)", review.id, decision, editor, review.operation_key
    )
    return Review.get_by_id(review.id)
