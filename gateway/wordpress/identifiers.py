"""Names the gateway gives the attachments it creates, derived from the operation key so
that they are stable across retries and unique on the site: the XML-RPC transport's file
names and both transports' attachment slugs."""

from __future__ import annotations

import hashlib


def media_token(operation_key: str) -> str:
    """``gw`` + 16 hex digits of SHA-256 of ``operation_key``: put in an attachment's file
    name (XML-RPC, and so its first title) and slug, findable by search before the key field
    exists."""
    return "gw" + hashlib.sha256(operation_key.encode("utf-8")).hexdigest()[:16]


def attachment_slug(filename: str, operation_key: str) -> str:
    """The slug of the attachment an upload creates: the file name's stem, lower case, and
    :func:`media_token`, e.g. ``hero-gw3f9c0a51d2e47b86``.

    Without it WordPress derives the slug from the title and makes it unique by trying
    ``hero-2``, ``hero-3`` and so on, one database query each (``wp_unique_post_slug``):
    a site whose workflows reuse an image title pays for every earlier upload. This slug is
    free at the first query. The file name comes made safe by the domain
    (:func:`gateway.actions.media.safe_filename`, stem at most 80 characters) and WordPress
    sanitizes a slug it is sent (``sanitize_title``), so nothing is cleaned here again."""
    return f"{filename.rsplit('.', 1)[0].lower()}-{media_token(operation_key)}"
