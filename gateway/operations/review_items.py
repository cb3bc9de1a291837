"""Opening review items: what the gateway could not decide alone is handed to an editor
(listing and closing them: :mod:`gateway.editorial.reviews`).

Kinds: ``suspected_duplicate`` (:mod:`gateway.operations.duplicates`), ``multiple_objects``
(two or more objects carry one operation key: never an automatic delete), ``unreadable_object``
(an object carrying the key that the site's user cannot read back:
:mod:`gateway.operations.lookup_hits`), ``person_decides``
(an action whose outcome nothing can prove), ``agent_action`` (an agent session asks for what
only a person decides: :mod:`gateway.agents.required_actions`), ``artifact_mismatch`` (an agent
session's work is not what the checkpoints prove: :mod:`gateway.agents.evidence`).
"""

from __future__ import annotations

import logging

from gateway.core.states import REVIEW_UNRESOLVED
from gateway.ledger import db
from gateway.ledger.models import Operation
from gateway.ledger.models import Review

log = logging.getLogger(__name__)


def open_review(target, row: Operation, kind: str, detail: dict) -> Review:
    """The open review item of ``row``'s operation key, created on first need."""
    return open_item(row.tenant, row.job_id, row.operation_key, kind, detail)


def open_item(tenant: str, job_id: str, operation_key: str, kind: str, detail: dict) -> Review:
    """The unresolved review item of ``operation_key`` (open, or being decided), created
    ``open`` on first need (also for items that have no WordPress operation, such as an
    agent's request only a person decides)."""
    with db.atomic():
        review = Review.get_or_none(
            Review.operation_key == operation_key, Review.status.in_(REVIEW_UNRESOLVED)
        )
        if review is None:
            review = Review.create(
                tenant=tenant, job_id=job_id, operation_key=operation_key, kind=kind, detail=detail
            )
            log.warning(
                "review %s opened for %s job_id=%s: %s", review.id, operation_key, job_id, kind
            )
    return review


def decided_distinct(operation_key: str) -> bool:
    """True when an editor decided that the suspects of this operation are distinct posts."""
    return (
        Review.select()
        .where(Review.operation_key == operation_key, Review.decision == "distinct")
        .exists()
    )


def overruled_distinct(operation_key: str, object_id: int) -> Review | None:
    """The review item whose ``distinct`` decision on this operation the evidence found since
    overrules, or None: the latest decision on the key is ``distinct`` (none of the suspects
    is the job's), yet ``object_id``, one of those suspects, has just been found in WordPress
    as the operation's own (by its operation key: the companion plugin's guard or lookup).
    The job's timeline says so (:func:`gateway.operations.perform.confirm`'s entry)."""
    latest = (
        Review.select()
        .where(Review.operation_key == operation_key, Review.decision.is_null(False))
        .order_by(Review.id.desc())
        .first()
    )
    if latest is None or latest.decision != "distinct":
        return None
    detail = latest.detail or {}
    suspects = detail.get("suspects") or detail.get("objects") or []
    if any(isinstance(s, dict) and s.get("id") == object_id for s in suspects):
        return latest
    return None
