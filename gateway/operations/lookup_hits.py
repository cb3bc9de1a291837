"""What a lookup by operation key found, judged before anything is adopted or sent again.

Reconciliation (:func:`gateway.operations.perform.reconcile`, the sweep) asks WordPress which
objects carry an operation's key (the companion plugin's ``/objects``) and acts on the answer:

* **none**: absent; the operation may be sent again under the same key;
* **one the site's user can read and edit**: conclusive; it is adopted (read back, CONFIRMED);
* **two or more**: a ``multiple_objects`` review item; never an automatic delete;
* **one it cannot reach**: a ``unreadable_object`` review item. Since companion 1.4.0 an
  object carrying the key that the caller may not read (``read_post``: another author's draft,
  a post reassigned to another author, made private by an editor) is reported as
  ``{operation_key, id, type, readable: false}``, and a readable one says whether the caller
  may edit it (``editable``; the gateway reads back with ``context=edit``). Such an object
  exists, so sending again would make a second one (the plugin's guard would refuse it
  anyway); it cannot be read back, so adopting it would record CONFIRMED without evidence. An
  editor decides: give the site's user access to it again and choose it (``same_as``, which
  reads it back first), or take the key off it.

An entry without ``readable`` (companion before 1.4.0, the XML-RPC transport's scan, which only
sees what the user can edit) counts as readable.

**The guard names one out of reach.** Operation keys are guessable (``tenant/job/vN/draft``):
a contributor may put a job's next key on a draft of their own. The companion plugin's guard
then refuses the gateway's create (409 naming that post), which the gateway cannot read back:
:func:`check_named` opens the ``unreadable_object`` review at once (409 ``needs-review``,
nothing sent again) instead of an ``outcome-unknown`` for an outcome that is known.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.core import exceptions as exc
from gateway.ledger.models import SENT
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Operation
from gateway.operations import review_items
from gateway.operations import transitions
from gateway.wordpress.errors import WordPressError

MULTIPLE = "multiple_objects"
UNREADABLE = "unreadable_object"


def out_of_reach(entry: dict) -> bool:
    """Whether the site's user can neither read nor edit the object of a lookup entry
    (``readable: false``, or ``editable: false``: companion plugin 1.4.0)."""
    return entry.get("readable") is False or entry.get("editable") is False


def adoptable(found: list[dict]) -> dict | None:
    """The one entry a lookup found, if it is one the site's user can read back; else None
    (nothing, several, or one out of reach). Pure: for batch read-backs and quick checks."""
    if len(found) == 1 and not out_of_reach(found[0]):
        return found[0]
    return None


def judge(target, row: Operation, found: list[dict]) -> dict | None:
    """The entry to adopt for ``row`` (one readable object), or None when nothing carries
    its key.

    Raises:
        NeedsReview (409 ``needs-review``): an object carrying the key is out of reach of the
            site's user (review kind ``unreadable_object``, detail ``objects`` and ``reason``),
            or several objects carry it (``multiple_objects``). Nothing is sent or adopted.
    """
    hidden = [o for o in found if out_of_reach(o)]
    if hidden:
        raise _review(target, row, UNREADABLE, found, _unreadable_reason(hidden, found))
    if len(found) > 1:
        reason = f"{len(found)} objects in WordPress carry this operation key"
        raise _review(target, row, MULTIPLE, found, reason)
    return found[0] if found else None


def check_named(target, row: Operation, find: Callable[[], list[dict]], named: int | None):
    """Before the object the companion plugin's guard named (its 409's ``existing_id``,
    ``named``) is adopted for the SENT ``row``: when the lookup by key (``find``, the effect's
    ``/objects`` read) reports an object carrying the key out of reach of the site's user,
    ``row`` becomes UNKNOWN and the review opens. A lookup that fails changes nothing (the
    read-back then decides).

    Raises:
        NeedsReview (409 ``needs-review``, review kind ``unreadable_object``), as
            :func:`judge`.
    """
    try:
        found = find()
    except WordPressError:
        return
    if any(out_of_reach(o) for o in found):
        detail = f"the companion plugin's guard named {named}, out of reach of the site's user"
        transitions.move(row, UNKNOWN, SENT, problem={"detail": detail})
        judge(target, Operation.get_by_id(row.id), found)


def _unreadable_reason(hidden: list[dict], found: list[dict]) -> str:
    ids = ", ".join(f"{o.get('type', 'object')} {o['id']}" for o in hidden)
    reason = (
        f"WordPress holds {ids} carrying this operation key, which the site's user cannot "
        "read back (another author's, or made private or reassigned since): not sent again, "
        "not adopted; an editor gives the site's user access to it and chooses it (same_as), "
        "or removes the key from it"
    )
    if len(found) > len(hidden):
        reason += f"; {len(found) - len(hidden)} more object(s) carry it"
    return reason


def _review(target, row: Operation, kind: str, found: list[dict], reason: str):
    detail = {"objects": found} if kind == MULTIPLE else {"objects": found, "reason": reason}
    review = review_items.open_review(target, row, kind, detail)
    return exc.NeedsReview(
        reason,
        operation_key=row.operation_key,
        ledger_state=row.state,
        review_id=review.id,
    )
