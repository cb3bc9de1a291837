"""The body of a repair's answer, built from what the domain returns (a
:class:`~gateway.actions.repair.Repair`). No Flask. Shapes: docs/api.md, "Response shapes".

The other side-effect answers are each action's own: its registration carries the
:class:`~gateway.operations.registry.Answer` (``media``, ``draft``, ``block``, ``publish``),
which the HTTP views (:func:`gateway.api.common.action_answer`) and the agent tools present
alike; an approval request's is :func:`gateway.editorial.approvals.request_view`.
"""

from __future__ import annotations

from gateway.core.digests import sha256_hex
from gateway.ledger.models import Job


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
