"""Read-back verification: what WordPress actually stores, compared field by field.

HTTP 200 is not success. Verification reads the post with ``context=edit`` (raw fields:
rendered titles carry HTML entities) and compares it with the baseline WordPress returned when
the gateway wrote it (kept in the draft receipt). What WordPress changed at write time
(sanitising ``&`` to ``&amp;``, stripping tags for authors) is reported under ``normalized``
and is not a failure; later drift from the baseline - a field emptied, meta dropped, an image
unset - is. Gateway-marked blocks (:mod:`gateway.operations.block_markers`) are left out of the
content comparison: a
block insert is not drift (the approval digest still covers them). Shape: docs/api.md,
"Verification".
"""

from __future__ import annotations

import re

from gateway.core.digests import canonical_json
from gateway.core.digests import sha256_hex
from gateway.operations.block_markers import strip_blocks
from gateway.wordpress import SEO_META

_IMAGE_ID = re.compile(r"\bwp-image-(\d+)\b")
NO_COMPANION = (
    "companion plugin absent: WordPress does not expose Rank Math fields to the "
    "REST API, so they cannot be written or read back"
)


def raw(post: dict, name: str) -> str:
    """The raw value of a rendered field (``title``, ``content``, ``excerpt``)."""
    value = post.get(name)
    return value.get("raw", "") if isinstance(value, dict) else (value or "")


def body_image_ids(content: str) -> list[int]:
    """Attachment ids of the ``wp-image-{id}`` images in ``content``, in order, once each."""
    seen: list[int] = []
    for match in _IMAGE_ID.finditer(content):
        value = int(match.group(1))
        if value not in seen:
            seen.append(value)
    return seen


def snapshot(post: dict) -> dict:
    """The fields verification and approvals care about, from a ``context=edit`` post."""
    meta = post.get("meta") or {}
    if isinstance(meta, list):  # WordPress answers [] when no meta is registered
        meta = {}
    return {
        "title": raw(post, "title"),
        "content": raw(post, "content"),
        "excerpt": raw(post, "excerpt"),
        "featured_media": post.get("featured_media") or 0,
        "status": post.get("status"),
        "seo": {name: meta.get(key) for name, key in SEO_META.items()},
    }


def content_digest(snap: dict) -> str:
    """The digest approvals bind to: hex SHA-256 of the canonical JSON of the raw title,
    content, excerpt, featured media and SEO fields."""
    return sha256_hex(
        canonical_json(
            {k: snap[k] for k in ("title", "content", "excerpt", "featured_media", "seo")}
        )
    )


def _field(expected, actual, ok=None) -> dict:
    return {
        "expected": expected,
        "actual": actual,
        "ok": (expected == actual) if ok is None else ok,
    }


def slug_field(expected: str, actual: str | None) -> dict:
    """The ``slug`` comparison, made whenever the draft asked for a slug. WordPress makes a
    taken slug unique (``wp_unique_post_slug``: ``news`` becomes ``news-2``; on publishing,
    and over REST already for a draft): that shows as ``ok: false`` with reason
    ``made-unique``. It is reported, never repaired (the other post holds the slug, and
    renaming a live post breaks its links), and it does not fail the overall verification,
    or the job could never be approved; any other slug difference does."""
    field = _field(expected, actual)
    if field["ok"]:
        return field
    if actual and re.fullmatch(re.escape(expected) + r"-\d+", actual):
        field["reason"] = "made-unique"
    else:
        field["reason"] = "WordPress stores another slug"
    return field


def compare(
    receipt: dict, live_post: dict, companion_present: bool, expected_status: str = "draft"
) -> dict:
    """Compare a live post with a draft receipt.

    Args:
        receipt: the draft operation's receipt (``baseline``, ``sent``, ``expected``).
        live_post: ``GET /wp/v2/posts/{id}?context=edit``.
        companion_present: whether Rank Math fields can be read back at all.
        expected_status: ``draft`` until published.

    Returns the verification body without ``job_id``: ``post_id``, ``ok``,
    ``content_sha256``, ``fields``, ``normalized``.
    """
    base, sent, want = receipt["baseline"], receipt["sent"], receipt["expected"]
    live = snapshot(live_post)
    fields = {
        "title": _field(base["title"], live["title"]),
        "excerpt": _field(base["excerpt"], live["excerpt"]),
        "content": _field(
            "sha256:" + sha256_hex(strip_blocks(base["content"])),
            "sha256:" + sha256_hex(strip_blocks(live["content"])),
        ),
        "featured_media": _field(want["featured_media"], live["featured_media"]),
        "body_media": _field(want["body_media"], body_image_ids(strip_blocks(live["content"]))),
    }
    for name in SEO_META:
        label = "seo." + name
        if not companion_present:
            fields[label] = {
                "expected": sent["seo"][name],
                "actual": None,
                "ok": None,
                "reason": NO_COMPANION,
            }
            continue
        expected = base["seo"].get(name) or sent["seo"][name]
        actual = live["seo"].get(name)
        fields[label] = _field(
            expected,
            actual,
            ok=bool(actual) and actual == expected if expected else actual in ("", None),
        )
    fields["status"] = _field(expected_status, live["status"])
    for name in ("categories", "tags"):  # only when the draft named them (else WordPress's)
        if name in want:
            fields[name] = _field(sorted(want[name]), sorted(live_post.get(name) or []))
    if want.get("slug"):
        fields["slug"] = slug_field(want["slug"], live_post.get("slug"))
    for name in ("title", "excerpt", "content"):
        if name in fields and not fields[name]["ok"] and live[name] == "":
            fields[name]["reason"] = "WordPress holds an empty value"
    normalized = {
        name: {"sent": sent[name], "stored": base[name]}
        for name in ("title", "excerpt", "content")
        if sent[name] != base[name]
    }
    oks = [f["ok"] for f in fields.values() if f.get("reason") != "made-unique"]
    overall = False if False in oks else (None if None in oks else True)
    return {
        "post_id": live_post.get("id"),
        "ok": overall,
        "content_sha256": content_digest(live),
        "fields": fields,
        "normalized": normalized,
    }
