"""Review items as editors see and close them (the kinds, and where items are opened:
:mod:`gateway.operations.review_items`).

Review items are what the gateway could not decide alone and shows to an editor.

* ``suspected_duplicate``: no identifier could be looked up (companion plugin absent), and a
  post with the same title by the gateway's user appeared after the operation was sent. A title
  match is only a suspicion: no further automatic write for that operation until an editor
  decides.
* ``multiple_objects``: two or more objects carry one operation key (legacy data). Never an
  automatic delete.
* ``agent_action``: an agent session asks for what only a person decides (an MCP or
  computer-use approval, an unknown tool, an environment reconnection refused with a reason);
  see :mod:`gateway.agents.required_actions`.
* ``artifact_mismatch``: an agent session's saved items, content or environment do not hold
  the artifacts the job's checkpoints prove; the session is stopped (``dismiss`` closes the
  item; an editor's checked follow-up lifts the stop); see :mod:`gateway.agents.evidence`.
"""

from __future__ import annotations

import logging

from gateway.core import exceptions as exc
from gateway.ledger import db
from gateway.ledger.models import Review

log = logging.getLogger(__name__)


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
