"""Insert-or-get on a unique key: the one way the ledger decides "who was first".

A row whose unique key already exists is not an error here but the answer: the first INSERT
holds the key and every later one finds its row. The constraint is the lock, so two racing
callers never both create (docs/architecture.md, "Every state change goes through
operations/transitions.py"; huey and rocket-rides-atomic decide the same way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from peewee import IntegrityError

from gateway.ledger import db

T = TypeVar("T")


def insert_or_get(
    insert: Callable[[], T], get: Callable[[], T | None] | None = None
) -> tuple[T | None, bool]:
    """Run ``insert`` in its own write transaction (:func:`gateway.ledger.db.atomic`);
    when a unique constraint refuses it, run ``get`` instead, outside that transaction
    (its rollback already happened).

    Args:
        insert: creates the row and returns it (``Model.create``, a plain-SQL INSERT).
        get: reads the row that holds the key (None: the caller only needs to know it
            exists, e.g. a duplicate webhook).

    Returns ``(row, created)``: ``(inserted row, True)``, or ``(get(), False)`` (``(None,
    False)`` without ``get``).

    Raises:
        whatever ``insert`` raises other than ``peewee.IntegrityError``, and whatever ``get``
        raises (e.g. ``DoesNotExist`` when the holder was deleted in between).
    """
    try:
        with db.atomic():
            return insert(), True
    except IntegrityError:
        return (get() if get is not None else None), False
