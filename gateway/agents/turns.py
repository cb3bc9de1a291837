"""The agent worker's turns: within one pass the tenants take turns (issue 40, item 5).

The agent worker runs in one thread of the main process, outside the per-worker fair shares
(:mod:`gateway.tenancy.tenant_shares`), one session after another, so the order of its work is
its fairness. A pass's work - the stored webhook events to claim and the due sessions to poll -
is laid out in one queue per tenant (:func:`lanes`) and handed out round robin
(:func:`gateway.core.rounds.take_turns`): one item of each tenant in turn, oldest first within
a tenant (its events by id, then its due sessions most overdue first). A tenant leaves the
pass once its items in the pass have taken ``agent_tenant_slice`` seconds
(``GATEWAY_AGENT_TENANT_SLICE``); the items it leaves are not claimed, so nothing is lost: an
event stays ``pending``, a session stays due, and the next pass takes them first (they are the
oldest).

So a tenant whose WordPress or OpenAI answers slowly, or who has many sessions, delays another
tenant's turn by at most one of its items, and a pass by at most its slice plus one item. An
item is never cut short: a session's actions are answered under its job's lease to the end,
each WordPress call bounded by ``GATEWAY_WP_TIMEOUT``.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass

from gateway.core.states import EVENT_PENDING
from gateway.ledger.models import AgentSession
from gateway.ledger.models import WebhookEvent

# The lane of events that name no bound session: ``agent.environment.*`` events and events of
# sessions bound to no job (ledger work only: applied or ignored in milliseconds).
NO_TENANT = ""


@dataclass(frozen=True)
class Item:
    """One unit of a tenant's turn: a stored event (``kind == "event"``, ``row`` a
    :class:`WebhookEvent`) or a due session (``"session"``, an :class:`AgentSession`)."""

    kind: str
    row: WebhookEvent | AgentSession


def lanes(
    events: Iterable[WebhookEvent], sessions: Iterable[AgentSession]
) -> dict[str, collections.deque[Item]]:
    """``{tenant: deque of items}``, in the order tenants first appear and, within a tenant,
    its events in the order given (by id) and then its due sessions (most overdue first). A
    due session with a pending event in the pass is left to its event (one handling per pass);
    an event of no bound session goes to :data:`NO_TENANT`'s lane."""
    events = list(events)
    named = {e.session_id for e in events if e.session_id}
    tenant_of = dict(
        AgentSession.select(AgentSession.session_id, AgentSession.tenant)
        .where(AgentSession.session_id.in_(named))
        .tuples()
    )
    queues: dict[str, collections.deque[Item]] = {}
    evented = set()
    for event in events:
        tenant = tenant_of.get(event.session_id, NO_TENANT)
        queues.setdefault(tenant, collections.deque()).append(Item("event", event))
        if event.status == EVENT_PENDING:
            evented.add(event.session_id)
    for row in sessions:
        if row.session_id not in evented:
            queues.setdefault(row.tenant, collections.deque()).append(Item("session", row))
    return queues
