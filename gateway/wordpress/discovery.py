"""Finding a site's REST root as WordPress documents it (REST API handbook, "Discovery"), no
credentials sent: the ``Link: <…>; rel="https://api.w.org/"`` header (or the HTML ``<link>``)
of the site's home page, then ``/wp-json/``, then ``/index.php?rest_route=/``; the first that
answers with the REST index wins (:func:`gateway.wordpress.rest_root.candidates`). ``gateway sites
add`` stores what it finds; ``gateway doctor`` shows it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import urljoin
from urllib.parse import urlsplit

import requests

from gateway.wordpress import http_session
from gateway.wordpress import rest_root as roots

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Discovered:
    """What discovery found: ``root`` (the REST root that answered its index, None when none
    did), ``how`` (``"link"``: the advertised root; ``"wp-json"``; ``"rest_route"``; ``None``),
    ``advertised`` (what the home page named, or None) and ``redirect`` (``(location,
    suggested site URL)`` when the home page or a root answered with a redirect, else None)."""

    root: str | None
    how: str | None
    advertised: str | None = None
    redirect: tuple[str, str] | None = None


def discover(site_url: str, timeout: float) -> Discovered:
    """Find the REST root of the site at ``site_url`` (no redirect is followed; nothing raised:
    a site that cannot be asked gives ``Discovered(None, None)``)."""
    with http_session.Session() as session:
        return _discover(session, site_url, timeout)


def _discover(session: http_session.Session, site_url: str, timeout: float) -> Discovered:
    redirect = None
    try:
        home = session.call("GET", site_url.rstrip("/") + "/", auth=None, timeout=timeout)
    except requests.RequestException as error:
        log.info("discovery: the home page of %s cannot be read: %s", site_url, error)
        home = None
    advertised = None
    if home is not None:
        redirect = redirect or _redirect(site_url, home)
        advertised = roots.advertised_root(home.links, home.text if _html(home) else "")
    for number, root in enumerate(roots.candidates(site_url, advertised)):
        try:
            answer = _get(session, roots.route_url(root, "/"), timeout, {"_fields": "namespaces"})
        except requests.RequestException:
            continue
        redirect = redirect or _redirect(site_url, answer)
        if _is_index(answer):
            how = "link" if advertised and number == 0 else _kind(root)
            return Discovered(root, how, advertised, redirect)
    return Discovered(None, None, advertised, redirect)


def _get(session, url: str, timeout: float, params: dict | None = None) -> requests.Response:
    fresh = {**(params or {}), roots.FRESH_PARAM: roots.fresh_value()}
    return session.call("GET", url, auth=None, timeout=timeout, params=fresh)


def _html(response: requests.Response) -> bool:
    return "html" in response.headers.get("Content-Type", "").lower()


def _is_index(response: requests.Response) -> bool:
    if not 200 <= response.status_code < 300:
        return False
    try:
        return roots.is_index(response.json())
    except ValueError:
        return False


def _kind(root: str) -> str:
    return "rest_route" if "rest_route=" in root else "wp-json"


def _redirect(site_url: str, response: requests.Response) -> tuple[str, str] | None:
    """``(location, suggested site URL)`` of a redirect to another scheme or host (a
    redirect within the site, e.g. WordPress's canonical one, is no evidence)."""
    if not response.is_redirect:
        return None
    location = urljoin(response.url, response.headers["Location"])
    if urlsplit(location)[:2] == urlsplit(response.url)[:2]:
        return None
    return location, roots.suggested_site_url(site_url, response.url, location)
