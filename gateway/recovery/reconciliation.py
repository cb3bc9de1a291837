"""Reconciliation: finish SENT/UNKNOWN operations by looking them up in WordPress.

UNKNOWN is fixed by lookup, not by retry. Finding the operation's identifier once is
conclusive at any time (CONFIRMED with that id); finding it on two objects, or on one the
site's user cannot read, opens a review item (:mod:`gateway.operations.lookup_hits`); absence
leaves the row for the client's next call, which sends again when absence is proven.
``recover_job`` serves ``POST /v1/jobs/{id}/recover``; ``sweep`` serves ``gateway reconcile`` and
the server's periodic sweep, batching many operation keys into each WordPress query.
"""

from __future__ import annotations

import logging

from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.core.states import NEVER_SENT
from gateway.jobs import records
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import FAILED
from gateway.ledger.models import SENT
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.operations import lookup_hits
from gateway.operations import ownership
from gateway.operations import perform
from gateway.operations import registry
from gateway.operations import review_items
from gateway.operations import transitions
from gateway.operations.target import Target
from gateway.operations.target import target_for
from gateway.recovery import never_sent
from gateway.tenancy import site_slots
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressNotFound
from gateway.wordpress.errors import WordPressRefused

log = logging.getLogger(__name__)
OBJECT_ROUTES = {"post": "/wp/v2/posts", "attachment": "/wp/v2/media"}  # WordPress REST API

# What reconciling one row came to (see :func:`reconcile_row`).
CONFIRMED_NOW = "confirmed"
ABSENT = "absent"
IN_FLIGHT = "in_flight"
REVIEW = "needs_review"
UNREACHABLE = "unreachable"
REFUSED = "refused"  # the object found is not provably the operation's (ownership)


def reconcile_row(
    target: Target,
    row: Operation,
    found: list[dict] | None = None,
    prefetched: dict[int, dict] | None = None,
) -> tuple[str, dict]:
    """Finish one SENT/UNKNOWN row the way its action's recovery kind says.

    * lookup: look it up in WordPress; found once -> CONFIRMED (read back); absent -> the row
      is marked UNKNOWN (unless still in flight) so that the client's next identical call sends
      again.
    * idempotent resend: send it again under the same key (the receiver deduplicates).
    * a person decides: open a review item; nothing is sent.

    Returns ``(result, facts)``: result is one of ``confirmed`` (facts: ``remote_id``),
    ``absent``, ``in_flight``, ``needs_review`` (``review_id``), ``refused`` (``reason``: the
    object found is not provably the operation's, :mod:`gateway.operations.ownership`) or
    ``unreachable`` (``reason``). Never raises for WordPress trouble; the cause is logged with
    the key.
    """
    try:
        action = registry.for_row(row)
    except registry.UnknownAction:
        log.error("no registered action for %s (job_id=%s)", row.operation_key, row.job_id)
        return UNREACHABLE, {"reason": f"no registered action {row.action!r}"}
    try:
        if action.recovery == registry.PERSON:
            review = review_items.open_review(target, row, registry.PERSON, {"action": row.action})
            return REVIEW, {"review_id": review.id}
        try:
            effect = action.rebuild(target, row, found=found, prefetched=prefetched)
        except (KeyError, TypeError) as error:  # an intent written without what rebuild needs
            log.error("cannot rebuild %s from its ledger row: %r", row.operation_key, error)
            return UNREACHABLE, {"reason": "the ledger row lacks what a lookup needs"}
        if action.recovery == registry.RESEND:
            outcome = perform.resend(target, row, effect)
        else:
            outcome = perform.reconcile(target, row, effect)
            if outcome is None and action.resend_if_absent and not _in_flight(target, row):
                outcome = perform.resend(
                    target, row, effect, cancelled_ok=action.resend_when_cancelled
                )
    except exc.NeedsReview as review:
        return REVIEW, {"review_id": review.extensions.get("review_id")}
    except exc.JobCancelled as error:  # only a resend refuses a cancelled job
        return UNREACHABLE, {"reason": error.detail}
    except exc.ForeignObject as refusal:  # logged by ownership with the key
        return REFUSED, {"reason": refusal.detail}
    except (exc.GatewayError, WordPressError) as error:
        log.warning("could not reconcile %s (job_id=%s): %s", row.operation_key, row.job_id, error)
        return UNREACHABLE, {"reason": "WordPress could not be asked"}
    if outcome is not None:
        _settle(target, outcome.row)
        return CONFIRMED_NOW, {"remote_id": outcome.row.remote_id}
    if _in_flight(target, row):
        return IN_FLIGHT, {}
    # Absent in WordPress: mark UNKNOWN so the client's next identical call sends again.
    transitions.move(row, UNKNOWN)
    return ABSENT, {}


def _in_flight(target: Target, row: Operation) -> bool:
    return row.state == SENT and perform.sent_age(row) < perform.in_flight_window(target)


def _entry(row: Operation, **extra) -> dict:
    return {"operation_key": row.operation_key, "action": row.action, **extra}


def recover_job(target: Target) -> dict:
    """Reconcile every SENT/UNKNOWN job-scoped row of the job and report (docs/api.md,
    "Recover"); site-scoped rows are left to the sweep.

    Never raises for WordPress trouble: rows it cannot look up stay ``unknown``."""
    job = target.job
    report = {
        "job_id": job.job_id,
        "completed": [],
        "failed": [],
        "unknown": [],
        "needs_review": [],
    }
    for row in records.operations_of(job):
        action = _action(row)
        if action is not None and action.scope == registry.WORKER and row.state != CONFIRMED:
            # Sent again with the same key by the worker that owns the receiver, not here.
            if row.state == FAILED:
                report["failed"].append(_entry(row, problem=action.refusal))
            else:
                report["unknown"].append(_entry(row, reason=f"resent by {action.resent_by}"))
        elif row.state in (SENT, UNKNOWN):
            if action is None or action.scope == registry.JOB:
                _recover_row(target, row, report)
        elif row.state == CONFIRMED:
            report["completed"].append(_entry(row, remote_id=row.remote_id))
            _settle(target, row)  # e.g. a crash between the ledger and the job update
        elif row.state == FAILED:  # a refusal, or never sent (the same request sends it)
            problem = NEVER_SENT if perform.never_sent(row) else "wordpress-refused"
            report["failed"].append(_entry(row, problem=problem))
    report["status"] = records.status_of(job)
    report["next_allowed_actions"] = next_actions(job, report)
    return report


def _settle(target: Target, row: Operation) -> None:
    try:
        settle = registry.for_row(row).settle
    except registry.UnknownAction:
        return
    if settle is not None:  # each action decides what a row of an older version records
        settle(target, row)


def _action(row: Operation) -> registry.Action | None:
    try:
        return registry.for_row(row)
    except registry.UnknownAction:
        return None  # reported as unknown by reconcile_row


def _recover_row(target: Target, row: Operation, report: dict) -> None:
    result, facts = reconcile_row(target, row)
    if result == CONFIRMED_NOW:
        report["completed"].append(_entry(row, reconciled=True, **facts))
    elif result == REVIEW:
        report["needs_review"].append(_entry(row, **facts))
    elif result in (UNREACHABLE, REFUSED):
        report["unknown"].append(_entry(row, **facts))
    elif result == IN_FLIGHT:
        report["unknown"].append(_entry(row, reason="in flight"))
    else:
        report["unknown"].append(
            _entry(row, reason="not found in WordPress; send the same request again", absent=True)
        )


def next_actions(job: Job, report: dict) -> list[str]:
    """What the automation may do next, from the job and its recover report: ``none`` for a
    cancelled job, ``editor_review``, ``retry_later`` while an outcome cannot be proven, the
    steps that redo operations proven absent or never sent, then the steps of the job's stage (each
    registered action's :attr:`~gateway.operations.registry.Action.phases`, plus
    :data:`gateway.jobs.records.STAGE_STEPS`). Pure: no ledger or WordPress access beyond
    ``job``."""
    if job.cancelled:
        return ["none"]
    if report["needs_review"]:
        return ["editor_review"]
    if any(not e.get("absent") for e in report["unknown"]):
        return ["retry_later"]
    redo = report["unknown"] + [e for e in report["failed"] if e.get("problem") == NEVER_SENT]
    steps = {registry.get(e["action"]).step for e in redo}
    if report["failed"]:
        return sorted(steps) or ["none"]
    stage = records.stage(job)
    steps.update(a.step for a in registry.all_actions() if stage in a.phases)
    steps.update(records.STAGE_STEPS.get(stage, ()))
    return sorted(steps) or ["none"]


def sweep(config: Config, older_than: float | None = None) -> dict:
    """One pass over stale SENT/UNKNOWN rows of every job (site-scoped rows included), each
    finished as its action's recovery kind says; operations whose objects carry their key are
    looked up in batches (one WordPress query per 100 keys per site). First, PREPARED rows
    whose request died before sending are settled FAILED never sent once the in-flight window
    passed (:func:`gateway.recovery.never_sent.settle`; not by ``older_than``; no lookup).

    Args:
        older_than: seconds since the last update for a row to count as stale
            (default: the in-flight window).

    Returns counts: ``{"never_sent", "examined", "confirmed", "absent", "needs_review",
    "unreachable", "refused", "site_busy"}`` (``refused``: the object found is not provably
    the operation's; ``site_busy``: rows of a site whose every concurrency slot was held,
    and extra passes that met such a site - left as they are until the next sweep;
    ``never_sent``: PREPARED rows settled). Each site is swept inside its own
    :func:`gateway.tenancy.site_slots.scope`, and so is each action's extra pass.
    """
    older_than = config.inflight_window if older_than is None else older_than
    counts = {
        **never_sent.settle(config),
        "examined": 0,
        "confirmed": 0,
        "absent": 0,
        "needs_review": 0,
        "unreachable": 0,
        "refused": 0,
        "site_busy": 0,
    }
    for action in registry.all_actions():
        if action.counted_as:
            counts[action.counted_as] = 0
        if action.sweep_pass is not None:
            try:
                with site_slots.scope():
                    counts.update(action.sweep_pass(config))
            except exc.SiteBusy:
                log.info("sweep: %s's pass met a busy site; next sweep", action.name)
                counts["site_busy"] += 1
    stale = [
        r
        for r in Operation.select().where(
            Operation.state.in_((SENT, UNKNOWN)), Operation.action.not_in(registry.worker_actions())
        )
        if perform.seconds_since(r.updated_at) >= older_than
    ]
    by_job: dict[tuple, list[Operation]] = {}
    for row in stale:
        by_job.setdefault((row.tenant, row.job_id), []).append(row)
    by_site: dict[tuple, list[tuple[Target, Operation]]] = {}
    for (tenant, job_id), rows in by_job.items():
        target = target_for(config, records.get_job(tenant, job_id))
        for row in rows:
            by_site.setdefault((tenant, target.site.name), []).append((target, row))
    for (_tenant, site_name), pairs in by_site.items():
        try:
            with site_slots.scope():
                pairs[0][0].hold_slot()  # before anything is examined or asked
                _sweep_site(pairs, counts)
        except exc.SiteBusy:  # back off: the rows stay SENT/UNKNOWN for the next sweep
            log.info("sweep: site %s is busy (GATEWAY_SITE_CONCURRENCY); next sweep", site_name)
            counts["site_busy"] += len(pairs)
    return counts


def _sweep_site(pairs: list[tuple[Target, Operation]], counts: dict) -> None:
    counts["examined"] += len(pairs)
    target = pairs[0][0]
    types = registry.keyed()
    keyed = [row for _, row in pairs if row.action in types]
    try:
        objects = []
        if keyed and target.companion.present:
            objects = target.client.find_by_operation_keys(
                [r.operation_key for r in keyed],
                since=min(r.created_at for r in keyed),  # a scanning transport stops there
                types=sorted({types[r.action] for r in keyed}),
            )
    except (WordPressError, exc.WordPressUnavailable, exc.UpstreamRefused) as error:
        log.warning("sweep: site %s unreachable: %s", target.site.name, error)
        counts["unreachable"] += len(pairs)
        return
    found_by_row = {
        row.id: [
            o
            for o in objects
            if o["operation_key"] == row.operation_key and o["type"] == types[row.action]
        ]
        for row in keyed
    }
    prefetched = _read_back_many(target, found_by_row)
    for row_target, row in pairs:
        result, _facts = reconcile_row(row_target, row, found_by_row.get(row.id), prefetched)
        if result == IN_FLIGHT:  # a stale row is past its window; count it as absent
            transitions.move(row, UNKNOWN)
            result = ABSENT
        counts[result] += 1
        counted_as = getattr(_action(row), "counted_as", None)
        if result == CONFIRMED_NOW and counted_as:
            counts[counted_as] += 1


def _read_back_many(target: Target, found_by_row: dict) -> dict[int, dict]:
    """Read back every object found exactly once, 100 per query per type, so a sweep of
    1,000 found operations costs a few dozen WordPress queries, not a thousand."""
    ids: dict[str, list[int]] = {kind: [] for kind in OBJECT_ROUTES}
    for found in found_by_row.values():
        hit = lookup_hits.adoptable(found)  # one object the site's user can read back
        if hit is not None and hit["type"] in ids:
            ids[hit["type"]].append(int(hit["id"]))
    prefetched: dict[int, dict] = {}
    for kind, wanted in ids.items():
        if wanted:
            try:
                prefetched.update(target.client.get_many(OBJECT_ROUTES[kind], wanted))
            except WordPressError as error:  # each row then reads itself back
                log.warning("sweep: batched read-back failed: %s", error)
    return prefetched


def adopt(target: Target, row: Operation, object_id: int) -> None:
    """An editor's ``same_as`` decision (:mod:`gateway.editorial.resolution`): bind
    ``object_id`` to ``row`` after :func:`ownership.check_adoptable` on the object
    as WordPress holds it now: write the operation key onto it (companion plugin present and
    the key missing), read it back, record CONFIRMED, settled on the job by the row's action.

    Raises:
        ForeignObject (409): no such object, or not provably the operation's.
        WordPressRefused (502): WordPress refuses the site's user the object (401/403: another
            author's, an ``unreadable_object`` review's object): nothing is adopted.
        WordPressUnavailable (503): it could not be read or adopted now."""
    action = registry.for_row(row)
    kind = ownership.object_type(row)
    client = target.client
    try:
        obj = client.get_media(object_id) if kind == "attachment" else client.get_post(object_id)
    except WordPressNotFound:
        log.warning("adopting %s: object %s not found", row.operation_key, object_id)
        raise exc.ForeignObject(
            f"object {object_id} is not a {kind} of this site",
            operation_key=row.operation_key,
            ledger_state=row.state,
            object_id=object_id,
        ) from None
    except WordPressRefused as error:  # 401/403: the object is out of the site's user's reach
        log.warning("adopting %s: object %s refused: %s", row.operation_key, object_id, error)
        raise exc.WordPressRefused(
            f"the site's user cannot read object {object_id} ({error.message}): give it "
            "access (make it the object's author again, or a role that may edit others' "
            "posts), then decide again",
            operation_key=row.operation_key,
            ledger_state=row.state,
        ) from error
    except WordPressError as error:
        log.warning("adopting %s: cannot read object %s: %s", row.operation_key, object_id, error)
        raise exc.WordPressUnavailable(
            f"could not read object {object_id}: {error.message}", retry_after=2
        ) from error
    ownership.check_adoptable(target, row, object_id, obj)
    try:
        if target.companion.present and not ownership.facts_of(obj)["operation_key"]:
            client.set_operation_key(object_id, row.operation_key, kind)
        outcome = perform.confirm(
            target, row, action.rebuild(target, row), object_id, reconciled=True, adopted=obj
        )
    except WordPressError as error:
        log.warning("adopting object %s for %s failed: %s", object_id, row.operation_key, error)
        cls = exc.WordPressRefused if error.definite else exc.WordPressUnavailable
        raise cls(
            f"could not adopt object {object_id}: {error.message}",
            retry_after=None if error.definite else 2,
            operation_key=row.operation_key,
        ) from error
    if action.settle is not None:
        action.settle(target, outcome.row)
