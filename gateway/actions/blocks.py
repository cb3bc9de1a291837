"""Named HTML blocks: insert a block (e.g. a resource-pack recommendation) into the job's post
exactly once (WordPress REST API, ``POST /wp/v2/posts/{id}`` with the whole new ``content``).

Each block is wrapped in markers that name it and carry the digest of its HTML (the format
and its kses caveats: :mod:`gateway.operations.block_markers`). The markers are looked up in
the *live* content, which is what makes the insert exactly-once across repeats, a
crash between the WordPress write and the ledger update (``find`` sees the marker: CONFIRMED),
and a new task version (a new operation key, but the marker with this digest is already there:
no write). New HTML under the same name replaces the marked block in place; ``position`` is
``end`` (the default and only value) for a block not yet present.

Verification ignores gateway-marked blocks when it compares content with the draft baseline
(:func:`gateway.operations.block_markers.strip_blocks`): a block insert is not drift. The
approval digest covers the whole live content, blocks included, so an editor approves exactly
what will be published.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from gateway.actions import drafts
from gateway.core import exceptions as exc
from gateway.core.digests import request_digest
from gateway.jobs import guards
from gateway.ledger.models import Operation
from gateway.operations import fresh_reads
from gateway.operations import ownership
from gateway.operations import perform
from gateway.operations import registry
from gateway.operations.block_markers import has_block
from gateway.operations.block_markers import html_digest
from gateway.operations.block_markers import with_block
from gateway.operations.effects import Effect
from gateway.operations.effects import Outcome
from gateway.operations.effects import lookup_only
from gateway.operations.target import Target
from gateway.wordpress.errors import WordPressNotFound
from gateway.wordpress.errors import WordPressOutcomeUnknown

log = logging.getLogger(__name__)
ACTION = "block"


def _raw_content(post: dict) -> str:
    value = post.get("content")
    return value.get("raw", "") if isinstance(value, dict) else (value or "")


def live_post(client, post_id: int) -> dict | None:
    """The post read back (``GET /wp/v2/posts/{id}?context=edit``), or None when WordPress
    answers 404 (the post was deleted: the block is definitely not there)."""
    try:
        return client.get_post(post_id)
    except WordPressNotFound:
        return None


def current_post(target: Target, post_id: int) -> dict:
    """The job's post before a block is written into it (read-modify-write): read again as a
    POST served as GET when the read does not verify against the job's draft, so that the
    block goes into WordPress's content, never into a cache's older copy
    (:func:`gateway.actions.drafts.fresh_read`; docs/hosts.md).

    Raises:
        CachedAnswer: even that read is older than the draft's write; WordPress errors."""
    draft = drafts.latest_draft(target.job)
    return drafts.fresh_read(target, post_id, draft.receipt if draft else None)


def _block_effect(target: Target, intent: dict, send: Callable[[], dict]) -> Effect:
    """The block's effect; ``find`` and ``read_back`` need only the stored ``intent``
    (``post_id``, ``name``, ``digest``): the marker is looked up in the live post."""
    post_id, name, digest = intent["post_id"], intent["name"], intent["digest"]

    def find() -> list[dict]:
        live = live_post(target.client, post_id)
        found = live is not None and has_block(_raw_content(live), name, digest)
        return [{"id": post_id, "type": "post"}] if found else []

    def read_back(object_id: int, sent: dict | None) -> dict:
        live = fresh_reads.after_write(target.client, object_id, sent)
        if not has_block(_raw_content(live), name, digest):
            raise WordPressOutcomeUnknown(f"block {name} is not in the post's content")
        return {"post_id": object_id, "name": name, "digest": digest, "bytes": intent.get("bytes")}

    return Effect(
        action=ACTION, send=send, find=find, read_back=read_back, creates=False, intent=intent
    )


def rebuild(target: Target, row: Operation, found=None, prefetched=None) -> Effect:
    """The block effect of ``row`` from its stored intent (registry ``rebuild``; blocks are
    found by reading their post, so batched lookups do not apply)."""
    return _block_effect(target, row.intent or {}, lookup_only)


def put_block(target: Target, name: str, html: str, position: str = "end") -> Outcome:
    """Insert or replace the named block in the job's post, exactly once.

    Operation key ``{tenant}/{job_id}/v{n}/block/{name}/{sha256(html)[:16]}``.

    Raises:
        NotFound: the job has no post yet (create the draft first).
        ForeignObject: another job or tenant holds the post too (nothing is written).
        plus everything :func:`perform.perform` raises.
    """
    guards.check_writable(target)
    job = target.job
    if not job.post_id:
        raise exc.NotFound("the job has no post yet; create the draft first")
    ownership.check_job_post(target, job.post_id)
    digest = html_digest(html)
    key = perform.operation_key(job, ACTION, f"{name}/{digest}")
    request_hash = request_digest({"name": name, "html": html, "position": position})
    intent = {"post_id": job.post_id, "name": name, "digest": digest, "bytes": len(html)}
    client, post_id = target.client, job.post_id

    def send() -> dict:
        live = current_post(target, post_id)
        content = _raw_content(live)
        if has_block(content, name, digest):
            return live  # already there (an earlier version or a lost response): no write
        return client.update_post(post_id, {"content": with_block(content, name, html)})

    log.info("block %s for job_id=%s operation_key=%s", name, job.job_id, key)
    return perform.perform(target, key, request_hash, _block_effect(target, intent, send), name)


def send_request(target: Target, request: dict) -> Outcome:
    """Registry ``send``: ``request`` is the block body (``html``, ``position``) plus the
    path's ``name``. Raises what :func:`put_block` raises."""
    return put_block(target, request["name"], request["html"], request.get("position", "end"))


registry.register(
    registry.Action(
        name=ACTION,
        recovery=registry.LOOKUP,
        send=send_request,
        rebuild=rebuild,
        step="put_block",
        tool=registry.AgentTool(
            "insert_block",
            "Insert (or replace in place) a named HTML block in the job's post, exactly once.",
            "block",
            path=(("name", "the block's name, e.g. resources"),),
        ),
        answer=registry.Answer("post_id", ("name", "digest")),
    )
)
