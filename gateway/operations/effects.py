"""What one ledger operation does (:class:`Effect`) and what came of it (:class:`Outcome`).

The types the rest of ``operations/`` speaks in, one floor below the modules that use them:
the action registry (:mod:`gateway.operations.registry`: an action's ``send`` returns an
:class:`Outcome`, its ``rebuild`` an :class:`Effect`), the one path of a write
(:mod:`gateway.operations.perform`) and the action modules. It imports nothing of
``operations``, so the registry and ``perform`` both import it and no circle closes (issue 37:
they once lived in ``perform.py``, which the registry imported back under ``TYPE_CHECKING``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

from gateway.ledger.models import Operation


@dataclass
class Effect:
    """What one operation does in WordPress.

    Attributes:
        action: ``media``, ``draft``, ``block``, ``repair``, ``publish``...
        send: performs the write and returns WordPress's object (``context=edit``).
        find: looks the operation up in WordPress; returns the objects that carry it (a list:
            0 = absent, 1 = done, 2+ = needs an editor).
        read_back: ``(object_id, sent_object or None) -> receipt``: reads the object back
            (``context=edit``) and returns the receipt to store; ``sent_object`` is what
            WordPress returned to the write, the baseline later verification compares with.
        creates: True when the write creates an object carrying the operation key (so the
            companion plugin's guard protects a resend); updates are idempotent by nature.
        title: the post title a suspected-duplicate search uses when no identifier exists.
        intent: stored with the PREPARED row: what a later reconciliation needs to read the
            object back without the original request (no secrets).
    """

    action: str
    send: Callable[[], dict]
    find: Callable[[], list[dict]]
    read_back: Callable[[int, dict | None], dict]
    creates: bool = True
    title: str | None = None
    intent: dict = field(default_factory=dict)


def lookup_only() -> dict:
    """The ``send`` of an effect rebuilt from a ledger row for a lookup (an action's
    ``rebuild``): reconciliation never writes.

    Raises:
        RuntimeError: always; calling it is a bug.
    """
    raise RuntimeError("an effect rebuilt from a ledger row for a lookup is never sent")


@dataclass
class Outcome:
    """The result of :func:`gateway.operations.perform.perform`: the ledger row and how it
    was reached."""

    row: Operation
    replayed: bool = False  # the stored receipt, no WordPress write
    created: bool = False  # this request made the write (HTTP 201)
    reconciled: bool = False  # found in WordPress by lookup
