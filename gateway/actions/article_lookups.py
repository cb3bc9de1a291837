"""What ``POST /v1/articles/validate`` asks outside the gateway, read-only, so that an article
the write routes would refuse is refused before its first upload:

* **category and tag names**, looked up in the site the job will write to, the way the draft
  route does (:func:`gateway.actions.terms.check_names`: ``GET /wp/v2/categories`` and
  ``GET /wp/v2/tags`` searches over REST, ``wp.getTerms`` over XML-RPC): an unknown or
  ambiguous category, or a tag the site's transport cannot create, is the draft route's
  problem. Nothing is created: a missing tag passes (the draft route creates it).
* **images given by ``source_url``**, probed as the media route would download them
  (:func:`gateway.actions.media_sources.probe`: the same address guard, schemes, redirects,
  deadline and size limit), reading at most the first 4096 bytes of each and uploading
  nothing; at most :data:`MAX_PROBES` at once, each distinct URL once.

The same term searches list a site's categories and tags for a form (``GET
/v1/sites/{site}/terms/{taxonomy}``, :func:`list_terms`: the n8n node's category and tag
pickers), read-only, so that no WordPress credential is needed outside the gateway.

Both wait on another server, so they take the tenant's request share first, as the write
routes do (:mod:`gateway.tenancy.tenant_shares`); term lookups also take a slot of the site
(:meth:`gateway.operations.target.Target.hold_slot`). Source: docs/api.md, ``POST
/v1/articles/validate``.
"""

from __future__ import annotations

import html
from concurrent.futures import ThreadPoolExecutor

from gateway.actions import media
from gateway.actions import media_sources
from gateway.actions import terms
from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.ledger.models import Job
from gateway.ledger.models import Site
from gateway.operations import refusals
from gateway.operations.target import Target
from gateway.tenancy import sites
from gateway.tenancy import tenant_shares
from gateway.wordpress.errors import WordPressError

MAX_PROBES = 8  # image URLs probed at once by one request
MAX_TERMS = 500  # terms one listing reads at most (five pages of WordPress's 100)
PROBE_PROBLEMS = (
    exc.MediaUrlRefused,
    exc.MediaDownloadFailed,
    exc.MediaSourceUnavailable,
    exc.UnsupportedMediaType,
)


def names_terms(draft: dict) -> bool:
    """Whether the draft body names a category or tag by name (an entry that is no number):
    only then is the site asked."""
    entries = [*(draft.get("categories") or []), *(draft.get("tags") or [])]
    return any(not isinstance(entry, int | float) for entry in entries)


def choose_site(tenant: str, name: str | None, needed: bool) -> tuple[Site | None, list[dict]]:
    """The site to look names up in: ``name`` (the body's ``site``, the job's site), or the
    tenant's only site when ``needed`` and none is named. Returns ``(site or None, errors)``,
    the errors at pointer ``/site``: ``site-not-found`` (no such site, or the tenant has
    none), ``validation-failed`` (several sites and none named)."""
    if name is not None:
        try:
            return sites.get_site(tenant, name), []
        except exc.SiteNotFound as missing:
            return None, [_error("/site", f"no site {name!r} for this tenant", missing.slug)]
    if not needed:
        return None, []
    found = sites.list_sites(tenant)
    if len(found) == 1:
        return found[0], []
    if not found:
        why = "the tenant has no site to look category and tag names up in"
        return None, [_error("/site", why, exc.SiteNotFound.slug)]
    listed = ", ".join(repr(s.name) for s in found)
    why = f"the tenant has {len(found)} sites ({listed}): name the job's site to look names up"
    return None, [_error("/site", why, exc.ValidationFailed.slug)]


def check_terms(config: Config, site: Site, draft: dict) -> None:
    """Look the draft's ``categories`` and ``tags`` up on ``site`` as the draft route does
    (:func:`gateway.actions.terms.check_names`), writing nothing.

    Raises:
        ValidationFailed (422), TransportLimit (422): the draft route's own refusals, with
            pointers in the draft (``/categories/{i}``, ``/tags/{i}``).
        WordPressUnavailable (503) / UpstreamRefused (502) / WordPressRefused (502):
            WordPress cannot be asked (:func:`gateway.operations.refusals.unmapped`).
        SiteBusy (429), TenantBusy (429): the site's slots or the tenant's share are taken.
    """
    # No job exists yet: the target stands for "a job of this tenant on this site", unsaved.
    target = Target(config, Job(tenant=site.tenant, job_id="", site=site.name), site=site)
    try:
        terms.check_names(target, draft)
    except WordPressError as error:
        raise refusals.unmapped(error) from error


def list_terms(config: Config, tenant: str, site_name: str, taxonomy: str, search: str) -> dict:
    """The site's terms of ``taxonomy`` (``categories`` or ``tags``) whose name or slug holds
    ``search`` (empty: every term), read-only (``GET /wp/v2/categories`` or ``/wp/v2/tags``
    with ``search``, ``hide_empty=false``, over REST; ``wp.getTerms`` over XML-RPC), at most
    :data:`MAX_TERMS`.

    Returns ``{"site", "taxonomy", "terms": [{"id", "name", "parent"}], "truncated"}``: names
    as a person reads them (WordPress's stored ``&amp;`` unescaped), ``parent`` 0 at the top
    level and for tags; ``truncated`` when more terms match than were read.

    Raises:
        SiteNotFound (404): the tenant has no site ``site_name``.
        WordPressUnavailable (503) / UpstreamRefused (502) / WordPressRefused (502):
            WordPress cannot be asked (:func:`gateway.operations.refusals.unmapped`).
        SiteBusy (429), TenantBusy (429): the site's slots or the tenant's share are taken.
    """
    site = sites.get_site(tenant, site_name)
    target = Target(config, Job(tenant=tenant, job_id="", site=site.name), site=site)
    found: list[dict] = []
    page, more = 1, True
    try:
        while more and len(found) < MAX_TERMS:
            items = target.client.search_terms(
                terms.TAXONOMIES[taxonomy][1], search, page, terms.PAGE
            )
            found += [_term(item) for item in items]
            more, page = len(items) == terms.PAGE, page + 1
    except WordPressError as error:
        raise refusals.unmapped(error) from error
    listed = list({term["id"]: term for term in found}.values())[:MAX_TERMS]
    return {"site": site.name, "taxonomy": taxonomy, "terms": listed, "truncated": more}


def _term(item: dict) -> dict:
    name = html.unescape(str(item.get("name") or ""))
    return {"id": int(item["id"]), "name": name, "parent": int(item.get("parent") or 0)}


def probe_images(config: Config, tenant: str, urls: dict[int, str]) -> dict[int, dict]:
    """Probe each image URL (``{index in media: source_url}``) as the media route would
    download it. Returns ``{index: entry}``: ``{"mime_type", "downloaded_from", "bytes"?}``
    for an image that answers, or ``{"error": {"pointer", "message", "problem"}}`` with the
    media route's problem type (``media-url-refused``, ``media-download-failed``,
    ``media-source-unavailable``, ``unsupported-media-type``).

    Raises:
        TenantBusy (429): the tenant is at its request share in this worker.
    """
    if not urls:
        return {}
    tenant_shares.enter_request(config, tenant)
    distinct = list(dict.fromkeys(urls.values()))
    with ThreadPoolExecutor(max_workers=min(MAX_PROBES, len(distinct))) as pool:
        answers = pool.map(lambda url: _probe(config, url), distinct)
        found = dict(zip(distinct, answers, strict=True))
    entries = {}
    for index, url in urls.items():
        entry = found[url]
        if "error" in entry:
            entry = {"error": {"pointer": f"/media/{index}/source_url", **entry["error"]}}
        entries[index] = entry
    return entries


def _probe(config: Config, url: str) -> dict:
    try:
        got = media_sources.probe(url, config)
        mime_type, _ext = media.sniff_type(got.first_bytes)
    except PROBE_PROBLEMS as refused:
        return {"error": {"message": refused.detail, "problem": refused.slug}}
    entry = {"mime_type": mime_type, "downloaded_from": got.final_url}
    if got.declared_bytes is not None:
        entry["bytes"] = got.declared_bytes
    return entry


def _error(pointer: str, message: str, problem: str) -> dict:
    return {"pointer": pointer, "message": message, "problem": problem}
