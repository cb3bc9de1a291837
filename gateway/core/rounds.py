"""Queues taking turns within one pass of a background loop: the webhook delivery pass
(:func:`gateway.actions.deliveries.resend_pending`, a queue per endpoint) and the agent
worker's pass (:mod:`gateway.agents.turns`, a queue per tenant) share this rule, so that one
queue's many items or slow upstream delay only its own (issue 40).

One item of each tenant in turn, in the order its queue holds them; a tenant leaves the pass
once its items in the pass took a slice of time, or when handling one says so (a failure);
what it leaves waits for the next pass.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


def take_turns(
    queues: dict[str, collections.deque[T]],
    handle: Callable[[T], object],
    slice_seconds: float,
    clock: Callable[[], float] = time.monotonic,
    name: str = "pass",
) -> int:
    """Call ``handle`` on one item of each queue (``queues``: a tenant, or an endpoint, ->
    its items, oldest first) in turn until every queue is empty or has left the pass. A queue
    leaves once ``handle`` has spent ``slice_seconds`` (``clock``'s unit, seconds) on its items in
    this call, or at once when ``handle`` returns ``False`` (any other value: it goes on).
    ``queues`` is consumed; ``name`` labels the log line of a queue that leaves.

    Returns how many items the leaving tenants left for the next pass. Raises what
    ``handle`` raises (the items not reached are then left too)."""
    spent: collections.Counter[str] = collections.Counter()
    left = 0
    while queues:
        for tenant in list(queues):
            started = clock()
            goes_on = handle(queues[tenant].popleft()) is not False
            spent[tenant] += clock() - started
            if not queues[tenant]:
                del queues[tenant]
            elif not goes_on or spent[tenant] >= slice_seconds:
                waiting = len(queues.pop(tenant))
                left += waiting
                log.info(
                    "%s: tenant %s leaves it after %.1f s; %s items wait for the next pass",
                    name,
                    tenant or "-",
                    spent[tenant],
                    waiting,
                )
    return left
