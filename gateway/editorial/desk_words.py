"""The desk's words for what lies outside a draft's card: the accessible names of a review
item's and a refused operation's controls, and the banner after a decision on a review item.

A desk control is named by what the editor sees on it and then by the job and title it acts
on (``Same as #7 for job D-4 “Fish & Chips”``), never by a number the page does not show
(the review item's id). When one job has two items on the desk, each name adds what the card
shows that tells them apart (the operation key, or what the agent asks). Plain strings for
templates and flash messages; no Flask here.
"""

from __future__ import annotations

from collections import Counter

from gateway.core.states import CONFIRMED
from gateway.editorial import previews
from gateway.editorial import reviews
from gateway.editorial.review_board import as_read
from gateway.ledger.models import Operation

ASKS_CHARS = 80  # of what an agent asks, in a control's name (the card shows it whole)
AGENT_ANSWERS = {"approve": "Approved", "deny": "Denied", "dismiss": "Dismissed"}


def job_titles(tenant: str, job_ids: set[str]) -> dict[str, str]:
    """The title each job's workflow sent with its latest draft (the draft rows' intent
    ``sent.title``, as readers see it: :func:`gateway.editorial.review_board.as_read`):
    ``{job_id: title}``, without the jobs that sent none."""
    if not job_ids:
        return {}
    rows = (
        Operation.select(Operation.job_id, Operation.intent)
        .where(Operation.tenant == tenant, Operation.job_id << job_ids, Operation.action == "draft")
        .order_by(Operation.task_version, Operation.id)
    )
    titles = {}
    for row in rows:
        title = ((row.intent or {}).get("sent") or {}).get("title")
        if title:
            titles[row.job_id] = as_read(title)  # the latest version's wins
    return titles


def job_named(job_id: str, title: str | None, word: str = "job") -> str:
    """``job D-4 “Fish & Chips”``, or ``job D-4`` when no title is known (``word``:
    ``"Job"`` to begin a sentence)."""
    return f"{word} {job_id} “{title}”" if title else f"{word} {job_id}"


def name_items(tenant: str, items: list[dict]) -> list[dict]:
    """Give each open review item (:func:`gateway.editorial.review_board.open_items`) its
    ``about``: ``for job D-4 “title”`` (the intended title, else the job's), and, when another
    item on the desk would read the same, what its card shows that tells them apart (the
    operation key; for an agent's request what it asks, up to :data:`ASKS_CHARS`). Returns
    ``items``."""
    titles = job_titles(tenant, {item["job_id"] for item in items})
    for item in items:
        title = item.get("intended_title") or titles.get(item["job_id"])
        item["about"] = "for " + job_named(item["job_id"], title)
    _tell_apart(items, _told_apart)
    return items


def _told_apart(item: dict) -> str:
    agent = item.get("agent_request")
    if agent is None:
        return item["operation_key"]
    asks = agent["what"]
    return asks if len(asks) <= ASKS_CHARS else asks[: ASKS_CHARS - 1] + "…"


def name_failed(tenant: str, rows: list[dict]) -> list[dict]:
    """Give each refused operation (:func:`gateway.editorial.review_board.failed_operations`)
    its ``about``: ``the post of job D-5 “title”`` or ``the image 'hero' of job D-5 “title”``
    (the words its row's summary uses), and the operation key its row shows when another row
    would read the same. Returns ``rows``."""
    titles = job_titles(tenant, {row["job_id"] for row in rows})
    for row in rows:
        what = previews.what_of(row["action"], row.get("slot"))
        row["about"] = f"{what} of {job_named(row['job_id'], titles.get(row['job_id']))}"
    _tell_apart(rows, lambda row: row["operation_key"])
    return rows


def _tell_apart(views: list[dict], shown) -> None:
    """Add ``(shown(view))`` to each ``about`` that another view shares."""
    counts = Counter(view["about"] for view in views)
    for view in views:
        if counts[view["about"]] > 1:
            view["about"] += f" ({shown(view)})"


def item_subject(tenant: str, review_id: int) -> str:
    """``Job D-4 “title”``: the job a review item is about, with its title, for a banner.

    Raises:
        NotFound: no review ``review_id`` for ``tenant``.
    """
    review = reviews.get(tenant, review_id)
    title = _item_title(tenant, reviews.review_view(review))
    return job_named(review.job_id, title, "Job")


def _item_title(tenant: str, review: dict) -> str | None:
    row = Operation.get_or_none(Operation.operation_key == review["operation_key"])
    sent = ((row.intent or {}).get("sent") or {}) if row is not None else {}
    title = sent.get("title") or (review.get("detail") or {}).get("title")
    if title:
        return as_read(title)
    return job_titles(tenant, {review["job_id"]}).get(review["job_id"])


def decided(tenant: str, body: dict, replayed: bool) -> str:
    """The banner after a decision on a review item (``body``: the
    :class:`gateway.editorial.resolution.Resolution`'s), in the editor's words:
    ``Distinct: job D-4 “Fish & Chips” goes on — its draft is written when its workflow sends
    it again.`` / ``Same as #70: job D-4 “…” takes post #70 as its draft; no new post is
    written.`` / ``Approved: your answer to the agent of job D-4 “…” is sent.``"""
    review, row = body["review"], body.get("operation") or {}
    job = job_named(review["job_id"], _item_title(tenant, review))
    decision = review["decision"]
    if decision == reviews.SAME_AS:
        words = _same_as(job, review["post_id"], row)
    elif decision == "distinct":
        what = previews.what_of(row.get("action"), row.get("slot"))
        what = "its draft" if row.get("action") == "draft" else what
        words = f"Distinct: {job} goes on — {what} is written when its workflow sends it again"
    else:
        words = _agent_answer(job, decision, row)
    again = " (already decided so: nothing written)" if replayed else ""
    return f"{words}{again}."


def _same_as(job: str, post_id: int, row: dict) -> str:
    if row.get("action") == "draft":
        return (
            f"Same as #{post_id}: {job} takes post #{post_id} as its draft; no new post is written"
        )
    what = previews.what_of(row.get("action"), row.get("slot")).replace("the ", "its ", 1)
    return f"Same as #{post_id}: {job} takes #{post_id} as {what}; nothing new is written"


def _agent_answer(job: str, decision: str, row: dict) -> str:
    answered = AGENT_ANSWERS.get(decision, decision.capitalize())
    if not row:  # a dismissed reconnection: nothing to send
        return f"{answered}: the request of the agent of {job} is closed"
    if row.get("state") == CONFIRMED:
        return f"{answered}: your answer to the agent of {job} is sent"
    return f"{answered}: your answer to the agent of {job} is recorded; the gateway sends it"
