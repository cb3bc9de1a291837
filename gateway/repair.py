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
"""

from __future__ import annotations

import logging

from gateway import blocks
from gateway import drafts
from gateway import exceptions as exc
from gateway import jobs
from gateway import media_metadata
from gateway import operations
from gateway import ownership
from gateway import refusals
from gateway import verification
from gateway.digests import canonical_json
from gateway.digests import request_digest
from gateway.digests import sha256_hex
from gateway.ledger import CONFIRMED
from gateway.operations import Effect
from gateway.operations import Outcome
from gateway.operations import Target
from gateway.wordpress import SEO_META
from gateway.wordpress.errors import WordPressError

log = logging.getLogger(__name__)


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
        kept = "".join(b["text"] for b in blocks.blocks_in(verification.raw(live, "content")))
        fixes["content"] = blocks.strip_blocks(base["content"]) + kept
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


def _read_live(target: Target, post_id: int) -> dict:
    try:
        return target.client.get_post(post_id)
    except WordPressError as error:
        raise refusals.cannot_read(error) from error


def _expected_status(job) -> str:
    return jobs.EXPECTED_STATUS.get(job.phase, "draft")


def _repair_effect(target: Target, draft_receipt: dict, post_id: int, fixes: dict) -> Effect:
    client, job = target.client, target.job

    def read_back(object_id: int, _sent: dict | None) -> dict:
        live = client.get_post(object_id)
        check = verification.compare(
            draft_receipt, live, target.companion.present, _expected_status(job)
        )
        return {"post_id": object_id, "fixes": sorted(fixes), "verification": check}

    return Effect(
        action="repair",
        send=lambda: client.update_post(post_id, fixes),
        find=lambda: [],  # an update is idempotent: sending it again is the reconciliation
        read_back=read_back,
        creates=False,
        intent={"update_of": post_id, "fixes": sorted(fixes)},
    )


def repair_job(target: Target) -> tuple[dict, Outcome | None]:
    """Verify the job's post live and write back only the failed fields.

    Returns ``(body, outcome)``; ``outcome`` is None when there was nothing to fix.

    Raises:
        NotFound: the job has no CONFIRMED draft.
        ForeignObject: another job or tenant holds the post too (nothing is written).
        WordPressUnavailable: the post cannot be read now.
        plus everything :func:`operations.perform` raises.
    """
    job = target.job
    draft = drafts.latest_draft(job)
    if draft is None:
        raise exc.NotFound("the job has no confirmed draft to repair")
    drafts.require_receipt(draft)
    ownership.check_job_post(target, draft.remote_id)
    live = _read_live(target, draft.remote_id)
    result = verification.compare(
        draft.receipt, live, target.companion.present, _expected_status(job)
    )
    fixes = fixes_for(draft.receipt, live, result)
    media_ids = media_metadata.post_media_ids(draft.receipt)
    try:
        field = media_metadata.compare(target, media_ids)
    except WordPressError as error:
        raise refusals.cannot_read(error) from error
    media_fixed = media_metadata.repair(target, field)  # one operation per attachment
    if media_fixed:
        media_metadata.add_to(result, media_metadata.compare(target, media_ids))
    if not fixes:
        shown = {"media_metadata": media_fixed} if media_fixed else {}
        body = {"job_id": job.job_id, "post_id": draft.remote_id, "fixes": shown}
        return {**body, "operation_key": None, "replayed": False, "verification": result}, None
    stamp = sha256_hex(canonical_json({"fixes": fixes, "drifted_at": live.get("modified_gmt")}))
    key = operations.operation_key(job, "repair", stamp[:16])
    effect = _repair_effect(target, draft.receipt, draft.remote_id, fixes)
    log.info("repairing %s for job_id=%s operation_key=%s", sorted(fixes), job.job_id, key)
    outcome = operations.perform(target, key, request_digest(fixes), effect, slot=stamp[:16])
    check = (outcome.row.receipt or {}).get("verification") or {}
    if outcome.row.state == CONFIRMED and check.get("ok"):
        jobs.advance_phase(job, "verified")
    body = {
        "job_id": job.job_id,
        "post_id": draft.remote_id,
        "fixes": {
            **{name: _shown(name, value) for name, value in fixes.items()},
            **({"media_metadata": media_fixed} if media_fixed else {}),
        },
        "operation_key": outcome.row.operation_key,
        "state": outcome.row.state,
        "replayed": outcome.replayed,
        "verification": check or None,
    }
    return body, outcome


def _shown(name: str, value):
    """A fix as shown in the response: content as its digest, the rest as sent."""
    return "sha256:" + sha256_hex(value) if name == "content" else value
