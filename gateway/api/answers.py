"""The bodies of side-effect answers, built from what the domain returns (an
:class:`~gateway.operations.perform.Outcome`, a :class:`~gateway.actions.repair.Repair`, an
:class:`~gateway.editorial.approvals.Request`): shared by the HTTP API (``gateway.api``) and the
agent tools (``gateway.agents.tools``), which present the same answers. No Flask. Shapes:
docs/api.md, "Response shapes".
"""

from __future__ import annotations

from gateway.core.digests import sha256_hex
from gateway.ledger.models import Job
from gateway.operations.perform import Outcome


def outcome_body(outcome: Outcome, id_name: str, *receipt_fields: str) -> dict:
    """The common body of a side-effect answer: operation key, ledger state, the remote id
    under ``id_name``, ``replayed``/``reconciled``, the named receipt fields, and ``pruned:
    true`` when retention dropped the receipt's bulky parts (:mod:`gateway.operator.retention`)."""
    row = outcome.row
    receipt = row.receipt or {}
    return {
        "operation_key": row.operation_key,
        "state": row.state,
        id_name: row.remote_id,
        **{name: receipt.get(name) for name in receipt_fields},
        "replayed": outcome.replayed,
        "reconciled": outcome.reconciled,
        **({"pruned": True} if row.pruned_at is not None else {}),
    }


def media_body(outcome: Outcome) -> dict:
    """``PUT /v1/jobs/{id}/media/{slot}``: ``source_url`` is WordPress's URL of the upload;
    ``requested_url`` and ``downloaded_from`` are the URL sent and the URL the gateway finally
    downloaded from (redirects followed) for an image sent by URL, else None."""
    return outcome_body(
        outcome, "media_id", "source_url", "mime_type", "requested_url", "downloaded_from"
    )


def draft_body(outcome: Outcome) -> dict:
    """``PUT /v1/jobs/{id}/draft``."""
    return outcome_body(outcome, "post_id", "link", "verification")


def block_body(outcome: Outcome) -> dict:
    """``PUT /v1/jobs/{id}/blocks/{name}``."""
    return outcome_body(outcome, "post_id", "name", "digest")


def publish_body(outcome: Outcome) -> dict:
    """``POST /v1/jobs/{id}/publish``."""
    return outcome_body(
        outcome, "post_id", "status", "link", "slug", "approval_id", "scheduled_for"
    )


def repair_body(job: Job, repair) -> dict:
    """``POST /v1/jobs/{id}/repair`` from a :class:`gateway.actions.repair.Repair`: content fixes
    are shown as their digest, the rest as sent."""
    outcome = repair.outcome
    shown = {"media_metadata": repair.media_metadata} if repair.media_metadata else {}
    body = {
        "job_id": job.job_id,
        "post_id": repair.post_id,
        "fixes": {
            name: "sha256:" + sha256_hex(value) if name == "content" else value
            for name, value in repair.fixes.items()
        }
        | shown,
        "operation_key": outcome.row.operation_key if outcome else None,
    }
    if outcome is not None:
        body["state"] = outcome.row.state
    body["replayed"] = outcome.replayed if outcome else False
    body["verification"] = repair.verification or None
    return body


def approval_request_body(job: Job, requested) -> dict:
    """``POST /v1/jobs/{id}/approval-requests`` from a
    :class:`gateway.editorial.approvals.Request`."""
    return {
        "job_id": job.job_id,
        "task_version": job.task_version,
        "post_id": requested.post_id,
        "content_sha256": requested.content_sha256,
        "phase": job.phase,
        "unchecked_fields": requested.unchecked_fields,
        "verification": requested.verification,
    }


# The answer body of each registered action an agent tool can perform (by action name).
_BODIES = {"media": media_body, "draft": draft_body, "block": block_body, "publish": publish_body}


def for_action(action: str, outcome: Outcome) -> dict:
    """The body the HTTP call of ``action`` answers with ``outcome``.

    Raises:
        KeyError: no answer shape is known for ``action``.
    """
    return _BODIES[action](outcome)
