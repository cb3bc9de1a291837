"""Side-effect operations: intent -> act -> record, with the ledger rules of docs/api.md.

:func:`perform` is the one path by which the gateway writes to WordPress:

1. claim the operation key (INSERT ... PREPARED; the unique constraint is the lock);
2. refuse a different request digest under the same key (422);
3. dispatch on the row's state: replay a CONFIRMED receipt; repeat a FAILED refusal (send a
   FAILED row that was never sent); look up SENT/UNKNOWN rows in WordPress before anything is
   sent again (reconciliation);
4. commit SENT *before* the WordPress call (a conditional UPDATE decides the single sender);
5. after the call: CONFIRMED on read-back evidence, FAILED on a definite refusal, UNKNOWN
   otherwise - never "failed" for an outcome that cannot be proven.

No network call runs inside a transaction.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging

from peewee import fn

from gateway.core import answers
from gateway.core import exceptions as exc
from gateway.core import logs
from gateway.core import states
from gateway.core.config import Config
from gateway.core.states import NEVER_SENT
from gateway.jobs import budgets
from gateway.jobs import leases
from gateway.jobs import timeline
from gateway.jobs.guards import refuse_cancelled
from gateway.ledger import db
from gateway.ledger import hot_sql
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import FAILED
from gateway.ledger.models import SENT
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.operations import crashes
from gateway.operations import duplicates
from gateway.operations import lookup_hits
from gateway.operations import ownership
from gateway.operations import refusals
from gateway.operations import registry
from gateway.operations import review_items
from gateway.operations import transitions
from gateway.operations.effects import Effect
from gateway.operations.effects import Outcome
from gateway.operations.target import Target
from gateway.wordpress.errors import UpstreamRefused
from gateway.wordpress.errors import WordPressAuthError
from gateway.wordpress.errors import WordPressDuplicate
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressRefused
from gateway.wordpress.errors import WordPressUnavailable

log = logging.getLogger(__name__)

CRASH_POINTS = ("after_prepared", "after_sent", "after_wordpress_response", "after_ledger_update")
MAX_ROUNDS = 4  # claim races are settled within a couple of rounds


def crash_point(config: Config, name: str) -> None:
    """Kill this process at ``name`` when fault tests enabled it (``GATEWAY_CRASH_POINTS``;
    :func:`gateway.operations.crashes.die`: SIGKILL, or a simulated crash in a test)."""
    if name in config.crash_points:
        crashes.die(name)


def operation_key(
    job: Job, action: str, slot: str | None = None, task_version: int | None = None
) -> str:
    """``{tenant}/{job_id}/v{task_version}/{action}[/{slot}]``."""
    version = job.task_version if task_version is None else task_version
    key = f"{job.tenant}/{job.job_id}/v{version}/{action}"
    return f"{key}/{slot}" if slot else key


def claim(
    target: Target,
    key: str,
    request_hash: str,
    action: str,
    slot: str | None = None,
    intent: dict | None = None,
) -> Operation:
    """Insert the PREPARED row for ``key`` or return the existing one
    (:func:`gateway.operations.transitions.claim`, with what the action binds, the site's
    credential version and the request's fencing token): the key's unique constraint is the
    lock.

    Raises:
        OperationKeyReused: the key exists with a different request digest.
    """
    row, created = transitions.claim(
        key=key,
        tenant=target.job.tenant,
        job_id=target.job.job_id,
        task_version=target.job.task_version,
        action=action,
        slot=slot,
        request_hash=request_hash,
        intent=intent,
        binds=_binds_of(action),
        credential_version=target.site.credential_version,
        fencing_token=target.fencing_token,
    )
    if created:
        crash_point(target.config, "after_prepared")
    if row.request_hash != request_hash:
        raise _reused(row)
    return row


def _binds_of(action: str) -> str | None:
    """What an operation of ``action`` binds (its registry entry's ``binds``), stored on the
    row at claim; ``post`` for an action nobody registered (refusing to adopt is safe)."""
    try:
        return registry.get(action).binds
    except registry.UnknownAction:
        return ownership.POST


def _reused(row: Operation) -> exc.GatewayError:
    return exc.OperationKeyReused(
        f"operation {row.operation_key} was first requested with other content; use a new "
        "task_version to change it",
        operation_key=row.operation_key,
        ledger_state=row.state,
    )


def replay(key: str, request_hash: str | None) -> Outcome | None:
    """The replay check, the first thing every action does after
    :func:`gateway.jobs.guards.check_writable`.

    Returns the stored receipt (``Outcome(replayed=True)``, no WordPress call) when ``key`` is
    CONFIRMED for the same request digest (``request_hash`` None: any request, for an action
    whose body decides nothing, e.g. ``publish``); None when the key is new or not yet
    CONFIRMED (:func:`perform` decides).

    Raises:
        OperationKeyReused (422): the key was first requested with another digest, in any
            state. Raised before anything of this request is resolved, downloaded or sent,
            so nothing of a refused request reaches WordPress.
    """
    existing = hot_sql.operation_by_key(key)
    if existing is None:
        return None
    if request_hash is not None and existing.request_hash != request_hash:
        raise _reused(existing)
    if existing.state == CONFIRMED:
        return Outcome(existing, replayed=True)
    return None


def _transition(row: Operation, to_state: str, **fields) -> bool:
    """Move ``row`` from the state and attempt count it was read with to ``to_state`` if
    nobody moved it first (:func:`gateway.operations.transitions.move`, one plain-SQL
    UPDATE); on success ``row`` holds what was written."""
    return transitions.move(row, to_state, same_attempt=True, **fields)


def _reload(row: Operation) -> Operation:
    return Operation.get_by_id(row.id)


def in_flight_window(target: Target) -> float:
    """Seconds a SENT row counts as in flight. With the guard only the sender's own wait
    (the WordPress timeout) matters; without it PHP may still be running after we gave up."""
    if target.companion.guard:
        return target.config.wp_timeout + 2
    return target.config.inflight_window


def sent_age(row: Operation) -> float:
    """Seconds since ``row`` was last sent (or last updated, if never sent)."""
    return seconds_since(row.sent_at or row.updated_at)


def perform(
    target: Target, key: str, request_hash: str, effect: Effect, slot: str | None = None
) -> Outcome:
    """Run one side effect under ``key`` exactly once.

    Raises:
        OperationKeyReused, OperationInProgress, NeedsReview, JobCancelled,
        WordPressRefused (502, definite), OutcomeUnknown / WordPressUnavailable (503),
        BudgetExhausted / SiteBusy (429, before any write).
    """
    logs.bind(operation_key=key)
    # 429 site-busy comes before the claim and before any WordPress call (a no-op without
    # GATEWAY_SITE_CONCURRENCY); the caller's scope holds the slot until it ends.
    target.hold_slot()
    row = claim(target, key, request_hash, effect.action, slot, effect.intent)
    for _ in range(MAX_ROUNDS):
        if row.state == CONFIRMED:
            return Outcome(row, replayed=True)
        if target.job.cancelled:
            raise exc.JobCancelled(
                "the job was cancelled; no further writes",
                operation_key=key,
                ledger_state=row.state,
            )
        if row.state == FAILED:
            if not (never_sent(row) or _credentials_renewed(target, row)):
                raise _stored_refusal(row)
        if row.state in (SENT, UNKNOWN):
            try:
                outcome = reconcile(target, row, effect)
            except (exc.OutcomeUnknown, exc.WordPressUnavailable, exc.UpstreamRefused) as unknown:
                # the lookup failed for now while another request's send is still in flight:
                # that send settles it, so the caller hears "in progress", as when nothing was
                # found (a page that needs a person, e.g. a firewall's 403, is still said)
                in_flight = in_flight_problem(target, row)
                if in_flight is None or not unknown.retryable:
                    raise
                raise in_flight from unknown
            if outcome is not None:
                return outcome
            row = _reload(row)
            if row.state not in (SENT, UNKNOWN):
                continue
            check_resend_allowed(target, row, effect)
        if target.fencing_token is not None:  # a newer grant may have come since the claim
            leases.check_fencing(target.job, target.fencing_token)
        # past the budget: 429 before any write (the spend refuses and the claim rolls back)
        before = (row.state, row.sent_at)
        if _claim_send(target, row):
            return _send(target, row, effect, before)  # the row as this sender committed it
        stale = _stale_version(target, row)
        if stale is not None:
            raise stale
        row = _reload(row)  # another request won the claim; look again
    raise exc.OperationInProgress(
        "another request is working on this operation",
        retry_after=1,
        operation_key=key,
        ledger_state=row.state,
    )


def _claim_send(target: Target, row: Operation) -> bool:
    """Move ``row`` to SENT and spend one write attempt of the job's budget, in one
    transaction: only the request that won the send spends, and a refusal (429
    ``budget-exhausted``) leaves the row as it was. The move also requires the job to be still
    at the row's task version (:func:`_same_version`): a request that read the job before a
    bump sends nothing of the old version after it."""
    job = target.job
    with db.atomic():
        won = _transition(
            row,
            SENT,
            when=_same_version(job, row),
            attempts=row.attempts + 1,
            sent_at=db.utcnow(),
            credential_version=target.site.credential_version,
            fencing_token=target.fencing_token,
        )
        if won:
            budgets.spend(target.config, job.tenant, job.job_id, budgets.WRITE_ATTEMPTS)
    return won


def _same_version(job: Job, row: Operation) -> tuple:
    """The condition "``job`` is still at ``row``'s task version" (a tuple of one peewee
    expression; empty for a row not of this job's own: a site-scoped term row, shared by jobs
    and by their versions, :data:`gateway.operations.registry.SITE`), read under a shared
    lock (:func:`gateway.ledger.db.shared_lock`): of a send claim and a version bump
    (``PUT /v1/jobs/{job_id}``, :func:`gateway.jobs.records.put_job`) racing, one commits
    first, so a new version's draft either sees the old version's create SENT (and settles it
    first, :mod:`gateway.operations.earlier_versions`) or that create is never sent."""
    if not _of_its_version(job, row):
        return ()
    current = Job.select(Job.id).where(Job.id == job.id, Job.task_version == row.task_version)
    return (fn.EXISTS(db.shared_lock(current)),)


def _of_its_version(job: Job, row: Operation) -> bool:
    """True when ``row`` belongs to one task version of ``job`` (a job-scoped action's row of
    this job), so a version bump makes it stale; False for a site-scoped row, or one of
    another job, which no bump of ``job`` makes stale."""
    if row.job_id != job.job_id:
        return False
    try:
        return registry.for_row(row).scope != registry.SITE
    except registry.UnknownAction:
        return False


def _stale_version(target: Target, row: Operation) -> exc.GatewayError | None:
    """409 ``stale-task-version`` when the job moved past ``row``'s task version (a bump
    while this request waited to send: nothing was sent), else None (also for a row no bump
    makes stale, :func:`_of_its_version`)."""
    if not _of_its_version(target.job, row):
        return None
    current = Job.select(Job.task_version).where(Job.id == target.job.id).scalar()
    if current is None or current == row.task_version:
        return None
    return exc.StaleTaskVersion(
        f"job {row.job_id} moved to task_version {current} while this request of task_version "
        f"{row.task_version} waited to send: nothing was sent; send it under the new version",
        task_version=current,
        operation_key=row.operation_key,
        ledger_state=row.state,
    )


def never_sent(row: Operation) -> bool:
    """True for a FAILED ``row`` the sweep settled because the request that stored its intent
    died before sending (``problem.reason`` :data:`~gateway.core.states.NEVER_SENT`,
    :mod:`gateway.recovery.never_sent`): nothing reached WordPress, so the same request sends
    it (FAILED -> SENT, won by one conditional UPDATE) without a lookup."""
    return row.state == FAILED and (row.problem or {}).get("reason") == NEVER_SENT


def _credentials_renewed(target: Target, row: Operation) -> bool:
    problem = row.problem or {}
    return (
        answers.wordpress_credentials_refused(
            problem.get("wordpress_status"), problem.get("wordpress_code")
        )
        and target.site.credential_version != row.credential_version
    )


def _stored_refusal(row: Operation) -> exc.GatewayError:
    problem = dict(row.problem or {})
    detail = problem.pop("detail", "WordPress refused this operation earlier")
    return exc.WordPressRefused(
        detail, operation_key=row.operation_key, ledger_state=row.state, **problem
    )


def in_flight_problem(target: Target, row: Operation) -> exc.GatewayError | None:
    """409 ``operation-in-progress`` (``Retry-After``: the rest of the in-flight window) when
    ``row`` is SENT and was sent less than the in-flight window ago, else None."""
    window = in_flight_window(target)
    if row.state == SENT and sent_age(row) < window:
        return exc.OperationInProgress(
            "the operation was sent moments ago and is not visible in WordPress yet",
            retry_after=max(1, int(window - sent_age(row))),
            operation_key=row.operation_key,
            ledger_state=row.state,
        )
    return None


def check_resend_allowed(target: Target, row: Operation, effect: Effect) -> None:
    """Refuse to act on the absence of SENT/UNKNOWN ``row`` (its lookup found nothing) until
    it is proven: absence is proven at once with the guard (or for idempotent updates);
    otherwise only after the in-flight window, and only when no suspected duplicate exists
    (:func:`gateway.operations.duplicates.check_suspected_duplicates`).

    Raises:
        OperationInProgress (409): ``row`` is in flight, or its window has not passed.
        NeedsReview (409): a post with the same title may be this operation's.
        OutcomeUnknown / WordPressUnavailable (503): the title search could not run.
    """
    in_flight = in_flight_problem(target, row)
    if in_flight is not None:
        raise in_flight
    window = in_flight_window(target)
    if not effect.creates or target.companion.guard:
        return
    if sent_age(row) < window:
        raise exc.OperationInProgress(
            "without the companion plugin's guard, absence is proven only after the "
            "in-flight window",
            retry_after=max(1, int(window - sent_age(row))),
            operation_key=row.operation_key,
            ledger_state=row.state,
        )
    try:
        duplicates.check_suspected_duplicates(target, row, effect)
    except WordPressError as error:  # the search could not run: still unknown, never a 500
        raise _unknown(row, error) from error


def reconcile(target: Target, row: Operation, effect: Effect) -> Outcome | None:
    """Look a SENT/UNKNOWN operation up in WordPress.

    Returns an :class:`Outcome` when the object was found once and can be read back
    (CONFIRMED, conclusive at any time), or None when it is absent. Raises NeedsReview when
    two or more objects carry the identifier, or one the site's user cannot read
    (:func:`gateway.operations.lookup_hits.judge`), and OutcomeUnknown when WordPress cannot be
    asked.
    """
    try:
        found = effect.find()
    except WordPressError as error:
        log.warning("lookup of %s failed (job_id=%s): %s", row.operation_key, row.job_id, error)
        raise _unknown(row, error) from error
    hit = lookup_hits.judge(target, row, found)
    if hit is None:
        return None
    log.info("reconciled %s: found %s %s", row.operation_key, hit.get("type"), hit["id"])
    return confirm(target, row, effect, hit["id"], reconciled=True, adopted=hit)


def resend(target: Target, row: Operation, effect: Effect, cancelled_ok: bool = False) -> Outcome:
    """Send a SENT/UNKNOWN operation of the *idempotent resend* kind again, under the same
    operation key (the receiver deduplicates by it), and record the outcome as :func:`perform`
    does. Refuses a cancelled job unless ``cancelled_ok`` (an action that a cancel itself
    makes, e.g. ``unschedule``).

    Raises:
        JobCancelled, OperationInProgress (another sender moved the row first), plus what
        :func:`perform` raises after sending.
    """
    if not cancelled_ok:
        refuse_cancelled(target.job)
    before = (row.state, row.sent_at)
    if _transition(
        row,
        SENT,
        attempts=row.attempts + 1,
        sent_at=db.utcnow(),
        credential_version=target.site.credential_version,
    ):
        return _send(target, row, effect, before)
    raise exc.OperationInProgress(
        "another request is sending this operation",
        retry_after=1,
        operation_key=row.operation_key,
        ledger_state=_reload(row).state,
    )


def _send(
    target: Target, row: Operation, effect: Effect, before: tuple[str, dt.datetime | None]
) -> Outcome:
    """Make the WordPress call of a row this request moved to SENT (``before``: its state
    and ``sent_at`` until then) and record the outcome."""
    crash_point(target.config, "after_sent")
    log.info("sending %s (attempt %s) job_id=%s", row.operation_key, row.attempts, row.job_id)
    try:
        obj = effect.send()
    except WordPressError as error:
        if not error.sent and not error.definite:
            raise _not_sent(row, error, before) from error
        return _after_error(target, row, effect, error)
    crash_point(target.config, "after_wordpress_response")
    return confirm(target, row, effect, int(obj["id"]), created=True, sent_object=obj)


def _not_sent(
    row: Operation, error: WordPressError, before: tuple[str, dt.datetime | None]
) -> exc.GatewayError:
    """The call never left the gateway (no connection, or the XML-RPC client could not be set
    up): the row goes back to the state and ``sent_at`` it had before this send (PREPARED for
    a first send), so the next request sends at once instead of reconciling, or waiting out
    an in-flight window for, a write that cannot have happened. Returns the problem to raise:
    503 ``wordpress-unavailable`` (502 ``upstream-refused`` for a page from in front of
    WordPress)."""
    state, sent_at = before
    transitions.move(
        row,
        state,
        SENT,
        same_attempt=True,
        sent_at=sent_at,
        problem={"detail": f"not sent: {error.message}", **_wp_facts(error)},
    )
    log.warning("not sent %s (job_id=%s): %s", row.operation_key, row.job_id, error)
    facts = {"operation_key": row.operation_key, "ledger_state": state}
    if isinstance(error, UpstreamRefused):
        return refusals.upstream_problem(error, **facts)
    return exc.WordPressUnavailable(
        f"{error.message}; nothing was sent to WordPress, the next request sends it",
        retry_after=error.retry_after or 2,
        **facts,
    )


def _after_error(target: Target, row: Operation, effect: Effect, error: WordPressError) -> Outcome:
    """Record what a call that left the gateway and failed proves: a definite refusal
    (FAILED), a page from in front of WordPress or an unknown outcome (UNKNOWN); a duplicate
    named by the companion plugin's guard is adopted, or reviewed at once when it is out of
    the site's user's reach (:func:`gateway.operations.lookup_hits.check_named`)."""
    if isinstance(error, WordPressDuplicate):
        log.info("guard named existing object %s for %s", error.existing_id, row.operation_key)
        lookup_hits.check_named(target, row, effect.find, error.existing_id)
        return confirm(target, row, effect, error.existing_id, reconciled=True)
    if isinstance(error, WordPressRefused):
        _record_refusal(row, error)
        raise _refused(row, error) from error
    if isinstance(error, UpstreamRefused):
        refusals.record_upstream(row, error)
        raise _unknown(row, error) from error
    return _after_unknown(target, row, effect, error)


def _after_unknown(
    target: Target, row: Operation, effect: Effect, error: WordPressError
) -> Outcome:
    """Record UNKNOWN, then try one lookup at once so that a lost response is usually
    resolved inside this request (n8n retries only 5 times)."""
    transitions.move(row, UNKNOWN, SENT, problem={"detail": str(error), **_wp_facts(error)})
    log.warning("outcome unknown for %s (job_id=%s): %s", row.operation_key, row.job_id, error)
    row = _reload(row)
    try:
        found = effect.find()
    except WordPressError as lookup_error:  # the next call or the sweep looks again
        log.warning(
            "immediate lookup of %s failed (job_id=%s): %s",
            row.operation_key,
            row.job_id,
            lookup_error,
        )
        found = []
    hit = lookup_hits.adoptable(found)  # anything else is the next reconciliation's
    if hit is not None:
        return confirm(target, row, effect, hit["id"], reconciled=True, adopted=hit)
    raise _unknown(row, error)


def confirm(
    target: Target,
    row: Operation,
    effect: Effect,
    remote_id: int,
    created: bool = False,
    reconciled: bool = False,
    sent_object: dict | None = None,
    adopted: dict | None = None,
) -> Outcome:
    """Read the object back and record CONFIRMED with its receipt (read-back evidence).

    An object this request did not create (``reconciled``: found by lookup, named by the
    companion plugin's guard, chosen by an editor) is first checked to be provably this
    operation's (:func:`gateway.operations.ownership.check_adoptable`, with ``adopted``: what is
    known of it).

    Raises:
        ForeignObject (409): the object is not this operation's; the row is left as it was
            (or set back to UNKNOWN when another job bound the object at the same moment).
        OutcomeUnknown / WordPressUnavailable (503): the read-back failed.
    """
    if reconciled:
        ownership.check_adoptable(target, row, int(remote_id), adopted)
    try:
        receipt = effect.read_back(int(remote_id), sent_object)
    except WordPressError as error:
        log.warning("read-back of %s (object %s) failed: %s", row.operation_key, remote_id, error)
        raise _unknown(row, error) from error
    receipt["reconciled"] = reconciled
    # a reconciled write enters the job's timeline in its transaction (issue 56)
    with db.atomic() if reconciled else contextlib.nullcontext():
        ours = transitions.move(
            row,
            CONFIRMED,
            transitions.NOT_CONFIRMED,
            remote_id=int(remote_id),
            receipt=receipt,
            problem=None,
        )
        if ours and reconciled:
            found = _found_words(row, int(remote_id))
            timeline.record(target.job, states.RECONCILED, None, receipt.get("digest"), found)
    crash_point(target.config, "after_ledger_update")
    if ours and reconciled:
        ownership.undo_if_raced(target, row, int(remote_id))
    if not ours:  # another request confirmed it first: answer with what it recorded
        row = _reload(row)
    return Outcome(row, created=created, reconciled=reconciled)


def _found_words(row: Operation, remote_id: int) -> str:
    """The timeline's note on a reconciled write: ``draft found in WordPress as object 69``,
    and, when it overrules an editor's ``distinct`` on that very object
    (:func:`gateway.operations.review_items.overruled_distinct`), who decided and that the
    evidence stands over it (the desk's Distinct said the write would go ahead)."""
    found = f"{row.action} found in WordPress as object {remote_id}"
    overruled = review_items.overruled_distinct(row.operation_key, remote_id)
    if overruled is None:
        return found
    return (
        f"{found}: it carries this job's operation key, so it is the job's own although "
        f"{overruled.resolved_by} decided “Distinct” on it; it was adopted and nothing was "
        "written twice"
    )


def _record_refusal(row: Operation, refusal: WordPressRefused) -> None:
    transitions.move(
        row,
        FAILED,
        SENT,
        problem={"detail": f"WordPress refused: {refusal.message}", **_wp_facts(refusal)},
    )


def _wp_facts(error: WordPressError) -> dict:
    return {"wordpress_status": error.status, "wordpress_code": error.code}


def _refused(row: Operation, refusal: WordPressRefused) -> exc.GatewayError:
    detail = f"WordPress refused the request: {refusal.message}"
    if isinstance(refusal, WordPressAuthError):
        detail += " (credentials or capability; update the site with 'gateway sites add')"
    return exc.WordPressRefused(
        detail, operation_key=row.operation_key, ledger_state=FAILED, **_wp_facts(refusal)
    )


def _unknown(row: Operation, error: WordPressError) -> exc.GatewayError:
    if isinstance(error, UpstreamRefused):
        return refusals.upstream_problem(
            error, operation_key=row.operation_key, ledger_state=_reload(row).state
        )
    cls = (
        exc.WordPressUnavailable if isinstance(error, WordPressUnavailable) else exc.OutcomeUnknown
    )
    current = _reload(row).state
    return cls(
        f"{error.message}; the operation will be reconciled before any retry",
        retry_after=error.retry_after or 2,
        operation_key=row.operation_key,
        ledger_state=current,
    )


def seconds_since(value: dt.datetime) -> float:
    """Seconds between ``value`` (naive UTC) and now."""
    return (db.utcnow() - value).total_seconds()
