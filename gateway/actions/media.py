"""Media: one image per job slot, uploaded once (WordPress REST API, ``POST /wp/v2/media``).

The MIME type is sniffed from the bytes, never trusted from the client, and the file extension
is set from it; a type WordPress would refuse is refused here (415) before anything is sent.
Under a new task version, unchanged bytes of a slot reuse the earlier attachment, once it is
read back (``GET /wp/v2/media/{id}``): an attachment deleted from the media library (or in its
trash) since is uploaded again instead (proudcity/wp-proudcity#2184).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable

from PIL import Image
from PIL import UnidentifiedImageError

from gateway.actions import drafts
from gateway.actions import media_sources
from gateway.core import exceptions as exc
from gateway.core import media_request
from gateway.core import states
from gateway.core.config import DEFAULT_MEDIA_MAX_PIXELS
from gateway.core.digests import request_digest
from gateway.core.digests import sha256_hex
from gateway.jobs import guards
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import PREPARED
from gateway.ledger.models import Operation
from gateway.operations import earlier_versions
from gateway.operations import perform
from gateway.operations import refusals
from gateway.operations import registry
from gateway.operations import transitions
from gateway.operations import verification
from gateway.operations.effects import Effect
from gateway.operations.effects import Outcome
from gateway.operations.effects import lookup_only
from gateway.operations.target import Target
from gateway.wordpress import OPERATION_KEY_META
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressNotFound

ACTION = "media"
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
DEFAULT_MAX_PIXELS = DEFAULT_MEDIA_MAX_PIXELS


def _claimed_format(content: bytes) -> str | None:
    for magic, name in SIGNATURES:
        if content.startswith(magic):
            return name
    if content[:4] == b"RIFF" and content[8:12] == b"WEBP":
        return "WEBP"
    return None


def sniff_type(content: bytes) -> tuple[str, str]:
    """``(mime_type, extension)`` of an image from its signature (the first bytes) alone,
    without decoding it: what the request digest names. The client's file name and MIME type
    are never trusted.

    Raises:
        UnsupportedMediaType (415): not a PNG, JPEG, GIF or WebP signature.
    """
    claimed = _claimed_format(content)
    if claimed is None:
        raise exc.UnsupportedMediaType(
            "the file is not a PNG, JPEG, GIF or WebP image (type sniffed from its bytes)"
        )
    return TYPES[claimed]


def sniff(content: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[str, str]:
    """``(mime_type, extension)`` of an image: the type from the file's signature
    (:func:`sniff_type`), its declared size checked against a pixel budget (``max_pixels``,
    ``GATEWAY_MEDIA_MAX_PIXELS``) BEFORE anything is decoded, then the whole image DECODED
    with Pillow, so a truncated or corrupt file never reaches WordPress. A pixel flood (a
    small file declaring 13000 x 13000 pixels would take ~650 MiB to decode) is refused from
    its header alone; Pillow's own decompression-bomb limit (``Image.MAX_IMAGE_PIXELS``) is
    set to the same budget. Decoding is most of an upload's CPU in the gateway (about
    a millisecond for a small PNG), so it runs once per upload, right before the bytes would
    be sent: never on a replay, which returns the stored receipt of bytes decoded before.

    Raises:
        UnsupportedMediaType (415): not a PNG, JPEG, GIF or WebP image.
        ImageUnreadable (422): it says it is one, but does not decode (truncated, corrupt).
        ImageTooLarge (422): it declares more than ``max_pixels`` pixels (nothing decoded).
    """
    mime, ext = sniff_type(content)
    claimed = _claimed_format(content)
    Image.MAX_IMAGE_PIXELS = max_pixels  # Pillow refuses twice this at open(), we refuse once
    try:
        with Image.open(io.BytesIO(content), formats=[claimed]) as image:
            _check_pixels(claimed, image.width, image.height, max_pixels)
            if claimed == "JPEG":  # decode at 1/8 scale: every byte is still read, half the CPU
                image.draft(image.mode, (max(1, image.width // 8), max(1, image.height // 8)))
            image.load()  # decodes the whole (first) frame: a cut-off file raises here
    except UnidentifiedImageError:
        raise _unreadable(claimed, "its header is incomplete or corrupt") from None
    except Image.DecompressionBombError:
        raise _too_many_pixels(claimed, "more than twice", max_pixels) from None
    except exc.ImageTooLarge:
        raise
    except Exception as error:  # noqa: BLE001 - Pillow raises many kinds on malformed bytes
        raise _unreadable(claimed, str(error)[:80] or type(error).__name__) from None
    return mime, ext


def _check_pixels(claimed: str, width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise _too_many_pixels(claimed, f"{width} x {height} = {width * height:,}", max_pixels)


def _too_many_pixels(claimed: str, declared: str, max_pixels: int) -> exc.GatewayError:
    return exc.ImageTooLarge(
        f"the {claimed} image declares {declared} pixels, more than GATEWAY_MEDIA_MAX_PIXELS "
        f"({max_pixels:,}); it was not decoded and nothing was sent to WordPress",
        errors=[{"pointer": "/file", "message": f"more than {max_pixels} pixels"}],
    )


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
    receipt = {
        "media_id": media_id,
        "source_url": stored.get("source_url"),
        "mime_type": stored.get("mime_type"),
        "alt_text": stored.get("alt_text"),
        "caption": verification.raw(stored, "caption"),
        "title": verification.raw(stored, "title"),
        "media_type": stored.get("media_type"),
        **intent,
    }
    wanted = intent.get("metadata") or {}
    receipt["metadata_ok"] = all(receipt[name] == value for name, value in wanted.items())
    return receipt


def reconciled_read_back(
    target: Target, media_id: int, key: str, intent: dict, stored: dict | None = None
) -> dict:
    """Read back an attachment found by lookup, first finishing its upload when the
    transport needed a second call that may not have happened (XML-RPC: the identifier,
    title and caption; a no-op over REST)."""
    target.client.finish_upload(media_id, key, intent.get("fields") or {})
    return read_back(target, media_id, intent, stored)


def _media_effect(
    target: Target,
    key: str,
    intent: dict,
    send: Callable[[], dict],
    found: list[dict] | None = None,
    prefetched: dict[int, dict] | None = None,
) -> Effect:
    """The upload's effect; ``find`` and ``read_back`` need only the stored ``intent``."""

    creates = not intent.get("update_of")  # a metadata update of an earlier attachment

    def find() -> list[dict]:
        if found is not None:
            return found
        return drafts.find_by_key(target, key, "attachment") if creates else []

    def read(media_id: int, sent: dict | None) -> dict:
        stored = (prefetched or {}).get(media_id)
        if sent is None and creates:  # found by lookup, not answered by the upload itself
            return reconciled_read_back(target, media_id, key, intent, stored)
        return read_back(target, media_id, intent, stored)

    return Effect(
        action=ACTION, send=send, find=find, read_back=read, creates=creates, intent=intent
    )


def _upload(
    target: Target, key: str, content: bytes, name: str, mime: str, sent: dict
) -> Callable[[], dict]:
    """The upload (``POST /wp/v2/media``) carrying the operation key in the meta."""

    def send() -> dict:
        meta = {"meta": {OPERATION_KEY_META: key}}
        return target.client.upload_media(content, name, mime, {**sent, **meta})

    return send


def rebuild(
    target: Target,
    row: Operation,
    found: list[dict] | None = None,
    prefetched: dict[int, dict] | None = None,
) -> Effect:
    """The upload effect of ``row`` from its stored intent (registry ``rebuild``)."""
    return _media_effect(
        target, row.operation_key, row.intent or {}, lookup_only, found, prefetched
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
        UnsupportedMediaType (415), ImageUnreadable (422: decoded only when the bytes are
        about to be sent, so a replay never decodes), TransportLimit (422: alt text over
        XML-RPC; a CONFIRMED operation still replays), plus everything
        :func:`perform.perform` raises.
    """
    guards.check_writable(target)
    mime, ext = sniff_type(content)  # 415 now; the whole image is decoded before it is sent
    name = safe_filename(filename, slot, ext)
    fields = {"title": title, "caption": caption, "alt_text": alt_text}
    sha = sha256_hex(content)  # once: the digest, the metadata-only update and the intent
    digest = request_digest({"sha256": sha, "filename": name, "mime_type": mime, **fields})
    key = perform.operation_key(target.job, ACTION, slot)
    alive: dict[int, bool] = {}  # earlier attachments read back by this request
    answered = _answered_without_sending(target, key, slot, digest, alt_text, alive)
    if answered is not None:  # also after a switch of transport
        return answered
    sent = {k: v for k, v in fields.items() if v is not None}
    _settle_earlier_uploads(target, key, slot, sha)  # lookups only: 503/409 before any write
    updated = _update_metadata(target, key, slot, digest, sha, name, sent, alive)
    if updated is not None:
        return updated
    # 422 for bytes that do not decode or declare too many pixels, before any row or upload
    sniff(content, target.config.media_max_pixels)
    intent = {
        "sha256": sha,
        "filename": name,
        "bytes": len(content),
        "metadata": sent,
        **_finishing_fields(title, caption),
    }
    effect = _media_effect(target, key, intent, _upload(target, key, content, name, mime, sent))
    return perform.perform(target, key, digest, effect, slot=slot)


def _answered_without_sending(
    target: Target, key: str, slot: str, digest: str, alt_text: str | None, alive: dict
) -> Outcome | None:
    """What both upload paths do before they touch an image's bytes: the replay check, the
    reuse of an earlier version's attachment (read back first; ``alive`` keeps what this
    request read), and the transport's refusal of alt text. The outcome that answers the
    request, or None to go on.

    Raises:
        OperationKeyReused (422), TransportLimit (422).
    """
    replayed = perform.replay(key, digest)
    if replayed is not None:
        return replayed
    reused = _reuse_earlier_version(target, key, slot, digest, alive)
    if reused is not None:
        return reused
    check_transport(target, alt_text)
    return None


def check_transport(target: Target, alt_text: str | None) -> None:
    """Refuse alt text the site's transport cannot write (XML-RPC: protected meta), before
    anything is claimed, downloaded or sent.

    Raises:
        TransportLimit (422, ``feature: alt_text``).
    """
    if alt_text and not target.companion.alt_text:
        raise exc.TransportLimit(
            f"alt text cannot be written over the site's {target.companion.transport} "
            "transport (protected meta); send the image without alt_text",
            feature="alt_text",
            transport=target.companion.transport,
            errors=[{"pointer": "/alt_text", "message": "not supported by the transport"}],
        )


def _finishing_fields(title: str | None, caption: str | None) -> dict:
    """``{"fields": {title, caption}}``: what a reconciliation must finish on a two-call
    (XML-RPC) upload; empty when neither is given."""
    fields = {k: v for k, v in (("title", title), ("caption", caption)) if v is not None}
    return {"fields": fields} if fields else {}


def _update_metadata(
    target: Target,
    key: str,
    slot: str,
    digest: str,
    sha: str,
    name: str,
    sent: dict,
    alive: dict[int, bool],
) -> Outcome | None:
    """The same bytes as an earlier version's attachment with other ``alt_text``, ``caption``
    or ``title``: update that attachment (``POST /wp/v2/media/{id}``, only the fields that
    differ from what it holds) instead of uploading the bytes again. None when there is no
    such attachment still in WordPress (:func:`still_there`; upload) or this version's
    operation exists already (perform decides). At task version 1 no earlier version exists:
    nothing is read.

    Raises:
        WordPressUnavailable (503) / UpstreamRefused (502): the earlier attachment cannot be
            read back now.
    """
    if target.job.task_version <= 1:
        return None
    if Operation.select().where(Operation.operation_key == key).exists():
        return None
    earlier = next(
        (
            row
            for row in _confirmed_of_slot(target, slot)
            if row.receipt.get("sha256") == sha
            and row.receipt.get("filename") == name
            and still_there(target, row.remote_id, alive)
        ),
        None,
    )
    if earlier is None:
        return None
    changed = {k: v for k, v in sent.items() if v != (earlier.receipt.get(k) or "")}
    if not changed:
        return _record_reuse(target, key, slot, digest, earlier)
    intent = {
        **{k: earlier.receipt[k] for k in ("sha256", "filename", "bytes") if k in earlier.receipt},
        "metadata": sent,
        "update_of": earlier.remote_id,
        "updated_from": earlier.operation_key,
    }
    effect = Effect(
        action=ACTION,
        send=lambda: target.client.update_media(earlier.remote_id, changed),
        find=lambda: [],  # an update is idempotent: sending it again is the reconciliation
        read_back=lambda media_id, _obj: read_back(target, media_id, intent),
        creates=False,
        intent=intent,
    )
    return perform.perform(target, key, digest, effect, slot=slot)


def _settle_earlier_uploads(target: Target, key: str, slot: str, sha: str) -> None:
    """The same bytes under a new task version while an earlier version's upload of them to
    ``slot`` is SENT or UNKNOWN: look it up first
    (:func:`gateway.operations.earlier_versions.settle`), so that a found attachment is
    CONFIRMED and reused (:func:`_update_metadata`) instead of uploaded a second time, and a
    proven absent one is uploaded. Other bytes make a new attachment anyway: nothing is read
    for them; nor at task version 1, nor once ``key`` has a row (:func:`perform.perform`
    decides).

    Raises:
        OutcomeUnknown / WordPressUnavailable (503), OperationInProgress, NeedsReview,
            ForeignObject (409): the earlier upload is not settled; nothing was written.
    """
    job = target.job
    if job.task_version <= 1 or Operation.select().where(Operation.operation_key == key).exists():
        return
    earlier = Operation.select().where(
        Operation.tenant == job.tenant,
        Operation.job_id == job.job_id,
        Operation.action == ACTION,
        Operation.slot == slot,
        Operation.task_version < job.task_version,
    )
    for row in earlier_versions.unsettled(earlier):
        intent = row.intent or {}
        if intent.get("sha256") == sha and not intent.get("update_of"):
            earlier_versions.settle(target, row, rebuild(target, row))


def _confirmed_of_slot_query(target: Target, slot: str, *more):
    """The query of the slot's CONFIRMED media rows of the job (and ``more`` conditions),
    newest first."""
    return (
        Operation.select()
        .where(
            Operation.tenant == target.job.tenant,
            Operation.job_id == target.job.job_id,
            Operation.action == ACTION,
            Operation.slot == slot,
            Operation.state == CONFIRMED,
            *more,
        )
        .order_by(Operation.id.desc())
    )


def _confirmed_of_slot(target: Target, slot: str) -> list[Operation]:
    """The slot's CONFIRMED media rows of the job, newest first."""
    return list(_confirmed_of_slot_query(target, slot))


def put_media_from_url(
    target: Target,
    slot: str,
    source_url: str,
    filename: str | None,
    alt_text: str | None,
    caption: str | None,
    title: str | None,
) -> Outcome:
    """Download the image at ``source_url`` (:mod:`gateway.actions.media_sources`) and upload it for
    ``slot`` once. The request digest covers the URL, the file name and the metadata, so a
    replay (and a later version asking the same) is answered from the ledger without
    downloading; the URL as sent, the downloaded bytes' SHA-256 and the final URL (after
    redirects) go into the receipt (``requested_url``, ``sha256``, ``downloaded_from``);
    ``source_url`` stays WordPress's URL of the upload. A download whose bytes (and file
    name) equal an earlier version's attachment of the slot reuses it, updating only changed
    metadata.

    Raises:
        OperationKeyReused (422) and TransportLimit (422: alt text over XML-RPC) before
        downloading; MediaUrlRefused (422),
        MediaDownloadFailed (502), UnsupportedMediaType (415), ImageUnreadable (422); plus
        everything :func:`perform.perform` raises.
    """
    guards.check_writable(target)
    fields = {"title": title, "caption": caption, "alt_text": alt_text}
    digest = request_digest({"source_url": source_url, "filename": filename, **fields})
    key = perform.operation_key(target.job, "media", slot)
    alive: dict[int, bool] = {}  # earlier attachments read back by this request
    answered = _answered_without_sending(target, key, slot, digest, alt_text, alive)
    if answered is not None:  # before anything is downloaded
        return answered
    target.hold_request()  # a download waits on another server: the tenant's request share
    got = media_sources.download(source_url, target.config)
    mime, ext = sniff(got.content, target.config.media_max_pixels)
    name = safe_filename(filename or got.filename, slot, ext)
    intent = {
        "sha256": sha256_hex(got.content),
        "filename": name,
        "bytes": len(got.content),
        "requested_url": source_url,  # as sent; WordPress's URL of the upload is source_url
        "downloaded_from": got.final_url,
        **_finishing_fields(title, caption),
    }
    sent = {k: v for k, v in fields.items() if v is not None}
    intent["metadata"] = sent
    _settle_earlier_uploads(target, key, slot, intent["sha256"])
    updated = _update_metadata(target, key, slot, digest, intent["sha256"], name, sent, alive)
    if updated is not None:  # the same bytes as an earlier version: no second upload
        return updated
    effect = _media_effect(target, key, intent, _upload(target, key, got.content, name, mime, sent))
    return perform.perform(target, key, digest, effect, slot=slot)


def send_request(target: Target, request: dict) -> Outcome:
    """Registry ``send`` (the agents' ``upload_media``): ``request`` is the JSON media body
    (``content_base64`` or ``source_url``, ``filename``, ``alt_text``, ``caption``,
    ``title``) plus the path's ``slot``, parsed as the HTTP view parses it
    (:func:`gateway.core.media_request.parse`).

    Raises:
        ValidationFailed (422): both or neither source, ``content_base64`` not valid base64 or
            empty; nothing is claimed.
        plus everything :func:`put_request` raises.
    """
    return put_request(target, request["slot"], media_request.parse(request))


def put_request(target: Target, slot: str, parsed: media_request.MediaRequest) -> Outcome:
    """Upload the image of ``slot`` that a parsed request names: its bytes
    (:func:`put_media`) or its URL (:func:`put_media_from_url`).

    Raises: what :func:`put_media` or :func:`put_media_from_url` raises.
    """
    metadata = (parsed.alt_text, parsed.caption, parsed.title)
    if parsed.source_url is not None:
        return put_media_from_url(target, slot, parsed.source_url, parsed.filename, *metadata)
    return put_media(target, slot, parsed.content, parsed.filename, *metadata)


def still_there(target: Target, media_id: int, alive: dict[int, bool]) -> bool:
    """Whether attachment ``media_id`` is still in WordPress, read back (``GET
    /wp/v2/media/{id}?context=edit`` or ``wp.getPost``): not when WordPress answers 404 (deleted
    from the media library) or holds it in the trash. ``alive`` remembers the answers of
    one request.

    Raises:
        WordPressUnavailable (503) / UpstreamRefused (502): it cannot be read now.
    """
    if media_id not in alive:
        try:
            alive[media_id] = target.client.get_media(media_id).get("status") != "trash"
        except WordPressNotFound:
            alive[media_id] = False
        except WordPressError as error:
            raise refusals.cannot_read(error) from error
    return alive[media_id]


def _reuse_earlier_version(
    target: Target, key: str, slot: str, digest: str, alive: dict[int, bool]
):
    """Unchanged bytes under a new task version: record the earlier attachment as this
    version's receipt (a replay, no upload) once it is read back (:func:`still_there`); None
    when it is gone (then it is uploaded again). At task version 1 there is no earlier
    version: nothing is read."""
    if target.job.task_version <= 1:
        return None
    earlier = _confirmed_of_slot_query(
        target, slot, Operation.request_hash == digest, Operation.operation_key != key
    ).first()
    if earlier is None:
        return None
    if not still_there(target, earlier.remote_id, alive):
        return None
    return _record_reuse(target, key, slot, digest, earlier)


def _record_reuse(target: Target, key: str, slot: str, digest: str, earlier: Operation):
    """Record ``earlier``'s attachment as this version's receipt (a replay, no write): the
    claimed row moves PREPARED -> CONFIRMED by one conditional UPDATE
    (:func:`gateway.operations.transitions.move`). None when the key's row is past PREPARED
    and not CONFIRMED (another request sends it: :func:`perform.perform`
    decides)."""
    row = perform.claim(target, key, digest, ACTION, slot)
    if row.state == CONFIRMED:
        return Outcome(row, replayed=True)
    reused = transitions.move(
        row,
        CONFIRMED,
        PREPARED,
        remote_id=earlier.remote_id,
        receipt={**earlier.receipt, "reused_from": earlier.operation_key},
    )
    if not reused:
        row = Operation.get_by_id(row.id)
        return Outcome(row, replayed=True) if row.state == CONFIRMED else None
    return Outcome(row, replayed=True)


registry.register(
    registry.Action(
        name=ACTION,
        binds="attachment",
        recovery=registry.LOOKUP,
        send=send_request,
        rebuild=rebuild,
        step="upload_media",
        object_type="attachment",
        phases=frozenset({states.DRAFTING}),
        tool=registry.AgentTool(
            "upload_media",
            "Upload one image of the job into a named slot, once (base64 bytes). Returns the "
            "media id and URL; the same slot and bytes again returns the stored receipt.",
            "media",
            path=(("slot", "the media slot, e.g. hero"),),
        ),
        # source_url: WordPress's URL of the upload; requested_url, downloaded_from: the URL
        # sent and the one finally downloaded from (redirects followed) for an image sent by
        # URL, else None.
        answer=registry.Answer(
            "media_id", ("source_url", "mime_type", "requested_url", "downloaded_from")
        ),
    )
)
