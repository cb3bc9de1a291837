"""Drafts: one WordPress post per job, created as a draft with its excerpt, featured image,
body images and Rank Math fields (WordPress REST API, ``POST /wp/v2/posts``).

The operation key travels inside the create request as post meta, so the companion plugin's
guard and reconciliation see it from the first byte. Under a new task version the same post is
updated, sending only the fields that differ - unless an editor moved it to the trash: then
nothing is written (409 ``post-trashed``) until the editor restores it or decides otherwise
(pento/claudaborative-editing#27).
"""

from __future__ import annotations

import html
import json
import logging
import re
from collections.abc import Callable

from gateway.actions import attachments
from gateway.actions import media_metadata
from gateway.actions import terms
from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core.digests import request_digest
from gateway.jobs import checkpoints
from gateway.jobs import guards
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import Operation
from gateway.operations import earlier_versions
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
from gateway.wordpress import OPERATION_KEY_META
from gateway.wordpress import SEO_META
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressNotFound

log = logging.getLogger(__name__)
ACTION = "draft"
PLACEHOLDER = re.compile(r"\{\{media:([a-z0-9_-]{1,64})\}\}")


def image_block(media_id: int, url: str, alt: str) -> str:
    """A block-editor image block for attachment ``media_id`` (``wp-image-{id}`` class)."""
    attrs = json.dumps(
        {"id": media_id, "sizeSlug": "full", "linkDestination": "none"}, separators=(",", ":")
    )
    return (
        f'<!-- wp:image {attrs} -->\n<figure class="wp-block-image size-full">'
        f'<img src="{html.escape(url, quote=True)}" alt="{html.escape(alt, quote=True)}"'
        f' class="wp-image-{media_id}"/></figure>\n<!-- /wp:image -->'
    )


def names_media(body: dict) -> bool:
    """True when the draft names a media slot (featured, body images or a placeholder)."""
    return bool(
        body.get("body_media")
        or (body.get("featured_media") or {}).get("slot")
        or PLACEHOLDER.search(body["content"])
    )


def placed_slots(body: dict) -> list[str]:
    """The slots the draft places in its content, in order: ``body_media``, plus the featured
    slot where a ``{{media:SLOT}}`` placeholder names it without ``body_media`` listing it
    (the featured image shown in the body too: its place among ``body_media`` is where its
    placeholder comes among theirs). docs/api.md, ``PUT /v1/jobs/{job_id}/draft``."""
    wanted = list(body.get("body_media") or [])
    featured = (body.get("featured_media") or {}).get("slot")
    placeholders = list(dict.fromkeys(PLACEHOLDER.findall(body["content"])))
    if not featured or featured in wanted or featured not in placeholders:
        return wanted
    before = placeholders[: placeholders.index(featured)]
    at = max((wanted.index(s) + 1 for s in before if s in wanted), default=0)
    return [*wanted[:at], featured, *wanted[at:]]


def resolve_media(
    job, body: dict, media: dict[str, Operation] | None = None
) -> tuple[int, list[int], str]:
    """``(featured_media_id, body_media_ids, content)`` with placeholders replaced.
    ``media``: the job's CONFIRMED media by slot as already read
    (:func:`gateway.jobs.records.confirmed_media`); read here when None and the draft names media.

    Raises:
        ValidationFailed: a named slot was never uploaded in this job (any task version; one
            error per slot, pointer ``/featured_media/slot`` or ``/body_media/{i}``), or
            ``content`` names a slot that is neither in ``body_media`` nor the featured slot.
        MediaNotReady (409): a named slot's upload is not CONFIRMED (yet).
    """
    listed = list(body.get("body_media") or [])
    featured_slot = (body.get("featured_media") or {}).get("slot")
    if not names_media(body):
        return 0, [], body["content"]  # no media named: nothing to look up
    media = records.confirmed_media(job) if media is None else media
    named = [("/featured_media/slot", featured_slot)] if featured_slot else []
    named += [(f"/body_media/{i}", slot) for i, slot in enumerate(listed)]
    missing = [(pointer, slot) for pointer, slot in named if slot not in media]
    if missing:
        _refuse_missing_media(job, missing)
    wanted = placed_slots(body)
    stray = sorted(set(PLACEHOLDER.findall(body["content"])) - set(wanted))
    if stray:
        raise exc.ValidationFailed(
            "content names media slots missing from body_media",
            errors=[
                {"pointer": "/content", "message": f"unknown placeholder slot {s!r}"} for s in stray
            ],
        )

    def replace(match: re.Match) -> str:
        row = media[match.group(1)]
        return image_block(
            row.remote_id, row.receipt.get("source_url") or "", row.receipt.get("alt_text") or ""
        )

    content = PLACEHOLDER.sub(replace, body["content"])
    featured = media[featured_slot].remote_id if featured_slot else 0
    return featured, [media[s].remote_id for s in wanted], content


def _refuse_missing_media(job, missing: list[tuple[str, str]]) -> None:
    """Why the named slots ``missing`` (``(pointer, slot)``) have no CONFIRMED attachment:
    never uploaded in this job is the request's mistake (422, waiting will not help); an
    upload in flight, unknown or refused is 409 ``media-not-ready`` with each slot's state.

    Raises:
        ValidationFailed (422) or MediaNotReady (409).
    """
    states = {
        row.slot: row.state
        for row in Operation.select(Operation.slot, Operation.state)
        .where(
            Operation.tenant == job.tenant,
            Operation.job_id == job.job_id,
            Operation.action == "media",
            Operation.slot.in_([slot for _, slot in missing]),
        )
        .order_by(Operation.id)
    }
    never = [(pointer, slot) for pointer, slot in missing if slot not in states]
    if never:
        raise exc.ValidationFailed(
            "no image was uploaded for media slot(s) "
            + ", ".join(repr(slot) for _, slot in never)
            + " in this job: upload each first (PUT /v1/jobs/{job_id}/media/{slot}); "
            "nothing was written",
            errors=[
                {"pointer": pointer, "message": f"no upload for slot {slot!r} in this job"}
                for pointer, slot in never
            ],
        )
    slots = list(dict.fromkeys(slot for _, slot in missing))
    raise exc.MediaNotReady(
        "media slots not CONFIRMED yet: "
        + ", ".join(f"{slot} ({states[slot]})" for slot in slots)
        + " (an upload in flight or unknown: retry it, or recover the job)",
        slots=slots,
    )


def post_fields(key: str, body: dict, featured: int, content: str) -> dict:
    """The WordPress fields of the post (``status`` draft, operation key and SEO as meta)."""
    seo = body["seo"]
    fields = {
        "title": body["title"],
        "content": content,
        "excerpt": body["excerpt"],
        "status": "draft",
        "featured_media": featured,
        "meta": {OPERATION_KEY_META: key, **{meta: seo[name] for name, meta in SEO_META.items()}},
    }
    for name in ("slug", "categories", "tags"):
        if body.get(name) is not None:
            fields[name] = body[name]
    return fields


def _changed_fields(fields: dict, previous: dict) -> dict:
    """Only what differs from the previous version's baseline (the key is never rewritten)."""
    base = previous["baseline"]
    changed = {}
    for name in ("title", "content", "excerpt"):
        if fields[name] != previous["sent"].get(name) or base[name] == "":
            changed[name] = fields[name]
    if fields["featured_media"] != base["featured_media"]:
        changed["featured_media"] = fields["featured_media"]
    meta = {
        k: v
        for k, v in fields["meta"].items()
        if k != OPERATION_KEY_META and v != base["seo"].get(_seo_name(k))
    }
    if meta:
        changed["meta"] = meta
    for name in ("slug", "categories", "tags"):
        if name in fields:
            changed[name] = fields[name]
    return changed


def _seo_name(meta_key: str) -> str:
    return next(name for name, key in SEO_META.items() if key == meta_key)


def read_back(
    target: Target,
    post_id: int,
    sent_object: dict | None,
    intent: dict,
    live: dict | None = None,
    media: dict[str, Operation] | None = None,
) -> dict:
    """Read the post back (``GET /wp/v2/posts/{id}?context=edit``, past any cache:
    :func:`gateway.operations.fresh_reads.after_write`) and build the draft receipt: the
    baseline WordPress returned to the write (or the read-back when the post was found by
    reconciliation) and its ``modified_gmt``, what was sent, what is expected, and the
    verification.
    ``live`` is a read-back already made (a sweep reads many posts in one query); ``media``
    the job's CONFIRMED media by slot as the draft request read them (None: read if needed)."""
    live = live or fresh_reads.after_write(target.client, post_id, sent_object)
    receipt = {
        "post_id": post_id,
        "link": live.get("link"),
        "baseline": verification.snapshot(sent_object or live),
        "modified_gmt": (sent_object or live).get("modified_gmt"),
        "sent": intent["sent"],
        "expected": intent["expected"],
    }
    receipt["verification"] = verification.compare(receipt, live, target.companion.present)
    media_metadata.add_to(receipt["verification"], _metadata_field(target, receipt, media))
    return receipt


def _metadata_field(target: Target, receipt: dict, media: dict | None = None) -> dict | None:
    """The verification's ``media_metadata`` field of a draft receipt, as ``GET
    /verification`` shows it (None when no image of the post asked for metadata). The post
    itself was read back: attachments that cannot be read now make the field ``ok: null``
    with a reason (not checked), never the write UNKNOWN."""
    ids = media_metadata.post_media_ids(receipt)
    try:
        return media_metadata.compare(target, ids, media)
    except WordPressError as error:
        log.warning("cannot read the attachments of post %s back: %s", receipt["post_id"], error)
        asked = media_metadata.wanted(target.job, ids, media)
        if not asked:
            return None
        return {
            "expected": {slot: dict(metadata) for slot, (_id, metadata) in asked.items()},
            "actual": None,
            "ok": None,
            "reason": "the attachments could not be read back now",
        }


def find_by_key(target: Target, key: str, post_type: str) -> list[dict]:
    """Objects of ``post_type`` carrying ``key`` ([] when the site offers no lookup: REST
    without the companion plugin). A scanning transport (XML-RPC) stops at the time the
    operation was first prepared: nothing older can carry it."""
    if not target.companion.present:
        return []
    row = Operation.get_or_none(Operation.operation_key == key)
    since = row.created_at if row is not None else None
    found = target.client.find_by_operation_keys([key], since=since, types=(post_type,))
    return [o for o in found if o["type"] == post_type]


def _draft_effect(
    target: Target,
    key: str,
    intent: dict,
    send: Callable[[], dict],
    found: list[dict] | None = None,
    prefetched: dict[int, dict] | None = None,
    media: dict[str, Operation] | None = None,
) -> Effect:
    """The draft's effect; ``find`` and ``read_back`` need only the stored ``intent``
    (``media``: the job's CONFIRMED media as the request read them, see :func:`read_back`)."""
    update_of = intent.get("update_of")

    def find() -> list[dict]:
        if update_of:  # an update is idempotent: sending it again is the reconciliation
            return []
        return found if found is not None else find_by_key(target, key, "post")

    def read(post_id: int, sent_object: dict | None) -> dict:
        live = (prefetched or {}).get(post_id)
        return read_back(target, post_id, sent_object, intent, live, media)

    return Effect(
        action=ACTION,
        send=send,
        find=find,
        read_back=read,
        creates=update_of is None,
        title=(intent.get("sent") or {}).get("title"),
        intent=intent,
    )


def rebuild(
    target: Target,
    row: Operation,
    found: list[dict] | None = None,
    prefetched: dict[int, dict] | None = None,
) -> Effect:
    """The draft effect of ``row`` from its stored intent (registry ``rebuild``)."""
    return _draft_effect(
        target, row.operation_key, row.intent or {}, lookup_only, found, prefetched
    )


def settle(target: Target, row: Operation) -> None:
    """Record a CONFIRMED draft on the job: its post id, and the phase ``verified`` (the
    read-back verified) or ``draft_confirmed``; an earlier version's row only fills in a
    missing post id."""
    job = target.job
    if row.task_version == job.task_version:
        check = (row.receipt or {}).get("verification") or {}
        phase = states.VERIFIED if check.get("ok") else states.DRAFT_CONFIRMED
        digest = check.get("content_sha256")
        records.advance_phase(job, phase, digest=digest, post_id=row.remote_id)
    elif job.post_id is None:
        records.touch(job, post_id=row.remote_id)


def settle_and_attach(target: Target, row: Operation) -> None:
    """Registry ``settle``: a draft CONFIRMED outside its own request (found by
    reconciliation, ``/recover``, the sweep, or adopted by an editor) finishes what the
    request would have done: :func:`settle`, then the post's images attached to it
    (:func:`gateway.actions.attachments.attach_media_ids`, one ledger query when they all
    are). An earlier version's row attaches nothing: the current version's draft does."""
    settle(target, row)
    if row.task_version != target.job.task_version or row.remote_id is None:
        return
    expected = (row.intent or {}).get("expected") or {}
    media_ids = [expected.get("featured_media") or 0, *(expected.get("body_media") or [])]
    attachments.attach_media_ids(target, row.remote_id, [i for i in media_ids if i])


def put_draft(target: Target, body: dict) -> Outcome:
    """Create the job's draft once (or update the same post under a new task version),
    then read it back.

    Args:
        body: the validated request (docs/api.md, ``PUT /v1/jobs/{job_id}/draft``).

    Raises:
        ArtifactDigestMismatch: ``content`` differs from the checkpointed body artifact.
        PostTrashed (409): an update whose post an editor moved to the trash; nothing written.
        MediaNotReady, ValidationFailed, plus everything :func:`perform.perform` raises.
    """
    guards.check_writable(target)
    job = target.job
    key = perform.operation_key(job, ACTION)
    digest = request_digest(body)
    replayed = perform.replay(key, digest)  # a changed body is refused before any term
    if replayed is not None:
        if job.phase not in states.GATEWAY_PHASES:
            # The request that confirmed the draft stopped (a crash) before its last step,
            # recording the draft on the job after attaching the images: finish both.
            settle_and_attach(target, replayed.row)
        elif (replayed.row.receipt or {}).get("reconciled"):
            # Confirmed by a lookup, not by the request that wrote it, which may have stopped
            # before attaching the images (and an attach may have failed since): finish that.
            attachments.attach_all(target, replayed.row.remote_id, _slots(body))
        return replayed
    checkpoints.check_body(job, body["content"])  # before anything is claimed
    media = records.confirmed_media(job) if names_media(body) else {}  # read once per request
    featured, body_ids, content = resolve_media(job, body, media)
    previous = _previous_draft(job)
    if previous is None and job.task_version > 1:
        previous = _settle_earlier_create(target)  # lookups only: 503/409 before any write
    update_of = previous.remote_id if previous is not None else None
    if update_of is not None:  # an update (sent again on reconciliation too): not into trash
        check_not_trashed(target, update_of)  # before a tag is created or the post written
    term_ids = terms.resolve(target, body)  # names -> ids; unknown categories 422, no write
    fields = post_fields(key, {**body, **term_ids}, featured, content)
    intent = {
        "sent": {
            "title": body["title"],
            "content": content,
            "excerpt": body["excerpt"],
            "seo": dict(body["seo"]),
        },
        "expected": {
            "featured_media": featured,
            "body_media": body_ids,
            **({"slug": body["slug"]} if body.get("slug") else {}),
            **term_ids,
        },
        "update_of": update_of,
    }
    if previous is not None and previous.pruned_at is not None:
        previous = None  # no baseline left to diff against: send every field
    changed = _changed_fields(fields, previous.receipt) if previous is not None else None

    def send() -> dict:
        if update_of:
            return target.client.update_post(update_of, changed)
        return target.client.create_post(fields)

    effect = _draft_effect(target, key, intent, send, media=media)
    outcome = perform.perform(target, key, digest, effect)
    if outcome.row.state == CONFIRMED:
        # A post this request created carries no attachment yet: nothing to look up.
        new_post = outcome.created and update_of is None
        attachments.attach_all(target, outcome.row.remote_id, _slots(body), media, new_post)
        settle(target, outcome.row)  # last: a replay finishes a request that died before it
    return outcome


def refuse_trashed(post_id: int, live: dict) -> None:
    """Refuse to write into the job's post read back as ``live`` when an editor moved it to
    the WordPress trash: restoring it (or not) is the editor's decision.

    Raises:
        PostTrashed (409): with ``post_id``; nothing was written.
    """
    if live.get("status") == "trash":
        raise exc.PostTrashed(
            f"the job's post {post_id} is in the WordPress trash (an editor moved it there); "
            "nothing was written: an editor restores it in WordPress (then send again) or "
            "decides the job ends",
            post_id=post_id,
        )


def check_not_trashed(target: Target, post_id: int) -> None:
    """Read the job's post back (``GET /wp/v2/posts/{id}?context=edit``) before it is
    updated and refuse a trashed one (:func:`refuse_trashed`). A post deleted for good is left
    to the update, which WordPress refuses (404).

    Raises:
        PostTrashed (409); WordPressUnavailable (503) / UpstreamRefused (502): the post
            cannot be read now.
    """
    try:
        live = target.client.get_post(post_id)
    except WordPressNotFound:
        return
    except WordPressError as error:
        raise refusals.cannot_read(error) from error
    refuse_trashed(post_id, live)


def _slots(body: dict) -> list[str]:
    """The media slots a draft uses: the featured image, then the body images."""
    featured = (body.get("featured_media") or {}).get("slot")
    return ([featured] if featured else []) + list(body.get("body_media") or [])


def _previous_draft(job) -> Operation | None:
    """The CONFIRMED draft of an earlier task version, whose post a new version updates
    (none at task version 1, the first: nothing is read)."""
    if job.task_version <= 1:
        return None
    return latest_draft(job, below_version=job.task_version)


def _settle_earlier_create(target: Target) -> Operation | None:
    """Before the job's post is created under a new task version while an earlier version's
    create is SENT or UNKNOWN: look each such row up, newest first
    (:func:`gateway.operations.earlier_versions.settle`). Found: the row is CONFIRMED and
    settled on the job (its post id), and its post is the one this version updates (returned).
    Proven absent: the next row; None when every one is, and this version creates. An older
    row left UNKNOWN behind a newer create was proven absent before that create was sent.

    Raises:
        OutcomeUnknown / WordPressUnavailable (503), OperationInProgress, NeedsReview,
            ForeignObject (409): the earlier write is not settled; nothing was written.
    """
    job = target.job
    earlier = Operation.select().where(
        Operation.tenant == job.tenant,
        Operation.job_id == job.job_id,
        Operation.action == ACTION,
        Operation.task_version < job.task_version,
    )
    for row in earlier_versions.unsettled(earlier):
        if (row.intent or {}).get("update_of"):
            continue  # an update of a post whose create is CONFIRMED: nothing to create
        outcome = earlier_versions.settle(target, row, rebuild(target, row))
        if outcome is not None:
            settle_and_attach(target, outcome.row)  # an earlier version: the post id only
            return latest_draft(job, below_version=job.task_version)
    return None


def latest_draft(job, below_version: int | None = None) -> Operation | None:
    """The job's CONFIRMED draft row of the highest task version (below ``below_version``
    when given)."""
    query = Operation.select().where(
        Operation.tenant == job.tenant,
        Operation.job_id == job.job_id,
        Operation.action == ACTION,
        Operation.state == CONFIRMED,
    )
    if below_version is not None:
        query = query.where(Operation.task_version < below_version)
    return query.order_by(Operation.task_version.desc()).first()


def require_receipt(row: Operation) -> None:
    """Refuse work that needs the draft's full receipt after retention pruned it.

    Raises:
        ReceiptPruned (409): ``gateway prune`` dropped the baseline on ``row.pruned_at``.
    """
    if row.pruned_at is not None:
        raise exc.ReceiptPruned(
            f"the draft receipt of {row.operation_key} was pruned on "
            f"{db.rfc3339(row.pruned_at)}: its baseline is gone, so the post cannot be "
            "compared or repaired by the gateway; a new task_version writes a fresh draft",
            operation_key=row.operation_key,
            ledger_state=row.state,
        )


def read_live(target: Target, post_id: int, receipt: dict | None = None) -> dict:
    """The job's post read back now (``GET /wp/v2/posts/{id}?context=edit``); with the draft's
    ``receipt``, a read that does not verify is made again past any cache
    (:func:`gateway.operations.fresh_reads.against_receipt`).

    Raises:
        WordPressRefused (502, definite): WordPress answers 404, the post is gone; asking
            again will not change that.
        WordPressUnavailable (503): WordPress cannot be asked now; UpstreamRefused (502): a
            page from in front of WordPress answered
            (:func:`gateway.operations.refusals.cannot_read`).
    """
    try:
        return fresh_read(target, post_id, receipt)
    except WordPressNotFound as error:
        log.warning("post %s of job_id=%s not found: %s", post_id, target.job.job_id, error)
        raise exc.WordPressRefused(
            f"the job's post {post_id} does not exist in WordPress",
            wordpress_status=error.status,
            wordpress_code=error.code,
        ) from error
    except WordPressError as error:
        log.warning("cannot read post %s of job_id=%s: %s", post_id, target.job.job_id, error)
        raise refusals.cannot_read(error) from error


def fresh_read(target: Target, post_id: int, receipt: dict | None) -> dict:
    """The post past any cache: read again as POST when it does not verify against
    ``receipt`` (None or pruned: one plain read).

    Raises:
        CachedAnswer: even that read is older than the draft's write; WordPress errors."""
    if not receipt or "baseline" not in receipt:
        return target.client.get_post(post_id)
    status = records.EXPECTED_STATUS.get(target.job.phase, "draft")
    present = target.companion.present

    def verifies(live: dict) -> bool:
        return verification.compare(receipt, live, present, status)["ok"] is not False

    return fresh_reads.against_receipt(
        target.client, post_id, verifies, receipt.get("modified_gmt")
    )


def verify_job(target: Target) -> dict:
    """Read the job's post back (``GET /wp/v2/posts/{id}?context=edit``) and compare it with
    the draft receipt. Advances the phase to ``verified`` when every field is ok.

    Raises:
        NotFound: the job has no CONFIRMED draft yet.
        ForeignObject: another job or tenant holds the post too (nothing is read).
        WordPressUnavailable: WordPress cannot be read now.
    """
    job = target.job
    row = latest_draft(job)
    if row is None:
        raise exc.NotFound("the job has no confirmed draft to verify yet")
    require_receipt(row)
    ownership.check_job_post(target, row.remote_id)
    try:
        live = fresh_read(target, row.remote_id, row.receipt)
    except WordPressNotFound:  # reported as a failed verification: the post is gone
        live = {"id": row.remote_id, "status": None}
    except WordPressError as error:
        log.warning("cannot verify %s (job_id=%s): %s", row.operation_key, job.job_id, error)
        raise refusals.cannot_read(error) from error
    expected_status = records.EXPECTED_STATUS.get(job.phase, "draft")
    result = verification.compare(row.receipt, live, target.companion.present, expected_status)
    try:
        field = media_metadata.compare(target, media_metadata.post_media_ids(row.receipt))
    except WordPressError as error:
        raise refusals.cannot_read(error) from error
    media_metadata.add_to(result, field)
    if result["ok"]:
        records.advance_phase(job, states.VERIFIED, digest=result["content_sha256"])
    return {"job_id": job.job_id, **result}


registry.register(
    registry.Action(
        name=ACTION,
        recovery=registry.LOOKUP,
        send=put_draft,
        rebuild=rebuild,
        step="create_draft",
        object_type="post",
        phases=frozenset({states.DRAFTING}),
        settle=settle_and_attach,
        tool=registry.AgentTool(
            "put_draft",
            "Create the job's WordPress post as a draft, once, and verify it by read-back. "
            "{{media:SLOT}} placeholders in content become image blocks. Different content "
            "under the same task version is refused: call bump_task_version first.",
            "draft",
        ),
        answer=registry.Answer("post_id", ("link", "verification")),
    )
)
