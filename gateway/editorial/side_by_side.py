"""A suspected duplicate side by side (issue 56, item 4): the draft the job meant to write (the
``sent`` part of its operation's stored intent) beside each post WordPress already holds that
may be it, read live (``context=edit``), with the text's differences marked.

* The texts are compared word by word with Python's :class:`difflib.SequenceMatcher` (the
  standard library's diff, ``autojunk`` off so common words are not dropped on long texts),
  on the words a reader sees: the HTML reduced to text by ``nh3`` (no tags kept) and its
  entities decoded. Each side is a list of ``{"text", "changed"}`` runs: on the draft's side
  ``changed`` marks words the post lacks, on the post's side words the draft lacks.
* Titles and excerpts are shown as readers see them
  (:func:`gateway.editorial.review_board.as_read`); images only when the job uploaded them
  (the page's ``img-src 'self'`` policy, :mod:`gateway.editorial.previews`).

Read-only: the decisions (Same as / Distinct) go through
:func:`gateway.editorial.resolution.resolve_review` as everywhere else. No Flask here.
"""

from __future__ import annotations

import difflib
import html

import nh3

from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.editorial import previews
from gateway.editorial import review_board
from gateway.editorial.review_board import ImageURL
from gateway.editorial.review_board import as_read
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.operations import verification
from gateway.operations.target import target_for
from gateway.wordpress.errors import WordPressError

COMPARED_KINDS = ("suspected_duplicate", "multiple_objects")


def words_of(content: str | None) -> list[str]:
    """The words a reader sees in ``content`` (HTML): tags dropped, entities decoded."""
    text = nh3.clean(content or "", tags=set())
    return html.unescape(text).split()


def marked(draft: list[str], post: list[str]) -> tuple[list[dict], list[dict], float]:
    """``(draft_runs, post_runs, ratio)``: each side as runs ``{"text", "changed"}``, and how
    alike the two are (:meth:`difflib.SequenceMatcher.ratio`, 0.0-1.0)."""
    matcher = difflib.SequenceMatcher(None, draft, post, autojunk=False)
    left, right = [], []
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        changed = op != "equal"
        if a2 > a1:
            left.append({"text": " ".join(draft[a1:a2]), "changed": changed})
        if b2 > b1:
            right.append({"text": " ".join(post[b1:b2]), "changed": changed})
    return left, right, round(matcher.ratio(), 3)


def _item(tenant: str, review_id: int) -> dict:
    for item in review_board.open_items(tenant):
        if item["review_id"] == review_id:
            return item
    raise exc.NotFound(f"no open review {review_id}")


def _draft_side(row: Operation | None, media: dict, image: ImageURL, job_id: str) -> dict:
    intent = (row.intent or {}) if row is not None else {}
    sent = intent.get("sent") or {}
    featured = (intent.get("expected") or {}).get("featured_media")
    return {
        "title": as_read(sent.get("title")),
        "excerpt": as_read(sent.get("excerpt")),
        "featured_url": image(job_id, featured) if featured in media else None,
        "featured_media": featured,
        "content": sent.get("content"),
    }


def _post_side(target, candidate: dict, media: dict, image: ImageURL) -> dict:
    side = {**candidate, "excerpt": None, "featured_url": None, "content": None, "error": None}
    if candidate.get("type", "post") != "post":
        return {**side, "error": f"a {candidate['type']}: only posts are read back"}
    try:
        post = target.client.get_post(candidate["id"])
    except WordPressError as error:
        return {**side, "error": f"cannot read the post back: {error.message}"}
    snap = verification.snapshot(post)
    featured = snap["featured_media"]
    return {
        **side,
        "title": as_read(snap["title"]),
        "excerpt": as_read(snap["excerpt"]),
        "status": snap["status"],
        "date_gmt": post.get("date_gmt"),
        "modified_gmt": post.get("modified_gmt"),
        "link": post.get("link") or candidate.get("link"),
        "featured_media": featured,
        "featured_url": image(target.job.job_id, featured) if featured in media else None,
        "content": snap["content"],
    }


def compare(config: Config, tenant: str, review_id: int, image: ImageURL) -> dict:
    """The open review item ``review_id`` of ``tenant`` with ``draft`` (title, excerpt,
    featured image, content runs) and ``posts`` (per candidate: title, excerpt, featured
    image, dates, status, links, content runs, ``ratio``; ``error`` when WordPress could not
    be read). One WordPress read per candidate post.

    Raises:
        NotFound: no open review item ``review_id`` of ``tenant``, or not one about posts.
    """
    item = _item(tenant, review_id)
    if item["kind"] not in COMPARED_KINDS or not item["candidates"]:
        raise exc.NotFound(f"review {review_id} names no posts to compare")
    job = Job.get(Job.tenant == tenant, Job.job_id == item["job_id"])
    row = Operation.get_or_none(Operation.operation_key == item["operation_key"])
    media = previews.job_media(tenant, job.job_id)
    draft = _draft_side(row, media, image, job.job_id)
    target = target_for(config, job)
    posts = [_post_side(target, c, media, image) for c in item["candidates"]]
    for post in posts:
        left, right, ratio = marked(words_of(draft["content"]), words_of(post["content"]))
        post.update(draft_runs=left, runs=right, ratio=ratio)
    return {"item": item, "draft": draft, "posts": posts}
