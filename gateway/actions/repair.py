"""Repair: write back only what verification found missing or drifted, with one
``POST /wp/v2/posts/{id}`` to the job's existing post (never a new post).

Repairable fields: ``title``, ``excerpt``, ``content`` (gateway-marked blocks in the live post
are kept), ``featured_media`` and the three Rank Math fields (companion plugin present). The
post's ``status`` is never repaired: publishing goes through an approval.

Operation key: ``{tenant}/{job_id}/v{n}/repair/{d16}`` where ``d16`` is the first 16 hex digits
of the SHA-256 of the canonical JSON of ``{"fixes", "drifted_at"}`` - the fixes and the live
post's ``modified_gmt``. Two repairs of the same drifted revision share the key (the second
replays, no write); after a successful repair nothing is left to fix (200, ``fixes: {}``, no
write); the same drift happening *again* later is a new revision of the post, hence a new key,
and is repaired again (keying by the fixes alone would replay and leave it broken).

A field repair cannot restore is **not a success**: a featured image whose attachment was
deleted from the media library (WordPress answers 200 to ``featured_media`` naming a missing
attachment and keeps 0; proudcity/wp-proudcity#2184) is left out of the write, and a field
WordPress did not keep after the write is found on read-back; either way the answer is 409
``repair-incomplete`` naming each such field and why, after the fields that could be restored
were written. The same holds for an image's metadata (``alt_text``, ``caption``, ``title``)
whose attachment was deleted in WordPress: ``unfixable`` names its slot and media id, and the
next step is to upload the image again under a new task_version and send the draft.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

from gateway.actions import blocks
from gateway.actions import drafts
from gateway.actions import media_metadata
from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core.digests import canonical_json
from gateway.core.digests import request_digest
from gateway.core.digests import sha256_hex
from gateway.jobs import guards
from gateway.jobs import records
from gateway.jobs import timeline
from gateway.ledger import db
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import Operation
from gateway.operations import block_markers
from gateway.operations import fresh_reads
from gateway.operations import ownership
from gateway.operations import perform
from gateway.operations import refusals
from gateway.operations import registry
from gateway.operations import verification
from gateway.operations.effects import Effect
from gateway.operations.effects import Outcome
from gateway.operations.effects import lookup_only
from gateway.operations.target import Target
from gateway.wordpress import SEO_META
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressNotFound

log = logging.getLogger(__name__)
ACTION = "repair"


def fixes_for(receipt: dict, live: dict, result: dict) -> dict:
    """The WordPress fields that restore the draft baseline where verification failed.

    Args:
        receipt: the draft receipt (``baseline``, ``sent``, ``expected``).
        live: the post read back (``context=edit``).
        result: :func:`verification.compare` of the two.

    Returns a partial ``POST /wp/v2/posts/{id}`` body (``{}`` when nothing is to fix).
    """
    base, fields = receipt["baseline"], result["fields"]
    fixes: dict = {}
    for name in ("title", "excerpt"):
        if fields[name]["ok"] is False:
            fixes[name] = base[name]
    if fields["content"]["ok"] is False or fields["body_media"]["ok"] is False:
        kept = "".join(
            b["text"] for b in block_markers.blocks_in(verification.raw(live, "content"))
        )
        fixes["content"] = block_markers.strip_blocks(base["content"]) + kept
    if fields["featured_media"]["ok"] is False:
        fixes["featured_media"] = receipt["expected"]["featured_media"]
    for name in ("categories", "tags"):
        if name in fields and fields[name]["ok"] is False:
            fixes[name] = receipt["expected"][name]
    meta = {
        key: fields["seo." + name]["expected"]
        for name, key in SEO_META.items()
        if fields["seo." + name]["ok"] is False
    }
    if meta:
        fixes["meta"] = meta
    return fixes


def _expected_status(job) -> str:
    return records.EXPECTED_STATUS.get(job.phase, "draft")


# Which verification fields show that a fix (a WordPress field) is in place.
_CHECKED_BY = {
    "title": ("title",),
    "excerpt": ("excerpt",),
    "content": ("content", "body_media"),
    "featured_media": ("featured_media",),
    "meta": tuple("seo." + name for name in SEO_META),
    "categories": ("categories",),
    "tags": ("tags",),
}


def _repair_effect(target: Target, intent: dict, send: Callable[[], dict]) -> Effect:
    """The repair's effect from its ``intent`` (``update_of``, ``fixes`` names, ``draft``
    operation key): it is found when every fixed field verifies against the draft baseline."""
    post_id, names = intent["update_of"], intent["fixes"]
    draft = Operation.get_or_none(Operation.operation_key == intent.get("draft"))
    draft = draft or drafts.latest_draft(target.job)

    def check(live: dict) -> dict:
        present = target.companion.present
        return verification.compare(draft.receipt, live, present, _expected_status(target.job))

    def find() -> list[dict]:
        live = blocks.live_post(target.client, post_id)
        if live is None or draft is None:
            return []
        fields = check(live)["fields"]
        fixed = all(fields[f]["ok"] is not False for n in names for f in _CHECKED_BY[n])
        return [{"id": post_id, "type": "post"}] if fixed else []

    def read_back(object_id: int, sent: dict | None) -> dict:
        result = check(fresh_reads.after_write(target.client, object_id, sent))
        return {"post_id": object_id, "fixes": names, "verification": result}

    return Effect(
        action=ACTION, send=send, find=find, read_back=read_back, creates=False, intent=intent
    )


def rebuild(target: Target, row: Operation, found=None, prefetched=None) -> Effect:
    """The repair effect of ``row`` from its stored intent (registry ``rebuild``)."""
    return _repair_effect(target, row.intent or {}, lookup_only)


def settle(target: Target, row: Operation) -> None:
    """A CONFIRMED repair enters the job's timeline and, when its read-back verifies, makes
    the job ``verified``: both in one transaction (a crash between them leaves neither)."""
    if row.task_version != target.job.task_version:
        return
    check = (row.receipt or {}).get("verification") or {}
    with db.atomic():
        timeline.record(target.job, states.REPAIRED, None, check.get("content_sha256"))
        if check.get("ok"):
            records.advance_phase(target.job, states.VERIFIED, digest=check.get("content_sha256"))


@dataclass
class Repair:
    """What :func:`repair_job` did: the post, the fixes written (WordPress fields, ``{}`` when
    nothing was to fix), the verification (after the repair, or the one that found nothing to
    fix) and the ledger outcome (None when nothing was written)."""

    post_id: int
    fixes: dict
    verification: dict | None
    outcome: Outcome | None
    media_metadata: list[str] = field(default_factory=list)


def unfixable(target: Target, fixes: dict) -> dict[str, str]:
    """The fixes that cannot restore their field, each with the reason: ``featured_media``
    naming an attachment that is no longer in WordPress (``GET /wp/v2/media/{id}`` 404, or
    in the trash), which WordPress would silently not set.

    Raises:
        WordPressUnavailable (503) / UpstreamRefused (502): the attachment cannot be read now.
    """
    media_id = fixes.get("featured_media")
    if not media_id:
        return {}
    try:
        gone = target.client.get_media(media_id).get("status") == "trash"
    except WordPressNotFound:
        gone = True
    except WordPressError as error:
        raise refusals.cannot_read(error) from error
    if not gone:
        return {}
    return {
        "featured_media": f"attachment {media_id} is no longer in WordPress (deleted from the "
        "media library); upload the image again under a new task_version and send the draft"
    }


def _not_kept(receipt: dict, names: list[str]) -> dict[str, str]:
    """The fixes written whose fields still fail in the repair's read-back verification."""
    fields = ((receipt or {}).get("verification") or {}).get("fields") or {}
    return {
        name: "WordPress did not keep the value written (read back after the repair)"
        for name in names
        if any((fields.get(f) or {}).get("ok") is False for f in _CHECKED_BY[name])
    }


def gone_media(job_id: str, gone: dict[str, int]) -> list[dict]:
    """``unfixable`` entries for images whose metadata cannot be written back because their
    attachment is no longer in WordPress (``gone``: ``{slot: media_id}``, from
    :func:`media_metadata.repair`): ``{"field": "media_metadata", "slot", "media_id",
    "reason"}``, the reason saying the next step."""
    return [
        {
            "field": "media_metadata",
            "slot": slot,
            "media_id": media_id,
            "reason": f"attachment {media_id} of slot {slot} is no longer in WordPress (deleted "
            "from the media library), so its alt_text, caption and title cannot be written "
            f"back; upload the image again under a new task_version (PUT /v1/jobs/{job_id} "
            f"with a higher task_version, then PUT /v1/jobs/{job_id}/media/{slot}) and send "
            "the draft",
        }
        for slot, media_id in sorted(gone.items())
    ]


def _incomplete(
    post_id: int,
    reasons: dict[str, str],
    written: list[str],
    outcome,
    media: list[dict] | None = None,
) -> None:
    """Raise 409 ``repair-incomplete`` when a field could not be restored (``reasons``: post
    fields, each with why; ``media``: :func:`gone_media` entries)."""
    unfixable = [{"field": name, "reason": why} for name, why in sorted(reasons.items())]
    unfixable += media or []
    if not unfixable:
        return
    raise exc.RepairIncomplete(
        "repair cannot restore "
        + ", ".join(f"{entry['field']} ({entry['reason']})" for entry in unfixable)
        + (f"; restored: {', '.join(written)}" if written else "; nothing else to restore"),
        post_id=post_id,
        unfixable=unfixable,
        fixes=written,
        operation_key=outcome.row.operation_key if outcome else None,
    )


def _media_field(target: Target, media_ids: list[int]) -> dict | None:
    """:func:`media_metadata.compare`, its read failures as problems.

    Raises:
        WordPressUnavailable (503) / UpstreamRefused (502): the attachments cannot be read now.
    """
    try:
        return media_metadata.compare(target, media_ids)
    except WordPressError as error:
        raise refusals.cannot_read(error) from error


def repair_job(target: Target) -> Repair:
    """Verify the job's post live and write back only the failed fields.

    Raises:
        NotFound: the job has no CONFIRMED draft.
        ForeignObject: another job or tenant holds the post too (nothing is written).
        WordPressRefused: the post no longer exists (404); WordPressUnavailable: it cannot be
            read now.
        PostTrashed (409): an editor moved the post to the trash; nothing is written.
        RepairIncomplete (409): a failed field cannot be restored (:func:`unfixable`; an
            image's metadata whose attachment is gone, :func:`gone_media`), or WordPress did
            not keep a fix; the others were written.
        plus everything :func:`perform.perform` raises.
    """
    guards.check_writable(target)
    job = target.job
    draft = drafts.latest_draft(job)
    if draft is None:
        raise exc.NotFound("the job has no confirmed draft to repair")
    drafts.require_receipt(draft)
    ownership.check_job_post(target, draft.remote_id)
    live = drafts.read_live(target, draft.remote_id, draft.receipt)  # past any cache
    drafts.refuse_trashed(draft.remote_id, live)  # the editor decides, not a repair
    result = verification.compare(
        draft.receipt, live, target.companion.present, _expected_status(job)
    )
    fixes = fixes_for(draft.receipt, live, result)
    reasons = unfixable(target, fixes)
    fixes = {name: value for name, value in fixes.items() if name not in reasons}
    media_ids = media_metadata.post_media_ids(draft.receipt)
    metadata = media_metadata.repair(target, _media_field(target, media_ids))  # one op each
    media_fixed = metadata.repaired
    gone = gone_media(job.job_id, metadata.gone)
    if media_fixed:
        media_metadata.add_to(result, _media_field(target, media_ids))
    if not fixes:
        _incomplete(draft.remote_id, reasons, ["media_metadata"] if media_fixed else [], None, gone)
        return Repair(draft.remote_id, {}, result, None, media_fixed)
    stamp = sha256_hex(canonical_json({"fixes": fixes, "drifted_at": live.get("modified_gmt")}))
    key = perform.operation_key(job, ACTION, stamp[:16])
    intent = {"update_of": draft.remote_id, "fixes": sorted(fixes), "draft": draft.operation_key}
    effect = _repair_effect(
        target, intent, lambda: target.client.update_post(draft.remote_id, fixes)
    )
    log.info("repairing %s for job_id=%s operation_key=%s", sorted(fixes), job.job_id, key)
    outcome = perform.perform(target, key, request_digest(fixes), effect, slot=stamp[:16])
    if outcome.row.state == CONFIRMED:
        settle(target, outcome.row)
        reasons |= _not_kept(outcome.row.receipt, sorted(fixes))
    written = sorted(set(fixes) - set(reasons)) + (["media_metadata"] if media_fixed else [])
    _incomplete(draft.remote_id, reasons, written, outcome, gone)
    check = (outcome.row.receipt or {}).get("verification")
    return Repair(draft.remote_id, fixes, check, outcome, media_fixed)


registry.register(
    registry.Action(
        name=ACTION,
        recovery=registry.LOOKUP,
        send=lambda target, _request: repair_job(target).outcome,
        rebuild=rebuild,
        step="repair",
        phases=frozenset({states.DRAFT_CONFIRMED}),
        settle=settle,
    )
)
