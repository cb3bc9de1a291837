"""Categories and tags by name (WordPress REST API, ``/wp/v2/categories`` and ``/wp/v2/tags``).

A draft's ``categories`` and ``tags`` hold ids (JSON numbers) and names (JSON strings: ``"12"``
is the name "12"). A name matches an existing term the way WordPress 6.1 ``wp_insert_term``
refuses a duplicate: PHP ``strtolower`` on both names (ASCII letters only, no accent folding:
"Cafe" and "Café" are two terms), after WordPress's own trimming and whitespace collapsing;
every page of the search is read (``per_page`` is capped at 100).

A missing tag is created as its own ledger operation with the **site-scoped** key
``{tenant}/site/{site}/term/{taxonomy}/{folded name}``, so any number of racing jobs asking for
one new tag create one term. The request digest covers the taxonomy and the folded name only,
so "Reviews" and "reviews" from two jobs are the same operation. WordPress answers a name it
already holds with 400 ``term_exists`` and the existing id (``data.term_id``): that id is
adopted. A term carries no identifier of ours, so reconciliation looks it up by name.

Categories are never created: an author may assign and create tags (``assign_terms`` /
``edit_terms`` of ``post_tag`` map to ``edit_posts``) but creating a category needs
``manage_categories`` (editors and up). An unknown category is 422 listing the unknown names,
before anything is written.
"""

from __future__ import annotations

import html
import logging
import re
import time

from gateway.core import exceptions as exc
from gateway.core.digests import request_digest
from gateway.ledger.models import Operation
from gateway.operations import perform as operations
from gateway.operations import refusals
from gateway.operations import registry as actions
from gateway.operations.perform import Effect
from gateway.operations.target import Target
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressRefused

log = logging.getLogger(__name__)

# request field -> (WordPress taxonomy, REST route, may the gateway create it)
TAXONOMIES = {
    "categories": ("category", "/wp/v2/categories", False),
    "tags": ("post_tag", "/wp/v2/tags", True),
}
ROUTES = {taxonomy: route for taxonomy, route, _ in TAXONOMIES.values()}
PAGE = 100
WAIT_ROUNDS = 40  # x 0.25 s: how long a job waits for another job creating the same term
_SPACE = re.compile(r"\s+")


def clean(name: str) -> str:
    """The name as WordPress stores it before comparing (``sanitize_text_field``: whitespace
    runs collapsed, trimmed)."""
    return _SPACE.sub(" ", name).strip()


def fold(name: str) -> str:
    """PHP ``strtolower`` as ``wp_insert_term`` applies it: ASCII letters lowered, every other
    character (accented ones included) unchanged."""
    return clean(html.unescape(name)).encode("utf-8").lower().decode("utf-8")


def find_term(target: Target, taxonomy: str, name: str) -> dict | None:
    """The existing term of ``taxonomy`` named ``name`` (compared by :func:`fold`), searching
    every page of ``GET /wp/v2/{route}?search=``; None when there is none.

    Raises:
        WordPressError: WordPress cannot be asked.
    """
    wanted, page = fold(name), 1
    while True:
        items = target.client.search_terms(ROUTES[taxonomy], clean(name), page, PAGE)
        for term in items:
            if fold(term.get("name") or "") == wanted:
                return term
        if len(items) < PAGE:
            return None
        page += 1


def term_key(target: Target, taxonomy: str, name: str) -> str:
    """``{tenant}/site/{site}/term/{taxonomy}/{folded name}``: one key per term and site."""
    return f"{target.job.tenant}/site/{target.job.site}/term/{taxonomy}/{fold(name)}"


def read_back(target: Target, term_id: int, intent: dict) -> dict:
    """The receipt of a term: ``GET /wp/v2/{route}/{id}`` read back."""
    term = target.client.get_term(ROUTES[intent["taxonomy"]], term_id)
    return {
        "term_id": int(term["id"]),
        "name": term.get("name"),
        "slug": term.get("slug"),
        "taxonomy": intent["taxonomy"],
    }


def rebuild(target: Target, row: Operation, found=None, prefetched=None) -> Effect:
    """The effect of a ``term`` ledger row from its intent alone (reconciliation, sweep):
    found by name, read back by id."""
    return _term_effect(target, row.intent or {})


def _term_effect(target: Target, intent: dict) -> Effect:
    taxonomy, name = intent["taxonomy"], intent["name"]

    def send() -> dict:
        try:
            return target.client.create_term(ROUTES[taxonomy], name)
        except WordPressRefused as refusal:
            existing = refusal.data.get("term_id") if refusal.code == "term_exists" else None
            if existing is None:
                raise
            log.info("term %s/%s exists as %s: adopted", taxonomy, name, existing)
            return {"id": int(existing)}

    def find() -> list[dict]:
        term = find_term(target, taxonomy, name)
        return [] if term is None else [{"id": int(term["id"]), "type": "term"}]

    return Effect(
        action="term",
        send=send,
        find=find,
        read_back=lambda term_id, _obj: read_back(target, term_id, intent),
        creates=False,  # the lookup by name is conclusive; WordPress refuses a duplicate name
        intent=intent,
    )


def ensure_term(target: Target, taxonomy: str, name: str) -> int:
    """The id of term ``name`` of ``taxonomy``, created once per site under the site-scoped
    key. A job finding another job creating the same term waits for it (a few seconds).

    Raises:
        everything :func:`operations.perform` raises.
    """
    key = term_key(target, taxonomy, name)
    digest = request_digest({"taxonomy": taxonomy, "name": fold(name)})
    intent = {"taxonomy": taxonomy, "name": clean(name)}
    for _ in range(WAIT_ROUNDS):
        try:
            outcome = operations.perform(target, key, digest, _term_effect(target, intent))
            return int(outcome.row.remote_id)
        except exc.OperationInProgress:
            time.sleep(0.25)
    raise exc.OperationInProgress(
        f"another job is creating the term {name!r}", retry_after=2, operation_key=key
    )


def check_transport(target: Target, missing: list[tuple[int, str]]) -> None:
    """Refuse tags to create when the site's transport cannot create terms (XML-RPC:
    ``wp.newTerm`` needs ``edit_terms``, which authors lack), before anything is written.

    Raises:
        TransportLimit (422, ``feature: new_terms``; ``errors`` points at ``/tags/{i}``).
    """
    if not missing or target.companion.new_terms:
        return
    raise exc.TransportLimit(
        "tags cannot be created over the site's "
        f"{target.companion.transport} transport: "
        + ", ".join(repr(n) for _, n in missing)
        + " (create them in WordPress or send existing tags; nothing was written)",
        feature="new_terms",
        transport=target.companion.transport,
        errors=[
            {"pointer": f"/tags/{i}", "message": f"no tag named {name!r}"} for i, name in missing
        ],
    )


def resolve(target: Target, body: dict) -> dict[str, list[int]]:
    """``{"categories": [ids], "tags": [ids]}`` for the fields the draft body names: ids kept,
    names matched, missing tags created. Unknown categories are refused before any write.

    Raises:
        ValidationFailed (422): a category name matches no category (``errors`` lists each,
            with its pointer ``/categories/{i}``).
        TransportLimit (422, ``feature: new_terms``): a tag is missing and the site's
            transport cannot create terms (XML-RPC); nothing was written.
        WordPressUnavailable (503): WordPress cannot be searched.
        plus everything :func:`ensure_term` raises.
    """
    found: dict[str, list] = {}
    missing: dict[str, list[tuple[int, str]]] = {}
    for field, (taxonomy, _route, _creatable) in TAXONOMIES.items():
        if body.get(field) is None:
            continue
        found[field], missing[field] = [], []
        for index, value in enumerate(body[field]):
            if isinstance(value, int | float):  # a JSON number is an id (1.0 included)
                found[field].append(int(value))
                continue
            try:
                term = find_term(target, taxonomy, value)
            except WordPressError as error:
                raise refusals.cannot_read(error) from error
            if term is None:
                missing[field].append((index, value))
                found[field].append(value)
            else:
                found[field].append(int(term["id"]))
    unknown = missing.get("categories") or []
    if unknown:
        raise exc.ValidationFailed(
            "unknown categories: " + ", ".join(repr(n) for _, n in unknown)
            + " (categories are created by editors in WordPress; nothing was written)",
            errors=[
                {"pointer": f"/categories/{i}", "message": f"no category named {name!r}"}
                for i, name in unknown
            ],
        )  # fmt: skip
    check_transport(target, missing.get("tags") or [])
    for field, items in found.items():
        taxonomy = TAXONOMIES[field][0]
        resolved = [v if isinstance(v, int) else ensure_term(target, taxonomy, v) for v in items]
        found[field] = list(dict.fromkeys(resolved))
    return found


def _send_request(target: Target, request: dict) -> None:
    """Registry ``send``: ``request`` is ``{"taxonomy", "name"}``; the outcome is the
    site-scoped ``term`` row (:func:`ensure_term`)."""
    ensure_term(target, request["taxonomy"], request["name"])


actions.register(
    actions.Action(
        name="term",
        binds="term",
        recovery=actions.LOOKUP,  # found by name (WordPress refuses a second term of a name)
        send=lambda target, request: _send_request(target, request),
        rebuild=rebuild,
        step="create_draft",
        scope=actions.SITE,  # one row per site and term, shared by jobs: the sweep's
    )
)
