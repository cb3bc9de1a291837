"""Images belong to their post: once a job's draft exists, each attachment it uses (featured
and body images) gets the post as its parent (WordPress REST API, ``POST /wp/v2/media/{id}``
``{"post": post_id}``), so the media library no longer shows them "unattached".

Each attachment is one ledger operation ``{tenant}/{job_id}/v{n}/attach/{slot}``, read back
(``post`` of ``GET /wp/v2/media/{id}?context=edit`` equals the post) like every other write. An
update is idempotent, so reconciliation reads the attachment: already attached is done. A slot
whose attachment was attached to the same post under an earlier task version is not sent
again; a replaced image in a later version is a new attachment and is attached too.
"""

from __future__ import annotations

import logging

from gateway.core import exceptions as exc
from gateway.core.digests import request_digest
from gateway.jobs import records
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import Operation
from gateway.operations import perform
from gateway.operations import registry
from gateway.operations.effects import Effect
from gateway.operations.target import Target
from gateway.wordpress.errors import WordPressOutcomeUnknown

log = logging.getLogger(__name__)


def _effect(target: Target, intent: dict) -> Effect:
    client, media_id, post_id = target.client, intent["media_id"], intent["post_id"]

    def find() -> list[dict]:
        parent = client.get_media(media_id).get("post")
        return [{"id": media_id, "type": "attachment"}] if parent == post_id else []

    def read_back(object_id: int, _sent: dict | None) -> dict:
        parent = client.get_media(object_id).get("post")
        if parent != post_id:
            raise WordPressOutcomeUnknown(f"read-back shows parent {parent!r}, not {post_id}")
        return {"media_id": object_id, "post_id": parent, "slot": intent["slot"]}

    return Effect(
        action="attach",
        send=lambda: client.update_media(media_id, {"post": post_id}),
        find=find,
        read_back=read_back,
        creates=False,
        intent=intent,
    )


def rebuild(target: Target, row: Operation, found=None, prefetched=None) -> Effect:
    """The effect of an ``attach`` ledger row from its intent alone (reconciliation)."""
    return _effect(target, row.intent or {})


def _attached(job) -> set[str]:
    """The request digests (attachment and post) of the job's CONFIRMED ``attach`` rows, any
    task version: one query for all slots."""
    rows = Operation.select(Operation.request_hash).where(
        Operation.tenant == job.tenant,
        Operation.job_id == job.job_id,
        Operation.action == "attach",
        Operation.state == CONFIRMED,
    )
    return {row.request_hash for row in rows}


def attach_all(
    target: Target,
    post_id: int,
    slots: list[str],
    media: dict[str, Operation] | None = None,
    new_post: bool = False,
) -> list[str]:
    """Attach the CONFIRMED attachment of each of ``slots`` to ``post_id`` once.

    ``media``: the job's CONFIRMED media by slot as the caller already read them
    (:func:`gateway.jobs.records.confirmed_media`; read here when None). ``new_post``: the caller
    created ``post_id`` in this request, so no attachment can be attached to it yet (the
    ledger is not asked which are).

    Returns the slots still not attached (WordPress could not be reached or refused): they
    are UNKNOWN/FAILED rows that the next draft call, ``recover`` or the sweep finish; the
    draft itself stands.
    """
    if not slots:  # a draft without images: nothing to look up
        return []
    job = target.job
    media = records.confirmed_media(job) if media is None else media
    attached = set() if new_post else _attached(job)
    pending = []
    for slot in dict.fromkeys(slots):
        row = media.get(slot)
        if row is None:
            continue
        intent = {"media_id": row.remote_id, "post_id": post_id, "slot": slot}
        digest = request_digest({"media_id": row.remote_id, "post_id": post_id})
        if digest in attached:
            continue
        key = perform.operation_key(job, "attach", slot)
        try:
            perform.perform(target, key, digest, _effect(target, intent), slot=slot)
        except exc.GatewayError as error:
            log.warning("job_id=%s operation_key=%s not attached: %s", job.job_id, key, error)
            pending.append(slot)
    return pending


def attach_media_ids(target: Target, post_id: int, media_ids: list[int]) -> list[str]:
    """Attach the job's CONFIRMED attachments ``media_ids`` (a draft receipt's featured and
    body images) to ``post_id`` once: :func:`attach_all` for their slots. Ids that are no
    CONFIRMED media of the job are left out. Returns the slots still not attached."""
    if not media_ids:
        return []
    media = records.confirmed_media(target.job)
    slots = [slot for slot, row in media.items() if row.remote_id in set(media_ids)]
    return attach_all(target, post_id, slots, media)


def _send_request(target: Target, request: dict) -> None:
    """Registry ``send``: ``request`` is ``{"post_id", "slots"}``; the outcomes are the
    ``attach`` rows (slots not attached stay UNKNOWN/FAILED)."""
    attach_all(target, request["post_id"], request["slots"])


registry.register(
    registry.Action(
        name="attach",
        binds="attachment",
        recovery=registry.LOOKUP,  # found by reading the attachment's parent
        # No client call repeats an attach (a draft's replay attaches only for a request
        # that stopped before recording the draft on the job): one found absent is sent again,
        # never for a cancelled job.
        resend_if_absent=True,
        send=lambda target, request: _send_request(target, request),
        rebuild=rebuild,
        step="create_draft",
    )
)
