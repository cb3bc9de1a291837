"""The resend rule's duplicate search: before a create that carries no identifier WordPress
can look up (no companion plugin) is sent again, a post with the same title is looked for. A
title match is only a *suspected duplicate*: an editor decides (review kind
``suspected_duplicate``), and no further automatic write happens for that operation until then.
"""

from __future__ import annotations

from gateway.core import exceptions as exc
from gateway.core.states import REVIEW_UNRESOLVED
from gateway.ledger import db
from gateway.ledger.models import Operation
from gateway.ledger.models import Review
from gateway.operations import ownership
from gateway.operations.review_items import decided_distinct
from gateway.operations.review_items import open_review


def check_suspected_duplicates(target, row: Operation, effect) -> None:
    """Before resending a create without an identifier to look up, search for a post with
    the same title by the gateway's user created after the operation was first sent, and
    not held by another job or tenant in the ledger (that one is provably not this
    operation's: :func:`gateway.operations.ownership.held_elsewhere`).

    Raises:
        NeedsReview: a suspect exists; a review item names it.
    """
    open_item = Review.get_or_none(
        Review.operation_key == row.operation_key, Review.status.in_(REVIEW_UNRESOLVED)
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
