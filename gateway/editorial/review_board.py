"""What the editors' review page (``GET /review``) shows: open review items, operations whose
outcome is not provable yet, and drafts awaiting approval with a summary of exactly what would
be published. Read-only: every decision goes through the domain functions the JSON API uses
(:func:`gateway.editorial.resolution.resolve_review`, :mod:`gateway.editorial.approvals`).

Shapes are plain dicts for templates; no Flask here.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable

from peewee import fn

from gateway.actions import drafts
from gateway.actions import publishing
from gateway.core import plain_text
from gateway.core import states
from gateway.core.config import Config
from gateway.core.digests import sha256_hex
from gateway.core.exceptions import GatewayError
from gateway.editorial import approvals
from gateway.editorial import decisions
from gateway.editorial import previews
from gateway.editorial import reviews
from gateway.editorial.desk_filter import DeskFilter
from gateway.editorial.desk_filter import sent_back
from gateway.jobs import timeline
from gateway.ledger import db
from gateway.ledger.models import SENT
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Approval
from gateway.ledger.models import ApprovalRequest
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.ledger.models import Site
from gateway.operations import ownership
from gateway.operations import verification
from gateway.operations.target import target_for
from gateway.recovery import retries
from gateway.wordpress.errors import WordPressError

log = logging.getLogger(__name__)
APPROVAL_HOURS = 24
ImageURL = Callable[[str, int], str]  # (job_id, attachment id) -> the page's thumbnail URL
CARDS_PER_PAGE = 10  # drafts awaiting approval per page: one WordPress read each


def edit_link(site_url: str | None, post_id: int) -> str | None:
    """The wp-admin edit screen of ``post_id`` (None when the site is unknown)."""
    if not site_url:
        return None
    return f"{site_url.rstrip('/')}/wp-admin/post.php?post={int(post_id)}&action=edit"


def as_read(text: str | None) -> str | None:
    """A title or excerpt as readers see it, as plain text: WordPress stores ``&amp;``,
    ``&#8217;``... (``wp_filter_kses``) and may keep tags (``<b>bold</b>``), which a theme
    renders; the tags are stripped to their text (a script's or style's content goes too),
    the entities decoded (:func:`gateway.core.plain_text.plain`); the template escapes it
    again."""
    return plain_text.plain(text) if text else text


def site_names(tenant: str) -> list[str]:
    """The names of ``tenant``'s sites, sorted (the desk's site filter)."""
    return sorted(_site_urls(tenant))


def _site_urls(tenant: str) -> dict[str, str]:
    return {s.name: s.url for s in Site.select().where(Site.tenant == tenant)}


def _job_sites(tenant: str, job_ids: set[str]) -> dict[str, str]:
    if not job_ids:
        return {}
    query = Job.select(Job.job_id, Job.site).where(Job.tenant == tenant, Job.job_id << job_ids)
    return {j.job_id: j.site for j in query}


def _candidates(detail: dict) -> list[dict]:
    """The posts a review item is about: ``suspects`` (suspected duplicate) or ``objects``
    (one key on several objects), as ``{"id", "title", "date_gmt", "status", "link"}``."""
    found = detail.get("suspects") or detail.get("objects") or []
    return [
        {
            "id": item.get("id"),
            "title": as_read(item.get("title")),
            "date_gmt": item.get("date_gmt"),
            "status": item.get("status"),
            "link": item.get("link"),
            "type": item.get("type", "post"),
        }
        for item in found
        if isinstance(item, dict) and item.get("id")
    ]


def agent_request(detail: dict) -> dict:
    """What an agent asks a person for (an ``agent_action`` item), or what the gateway could
    not prove of its work (an ``artifact_mismatch`` item), in one line per field:
    ``{"type", "what", "decisions"}``."""
    action = detail.get("action") or {}
    request = action.get("request") or {}
    kind = action.get("type", "?")
    if kind == "function_call":
        what = f"call of unknown tool {action.get('name')!r} with {action.get('arguments')!r}"
    elif kind == "mcp_approval_request":
        what = (
            f"MCP {request.get('server_label')}: {request.get('name')} - {request.get('message')}"
        )
    elif kind == "computer_use_approval_request":
        what = f"computer use: {request.get('type')} {request.get('origin') or ''}".strip()
        what += f" ({request.get('reason')})" if request.get("reason") else ""
    elif kind == "environment_connection":
        what = f"reconnect environment {action.get('environment_id')}"
        what += f" ({detail['refused']})" if detail.get("refused") else " (its owner's work)"
    else:  # an artifact_mismatch item: the gateway's finding, not the agent's request
        kind = "artifact_mismatch"
        found = [
            f"{m.get('role') or m.get('phase') or m.get('uri')}: expected "
            f"{m.get('expected_sha256') or m.get('recorded')}, found "
            f"{m.get('actual_sha256') or m.get('claimed')}"
            for m in detail.get("mismatches") or []
        ]
        what = f"not proven ({detail.get('check')}): " + "; ".join(found)
    return {"type": kind, "what": what, "decisions": detail.get("decisions") or []}


def decision_label(decision: str | None, post_id: int | None = None) -> str:
    """A decision as the page's buttons name it: ``Same as post #1109``, ``Distinct``,
    ``Approve``..."""
    if decision == reviews.SAME_AS:
        return f"Same as post #{post_id}"
    return (decision or "?").replace("_", " ").capitalize()


def standing_words(
    decision: str | None,
    post_id: int | None,
    resolved_by: str | None,
    review_status: str | None,
    resolved_at: dt.datetime | str | None,
) -> str:
    """The decision that stands on a review item, for editors (the members of a 409
    ``review-decided``, or of the item): ``"Same as post #1109", being decided by ed1 since
    6 Dec 2026, 03:58 UTC`` while it is applied, ``... decided by ed2 on ...`` once done."""
    label = decision_label(decision, post_id)
    if review_status == states.REVIEW_DECIDING:
        return f"“{label}”, being decided by {resolved_by} since {previews.minute(resolved_at)}"
    return f"“{label}”, decided by {resolved_by} on {previews.minute(resolved_at)}"


def open_items(tenant: str, window: float | None = None) -> list[dict]:
    """Open review items of ``tenant`` with the operation's intended title and the
    candidate posts (title, date, status, public link and wp-admin edit link). An item whose
    decision is being applied (``deciding``) carries ``claim``: :func:`standing_words`, while
    its claim is younger than ``window`` seconds by the database's clock (the in-flight
    window; an older claim may be taken over, so the item is decided as an open one)."""
    items = reviews.list_open(tenant)
    since = db.db_now() - dt.timedelta(seconds=window) if window is not None else None
    keys = [item["operation_key"] for item in items]
    rows = {r.operation_key: r for r in Operation.select().where(Operation.operation_key << keys)}
    sites = _site_urls(tenant)
    job_sites = _job_sites(tenant, {item["job_id"] for item in items})
    for item in items:
        row = rows.get(item["operation_key"])
        intent = (row.intent or {}) if row is not None else {}
        site_url = sites.get(job_sites.get(item["job_id"], ""))
        item["intended_title"] = (intent.get("sent") or {}).get("title") or item["detail"].get(
            "title"
        )
        item["ledger_state"] = row.state if row is not None else None
        item["sent_at"] = db.rfc3339(row.sent_at) if row is not None else None
        item["action"] = row.action if row is not None else None
        item["candidates"] = _candidates(item["detail"])
        if item["kind"] in ("agent_action", "artifact_mismatch"):
            item["agent_request"] = agent_request(item["detail"])
        for candidate in item["candidates"]:
            candidate["edit_link"] = edit_link(site_url, candidate["id"])
        item["claim"] = _fresh_claim(item, since)
    return items


def _fresh_claim(item: dict, since: dt.datetime | None) -> str | None:
    if item["status"] != states.REVIEW_DECIDING:
        return None
    claimed = dt.datetime.fromisoformat(item["resolved_at"]).replace(tzinfo=None)
    if since is not None and claimed <= since:
        return None  # left by a process that died: the next decider takes it over
    return standing_words(
        item["decision"], item["post_id"], item["resolved_by"], item["status"], claimed
    )


def pending_operations(tenant: str) -> list[dict]:
    """``UNKNOWN`` and ``SENT`` ledger rows of ``tenant``, oldest first, each with
    ``words``: its problem for an editor (:func:`gateway.editorial.previews.problem_in_words`)."""
    query = (
        Operation.select()
        .where(Operation.tenant == tenant, Operation.state << (UNKNOWN, SENT))
        .order_by(Operation.id)
    )
    views = [row.as_dict() for row in query]
    return [{**view, "words": previews.problem_in_words(view)} for view in views]


def failed_operations(tenant: str) -> list[dict]:
    """FAILED ledger rows of ``tenant`` (:func:`gateway.recovery.retries.failed_operations`) with
    their ``job_id`` and ``words`` (:func:`gateway.editorial.previews.problem_in_words`)."""
    views = [{**row.as_dict(), "job_id": row.job_id} for row in retries.failed_operations(tenant)]
    return [{**view, "words": previews.problem_in_words(view)} for view in views]


def _approval_state(approval, job: Job, post_id: int | None, digest: str | None, now) -> str:
    """``valid`` or the problem slug that would refuse a publish under ``approval`` now."""
    if post_id is None or digest is None:
        return "unverified"
    refusal = publishing.refusal_for(approval, job, post_id, digest, now)
    return "valid" if refusal is None else refusal.slug


def _live_summary(target, image_url: ImageURL) -> dict:
    """The live post of the job's latest draft, summarised (``context=edit`` read-back): its
    fields, the content rendered for reading (sanitized, the job's images as thumbnails
    through ``image_url``) and the featured image."""
    row = drafts.latest_draft(target.job)
    if row is None:
        return {"error": "the job has no confirmed draft"}
    ownership.check_job_post(target, row.remote_id)
    try:
        post = target.client.get_post(row.remote_id)
    except WordPressError as error:
        return {"post_id": row.remote_id, "error": f"cannot read the post back: {error.message}"}
    snap = verification.snapshot(post)
    sent = (row.receipt or {}).get("sent") or {}
    job = target.job
    media = previews.job_media(job.tenant, job.job_id)
    rendered = previews.render_content(
        snap["content"], media, lambda media_id: image_url(job.job_id, media_id)
    )
    featured = snap["featured_media"]
    return {
        "post_id": row.remote_id,
        "status": snap["status"],
        "link": post.get("link"),
        "title": as_read(snap["title"]),
        "excerpt": as_read(snap["excerpt"]),
        "seo": snap["seo"],
        "featured_media": featured,
        "featured_url": image_url(job.job_id, featured) if featured in media else None,
        "content_html": rendered["html"],
        "body_images": [
            {"id": media_id, "url": image_url(job.job_id, media_id)}
            for media_id in dict.fromkeys(rendered["images"])
        ],
        "content_sha256": sha256_hex(snap["content"]),
        "content_chars": len(snap["content"]),
        "digest": publishing.live_digest(post),
        "sent_title": as_read(sent.get("title")),
        "sent_excerpt": sent.get("excerpt"),
        "sent_seo": sent.get("seo") or {},
        "error": None,
    }


def _request_of(job: Job) -> ApprovalRequest | None:
    return ApprovalRequest.get_or_none(
        ApprovalRequest.tenant == job.tenant,
        ApprovalRequest.job_id == job.job_id,
        ApprovalRequest.task_version == job.task_version,
    )


def _awaiting(tenant: str, desk: DeskFilter | None = None):
    query = Job.select().where(
        Job.tenant == tenant,
        Job.phase << states.AWAITING_APPROVAL_PHASES,
        Job.cancelled == False,  # noqa: E712 (peewee expression)
    )
    return desk.apply(query) if desk is not None else query


def count_awaiting(tenant: str, desk: DeskFilter | None = None) -> int:
    """How many drafts of ``tenant`` the page lists (verified or approval pending, not
    cancelled, narrowed by ``desk``; a ledger count, no WordPress read)."""
    return _awaiting(tenant, desk).count()


def count_approved(tenant: str, desk: DeskFilter | None = None) -> int:
    """How many of those drafts hold an approval of their current task version that is
    neither revoked nor expired (a ledger count; whether the post still matches the approved
    digest is each card's read-back, ``approved``)."""
    approved = Approval.select(Approval.id).where(
        Approval.tenant == Job.tenant,
        Approval.job_id == Job.job_id,
        Approval.task_version == Job.task_version,
        Approval.revoked_at.is_null(),
        Approval.expires_at > db.db_now(),
    )
    return _awaiting(tenant, desk).where(fn.EXISTS(approved)).count()


def count_sent_back(tenant: str, desk: DeskFilter | None = None) -> int:
    """How many of those drafts were sent back with a note (changes requested on their
    current task version: they wait for the workflow, not for an approval; a ledger count)."""
    return _awaiting(tenant, desk).where(sent_back(True)).count()


def awaiting_approval(
    config: Config,
    tenant: str,
    image_url: ImageURL,
    page: int = 1,
    per_page: int = CARDS_PER_PAGE,
    desk: DeskFilter | None = None,
) -> list[dict]:
    """Page ``page`` (from 1, ``per_page`` jobs, most recently updated first) of the jobs of
    ``tenant`` in phase ``verified`` or ``approval_pending`` (not cancelled), each with a
    fresh read-back summary of what publishing would make public, the approval request and
    the job's approvals with their state now. WordPress is read once per job shown, never
    for the other pages. A WordPress failure is shown per job. ``desk`` narrows the jobs
    (:mod:`gateway.editorial.desk_filter`).
    ``image_url(job_id, attachment_id)`` is the review page's thumbnail route."""
    query = (
        _awaiting(tenant, desk)
        .order_by(Job.updated_at.desc(), Job.id.desc())
        .paginate(page, per_page)
    )
    cards, now, sites = [], db.db_now(), _site_urls(tenant)
    for job in query:
        try:
            live = _live_summary(target_for(config, job), image_url)
        except GatewayError as error:
            live = {"error": f"{error.title}: {error.detail}"}
        request = _request_of(job)
        post_id, digest = live.get("post_id"), live.get("digest")
        cards.append(
            {
                "job_id": job.job_id,
                "site": job.site,
                "task_version": job.task_version,
                "phase": job.phase,
                "updated_at": db.rfc3339(job.updated_at),
                "live": live,
                "edit_link": edit_link(sites.get(job.site), post_id) if post_id else None,
                "request": None
                if request is None
                else {
                    "requested_by": request.requested_by,
                    "requested_at": db.rfc3339(request.updated_at),
                    "content_sha256": request.content_sha256,
                    "changed_since": digest is not None and digest != request.content_sha256,
                },
                "decision": decisions.decision_view(job),  # issue 56
                "notes": timeline.notes(job),
                "approvals": [
                    {
                        **approvals.approval_view(a),
                        "state": _approval_state(a, job, post_id, digest, now),
                    }
                    for a in publishing.approvals_of(job)
                ],
            }
        )
        valid = [a for a in cards[-1]["approvals"] if a["state"] == "valid"]
        cards[-1]["approved"] = valid[0] if valid else None  # Publish is offered only then
    return cards


def approval_body(
    task_version: int, content_sha256: str, post_id: int, max_days: float = 7.0
) -> dict:
    """The body of an approval given from the page: what the editor saw (version, digest and
    post of the page's read-back, checked again against the live post by
    :func:`approvals.approve`) and an expiry :data:`APPROVAL_HOURS` hours from now on the
    database clock, or sooner when the configured cap (``max_days``) is shorter."""
    hours = min(APPROVAL_HOURS, max_days * 24 * 0.99)  # stay inside the cap
    expires = db.db_now() + dt.timedelta(hours=hours)
    return {
        "task_version": task_version,
        "content_sha256": content_sha256,
        "post_id": post_id,
        "expires_at": db.rfc3339(expires),
    }
