"""The resend rule's duplicate search: before a create that carries no identifier WordPress
can look up (no companion plugin) is sent again, a post with the same title is looked for. A
title match is only a *suspected duplicate*: an editor decides (review kind
``suspected_duplicate``), and no further automatic write happens for that operation until then.

**Titles as readers see them.** WordPress does not store every title as sent: for a user
without ``unfiltered_html`` (an author) ``title_save_pre`` runs ``wp_filter_kses``, so
``Tom & Jerry`` is stored (and ``title.raw`` under ``context=edit`` reads) ``Tom &amp; Jerry``,
``A < B`` ``A &lt; B``, ``A > B`` ``A &gt; B``, tags it does not allow are dropped (their text
kept), and ``trim`` removes surrounding spaces; a column that cannot hold an emoji stores
``&#x1f389;`` (``wp_encode_emoji``). So titles are compared as readers see them
(:func:`as_read`), never byte for byte, and searched for both as sent and as stored
(:func:`search_texts`): WordPress's search compares stored text (``LIKE``), and a title of more
than nine words is searched as one phrase (``WP_Query::parse_search``), which ``&`` never
matches in ``&amp;``.
"""

from __future__ import annotations

import html

from gateway.core import exceptions as exc
from gateway.core import plain_text
from gateway.core.states import REVIEW_UNRESOLVED
from gateway.ledger import db
from gateway.ledger.models import Operation
from gateway.ledger.models import Review
from gateway.operations import ownership
from gateway.operations.review_items import decided_distinct
from gateway.operations.review_items import open_review


def as_read(title: str) -> str:
    """``title`` as a reader sees it, the form two titles are compared in: tags removed with
    their text kept, as ``wp_kses`` does to a tag it does not allow, HTML entities decoded
    (:func:`gateway.core.plain_text.plain`), whitespace runs made one space and trimmed.
    ``Tom &amp; Jerry`` and ``Tom & Jerry `` read alike; ``Tom and Jerry`` does not."""
    return " ".join(plain_text.plain(title, keep_script_text=True).split())


def search_texts(title: str) -> list[str]:
    """What to search WordPress for to find a post titled ``title``: the title as sent and as
    WordPress stores it for an author (:func:`as_read`, then ``&``, ``<``, ``>`` escaped as
    ``wp_kses`` escapes them); one string when both are the same, never empty for a title
    that is not blank."""
    stored = html.escape(as_read(title), quote=False)
    return [text for text in dict.fromkeys((title.strip(), stored)) if text]


def _posts_titled(target, title: str) -> list[dict]:
    """Posts found by each of :func:`search_texts`, once each, in the order found."""
    found: dict[int, dict] = {}
    for text in search_texts(title):
        for post in target.client.find_posts_by_title(text):
            found.setdefault(int(post["id"]), post)
    return list(found.values())


def check_suspected_duplicates(target, row: Operation, effect) -> None:
    """Before resending a create without an identifier to look up, search for a post with
    the same title (as readers see it: :func:`as_read`) by the gateway's user created after
    the operation was first sent, and not held by another job or tenant in the ledger (that
    one is provably not this operation's: :func:`gateway.operations.ownership.held_elsewhere`).

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
    wanted = as_read(effect.title)
    suspects = [
        {
            "id": post["id"],
            "title": post["title"]["raw"],
            "date_gmt": post["date_gmt"],
            "status": post["status"],
            "link": post.get("link"),
        }
        for post in _posts_titled(target, effect.title)
        if as_read(post["title"]["raw"]) == wanted
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
