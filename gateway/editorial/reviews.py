"""Review items as editors see and close them (the kinds, and where items are opened:
:mod:`gateway.operations.review_items`).

Review items are what the gateway could not decide alone and shows to an editor.

* ``suspected_duplicate``: no identifier could be looked up (companion plugin absent), and a
  post with the same title by the gateway's user appeared after the operation was sent. A title
  match is only a suspicion: no further automatic write for that operation until an editor
  decides.
* ``multiple_objects``: two or more objects carry one operation key (legacy data). Never an
  automatic delete.
* ``unreadable_object``: an object carries the operation key but the site's user cannot read it
  back (reassigned to another author, made private): never sent again, never adopted unread.
  ``same_as`` reads it back first (refused while it is still out of reach); see
  :mod:`gateway.operations.lookup_hits`.
* ``agent_action``: an agent session asks for what only a person decides (an MCP or
  computer-use approval, an unknown tool, an environment reconnection refused with a reason);
  see :mod:`gateway.agents.required_actions`.
* ``artifact_mismatch``: an agent session's saved items, content or environment do not hold
  the artifacts the job's checkpoints prove; the session is stopped (``dismiss`` closes the
  item; an editor's checked follow-up lifts the stop); see :mod:`gateway.agents.evidence`.

An item's ``status`` (declared in :mod:`gateway.ledger.models` from
:data:`gateway.core.states.REVIEW_MOVES`) moves only here, by :func:`gateway.ledger.moves.move`:
``open`` -> ``deciding`` (:func:`claim`: one editor's decision, before any WordPress write
it causes; of two editors deciding at once the other gets 409 ``review-decided`` naming the
decision that stands) -> ``resolved`` (:func:`close`); ``deciding`` -> ``open``
(:func:`release`: the decision's write failed). While ``deciding``, ``decision``,
``resolved_by`` and ``resolved_at`` name the claim (what, who, since when by the database's
clock); a claim older than the in-flight window (``GATEWAY_INFLIGHT_WINDOW``: its process
died) is taken over by the next decider (``deciding`` -> ``deciding``).
"""

from __future__ import annotations

import datetime as dt
import logging

from gateway.core import exceptions as exc
from gateway.core.states import REVIEW_DECIDING
from gateway.core.states import REVIEW_OPEN
from gateway.core.states import REVIEW_RESOLVED
from gateway.core.states import REVIEW_UNRESOLVED
from gateway.ledger import db
from gateway.ledger import moves
from gateway.ledger.models import REVIEW_STATUS
from gateway.ledger.models import Review

log = logging.getLogger(__name__)
SAME_AS = "same_as"  # the decision that names a post (``post_id``): the item's object is it


def list_open(tenant: str) -> list[dict]:
    """Review items of ``tenant`` not yet resolved (``open``, or ``deciding``: a decision
    being applied), oldest first."""
    return [
        review_view(r)
        for r in Review.select()
        .where(Review.tenant == tenant, Review.status.in_(REVIEW_UNRESOLVED))
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


def get(tenant: str, review_id: int) -> Review:
    """The review ``review_id`` of ``tenant``, whatever its status.

    Raises:
        NotFound: no such review for this tenant.
    """
    review = Review.get_or_none(Review.id == review_id, Review.tenant == tenant)
    if review is None:
        raise exc.NotFound(f"no open review {review_id}")
    return review


def get_open(tenant: str, review_id: int) -> Review:
    """The review ``review_id`` of ``tenant``, not yet resolved (``open``, or ``deciding``:
    :func:`claim` decides whether that claim may be taken over).

    Raises:
        NotFound: no such review for this tenant.
        ReviewDecided (409): it was resolved already (the decision that stands).
    """
    review = get(tenant, review_id)
    if review.status == REVIEW_RESOLVED:
        raise decided(review)
    return review


def stands(review: Review, decision: str, post_id: int | None) -> bool:
    """True when ``decision`` (with ``post_id`` for ``same_as``) is the decision ``review``
    was resolved with: the same request again, whoever sends it (a retry whose first answer
    was lost), answered with the stored outcome instead of 409. A decision still being
    applied (``deciding``) does not stand yet."""
    if review.status != REVIEW_RESOLVED or review.decision != decision:
        return False
    return decision != SAME_AS or review.post_id == post_id


def decided(review: Review) -> exc.ReviewDecided:
    """The 409 ``review-decided`` naming the decision on ``review`` that stands (``decision``
    with its ``post_id``, ``resolved_by``, ``review_status``: ``deciding`` while it is applied,
    or ``resolved``; ``resolved_at``: since when it is claimed, or when it was applied)."""
    return exc.ReviewDecided(
        f"review {review.id} is {review.status}: {review.decision} by {review.resolved_by}",
        review_id=review.id,
        decision=review.decision,
        post_id=review.post_id,
        resolved_by=review.resolved_by,
        review_status=review.status,
        resolved_at=db.rfc3339(review.resolved_at),
    )


def claim(review: Review, decision: str, post_id: int | None, editor: str, window: float) -> Review:
    """Claim the decision on ``review`` for ``editor`` before anything is written for it: one
    conditional UPDATE ``open -> deciding`` (or ``deciding -> deciding`` for a claim older than
    ``window`` seconds by the database's clock, left by a process that died), recording
    ``decision``, ``post_id``, ``resolved_by`` and the claim's moment in ``resolved_at``.
    Returns the review as claimed; :func:`close` or :func:`release` ends the claim.

    Raises:
        ReviewDecided (409): another editor's decision stands (being applied, or resolved).
    """
    now = db.db_now()
    taken_over = (Review.status == REVIEW_OPEN) | (
        Review.resolved_at <= now - dt.timedelta(seconds=window)
    )
    claimed = moves.move(
        REVIEW_STATUS,
        {"id": review.id},
        REVIEW_DECIDING,
        REVIEW_UNRESOLVED,
        when=(taken_over,),
        decision=decision,
        post_id=post_id,
        resolved_by=editor,
        resolved_at=now,
    )
    current = Review.get_by_id(review.id)
    if not claimed:
        raise decided(current)
    if review.status == REVIEW_DECIDING:
        log.warning("review %s: took over the claim %s left", review.id, review.resolved_by)
    return current


def release(claimed: Review) -> bool:
    """Give the claim back (``deciding -> open``) after its decision's write failed, so an
    editor may decide again; True when released (False: another decider took it over)."""
    released = moves.move(
        REVIEW_STATUS,
        {"id": claimed.id, "resolved_at": claimed.resolved_at},
        REVIEW_OPEN,
        REVIEW_DECIDING,
        decision=None,
        post_id=None,
        resolved_by=None,
        resolved_at=None,
    )
    log.info("review %s: decision %s released", claimed.id, claimed.decision)
    return bool(released)


def close(claimed: Review, detail: dict | None = None) -> Review:
    """Record the claimed decision (:func:`claim`) as applied: ``deciding -> resolved``, with
    ``detail`` (the item's detail, e.g. with the editor's ``reason``) when given.

    Raises:
        ReviewDecided (409): the claim was taken over meanwhile (older than the window).
    """
    fields = {"resolved_at": db.utcnow()}
    if detail is not None:
        fields["detail"] = detail
    where = {"id": claimed.id, "resolved_at": claimed.resolved_at}
    if not moves.move(REVIEW_STATUS, where, REVIEW_RESOLVED, REVIEW_DECIDING, **fields):
        raise decided(Review.get_by_id(claimed.id))
    log.info(
        "review %s resolved as %s by %s (%s)",
        claimed.id,
        claimed.decision,
        claimed.resolved_by,
        claimed.operation_key,
    )
    return Review.get_by_id(claimed.id)


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
