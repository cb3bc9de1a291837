"""Where a site serves its REST API, how a read reaches WordPress rather than a cache in front
of it, and where a redirect in front of it points. Pure functions over URLs and headers; the
REST client (:mod:`gateway.wordpress.client`) makes the calls.

**The REST root** is discovered as WordPress documents it (REST API handbook, "Discovery"):
the ``Link: <…>; rel="https://api.w.org/"`` header of the site's pages, or the page's
``<link rel="https://api.w.org/" href="…">``. With pretty permalinks it is ``/wp-json/``;
with plain permalinks WordPress advertises ``/index.php?rest_route=/``, the fallback that works
whatever the permalinks or a plugin hiding ``/wp-json/`` do (public report tradik/wpexporter#66).
The fallback names ``index.php`` as ``get_rest_url()`` does (wp-includes/rest-api.php: nginx
allows only HTTP/1.0 methods when it rewrites ``/`` to ``/index.php``, so a DELETE at
``/?rest_route=`` gets 405); a root stored as ``/?rest_route=/`` is called the same way.
Only the path and query of an advertised root are kept: they are joined to the site URL the
operator gave, so the application password never goes to another host a page names.

**Fresh reads.** A cache in front of ``/wp-json/`` may keep GET answers by URL whatever
``Cache-Control: no-cache`` says (litespeedtech/lscache_wp#413, #732). Every read therefore
carries :data:`FRESH_PARAM` with a value used once: WordPress ignores a query parameter no
route registers (``WP_REST_Request`` keeps it, no schema validates it), and a URL-keyed cache
cannot have stored that URL. The reserved ``_fields``, ``_embed``, ``_envelope``, ``_method``
and ``_jsonp`` are avoided. A cache that drops query strings is passed by :data:`OVERRIDE`: a
POST (no cache stores one) that WordPress serves as a GET (``WP_REST_Server::serve_request``
honours ``X-HTTP-Method-Override``).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Mapping
from html.parser import HTMLParser
from urllib.parse import urljoin
from urllib.parse import urlsplit

API_REL = "https://api.w.org/"
PRETTY = "/wp-json/"
PLAIN = "/index.php?rest_route=/"
FRESH_PARAM = "gateway_fresh"
#: Headers of a read sent as a POST that WordPress serves as the GET it names.
OVERRIDE = {"X-HTTP-Method-Override": "GET"}
#: Headers of every read: ask any cache in front to go to WordPress.
NO_CACHE = {"Cache-Control": "no-cache", "Pragma": "no-cache"}
#: What to tell the person who runs a cache in front of ``/wp-json/``.
EXCLUDE_REST = (
    "exclude the REST API from the cache in front of WordPress: /wp-json/* and any URL with "
    "rest_route= (LiteSpeed Cache: Cache > Cache REST API off; Cloudflare: a Cache Rule "
    "'bypass cache' for /wp-json/*; Varnish or nginx: pass requests that carry an "
    "Authorization header)"
)

_counter = itertools.count()
_PROCESS = os.urandom(4).hex()


def fresh_value() -> str:
    """A value of :data:`FRESH_PARAM` never used before by this process (random per process,
    then a counter): e.g. ``"9f2c01aa-17"``."""
    return f"{_PROCESS}-{next(_counter)}"


def route_url(root: str, route: str) -> str:
    """The absolute URL of REST ``route`` (``/wp/v2/posts``; ``/`` for the index) under
    ``root`` (``https://x.example/wp-json/`` or ``https://x.example/index.php?rest_route=/``;
    a root stored as ``…/?rest_route=/`` gets ``index.php``, see the module)."""
    if "rest_route=" in root:
        before = root.split("rest_route=", 1)[0]
        if before.endswith("/?"):
            before = before[:-1] + "index.php?"
        return before + "rest_route=" + (route or "/")
    return root.rstrip("/") + (route or "/")


def default_root(site_url: str) -> str:
    """The root a site has until one is discovered: ``{site_url}/wp-json/``."""
    return site_url.rstrip("/") + PRETTY


def candidates(site_url: str, advertised: str | None) -> list[str]:
    """The roots to try, in order: the advertised one (its path and query joined to
    ``site_url``'s scheme and host), ``/wp-json/``, then ``/index.php?rest_route=/`` (each
    once)."""
    base = site_url.rstrip("/")
    found = []
    if advertised:
        parts = urlsplit(advertised)
        origin = urlsplit(base)
        found.append(f"{origin.scheme}://{origin.netloc}{parts.path or '/'}")
        if parts.query:
            found[-1] += "?" + parts.query
    for root in (base + PRETTY, base + PLAIN):
        if root not in found:
            found.append(root)
    return found


class _LinkParser(HTMLParser):
    def __init__(self):
        super().__init__()
        self.href: str | None = None

    def handle_starttag(self, tag, attrs):
        values = dict(attrs)
        if tag == "link" and self.href is None and values.get("rel") == API_REL:
            self.href = values.get("href")


def advertised_root(links: Mapping, page: str) -> str | None:
    """The root a site's page advertises: ``links`` is requests' parsed ``Link`` header
    (``Response.links``, keyed by ``rel``), ``page`` its HTML (the first 200 KB are read)."""
    link = (links.get(API_REL) or {}).get("url")
    if link:
        return link
    parser = _LinkParser()
    parser.feed(page[:200_000])
    return parser.href


def is_index(body) -> bool:
    """True for a REST index answer (``GET {root}``): an object with ``namespaces``."""
    return isinstance(body, dict) and isinstance(body.get("namespaces"), list)


def suggested_site_url(site_url: str, request_url: str, location: str) -> str:
    """The site URL a redirect suggests: where ``location`` (relative to ``request_url``)
    points, without the part of the request that came after ``site_url`` (non-www to www:
    ``http://x.example/wp-json/wp/v2/posts`` to ``https://www.x.example/wp-json/wp/v2/posts``
    suggests ``https://www.x.example``; WP-API/node-wpapi#248)."""
    target = urlsplit(urljoin(request_url, location))
    asked = urlsplit(request_url)
    site_path = urlsplit(site_url).path.rstrip("/")
    tail = asked.path[len(site_path) :] if asked.path.startswith(site_path) else asked.path
    if tail and tail != "/" and target.path.endswith(tail):
        path = target.path[: -len(tail)]
    else:
        path = site_path
    return f"{target.scheme}://{target.netloc}{path}".rstrip("/")


def cache_hit(headers: Mapping) -> str | None:
    """The header that shows an answer came from a cache's store, not from WordPress
    (``"X-LiteSpeed-Cache: hit"``), or None. ``headers``: case-insensitive (requests')."""
    for name in ("X-LiteSpeed-Cache", "X-Cache", "X-Cache-Status", "X-Proxy-Cache"):
        value = headers.get(name) or ""
        if "hit" in value.lower():
            return f"{name}: {value}"
    status = (headers.get("CF-Cache-Status") or "").upper()
    if status in ("HIT", "STALE", "UPDATING", "REVALIDATED"):
        return f"CF-Cache-Status: {status}"
    age = headers.get("Age") or ""
    if age.strip().isdigit() and int(age) > 0:
        return f"Age: {age.strip()}"
    return None


def caching_front(headers: Mapping) -> str | None:
    """The header that shows a cache in front of the site at all, on a hit or a miss
    (``X-LiteSpeed-Cache``, ``CF-Cache-Status`` other than ``DYNAMIC``/``BYPASS``,
    ``X-Cache``, ``X-Cache-Status``, ``X-Proxy-Cache``, ``X-Varnish``, ``Age``), or None."""
    hit = cache_hit(headers)
    if hit:
        return hit
    for name in ("X-LiteSpeed-Cache", "X-Cache", "X-Cache-Status", "X-Proxy-Cache", "X-Varnish"):
        if headers.get(name):
            return f"{name}: {headers[name]}"
    status = (headers.get("CF-Cache-Status") or "").upper()
    if status and status not in ("DYNAMIC", "BYPASS"):
        return f"CF-Cache-Status: {status}"
    return None
