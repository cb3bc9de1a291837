"""What an editor sees of a draft before approving it: the content as a reader would see it
(sanitized), the job's own images as thumbnails served through the gateway, times to the
minute with their zone, and ledger problems in words.

* Content is sanitized with ``nh3`` (Python binding of the Rust ``ammonia`` crate, an
  allow-list HTML sanitizer; ``bleach`` is deprecated in its favour): no script, style,
  event handler, frame or form survives, and links get ``rel="noopener noreferrer"``.
* Images: an ``<img>`` is kept only when its ``src`` is the ``source_url`` of an attachment
  this job uploaded (a CONFIRMED ``media`` row of the job's ledger); its ``src`` is rewritten
  to the gateway's thumbnail route, so the review page's ``img-src 'self'`` policy holds and
  the browser never talks to WordPress. Any other image is replaced by a note.
* :func:`job_image` fetches such an attachment's image from WordPress with the site's
  credentials, for the job's tenant only, and never for an id the job's ledger does not hold:
  the route is not an open proxy.

No Flask here: the review page's blueprint turns these into responses.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from collections.abc import Iterator
from urllib.parse import urlsplit
from urllib.parse import urlunsplit

import nh3

from gateway.core.config import Config
from gateway.core.exceptions import NotFound
from gateway.core.exceptions import WordPressUnavailable
from gateway.core.states import NEVER_SENT
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import FAILED
from gateway.ledger.models import SENT
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.operations.target import target_for
from gateway.wordpress.errors import WordPressError

THUMBNAIL_SIZES = ("medium", "thumbnail")  # WordPress's generated sizes, largest first
IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/avif")
MAX_IMAGE_BYTES = 8 * 1024 * 1024
TAGS = {
    "p", "br", "hr", "h2", "h3", "h4", "h5", "h6", "strong", "b", "em", "i", "u", "s",
    "sub", "sup", "small", "mark", "blockquote", "q", "cite", "code", "pre", "kbd",
    "ul", "ol", "li", "dl", "dt", "dd", "a", "img", "figure", "figcaption",
    "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "span", "div",
}  # fmt: skip
ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title", "width", "height"},
    "th": {"colspan", "rowspan"},
    "td": {"colspan", "rowspan"},
}
_SRCLESS_IMG = re.compile(r"<img(?![^>]*\ssrc=)[^>]*>")
FOREIGN_IMAGE_NOTE = (
    '<span class="foreign-image">[an image that is not one of this job\'s uploads]</span>'
)


def minute(value: dt.datetime | str | None) -> str:
    """A time for people: ``30 Nov 2026, 08:56 UTC`` (to the minute, with its zone).

    ``value`` is a datetime or an ISO 8601 / RFC 3339 string; a value without an offset is
    UTC (the ledger's naive UTC, WordPress's ``date_gmt``). None or "" gives "—".
    """
    if value in (None, ""):
        return "—"
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    value = value.astimezone(dt.UTC)
    return f"{value.day} {value:%b %Y, %H:%M} UTC"


def job_media(tenant: str, job_id: str) -> dict[int, str]:
    """The attachments the job uploaded: ``{attachment id: source_url}`` from its CONFIRMED
    ``media`` rows (every task version)."""
    rows = Operation.select(Operation.remote_id, Operation.receipt).where(
        Operation.tenant == tenant,
        Operation.job_id == job_id,
        Operation.action == "media",
        Operation.state == CONFIRMED,
    )
    return {r.remote_id: (r.receipt or {}).get("source_url") or "" for r in rows if r.remote_id}


def render_content(content: str, media: dict[int, str], image_url: Callable[[int], str]) -> dict:
    """``content`` (raw post HTML) sanitized for the review page.

    Args:
        media: the job's attachments, from :func:`job_media`.
        image_url: the gateway's URL for an attachment id (the thumbnail route).

    Returns ``{"html": str, "images": [attachment ids shown, in order]}``.
    """
    by_url = {url: media_id for media_id, url in media.items() if url}
    shown: list[int] = []

    def keep(tag: str, attribute: str, value: str) -> str | None:
        if tag == "img" and attribute == "src":
            media_id = by_url.get(value)
            if media_id is None:
                return None
            shown.append(media_id)
            return image_url(media_id)
        return value

    cleaned = nh3.clean(
        content or "",
        tags=TAGS,
        clean_content_tags={"script", "style", "template", "noscript", "textarea", "title"},
        attributes=ATTRIBUTES,
        attribute_filter=keep,
        url_schemes={"http", "https", "mailto"},
    )
    return {"html": _SRCLESS_IMG.sub(FOREIGN_IMAGE_NOTE, cleaned), "images": shown}


def job_image(config: Config, job: Job, media_id: int) -> tuple[str, Iterator]:
    """The image of attachment ``media_id`` of ``job`` (the caller's tenant's), fetched from
    WordPress with the site's credentials: a generated size (medium, else thumbnail) when
    WordPress made one, else the original. WordPress REST API ``GET /wp/v2/media/{id}``, then
    the file at the path of the ``source_url`` it names, on the site's own origin
    (:func:`on_site`).

    Returns ``(content type, iterator of byte chunks)``.

    Raises:
        NotFound: the job's ledger holds no CONFIRMED upload ``media_id``, or WordPress has no
            such image (any more).
        WordPressUnavailable: WordPress could not be asked.
    """
    if media_id not in job_media(job.tenant, job.job_id):
        raise NotFound(f"job {job.job_id!r} uploaded no attachment {media_id}")
    client = target_for(config, job).client
    try:
        url = on_site(client.base_url, _image_source(client.get_media(media_id)))
        content_type, chunks = client.fetch_file(
            url, IMAGE_TYPES, MAX_IMAGE_BYTES, config.preview_timeout
        )
    except WordPressError as error:
        if error.status == 404:
            raise NotFound(f"WordPress has no attachment {media_id} any more") from None
        raise WordPressUnavailable(f"cannot fetch attachment {media_id}: {error.message}") from None
    return content_type, chunks


def on_site(site_url: str, source_url: str) -> str:
    """``source_url``'s path and query on the registered site's own scheme and host: the
    site's credentials never travel to another host (a CDN, or a URL an attachment was made
    to carry), and a site reached through a proxy or another host name still works."""
    site, source = urlsplit(site_url), urlsplit(source_url)
    if not source.path.startswith("/"):
        raise NotFound("the attachment has no file URL")
    return urlunsplit((site.scheme, site.netloc, source.path, source.query, ""))


def _image_source(attachment: dict) -> str:
    sizes = (attachment.get("media_details") or {}).get("sizes") or {}
    for name in THUMBNAIL_SIZES:
        url = (sizes.get(name) or {}).get("source_url")
        if url:
            return url
    return attachment.get("source_url") or ""


WHAT = {"draft": "the post", "media": "the image", "publish": "publishing the post"}
LOOKUP_FIRST = (
    "The gateway looks it up in WordPress before anything is sent again (on the next call, on "
    "recover, or in its background sweep), so nothing is written twice."
)


def what_of(action: str | None, slot: str | None = None) -> str:
    """What a ledger row writes, in an editor's words: ``the post``, ``the image 'hero'``,
    ``publishing the post``, or ``the {action} operation`` for the rest."""
    if action == "media" and slot:
        return f"the image '{slot}'"
    return WHAT.get(action or "", f"the {action} operation")


def problem_in_words(row: dict) -> dict:
    """What a SENT, UNKNOWN or FAILED ledger row
    (:meth:`gateway.ledger.models.Operation.as_dict`) means for an editor.

    Returns ``{"summary": str, "next": str, "technical": str | None}``: what happened, what
    happens next, and the recorded problem as it was (for the folded-away detail).
    """
    what = what_of(row["action"], row.get("slot"))
    problem = row.get("problem") or {}
    summary, next_step = _what_happened(row, problem, what), LOOKUP_FIRST
    if row["state"] == FAILED:
        next_step = (
            "Nothing is sent again by itself: fix the cause, then allow a retry (or renew the "
            "site's application password after a 401 or 403)."
        )
    if problem.get("reason") == NEVER_SENT:
        next_step = "The same request sends it once; nobody needs to decide anything."
    upstream = problem.get("upstream") or {}
    status = problem.get("wordpress_status") or upstream.get("status")
    technical = "; ".join(
        str(part)
        for part in (
            problem.get("detail"),
            f"HTTP {status}" if status else "",
            f"WordPress code {problem['wordpress_code']}" if problem.get("wordpress_code") else "",
            f"{upstream.get('method')} {upstream.get('url')}" if upstream.get("url") else "",
        )
        if part
    )
    return {"summary": summary, "next": next_step, "technical": technical or None}


def _what_happened(row: dict, problem: dict, what: str) -> str:
    status, detail = problem.get("wordpress_status"), str(problem.get("detail") or "")
    upstream = problem.get("upstream") or {}
    if problem.get("reason") == NEVER_SENT:
        return f"The request for {what} ended before it was sent: nothing reached WordPress."
    if row["state"] == FAILED:
        message = detail.removeprefix("WordPress refused: ")
        code = f" (HTTP {status})" if status else ""
        return f"WordPress refused {what}{code}: {message}"
    if row["state"] == SENT:
        return (
            f"The request for {what} was sent to WordPress at {minute(row.get('sent_at'))}; "
            "its answer has not been recorded yet."
        )
    if problem.get("reason") == "retry-authorized":
        return f"WordPress had refused {what}; {detail}."
    if problem.get("reason") == "upstream-refused":
        title = f" (“{upstream['title']}”)" if upstream.get("title") else ""
        return (
            f"A page from in front of WordPress — a firewall, proxy or the web server — "
            f"answered the request for {what} with HTTP {upstream.get('status')}{title}, so it "
            "is not known whether WordPress saved it. Someone may have to let the gateway "
            "through."
        )
    if status:
        return (
            f"WordPress answered the request for {what} with an error (HTTP {status}) after "
            "receiving it, so it may or may not have saved it."
        )
    if "timeout" in detail:
        return (
            f"WordPress did not answer the request for {what} in time, so it may or may not "
            "have saved it."
        )
    return (
        f"The connection to WordPress was lost while it handled the request for {what}, so "
        "it may or may not have saved it."
    )
