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

**Names as WordPress stores them.** WordPress saves a term name through ``sanitize_term`` (the
``pre_term_name`` filters: ``wp_filter_kses`` and ``_wp_specialchars``), so ``News & Events`` is
stored as ``News &amp; Events``, while the ``search`` of ``GET /wp/v2/{route}`` and of
XML-RPC ``wp.getTerms`` is a plain ``LIKE`` on the stored text (WP-API/WP-API#1227). A name
holding ``&``, ``<`` or ``>`` is therefore searched both as given and as stored
(:func:`search_forms`); both transports search through :func:`find_terms`.

**Categories of one name under several parents** (``Local`` under Sports and under Politics)
are ambiguous: 422 naming every candidate with its parent, before anything is written. The
draft chooses with an id, or with ``{"name": ..., "parent": ...}`` (the parent an id, ``0``
for the top level, or a category name). A name is never split: ``AC/DC`` is one name.
"""

from __future__ import annotations

import html
import logging
import re
import time
from dataclasses import dataclass
from dataclasses import field

from gateway.core import exceptions as exc
from gateway.core.digests import request_digest
from gateway.ledger.models import Operation
from gateway.operations import perform
from gateway.operations import refusals
from gateway.operations import registry
from gateway.operations.effects import Effect
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


def search_forms(name: str) -> list[str]:
    """The texts to search for term ``name``: the cleaned name and, when it holds ``&``, ``<``
    or ``>``, the same name as WordPress stores it (``_wp_specialchars``: ``&amp;``, ``&lt;``,
    ``&gt;``), since a search compares stored text. One or two strings, never empty."""
    plain = clean(html.unescape(name))
    stored = html.escape(plain, quote=False)
    return list(dict.fromkeys((plain, stored)))


def find_terms(target: Target, taxonomy: str, name: str) -> list[dict]:
    """Every existing term of ``taxonomy`` named ``name`` (compared by :func:`fold`), in the
    REST term shape (``id``, ``name``, ``parent``...), found by reading every page of the
    search for each of :func:`search_forms` (``GET /wp/v2/{route}?search=`` over REST,
    ``wp.getTerms`` over XML-RPC); [] when there is none. Several only for a hierarchical
    taxonomy (one name under several parents).

    Raises:
        WordPressError: WordPress cannot be asked.
    """
    wanted, found = fold(name), {}
    for text in search_forms(name):
        page = 1
        while True:
            items = target.client.search_terms(ROUTES[taxonomy], text, page, PAGE)
            for term in items:
                if fold(term.get("name") or "") == wanted:
                    found.setdefault(int(term["id"]), term)
            if len(items) < PAGE:
                break
            page += 1
    return list(found.values())


def find_term(target: Target, taxonomy: str, name: str) -> dict | None:
    """The existing term of ``taxonomy`` named ``name`` (:func:`find_terms`; the lowest id when
    several share the name), or None.

    Raises:
        WordPressError: WordPress cannot be asked.
    """
    terms = sorted(find_terms(target, taxonomy, name), key=lambda t: int(t["id"]))
    return terms[0] if terms else None


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
        everything :func:`perform.perform` raises.
    """
    key = term_key(target, taxonomy, name)
    digest = request_digest({"taxonomy": taxonomy, "name": fold(name)})
    intent = {"taxonomy": taxonomy, "name": clean(name)}
    for _ in range(WAIT_ROUNDS):
        try:
            outcome = perform.perform(target, key, digest, _term_effect(target, intent))
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


@dataclass
class Lookup:
    """What one ``categories``/``tags`` entry names: the term id, or why there is none
    (``missing``: no term of that name; ``errors``: ambiguous or an unknown parent)."""

    term_id: int | None = None
    missing: bool = False
    errors: list[dict] = field(default_factory=list)


def _parent_names(target: Target, terms: list[dict]) -> dict[int, str]:
    """The names of the parents of ``terms`` by id (``GET /wp/v2/categories/{id}`` or
    ``wp.getTerm`` once per parent; ``0`` is the top level)."""
    names = {0: "(top level)"}
    for parent in sorted({int(t.get("parent") or 0) for t in terms} - {0}):
        names[parent] = html.unescape(target.client.get_term(ROUTES["category"], parent)["name"])
    return names


def _ambiguous(target: Target, name: str, terms: list[dict], pointer: str) -> dict:
    """The error of a category name several categories share: each candidate with its
    parent, and how to choose."""
    parents = _parent_names(target, terms)
    candidates = [
        {
            "id": int(t["id"]),
            "name": html.unescape(t.get("name") or ""),
            "parent": {"id": int(t.get("parent") or 0), "name": parents[int(t.get("parent") or 0)]},
        }
        for t in sorted(terms, key=lambda t: int(t["id"]))
    ]
    shown = ", ".join(f"id {c['id']} under {c['parent']['name']!r}" for c in candidates)
    return {
        "pointer": pointer,
        "message": f"{len(terms)} categories are named {name!r} ({shown}); send the id, or "
        f'{{"name": {name!r}, "parent": <parent id or name>}}',
        "candidates": candidates,
    }


def _parent_id(target: Target, parent, pointer: str) -> Lookup:
    """The category id ``parent`` names: an id as given (``0``: the top level), or the one
    category of that name."""
    if isinstance(parent, int | float):
        return Lookup(int(parent))
    found = _lookup_category(target, parent, None, pointer)
    if found.missing:
        found.errors.append({"pointer": pointer, "message": f"no category named {parent!r}"})
    return Lookup(found.term_id, errors=found.errors)


def _lookup_category(target: Target, name: str, parent, pointer: str) -> Lookup:
    """The category ``name`` (under ``parent`` when given, see :func:`_parent_id`)."""
    terms = find_terms(target, "category", name)
    if parent is not None:
        chosen = _parent_id(target, parent, pointer + "/parent")
        if chosen.errors:
            return chosen
        terms = [t for t in terms if int(t.get("parent") or 0) == chosen.term_id]
    if not terms:
        return Lookup(missing=True)
    if len(terms) > 1:
        return Lookup(errors=[_ambiguous(target, name, terms, pointer)])
    return Lookup(int(terms[0]["id"]))


def lookup(target: Target, taxonomy: str, value, pointer: str) -> Lookup:
    """What one entry of ``categories`` or ``tags`` names: a JSON number is an id (1.0
    included), a string a name, an object (categories) ``{"name", "parent"}``.

    Raises:
        WordPressError: WordPress cannot be asked.
    """
    if isinstance(value, int | float):
        return Lookup(int(value))
    if taxonomy == "category":
        if isinstance(value, dict):
            return _lookup_category(target, value["name"], value["parent"], pointer)
        return _lookup_category(target, value, None, pointer)
    term = find_term(target, taxonomy, value)
    return Lookup(missing=True) if term is None else Lookup(int(term["id"]))


def _name_of(value) -> str:
    return value["name"] if isinstance(value, dict) else value


def check_names(target: Target, body: dict) -> tuple[dict[str, list], dict[str, list]]:
    """Everything :func:`resolve` refuses before it writes, and nothing written: each
    ``categories``/``tags`` entry of the draft body looked up (:func:`lookup`: ``GET``
    requests only, over REST; ``wp.getTerms``/``wp.getTerm`` over XML-RPC). Returns
    ``(found, missing)``: ``{field: [term id, or the name of a tag to create]}`` and
    ``{field: [(index, name)]}`` of the names without a term. ``POST /v1/articles/validate``
    calls it alone.

    Raises:
        ValidationFailed (422): unknown or ambiguous categories, a ``parent`` naming no
            category or several (``errors`` with pointers ``/categories/{i}``).
        TransportLimit (422, ``feature: new_terms``): a tag to create over XML-RPC.
        WordPressError: WordPress cannot be asked (the caller maps it).
    """
    found: dict[str, list] = {}
    missing: dict[str, list[tuple[int, str]]] = {}
    errors: list[dict] = []
    for field_name, (taxonomy, _route, _creatable) in TAXONOMIES.items():
        if body.get(field_name) is None:
            continue
        found[field_name], missing[field_name] = [], []
        for index, value in enumerate(body[field_name]):
            term = lookup(target, taxonomy, value, f"/{field_name}/{index}")
            errors += term.errors
            if term.missing:
                missing[field_name].append((index, _name_of(value)))
            found[field_name].append(_name_of(value) if term.term_id is None else term.term_id)
    _refuse_categories(missing.get("categories") or [], errors)
    check_transport(target, missing.get("tags") or [])
    return found, missing


def resolve(target: Target, body: dict) -> dict[str, list[int]]:
    """``{"categories": [ids], "tags": [ids]}`` for the fields the draft body names: ids kept,
    names matched (:func:`check_names`), missing tags created. Unknown or ambiguous
    categories are refused before any write.

    Raises:
        ValidationFailed (422): a category name matches no category, or several under
            different parents (``errors`` lists each with its pointer ``/categories/{i}``;
            an ambiguous one with its ``candidates``: ``{"id", "name", "parent": {"id",
            "name"}}``), or a ``parent`` names no category or several.
        TransportLimit (422, ``feature: new_terms``): a tag is missing and the site's
            transport cannot create terms (XML-RPC); nothing was written.
        WordPressUnavailable (503): WordPress cannot be searched.
        plus everything :func:`ensure_term` raises.
    """
    try:
        found, _missing = check_names(target, body)
    except WordPressError as error:
        raise refusals.cannot_read(error) from error
    for field_name, items in found.items():
        taxonomy = TAXONOMIES[field_name][0]
        resolved = [v if isinstance(v, int) else ensure_term(target, taxonomy, v) for v in items]
        found[field_name] = list(dict.fromkeys(resolved))
    return found


def _refuse_categories(unknown: list[tuple[int, str]], errors: list[dict]) -> None:
    """422 for unknown categories (never created here) and for ambiguous ones or unknown
    parents (``errors``), all in one problem, before anything is written."""
    if not unknown and not errors:
        return
    errors = errors + [
        {"pointer": f"/categories/{i}", "message": f"no category named {name!r}"}
        for i, name in unknown
    ]
    errors.sort(key=lambda e: [int(p) if p.isdigit() else p for p in e["pointer"].split("/")])
    what = []
    if unknown:
        what.append("unknown categories: " + ", ".join(repr(n) for _, n in unknown))
    if len(errors) > len(unknown):
        what.append("categories named ambiguously or under an unknown parent")
    raise exc.ValidationFailed(
        "; ".join(what) + " (categories are created and arranged by editors in WordPress; "
        "nothing was written)",
        errors=errors,
    )


def _send_request(target: Target, request: dict) -> None:
    """Registry ``send``: ``request`` is ``{"taxonomy", "name"}``; the outcome is the
    site-scoped ``term`` row (:func:`ensure_term`)."""
    ensure_term(target, request["taxonomy"], request["name"])


registry.register(
    registry.Action(
        name="term",
        binds="term",
        recovery=registry.LOOKUP,  # found by name (WordPress refuses a second term of a name)
        send=lambda target, request: _send_request(target, request),
        rebuild=rebuild,
        step="create_draft",
        scope=registry.SITE,  # one row per site and term, shared by jobs: the sweep's
    )
)
