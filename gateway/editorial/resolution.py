"""The resolution of review items: an editor's decision applied (``POST
/v1/reviews/{id}/resolve`` and the review page).

``same_as`` and ``distinct`` decide items about a WordPress object (suspected duplicates,
several objects under one key). Kinds that are not about a WordPress object register a
:class:`Decider` (the agents package does for ``agent_action``) so that this module, which
sits below them, never imports them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.core.registry import Registry
from gateway.core.registry import UnknownName
from gateway.core.states import DUPLICATE_DECIDED
from gateway.core.states import REVIEW_RESOLVED
from gateway.editorial import reviews
from gateway.jobs import records
from gateway.jobs import timeline
from gateway.ledger import db
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.operations.target import target_for
from gateway.recovery import reconciliation

OPERATION_DECISIONS = ("same_as", "distinct")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decider:
    """How items of one kind are decided.

    Attributes:
        decisions: the decisions that fit the kind (any other is 422).
        decide: ``(config, review, decision, reason, editor) -> dict``, the answer body.
    """

    decisions: tuple[str, ...]
    decide: Callable[..., dict]


@dataclass(frozen=True)
class Resolution:
    """The answer to a decision: ``body`` ([ReviewResolution]: ``review``, ``operation``) and
    ``replayed``: True when the decision was the one that stood already (nothing was written;
    the API answers 200 with ``Idempotent-Replayed: true``)."""

    body: dict
    replayed: bool = False


class UnknownDecider(UnknownName):
    """No decider is registered for this kind of review item."""


_deciders: Registry[Decider] = Registry("review decider", UnknownDecider)


def register_decider(kind: str, decider: Decider) -> Decider:
    """Decide review items of ``kind`` with ``decider`` (called once, at import, by the
    package that opens such items) and return it.

    Raises:
        NameTaken: a decider for ``kind`` is registered already (the first one stays).
    """
    return _deciders.add(kind, decider)


def decider_for(kind: str) -> Decider:
    """The decider registered for review items of ``kind``.

    Raises:
        UnknownDecider: none is (``same_as``/``distinct`` items about a WordPress object are
            decided here, without one).
    """
    return _deciders.get(kind)


def resolve_review(
    config: Config,
    tenant: str,
    review_id: int,
    decision: str,
    post_id: int | None,
    editor: str,
    reason: str | None = None,
) -> Resolution:
    """Apply an editor's decision on a review item and return the answer.

    ``same_as``: the operation's object is ``post_id``: write the identifier onto it (when
    the companion plugin is present and it lacks one), read it back and record CONFIRMED, so
    the next identical call is a replay. ``distinct``: the suspects are other posts; the
    operation may be sent again (no title check for it from now on). Never deletes anything.
    Kinds that are not about a WordPress object decide through the :class:`Decider`
    registered for them (``agent_action``: :func:`gateway.agents.required_actions.resolve`,
    with ``approve``/``deny``/``dismiss`` and a ``reason``).

    The decision is claimed (:func:`gateway.editorial.reviews.claim`, ``open -> deciding``)
    after the request is checked and before anything is written for it: of two editors
    deciding one item at once, one applies its decision, the other gets 409
    ``review-decided`` and nothing is written for it. A decision whose write fails gives the
    claim back (the item is ``open`` again) and raises. The decision that stands already
    (resolved: the same ``decision`` and, for ``same_as``, ``post_id``; whoever sends it, e.g.
    a client retrying a request whose answer was lost) is answered with the item and its
    operation as they are now, :attr:`Resolution.replayed`, nothing written.

    Raises:
        NotFound: no review ``review_id`` for ``tenant``.
        ReviewDecided (409): another decision stands (being applied, or resolved), or this
            one is still being applied.
        ValidationFailed (422): ``post_id`` is not one of the review item's candidates.
        ForeignObject (409): the object is not provably this operation's
            (:func:`gateway.operations.ownership.check_adoptable`); nothing is written, the review
            stays open.
        WordPressRefused / WordPressUnavailable: the identifier could not be written.
    """
    review = reviews.get(tenant, review_id)
    if reviews.stands(review, decision, post_id):
        return _replay(review)
    if review.status == REVIEW_RESOLVED:
        raise reviews.decided(review)
    decider = decider_for(review.kind) if review.kind in _deciders else None
    allowed = decider.decisions if decider is not None else OPERATION_DECISIONS
    if decision not in allowed:
        raise exc.ValidationFailed(
            f"decision {decision!r} does not fit a {review.kind} review item",
            errors=[{"pointer": "/decision", "message": f"not allowed for {review.kind}"}],
        )
    if decider is not None:
        post_id = None  # an agent's request is about no WordPress object
    elif decision == "same_as":
        reviews.check_candidate(review, post_id)
    try:
        claimed = reviews.claim(review, decision, post_id, editor, config.inflight_window)
    except exc.ReviewDecided:
        current = reviews.get(tenant, review_id)  # resolved meanwhile: by this very decision?
        if reviews.stands(current, decision, post_id):
            return _replay(current)
        raise
    try:
        if decider is not None:
            return Resolution(decider.decide(config, claimed, decision, reason, editor))
        return Resolution(_decide_operation(config, claimed, decision, post_id))
    except BaseException:
        _give_back(claimed)
        raise


def _replay(review) -> Resolution:
    """The answer of the decision that stands on ``review``: the item and the row of its
    operation key now (an agent's request: its ``*_result`` row; none for a dismissed
    reconnection)."""
    log.info("review %s: %s again: it stands (%s)", review.id, review.decision, review.resolved_by)
    row = Operation.get_or_none(Operation.operation_key == review.operation_key)
    body = {"review": reviews.review_view(review), "operation": row.as_dict() if row else None}
    return Resolution(body, replayed=True)


def _decide_operation(config: Config, claimed, decision: str, post_id: int | None) -> dict:
    row = Operation.get(Operation.operation_key == claimed.operation_key)
    if decision == "same_as":
        target = target_for(config, records.get_job(claimed.tenant, claimed.job_id))
        reconciliation.adopt(target, row, post_id)
    with db.atomic():
        review = reviews.close(claimed)
        _record_decision(claimed, decision, post_id)
    return {
        "review": reviews.review_view(review),
        "operation": Operation.get_by_id(row.id).as_dict(),
    }


def _record_decision(claimed, decision: str, post_id: int | None) -> None:
    """Enter the editor's duplicate decision on the job's timeline (``duplicate_decided``, by
    the editor, the note ``same_as #<post_id>`` or ``distinct``), in the transaction that
    closes the review item; an item of no job (or of a job removed) has no timeline."""
    job = Job.get_or_none(Job.tenant == claimed.tenant, Job.job_id == claimed.job_id)
    if job is not None:
        note = f"same_as #{post_id}" if decision == "same_as" else decision
        timeline.record(job, DUPLICATE_DECIDED, claimed.resolved_by, None, note)


def _give_back(claimed) -> None:
    """Release a claim whose decision failed; a ledger that cannot serve leaves it
    ``deciding`` until the window lets the next decider take it over (the error raised is
    the decision's)."""
    try:
        reviews.release(claimed)
    except Exception as error:  # the decision's own error is what is raised
        log.warning("review %s: claim not released: %s", claimed.id, error)
