"""Checking a whole article before anything is written (``POST /v1/articles/validate``).

A pipeline uploads images first and writes the draft last, so a draft refused for its text
leaves attachments nobody uses, and a corrupt image is found only after the others were
uploaded. :func:`check_article` runs, on the whole article at once, every check of the media
and draft routes that does not depend on WordPress or on the ledger:

* the draft body as ``PUT /v1/jobs/{job_id}/draft`` validates it (``schemas/draft.json``,
  then template leftovers, :func:`gateway.core.validation.check_template_leftovers`);
* media references: every slot the draft names (``featured_media``, ``body_media``,
  ``{{media:SLOT}}`` placeholders) is one of the article's images, and every placeholder is
  in ``body_media`` (:func:`gateway.actions.drafts.resolve_media`'s rule); each slot once;
* each image sent as base64 decodes as base64 and as an image WordPress takes
  (:func:`gateway.actions.media.sniff`: PNG, JPEG, GIF or WebP, decoded whole); an image
  given by ``url`` is checked for its form only (an ``http(s)`` URL with a host), not fetched;
* what needs another server, read-only (:mod:`gateway.actions.article_lookups`): category and
  tag names looked up in the job's site (``site``, or the tenant's only one), and each image
  given by ``source_url`` probed as the media route downloads it (first bytes only).

It writes nothing (no job, no ledger row of a job, nothing in WordPress, no upload); of the
ledger it reads only the tenant's site rows. Source: docs/api.md, ``POST /v1/articles/validate``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from urllib.parse import urlsplit

from gateway.actions import article_lookups
from gateway.actions import drafts
from gateway.actions import media
from gateway.core import exceptions as exc
from gateway.core import validation
from gateway.core.config import Config

SOURCES = frozenset(("content_base64", "source_url", "url"))  # an image's sources, one at most


def check_article(config: Config, tenant: str, body: dict) -> dict:
    """Check an article of ``tenant`` (validated ``schemas/article_validation.json``:
    ``{"site"?, "draft", "media"}``) as the draft and media routes would, all at once.

    Returns ``{"ok": true, "site": name | None, "draft": {"featured_slot", "body_media",
    "placeholders"}, "media": [{"slot", "source", "mime_type"?, "bytes"?, "sha256"?,
    "downloaded_from"?}]}`` (``site``: where names were looked up, None when none were;
    ``source``: ``content_base64``, ``source_url``, ``url`` or ``none``: only referenced,
    e.g. uploaded before).

    Raises:
        ValidationFailed (422): every problem found, each ``{"pointer", "message",
            "problem"}`` with its pointer in this body (``/draft/content``,
            ``/draft/categories/0``, ``/media/1/source_url``, ``/site``) and the problem type
            the write route would answer (``validation-failed``, ``template-leftover``,
            ``unsupported-media-type``, ``image-unreadable``, ``transport-limit``,
            ``media-url-refused``, ``media-download-failed``, ``media-source-unavailable``,
            ``site-not-found``). Nothing was written anywhere.
        WordPressUnavailable (503), UpstreamRefused (502), WordPressRefused (502), SiteBusy
            (429), TenantBusy (429): the site or an image server could not be asked now
            (:mod:`gateway.actions.article_lookups`).
    """
    errors: list[dict] = []
    draft, draft_ok = _check_draft(body["draft"], errors)
    images = body.get("media") or []
    checked = [_check_image(i, image, errors) for i, image in enumerate(images)]
    references = _check_references(draft, images, errors)
    needed = draft_ok and article_lookups.names_terms(draft)
    site, site_errors = article_lookups.choose_site(tenant, body.get("site"), needed)
    errors += site_errors
    if needed and site is not None:
        try:
            article_lookups.check_terms(config, site, draft)
        except (exc.ValidationFailed, exc.TransportLimit) as refused:
            errors.extend(_under("/draft", refused))
    urls = {i: image["source_url"] for i, image in enumerate(images) if _probed(image)}
    for index, found in article_lookups.probe_images(config, tenant, urls).items():
        if "error" in found:
            errors.append(found["error"])
        else:
            checked[index].update(found)
    if errors:
        errors.sort(key=_order)
        raise exc.ValidationFailed(
            f"{len(errors)} problem(s) in the article; nothing was written (no ledger row, "
            "no WordPress request): correct them before uploading anything",
            errors=errors,
        )
    return {
        "ok": True,
        "site": site.name if site is not None and needed else None,
        "draft": references,
        "media": checked,
    }


def _probed(image: dict) -> bool:
    """An image given by ``source_url`` alone (two sources are refused without asking)."""
    return "source_url" in image and len(SOURCES & image.keys()) == 1


def _order(error: dict) -> list:
    """Errors in the order of the body: by pointer, array indices as numbers (ASCII digits
    only: a member named ``²`` is a name)."""
    parts = error["pointer"].split("/")
    return [(0, int(p), "") if p.isascii() and p.isdigit() else (1, 0, p) for p in parts]


def _under(prefix: str, error: exc.GatewayError) -> list[dict]:
    """``error``'s entries with their pointers under ``prefix`` and the problem type named."""
    found = error.extensions.get("errors") or [{"pointer": "", "message": error.detail}]
    return [
        {**entry, "pointer": prefix + entry.get("pointer", ""), "problem": error.slug}
        for entry in found
    ]


def _check_draft(draft: dict, errors: list[dict]) -> tuple[dict, bool]:
    """The draft validated as the draft route does, and whether it passed its schema (its
    category and tag entries can then be looked up); on a schema refusal its leftovers are
    still looked for, so one answer names both."""
    try:
        return validation.validate("draft", draft), True
    except exc.TemplateLeftover as leftover:
        errors.extend(_under("/draft", leftover))
        return draft, True
    except exc.ValidationFailed as refused:
        errors.extend(_under("/draft", refused))
        try:
            validation.check_template_leftovers(draft, validation.TEMPLATE_FIELDS["draft"])
        except exc.TemplateLeftover as leftover:
            errors.extend(_under("/draft", leftover))
    return draft, False


def _check_image(index: int, image: dict, errors: list[dict]) -> dict:
    where = f"/media/{index}"
    entry = {"slot": image["slot"], "source": "none"}
    given = sorted(SOURCES & image.keys())
    if len(given) > 1:
        errors.append(
            {
                "pointer": where,
                "message": f"give one of content_base64, source_url or url, not {given}",
                "problem": exc.ValidationFailed.slug,
            }
        )
        return entry
    if "source_url" in image:
        entry["source"] = "source_url"  # probed: gateway.actions.article_lookups
    if "url" in image:
        entry["source"] = "url"
        parts = urlsplit(image["url"])
        if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
            errors.append(
                {
                    "pointer": f"{where}/url",
                    "message": "an http(s) URL with a host and no user info is expected",
                    "problem": exc.ValidationFailed.slug,
                }
            )
    if "content_base64" in image:
        entry["source"] = "content_base64"
        entry.update(_decoded(f"{where}/content_base64", image["content_base64"], errors))
    return entry


def _decoded(pointer: str, text: str, errors: list[dict]) -> dict:
    """What the media route would learn from ``text``: type, size, SHA-256; or its refusal
    appended to ``errors``."""
    try:
        content = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        errors.append(
            {
                "pointer": pointer,
                "message": "invalid base64",
                "problem": exc.ValidationFailed.slug,
            }
        )
        return {}
    if not content:
        errors.append({"pointer": pointer, "message": "empty", "problem": "validation-failed"})
        return {}
    try:
        mime_type, _ext = media.sniff(content)
    except (exc.UnsupportedMediaType, exc.ImageUnreadable) as refused:
        errors.append({"pointer": pointer, "message": refused.detail, "problem": refused.slug})
        return {}
    return {
        "mime_type": mime_type,
        "bytes": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }


def _check_references(draft: dict, images: list[dict], errors: list[dict]) -> dict:
    """Every slot the draft names is an image of the article; placeholders are in
    ``body_media``; no slot twice."""
    slots: dict[str, int] = {}
    for i, image in enumerate(images):
        if image["slot"] in slots:
            errors.append(
                {
                    "pointer": f"/media/{i}/slot",
                    "message": f"slot {image['slot']!r} is given twice (first at "
                    f"/media/{slots[image['slot']]})",
                    "problem": exc.ValidationFailed.slug,
                }
            )
        slots.setdefault(image["slot"], i)
    # the draft may have failed its schema: read what is there, as it is
    featured = draft.get("featured_media")
    featured_slot = featured.get("slot") if isinstance(featured, dict) else None
    listed = draft.get("body_media")
    body_media = [s for s in listed if isinstance(s, str)] if isinstance(listed, list) else []
    content = draft.get("content")
    placeholders = drafts.PLACEHOLDER.findall(content) if isinstance(content, str) else []
    named = [("/draft/featured_media/slot", featured_slot)] if featured_slot else []
    named += [(f"/draft/body_media/{i}", slot) for i, slot in enumerate(body_media)]
    for pointer, slot in named:
        if slot not in slots:
            errors.append(
                {
                    "pointer": pointer,
                    "message": f"no image for slot {slot!r} in media",
                    "problem": exc.ValidationFailed.slug,
                }
            )
    for slot in sorted(set(placeholders) - set(body_media) - {featured_slot}):
        errors.append(
            {
                "pointer": "/draft/content",
                "message": f"unknown placeholder slot {slot!r}: neither in body_media nor "
                "the featured slot",
                "problem": exc.ValidationFailed.slug,
            }
        )
    return {
        "featured_slot": featured_slot,
        "body_media": body_media,
        "placeholders": list(dict.fromkeys(placeholders)),
    }
