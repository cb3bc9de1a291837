"""Ownership of WordPress objects: an object id is bound to an operation or a job only when it
is provably that operation's.

Every path that binds a WordPress object id to an operation or job goes through here: an
editor's ``same_as`` decision, reconciliation adopting what a lookup found, the companion
plugin's ``existing_id``, and the writes to a job's post (repair, blocks, approvals, publish).
The rules:

* **The ledger.** No other job (of any tenant) may hold the object on the same WordPress
  install; within one job, a media slot's attachment belongs to that slot, and a post to the
  job's draft chain; an image's upload, attachment to the post and metadata updates are one
  chain per slot; terms are shared by every job of a site and belong to none. Which chain an
  operation belongs to is its row's ``binds``, stored at claim from its registry entry. An
  *install* is what WordPress reports about itself
  (:func:`gateway.tenancy.sites.install_identity`: the ``url`` and ``home`` of its REST index),
  not the URL configured for the site: two tenants may
  reach one install by different URLs. A site whose identity cannot be learnt counts as the
  same install (refusing is safe; adopting is not).
* **The object.** When its facts are at hand (a lookup entry, or the object read back), an
  object of the wrong type is refused, and so is one carrying another operation key.

A keyless object that nothing else holds can still be adopted: that is what an editor's
decision is for.
"""

from __future__ import annotations

import logging

from gateway.core import exceptions as exc
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.ledger.models import Site
from gateway.operations import transitions
from gateway.tenancy import sites
from gateway.wordpress import OPERATION_KEY_META
from gateway.wordpress.errors import WordPressError

log = logging.getLogger(__name__)
# The WordPress object types an operation can bind (the registry's ``Action.binds``).
POST, ATTACHMENT, TERM = "post", "attachment", "term"


def object_type(row: Operation) -> str:
    """The WordPress type the operation ``row`` binds, as stored on its row at claim
    (``binds``, from its registry entry: :attr:`gateway.operations.registry.Action.binds`):
    ``post`` (the job's draft chain), ``attachment`` (an image slot's chain: its upload, its
    attachment to the post, its metadata updates) or ``term`` (site objects many jobs and
    tenants share by name; their ids are not post ids). A row that binds nothing counts as
    ``post`` (refusing is safe)."""
    return row.binds or POST


def _binds(row: Operation, kind: str) -> bool:
    return row.binds == kind


def facts_of(obj: dict) -> dict:
    """``{"type", "operation_key"}`` of a REST object (``context=edit``) or of a companion
    lookup entry (which carries ``operation_key`` itself)."""
    if "operation_key" in obj:
        key = obj.get("operation_key")
    else:
        meta = obj.get("meta") if isinstance(obj.get("meta"), dict) else {}
        key = meta.get(OPERATION_KEY_META)
    return {"type": obj.get("type"), "operation_key": key or None}


def check_adoptable(target, row: Operation, object_id: int, obj: dict | None = None) -> None:
    """Refuse to bind ``object_id`` to the operation ``row`` unless it is provably its own.

    Args:
        target: the job's :class:`gateway.operations.perform.Target`.
        row: the operation that would adopt the object.
        obj: what is known of the object (a REST object or a lookup entry), or None.

    Raises:
        ForeignObject (409): wrong type, another operation key, or held by another
            operation, job or tenant on the same install.
        WordPressUnavailable (503): the install's identity cannot be learnt now.
    """
    if _binds(row, TERM):
        return  # a term is found by name and shared: there is no owner to check
    want = object_type(row)
    if obj is not None:
        facts = facts_of(obj)
        if facts["type"] and facts["type"] != want:
            raise _foreign(row, object_id, f"it is a {facts['type']}, not a {want}")
        key = facts["operation_key"]
        if key and key != row.operation_key:  # visible whenever the plugin registers the meta
            raise _foreign(row, object_id, f"it carries the operation key {key}")
    holder = held_elsewhere(target, row, object_id)
    if holder is not None:
        raise _foreign(row, object_id, f"the ledger binds it to {holder.operation_key}")


def held_elsewhere(target, row: Operation, object_id: int) -> Operation | None:
    """The operation of another job (or another media slot) that holds ``object_id`` on the
    target's install, or None: such an object is provably not ``row``'s, not even a suspect."""
    found = holders(target, object_id, ignore=lambda h: _same_chain(row, h))
    return found[0] if found else None


def undo_if_raced(target, row: Operation, object_id: int) -> None:
    """After ``row`` was confirmed with an adopted ``object_id``: if another job or tenant
    bound the same object meanwhile (the check and the UPDATE are two statements), set ``row``
    back to UNKNOWN without the object and refuse. Two racing adoptions may then both be
    undone - never both kept.

    Raises:
        ForeignObject (409).
    """
    holder = held_elsewhere(target, row, object_id)
    if holder is None:
        return
    transitions.move(
        row,
        UNKNOWN,
        CONFIRMED,
        when=(Operation.remote_id == object_id,),
        remote_id=None,
        receipt=None,
    )
    raise _foreign(row, object_id, f"{holder.operation_key} bound it at the same moment")


def check_job_post(target, post_id: int) -> None:
    """Refuse a write to (or an approval of) ``post_id`` as the job's post when another job
    or tenant holds it on the same install (a binding recorded before ownership was checked).

    Raises:
        ForeignObject (409), WordPressUnavailable (503): as :func:`check_adoptable`.
    """
    job = target.job
    for holder in holders(
        target, post_id, ignore=lambda h: (h.tenant, h.job_id) == (job.tenant, job.job_id)
    ):
        raise exc.ForeignObject(
            f"post {post_id} is bound to {holder.operation_key} as well; an editor must "
            "sort the bindings out before this job writes to it",
            post_id=post_id,
        )


def holders(target, object_id: int, ignore=None) -> list[Operation]:
    """CONFIRMED operations of any tenant bound to ``object_id`` on the install behind the
    target's site, except those ``ignore(row)`` accepts (a ledger query; install identities
    are learnt only when a row remains, once per site)."""
    query = Operation.select().where(
        Operation.remote_id == int(object_id),
        Operation.state == CONFIRMED,
        # Only operations that bind a post or an attachment: term ids are another id space,
        # and agent-session inputs bind no WordPress object.
        Operation.binds.in_((POST, ATTACHMENT)),
    )
    rows = [row for row in query if ignore is None or not ignore(row)]
    if not rows:
        return []
    mine = _identity(target.site, target.client)
    same, cache = [], {}
    for row in rows:
        site = _site_of(row)
        if site is None or site.id == target.site.id:
            same.append(row)  # no site left to tell: refuse rather than adopt
            continue
        if site.id not in cache:
            cache[site.id] = _identity_or_none(site, target.config)
        if cache[site.id] in (None, mine):
            same.append(row)
    return same


def _same_chain(row: Operation, holder: Operation) -> bool:
    """Whether ``holder`` binds the object for the same thing as ``row``: the same job and
    either the same media slot, or both about the job's post."""
    if (holder.tenant, holder.job_id) != (row.tenant, row.job_id):
        return False
    if holder.operation_key == row.operation_key:
        return True
    mine, theirs = object_type(row), object_type(holder)
    if ATTACHMENT in (mine, theirs):
        return mine == theirs and _image_slot(row) == _image_slot(holder)
    return mine == theirs == POST and _binds(row, POST) and _binds(holder, POST)


def _image_slot(row: Operation) -> str:
    """The image slot of a media, attach or media_meta row (``media_meta``'s slot is
    ``{slot}/{stamp}``)."""
    return (row.slot or "").split("/", 1)[0]


def _site_of(row: Operation) -> Site | None:
    job = Job.get_or_none(Job.tenant == row.tenant, Job.job_id == row.job_id)
    if job is None:
        return None
    return Site.get_or_none(Site.tenant == job.tenant, Site.name == job.site)


def _identity(site: Site, client) -> tuple[str, str]:
    try:
        return sites.install_identity(site, client)
    except WordPressError as error:
        raise exc.WordPressUnavailable(
            f"cannot tell which WordPress install site {site.name!r} is: {error.message}",
            retry_after=2,
        ) from error


def _identity_or_none(site: Site, config) -> tuple[str, str] | None:
    """Another site's install identity (learnt now if it never was), None when unknown."""
    if site.install_url:
        return site.install_url, site.install_home or ""
    try:
        client = sites.client_for(site, config.secret_key, config.wp_timeout)
        return sites.install_identity(site, client)
    except (WordPressError, RuntimeError) as error:
        log.warning("install identity of site %s/%s unknown: %s", site.tenant, site.name, error)
        return None


def _foreign(row: Operation, object_id: int, why: str) -> exc.GatewayError:
    log.warning("refused to bind object %s to %s: %s", object_id, row.operation_key, why)
    return exc.ForeignObject(
        f"object {object_id} is not provably this operation's: {why}",
        operation_key=row.operation_key,
        ledger_state=row.state,
        object_id=int(object_id),
    )
