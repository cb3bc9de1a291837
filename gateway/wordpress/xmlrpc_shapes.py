"""XML-RPC structs <-> the REST API's ``context=edit`` shape, so the domain sees one shape
whichever transport a site uses (``wp.getPost``/``wp.newPost``/``wp.editPost`` structs as
documented in ``wp-includes/class-wp-xmlrpc-server.php``)."""

from __future__ import annotations

import datetime as dt
import xmlrpc.client

KEY_FIELD = "gateway_operation_key"
PROTECTED_KEY_FIELD = "_gateway_operation_key"  # the REST transport's key (companion plugin)
TERM_TAXONOMIES = {"categories": "category", "tags": "post_tag"}


def iso(value) -> str | None:
    """``xmlrpc.client.DateTime`` -> ``YYYY-MM-DDTHH:MM:SS`` (the REST API's format)."""
    if value is None or value == "":
        return None
    text = value.value if isinstance(value, xmlrpc.client.DateTime) else str(value)
    try:
        return dt.datetime.strptime(text[:17], "%Y%m%dT%H:%M:%S").isoformat()
    except ValueError:
        return None


def key_of(item: dict) -> str | None:
    fields = {f.get("key"): f.get("value") for f in item.get("custom_fields") or []}
    return fields.get(KEY_FIELD) or fields.get(PROTECTED_KEY_FIELD)


def rest_shape(item: dict) -> dict:
    """A ``wp.getPost`` struct in the REST API's ``context=edit`` shape (posts and
    attachments): ``id``, ``type``, ``status``, ``title``/``content``/``excerpt``/``caption``
    as ``{"raw"}``, ``featured_media``, ``meta`` (custom fields), ``link``, ``date_gmt``,
    ``modified_gmt``, ``author``, ``slug``, ``source_url``, ``mime_type``, ``media_type``,
    ``alt_text`` (None: not readable over XML-RPC), ``post`` (an attachment's parent, None
    when unattached), ``operation_key``, and ``categories``/``tags`` (ids) when the struct
    holds its ``terms``."""
    thumb = item.get("post_thumbnail") or {}
    meta = {f.get("key"): f.get("value") for f in item.get("custom_fields") or []}
    mime = item.get("post_mime_type") or ""
    return {
        "id": int(item["post_id"]),
        "type": item.get("post_type"),
        "status": item.get("post_status"),
        "title": {"raw": item.get("post_title", "")},
        "content": {"raw": item.get("post_content", "")},
        "excerpt": {"raw": item.get("post_excerpt", "")},
        "caption": {"raw": item.get("post_excerpt", "")},
        "featured_media": int(thumb.get("attachment_id") or 0) if isinstance(thumb, dict) else 0,
        "meta": {k: v for k, v in meta.items() if k != PROTECTED_KEY_FIELD},
        "link": item.get("link"),
        "date_gmt": iso(item.get("post_date_gmt")),
        "modified_gmt": iso(item.get("post_modified_gmt")),
        "author": int(item.get("post_author") or 0),
        "post": int(item.get("post_parent") or 0) or None,
        "slug": item.get("post_name"),
        "source_url": item.get("guid"),
        "mime_type": mime,
        "media_type": "image" if mime.startswith("image/") else "file",
        "alt_text": None,
        "operation_key": key_of(item),
        **_term_ids(item),
    }


def _term_ids(item: dict) -> dict:
    """``categories`` and ``tags`` (term ids in WordPress's order) from the ``terms`` of a
    ``wp.getPost`` struct; nothing when the struct was read without its terms."""
    if "terms" not in item:
        return {}
    ids: dict[str, list[int]] = {name: [] for name in TERM_TAXONOMIES}
    by_taxonomy = {taxonomy: name for name, taxonomy in TERM_TAXONOMIES.items()}
    for term in item.get("terms") or []:
        name = by_taxonomy.get(term.get("taxonomy"))
        if name is not None:
            ids[name].append(int(term["term_id"]))
    return ids


def xmlrpc_struct(fields: dict) -> dict:
    """REST post fields -> a ``wp.newPost``/``wp.editPost`` content struct, holding only the
    fields given (``meta`` becomes ``custom_fields``; the protected key is renamed;
    ``date_gmt`` becomes ``post_date_gmt``, which WordPress prefers over ``post_date``)."""
    names = {
        "title": "post_title",
        "content": "post_content",
        "excerpt": "post_excerpt",
        "status": "post_status",
        "slug": "post_name",
        "featured_media": "post_thumbnail",
    }
    struct = {names[k]: v for k, v in fields.items() if k in names}
    if fields.get("date_gmt"):  # scheduling: UTC, sent as a dateTime.iso8601 (IXR_Date)
        struct["post_date_gmt"] = xmlrpc.client.DateTime(
            dt.datetime.fromisoformat(fields["date_gmt"])
        )
    terms = {TERM_TAXONOMIES[k]: list(v) for k, v in fields.items() if k in TERM_TAXONOMIES}
    if terms:
        struct["terms"] = terms
    meta = {
        (KEY_FIELD if k == PROTECTED_KEY_FIELD else k): v
        for k, v in (fields.get("meta") or {}).items()
    }
    if meta:
        struct["custom_fields"] = [{"key": k, "value": v} for k, v in meta.items()]
    return struct


def term_shape(item: dict) -> dict:
    """A ``wp.getTerm``/``wp.getTerms`` struct in the REST API's term shape: ``id``,
    ``name``, ``slug``, ``taxonomy``, ``description``, ``parent``, ``count``."""
    return {
        "id": int(item["term_id"]),
        "name": item.get("name"),
        "slug": item.get("slug"),
        "taxonomy": item.get("taxonomy"),
        "description": item.get("description", ""),
        "parent": int(item.get("parent") or 0),
        "count": int(item.get("count") or 0),
    }


def lookup_entry(item: dict, key: str, complete: bool) -> dict:
    """A scanned ``wp.getPosts`` item as an entry of the companion plugin's lookup
    (``operation_key``, ``id``, ``type``, ``status``, ``date_gmt``, ``title``), plus
    ``complete`` (False: found by the media token in the title, key not written yet)."""
    return {
        "operation_key": key,
        "id": int(item["post_id"]),
        "type": item.get("post_type"),
        "status": item.get("post_status"),
        "date_gmt": iso(item.get("post_date_gmt")),
        "title": item.get("post_title"),
        "complete": complete,
    }
