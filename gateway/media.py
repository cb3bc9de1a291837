"""Media: one image per job slot, uploaded once (WordPress REST API, ``POST /wp/v2/media``).

The MIME type is sniffed from the bytes, never trusted from the client, and the file extension
is set from it; a type WordPress would refuse is refused here (415) before anything is sent.
Under a new task version, unchanged bytes of a slot reuse the earlier attachment.
"""

from __future__ import annotations

import io
import re

from PIL import Image
from PIL import UnidentifiedImageError

from gateway import db
from gateway import drafts
from gateway import exceptions as exc
from gateway import operations
from gateway.digests import request_digest
from gateway.digests import sha256_hex
from gateway.ledger import CONFIRMED
from gateway.ledger import Operation
from gateway.operations import Effect
from gateway.operations import Outcome
from gateway.operations import Target
from gateway.wordpress import OPERATION_KEY_META

# The image types every WordPress site accepts from an author: signature -> Pillow's format.
SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
)
TYPES = {
    "PNG": ("image/png", "png"),
    "JPEG": ("image/jpeg", "jpg"),
    "GIF": ("image/gif", "gif"),
    "WEBP": ("image/webp", "webp"),
}


def _claimed_format(content: bytes) -> str | None:
    for magic, name in SIGNATURES:
        if content.startswith(magic):
            return name
    if content[:4] == b"RIFF" and content[8:12] == b"WEBP":
        return "WEBP"
    return None


def sniff(content: bytes) -> tuple[str, str]:
    """``(mime_type, extension)`` of an image: the type from the file's signature, then the
    whole image DECODED with Pillow, so a truncated or corrupt file never reaches WordPress.
    The client's file name and MIME type are never trusted.

    Raises:
        UnsupportedMediaType (415): not a PNG, JPEG, GIF or WebP image.
        ImageUnreadable (422): it says it is one, but does not decode (truncated, corrupt,
            or a decompression bomb).
    """
    claimed = _claimed_format(content)
    if claimed is None:
        raise exc.UnsupportedMediaType(
            "the file is not a PNG, JPEG, GIF or WebP image (type sniffed from its bytes)"
        )
    try:
        with Image.open(io.BytesIO(content), formats=[claimed]) as image:
            if claimed == "JPEG":  # decode at 1/8 scale: every byte is still read, half the CPU
                image.draft(image.mode, (max(1, image.width // 8), max(1, image.height // 8)))
            image.load()  # decodes the whole (first) frame: a cut-off file raises here
    except UnidentifiedImageError:
        raise _unreadable(claimed, "its header is incomplete or corrupt") from None
    except Exception as error:  # noqa: BLE001 - Pillow raises many kinds on malformed bytes
        raise _unreadable(claimed, str(error)[:80] or type(error).__name__) from None
    return TYPES[claimed]


def _unreadable(claimed: str, reason: str) -> exc.GatewayError:
    return exc.ImageUnreadable(
        f"the {claimed} image cannot be decoded ({reason}); nothing was sent to WordPress",
        errors=[{"pointer": "/file", "message": f"{claimed} image does not decode"}],
    )


def safe_filename(filename: str | None, slot: str, ext: str) -> str:
    """An ASCII file name with the sniffed extension, e.g. ``hero-image.png``."""
    stem = (filename or slot).rsplit(".", 1)[0]
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-")[:80] or slot
    return f"{stem}.{ext}"


def read_back(target: Target, media_id: int, intent: dict, stored: dict | None = None) -> dict:
    """Read the attachment back (``GET /wp/v2/media/{id}?context=edit``) into a receipt;
    ``stored`` is a read-back already made (a sweep reads many attachments in one query)."""
    stored = stored or target.client.get_media(media_id)
    return {
        "media_id": media_id,
        "source_url": stored.get("source_url"),
        "mime_type": stored.get("mime_type"),
        "alt_text": stored.get("alt_text"),
        "media_type": stored.get("media_type"),
        **intent,
    }


def reconciled_read_back(
    target: Target, media_id: int, key: str, intent: dict, stored: dict | None = None
) -> dict:
    """Read back an attachment found by lookup, first finishing its upload when the
    transport needed a second call that may not have happened (XML-RPC: the identifier,
    title and caption; a no-op over REST)."""
    target.client.finish_upload(media_id, key, intent.get("fields") or {})
    return read_back(target, media_id, intent, stored)


def _media_effect(
    target: Target, key: str, content: bytes, mime: str, fields: dict, intent: dict
) -> Effect:
    def send() -> dict:
        return target.client.upload_media(
            content, intent["filename"], mime, {**fields, "meta": {OPERATION_KEY_META: key}}
        )

    def confirm_read_back(media_id: int, sent: dict | None) -> dict:
        if sent is None:  # found by lookup, not answered by the upload itself
            return reconciled_read_back(target, media_id, key, intent)
        return read_back(target, media_id, intent)

    return Effect(
        action="media",
        send=send,
        find=lambda: drafts.find_by_key(target, key, "attachment"),
        read_back=confirm_read_back,
        creates=True,
        intent=intent,
    )


def put_media(
    target: Target,
    slot: str,
    content: bytes,
    filename: str | None,
    alt_text: str | None,
    caption: str | None,
    title: str | None,
) -> Outcome:
    """Upload the image of ``slot`` once.

    Returns the :class:`Outcome`; the receipt holds ``media_id`` and ``source_url``.

    Raises:
        UnsupportedMediaType (415), TransportLimit (422: alt text over XML-RPC; a CONFIRMED
        operation still replays), plus everything :func:`operations.perform` raises.
    """
    mime, ext = sniff(content)
    name = safe_filename(filename, slot, ext)
    fields = {"title": title, "caption": caption, "alt_text": alt_text}
    digest = request_digest(
        {"sha256": sha256_hex(content), "filename": name, "mime_type": mime, **fields}
    )
    key = operations.operation_key(target.job, "media", slot)
    existing = Operation.get_or_none(Operation.operation_key == key)
    if existing is not None and existing.state == CONFIRMED and existing.request_hash == digest:
        return Outcome(existing, replayed=True)  # also after a switch of transport
    reused = _reuse_earlier_version(target, key, slot, digest)
    if reused is not None:
        return reused
    if alt_text and not target.companion.alt_text:
        raise exc.TransportLimit(
            f"alt text cannot be written over the site's {target.companion.transport} "
            "transport (protected meta); send the image without alt_text",
            feature="alt_text",
            transport=target.companion.transport,
            errors=[{"pointer": "/alt_text", "message": "not supported by the transport"}],
        )
    intent = {"sha256": sha256_hex(content), "filename": name, "bytes": len(content)}
    wp_fields = {k: v for k, v in (("title", title), ("caption", caption)) if v is not None}
    if wp_fields:  # what a reconciliation must finish on a two-call (XML-RPC) upload
        intent["fields"] = wp_fields
    effect = _media_effect(
        target, key, content, mime, {k: v for k, v in fields.items() if v is not None}, intent
    )
    return operations.perform(target, key, digest, effect, slot=slot)


def _reuse_earlier_version(target: Target, key: str, slot: str, digest: str):
    """Unchanged bytes under a new task version: record the earlier attachment as this
    version's receipt (a replay, no upload)."""
    earlier = (
        Operation.select()
        .where(
            Operation.tenant == target.job.tenant,
            Operation.job_id == target.job.job_id,
            Operation.action == "media",
            Operation.slot == slot,
            Operation.state == CONFIRMED,
            Operation.request_hash == digest,
            Operation.operation_key != key,
        )
        .order_by(Operation.id.desc())
        .first()
    )
    if earlier is None or Operation.select().where(Operation.operation_key == key).exists():
        return None
    row = operations.claim(target, key, digest, "media", slot)
    Operation.update(
        state=CONFIRMED,
        remote_id=earlier.remote_id,
        receipt={**earlier.receipt, "reused_from": earlier.operation_key},
        updated_at=db.utcnow(),
    ).where(Operation.id == row.id).execute()
    return Outcome(Operation.get_by_id(row.id), replayed=True)


def media_view(outcome: Outcome) -> dict:
    """The media endpoint's response body."""
    return operations.outcome_view(outcome, "media_id", "source_url", "mime_type")
