"""Media metadata in verification and repair: the ``alt_text``, ``caption`` and ``title`` each
image of the job's post was given are read back (``GET /wp/v2/media?include=…&context=edit``,
one query) and compared; repair writes back only the drifted fields of each attachment
(``POST /wp/v2/media/{id}``) as a ledger operation of its own,
``{tenant}/{job_id}/v{n}/media_meta/{slot}/{d16}`` (``d16``: the fixes and the attachment's
``modified_gmt``, as for post repairs), read back like every other write. An attachment
deleted in WordPress has no metadata to write back: repair names it (slot and id) instead,
and :mod:`gateway.actions.repair` answers 409 ``repair-incomplete``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.digests import canonical_json
from gateway.core.digests import request_digest
from gateway.core.digests import sha256_hex
from gateway.jobs import records
from gateway.ledger.models import Operation
from gateway.operations import perform
from gateway.operations import refusals
from gateway.operations import registry
from gateway.operations import verification
from gateway.operations.effects import Effect
from gateway.operations.target import Target
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressNotFound
from gateway.wordpress.errors import WordPressOutcomeUnknown


def _stored(attachment: dict) -> dict:
    """The attachment's metadata as stored; ``alt_text`` is None when the transport cannot
    read it (XML-RPC: protected meta), "" when it is empty."""
    unreadable = bool(attachment) and "alt_text" in attachment and attachment["alt_text"] is None
    return {
        "alt_text": None if unreadable else attachment.get("alt_text") or "",
        "caption": verification.raw(attachment, "caption"),
        "title": verification.raw(attachment, "title"),
    }


def wanted(
    job, media_ids: list[int], media: dict[str, Operation] | None = None
) -> dict[str, tuple[int, dict]]:
    """``{slot: (media_id, {field: value asked for})}`` for the post's images whose media
    request named metadata (latest CONFIRMED row of each slot; ``media``: those rows as
    already read by the caller, :func:`gateway.jobs.records.confirmed_media`). A post without images
    reads nothing."""
    if not media_ids:
        return {}
    found = {}
    for slot, row in (records.confirmed_media(job) if media is None else media).items():
        metadata = (row.receipt or {}).get("metadata") or {}
        if row.remote_id in media_ids and metadata:
            found[slot] = (row.remote_id, metadata)
    return found


def post_media_ids(draft_receipt: dict) -> list[int]:
    """The attachment ids a draft receipt expects in its post (featured and body images)."""
    expected = draft_receipt.get("expected") or {}
    featured = [expected["featured_media"]] if expected.get("featured_media") else []
    return featured + list(expected.get("body_media") or [])


def add_to(result: dict, field: dict | None) -> dict:
    """``result`` (a verification) with the ``media_metadata`` field, ``ok`` updated."""
    if field is not None:
        result["fields"]["media_metadata"] = field
        if field["ok"] is False:  # None: cannot be checked here, as verification.compare has it
            result["ok"] = False
    return result


def compare(
    target: Target, media_ids: list[int], media: dict[str, Operation] | None = None
) -> dict | None:
    """The ``media_metadata`` verification field: ``{"expected", "actual", "ok"}`` keyed by
    slot, or None when no image of the post asked for metadata (``media``: as
    :func:`wanted`).

    Raises:
        WordPressError: the attachments cannot be read.
    """
    asked = wanted(target.job, media_ids, media)
    if not asked:
        return None
    live = target.client.get_many("/wp/v2/media", [mid for mid, _ in asked.values()])
    expected, actual, unread = {}, {}, False
    for slot, (media_id, metadata) in asked.items():
        expected[slot] = dict(metadata)
        stored = _stored(live.get(media_id, {}))
        actual[slot] = {name: stored[name] for name in metadata}
        unread = unread or any(v is None for v in actual[slot].values())
    drifted = _fixes(expected, actual)
    field = {"expected": expected, "actual": actual, "ok": not drifted}
    if not drifted and unread:  # what can be read matches; the rest cannot be checked
        field.update(ok=None, reason="alt text cannot be read over the site's transport")
    return field


def _fixes(expected: dict, actual: dict) -> dict[str, dict]:
    """``{slot: {field: value}}`` of the readable fields that differ (a field the transport
    cannot read, ``None``, is never written back: it cannot be checked afterwards either)."""
    found = {}
    for slot, wanted_fields in expected.items():
        fixes = {
            k: v
            for k, v in wanted_fields.items()
            if actual[slot].get(k) is not None and actual[slot].get(k) != v
        }
        if fixes:
            found[slot] = fixes
    return found


def _effect(target: Target, intent: dict) -> Effect:
    client, media_id, fixes = target.client, intent["media_id"], intent["fixes"]

    def read_back(object_id: int, _sent: dict | None) -> dict:
        stored = _stored(client.get_media(object_id))
        if any(stored[name] != value for name, value in fixes.items()):
            raise WordPressOutcomeUnknown("read-back does not show the repaired metadata")
        return {"media_id": object_id, "slot": intent["slot"], "fixes": sorted(fixes)}

    return Effect(
        action="media_meta",
        send=lambda: client.update_media(media_id, fixes),
        find=lambda: [],  # an update is idempotent: sending it again is the reconciliation
        read_back=read_back,
        creates=False,
        intent=intent,
    )


def rebuild(target: Target, row: Operation, found=None, prefetched=None) -> Effect:
    """The effect of a ``media_meta`` row from its intent alone (reconciliation)."""
    return _effect(target, row.intent or {})


@dataclass
class MetadataRepair:
    """What :func:`repair` did: ``repaired``, the slots whose metadata was written back;
    ``gone``, ``{slot: media_id}`` of the drifted attachments WordPress no longer has
    (deleted from the media library, or in its trash), whose metadata cannot be written."""

    repaired: list[str]
    gone: dict[str, int]


def _live_attachment(target: Target, media_id: int) -> dict | None:
    """The attachment read back (``GET /wp/v2/media/{id}?context=edit``), or None when
    WordPress answers 404 or holds it in the trash.

    Raises:
        WordPressUnavailable (503) / UpstreamRefused (502): it cannot be read now.
    """
    try:
        attachment = target.client.get_media(media_id)
    except WordPressNotFound:
        return None
    except WordPressError as error:
        raise refusals.cannot_read(error) from error
    return None if attachment.get("status") == "trash" else attachment


def repair(target: Target, field: dict | None) -> MetadataRepair:
    """Write back the drifted metadata of each attachment in ``field`` (the verification's
    ``media_metadata``), one ledger operation per attachment. An attachment WordPress no
    longer has is left out (nothing can restore its metadata) and named in ``gone``.

    Raises:
        WordPressUnavailable (503) / UpstreamRefused (502): an attachment cannot be read now;
        plus everything :func:`perform.perform` raises.
    """
    done = MetadataRepair(repaired=[], gone={})
    if not field or field["ok"] is not False:
        return done
    for slot, fixes in _fixes(field["expected"], field["actual"]).items():
        media_id = records.confirmed_media(target.job)[slot].remote_id
        attachment = _live_attachment(target, media_id)
        if attachment is None:
            done.gone[slot] = media_id
            continue
        modified = attachment.get("modified_gmt")
        stamp = sha256_hex(canonical_json({"fixes": fixes, "drifted_at": modified}))[:16]
        key = perform.operation_key(target.job, "media_meta", f"{slot}/{stamp}")
        intent = {"media_id": media_id, "slot": slot, "fixes": fixes}
        perform.perform(
            target, key, request_digest(intent), _effect(target, intent), slot=f"{slot}/{stamp}"
        )
        done.repaired.append(slot)
    return done


def _send_request(target: Target, request: dict) -> None:
    """Registry ``send``: ``request`` is ``{"field"}``, the verification's ``media_metadata``;
    the outcomes are the ``media_meta`` rows, one per repaired attachment."""
    repair(target, request["field"])


registry.register(
    registry.Action(
        name="media_meta",
        binds="attachment",
        recovery=registry.RESEND,  # an idempotent update: nothing to look up, sent again
        send=lambda target, request: _send_request(target, request),
        rebuild=rebuild,
        step="repair",
    )
)
