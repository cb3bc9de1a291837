"""Settling the PREPARED rows of requests that died before sending (the sweep's first pass).

A request stores its intent (PREPARED, :func:`gateway.operations.perform.claim`) and then
claims the send (PREPARED -> SENT, committed before the WordPress call). A request that dies
in between leaves a row that nobody is working on and that never reached WordPress: without
this pass the job would say ``in_progress`` until the same request came again.

Once such a row was last updated longer ago than the in-flight window
(``GATEWAY_INFLIGHT_WINDOW``, by the database's clock, as a lease's or an agent input's
window), the sweep moves it PREPARED -> FAILED with ``problem.reason``
:data:`~gateway.core.states.NEVER_SENT`: FAILED because nothing was created (as for a
refusal), so the job's status says ``failed`` instead of waiting forever; nothing is looked
up in WordPress, since nothing was sent. The same request afterwards sends it once
(FAILED -> SENT, :func:`gateway.operations.perform.never_sent`).

An action that no client call repeats (``resend_if_absent``: a draft's attach step, which the
draft answers 2xx without when WordPress could not be reached, and an unschedule) goes to
UNKNOWN instead, with the same reason: the sweep's next pass over UNKNOWN rows looks it up
and, absent, sends it (:func:`gateway.recovery.reconciliation.reconcile_row`); FAILED would
leave it to a client that never comes, and the job ``failed`` although every call was
answered 2xx (the soak's nemesis found it: a WordPress partition during an attach).

The agent worker's queued inputs (:mod:`gateway.agents.submissions`: PREPARED by design until
the worker sends them) are left alone, as the sweep leaves every worker-scoped action
(:func:`gateway.operations.registry.worker_actions`).

The race with the request itself, waking up late and claiming the send, is decided by one
conditional UPDATE each (:func:`gateway.operations.transitions.move` with ``same_attempt``):
if the request's PREPARED -> SENT came first, the sweep's move finds no PREPARED row and
changes nothing; if the sweep's came first, the request's claim finds no PREPARED row,
reads the row again, finds it FAILED never sent, and claims FAILED -> SENT: either way the
write is sent once. So the window (``updated_at`` is written by the gateway's clock, judged
against the database's) only keeps the sweep off rows a live request is about to send; a
clock's skew can make the job say ``failed`` a little early, never send twice. Source:
docs/api.md ("The ledger").
"""

from __future__ import annotations

import datetime as dt
import logging

from gateway.core.config import Config
from gateway.core.states import NEVER_SENT
from gateway.ledger import db
from gateway.ledger.models import FAILED
from gateway.ledger.models import PREPARED
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Operation
from gateway.operations import registry
from gateway.operations import transitions

log = logging.getLogger(__name__)

DETAIL = (
    "never sent: the request that stored this operation's intent ended before sending it; "
    "nothing reached WordPress, and the same request sends it"
)


def settle(config: Config) -> dict:
    """Move every PREPARED row older than ``config.inflight_window`` seconds (by the
    database's clock) to FAILED never sent, except the worker-scoped actions' rows.

    Returns ``{"never_sent": n}``: the rows this pass moved (a row that a request claimed
    meanwhile is not counted and not changed). Makes no WordPress call.
    """
    cutoff = db.db_now() - dt.timedelta(seconds=config.inflight_window)
    stale = Operation.select().where(
        Operation.state == PREPARED,
        Operation.updated_at < cutoff,
        Operation.action.not_in(registry.worker_actions()),
    )
    settled = 0
    for row in list(stale):
        if settle_row(row, cutoff):
            settled += 1
            log.info("never sent %s (job_id=%s): settled", row.operation_key, row.job_id)
    return {"never_sent": settled}


def settle_row(row: Operation, cutoff: dt.datetime) -> bool:
    """Move ``row`` (read PREPARED) to FAILED never sent (UNKNOWN for an action no client
    repeats, ``resend_if_absent``) if it is still PREPARED at the attempt count it was read
    with and was last updated before ``cutoff`` (naive UTC).

    Returns True when this caller moved it; False when a request claimed its send (or
    touched it) since it was read."""
    try:
        to = UNKNOWN if registry.for_row(row).resend_if_absent else FAILED
    except registry.UnknownAction:
        to = FAILED
    return transitions.move(
        row,
        to,
        PREPARED,
        same_attempt=True,
        when=(Operation.updated_at < cutoff,),
        problem={"reason": NEVER_SENT, "detail": DETAIL},
    )
