"""A small WordPress REST API client (application-password Basic auth).

Follows the WordPress REST API handbook: ``/wp/v2/posts``, ``/wp/v2/media``, ``context=edit``
for raw fields, and the companion plugin's ``/publishing-gateway/v1`` routes. It knows nothing
of Flask or the ledger. One keep-alive session (:mod:`gateway.wordpress.http_session`: requests'
adapter pool, urllib3 underneath, no retries) is kept per site, user and thread.
Every failure becomes a :mod:`gateway.wordpress.errors` exception that says whether the outcome
is definite.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from urllib.parse import quote
from urllib.parse import urljoin

import orjson
import requests

from gateway.wordpress import http_session
from gateway.wordpress import rest_root as roots
from gateway.wordpress.errors import CachedAnswer
from gateway.wordpress.errors import UpstreamRefused
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressNotFound
from gateway.wordpress.errors import WordPressOutcomeUnknown
from gateway.wordpress.errors import WordPressRefused
from gateway.wordpress.errors import WordPressUnavailable
from gateway.wordpress.errors import answer_error
from gateway.wordpress.errors import is_wordpress_error_body
from gateway.wordpress.errors import parse_retry_after
from gateway.wordpress.errors import upstream_error
from gateway.wordpress.identifiers import attachment_slug

OPERATION_KEY_META = "_gateway_operation_key"
SEO_META = {
    "title": "rank_math_title",
    "description": "rank_math_description",
    "focus_keyword": "rank_math_focus_keyword",
}
COMPANION_NAMESPACE = "/publishing-gateway/v1"
LOOKUP_BATCH = 100  # operation keys per lookup query: the companion plugin's maximum
LOOKUP_QUERY_BYTES = 6000  # URL-encoded keys per query, so the URL stays under 8 KiB

_local = threading.local()
_JSON_START = re.compile(r"[\[{]")

#: Called after every WordPress call as ``observer(method, route, status, outcome, seconds)``:
#: REST: the HTTP method and ``route`` without the query string; XML-RPC
#: (:mod:`gateway.wordpress.xmlrpc`): the method name and ``/xmlrpc.php``; ``status`` None
#: when no response arrived, ``outcome`` one of ``ok``, ``refused`` (definite), ``unknown``,
#: ``unavailable``. The gateway's logs and
#: metrics register here, so this package needs neither.
OBSERVERS: list[Callable[[str, str, int | None, str, float], None]] = []

log = logging.getLogger(__name__)


def add_observer(observer: Callable[[str, str, int | None, str, float], None]) -> None:
    """Register ``observer`` for every later call (once; a second registration is ignored)."""
    if observer not in OBSERVERS:
        OBSERVERS.append(observer)


def outcome_of(error: WordPressError | None) -> str:
    """``ok``, ``refused``, ``unavailable`` or ``unknown`` for a call that raised ``error``."""
    if error is None:
        return "ok"
    if isinstance(error, WordPressUnavailable):
        return "unavailable"
    return "refused" if error.definite else "unknown"


def notify(
    method: str, route: str, status: int | None, error: WordPressError | None, started: float
) -> None:
    """Tell every :data:`OBSERVERS` entry about one finished call (``started``: its
    ``time.perf_counter()``); both transports report through here."""
    seconds = time.perf_counter() - started
    for observer in OBSERVERS:
        observer(method, route, status, outcome_of(error), seconds)


def _session(base_url: str, username: str) -> http_session.Session:
    sessions = getattr(_local, "sessions", None)
    if sessions is None:
        sessions = _local.sessions = {}
    key = (base_url, username)
    if key not in sessions:
        sessions[key] = http_session.Session()
    return sessions[key]


def _upstream(
    method: str, url: str, response: requests.Response, site_url: str = ""
) -> WordPressError:
    location = response.headers.get("Location") if response.is_redirect else None
    if location:
        location = urljoin(url, location)
    return upstream_error(
        method=method,
        url=url,
        status=response.status_code,
        content_type=response.headers.get("Content-Type", ""),
        text=response.text,
        retry_after=response.headers.get("Retry-After"),
        location=location,
        suggested_url=roots.suggested_site_url(site_url or url, url, location)
        if location
        else None,
    )


def parse_json_lenient(text: str):
    """Parse a WordPress body that may carry PHP notices before the JSON.

    Returns the decoded JSON, or raises ``ValueError`` when no JSON document is found."""
    try:
        return json.loads(text)
    except ValueError:
        match = _JSON_START.search(text)
        if not match:
            raise
        return json.JSONDecoder().raw_decode(text[match.start() :])[0]


def lookup_batches(keys: list[str]) -> list[list[str]]:
    """Split ``keys`` into lookup queries: at most :data:`LOOKUP_BATCH` keys and
    :data:`LOOKUP_QUERY_BYTES` URL-encoded bytes each (a single longer key goes alone)."""
    batches: list[list[str]] = []
    batch: list[str] = []
    size = 0
    for key in keys:
        cost = len(quote(key, safe="")) + 3  # "%2C" between keys
        if batch and (len(batch) == LOOKUP_BATCH or size + cost > LOOKUP_QUERY_BYTES):
            batches.append(batch)
            batch, size = [], 0
        batch.append(key)
        size += cost
    if batch:
        batches.append(batch)
    return batches


def error_for(
    method: str, url: str, response: requests.Response, site_url: str = ""
) -> WordPressError:
    """Map a non-2xx response to the right error class, by origin first: only a WordPress
    REST error body (JSON ``code`` + ``message``) can be a definite refusal, and its class is
    the row of :data:`gateway.wordpress.errors.REST_ANSWERS` it falls under; an HTML or
    empty page is the row of :data:`gateway.wordpress.errors.UPSTREAM_ANSWERS` it falls under
    (:class:`UpstreamRefused`: 4xx, 429, 503; an unknown outcome: other 5xx, which a proxy
    also sends after forwarding). A redirect names where it points and the site URL it
    suggests (relative to ``site_url``)."""
    status = response.status_code
    try:
        body = parse_json_lenient(response.text)
    except ValueError:
        body = None
    if not is_wordpress_error_body(body):
        return _upstream(method, url, response, site_url)  # the table: errors.UPSTREAM_ANSWERS
    code, message = body.get("code"), body.get("message") or response.reason
    data = body.get("data") if isinstance(body.get("data"), dict) else {}
    facts = dict(
        method=method,
        url=url,
        status=status,
        code=code,
        data=data,
        retry_after=parse_retry_after(response.headers.get("Retry-After")),
    )
    return answer_error(status, code)(message, **facts)  # the table: errors.REST_ANSWERS


def _json_of(method: str, url: str, response: requests.Response, write: bool):
    """The JSON of a 2xx answer. WordPress labels every REST answer JSON, even with PHP
    notices in front of it; a 2xx that is neither labelled JSON nor parses as JSON is a page
    from in front of WordPress (:class:`UpstreamRefused`). JSON behind PHP notices is an
    unknown outcome for a write (strict) and read leniently otherwise."""
    try:
        if (response.encoding or "utf-8").lower() in ("utf-8", "utf8"):
            try:  # WordPress's own answers (UTF-8): decoded as json would, only faster
                return orjson.loads(response.content)
            except orjson.JSONDecodeError:
                pass  # PHP notices, other encodings, NaN, big integers: as before
        return response.json() if write else parse_json_lenient(response.text)
    except ValueError as exc:
        if "json" not in response.headers.get("Content-Type", "").lower():
            raise _upstream(method, url, response) from exc
        raise WordPressOutcomeUnknown(
            "2xx without a valid JSON body (PHP output before it?)",
            method=method,
            url=url,
            status=response.status_code,
        ) from exc


def upstream_page(
    method: str, url: str, response: requests.Response, site_url: str = ""
) -> UpstreamRefused | None:
    """The :class:`UpstreamRefused` that ``response`` stands for when it came from in front of
    WordPress (a firewall, CDN, proxy, redirect, login or maintenance page), else None
    (``gateway doctor`` inspects raw answers with it)."""
    if not 200 <= response.status_code < 300:
        error = error_for(method, url, response, site_url)
        return error if isinstance(error, UpstreamRefused) else None
    try:
        _json_of(method, url, response, write=False)
    except UpstreamRefused as error:
        return error
    except WordPressError:
        return None
    return None


class WordPressClient:
    """REST client for one site and user.

    Args:
        base_url: the site's URL, e.g. ``http://127.0.0.1:8081``.
        username: the WordPress user.
        app_password: the user's application password (kept in memory only).
        timeout: seconds for one call (connect and read).
        rest_root: where the site serves its REST API (``{base_url}/wp-json/`` when None, or
            ``{base_url}/index.php?rest_route=/``; :mod:`gateway.wordpress.rest_root`).

    Every GET read carries ``Cache-Control: no-cache`` and a query parameter used once
    (:func:`gateway.wordpress.rest_root.fresh_value`); an answer that still shows a cache
    hit (:func:`gateway.wordpress.rest_root.cache_hit`) is read again as a POST WordPress
    serves as GET, and a hit there too raises :class:`CachedAnswer`.
    """

    transport = "rest"

    def __init__(
        self,
        base_url: str,
        username: str,
        app_password: str,
        timeout: float = 30,
        rest_root: str | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        self.username = username
        self._auth = (username, app_password)
        self.timeout = timeout
        self.rest_root = rest_root or roots.default_root(self.base_url)

    def __repr__(self) -> str:  # never show the password
        return f"WordPressClient({self.base_url!r}, {self.username!r})"

    def url(self, route: str) -> str:
        """Absolute URL of a REST route such as ``/wp/v2/posts`` under :attr:`rest_root`."""
        return roots.route_url(self.rest_root, route)

    def call(
        self,
        method: str,
        route: str,
        *,
        write: bool,
        params=None,
        json_body=None,
        data: bytes | None = None,
        headers: dict | None = None,
        direct: bool = False,
    ):
        """Make one REST call and return the decoded JSON body.

        ``write`` marks a call that may change WordPress: for it a 2xx without valid JSON
        (e.g. PHP notices in front of the body) is an unknown outcome; reads parse leniently.
        A GET read goes past caches (see the class); ``direct`` sends it at once as a POST
        with ``X-HTTP-Method-Override: GET`` (no cache stores a POST).

        Raises:
            WordPressRefused (and subclasses): a definite refusal by WordPress itself.
            UpstreamRefused: an HTML/empty 4xx, 429 or 503, or a 2xx page without JSON: the
                answer came from in front of WordPress (outcome unknown).
            WordPressUnavailable: no connection, or WordPress's own 429/503.
            WordPressOutcomeUnknown: timeout or reset after sending, other 5xx, a 2xx with
                PHP output before the JSON.
            CachedAnswer: a read that a cache answered even as a POST.
        """
        started = time.perf_counter()
        error: WordPressError | None = None
        status: int | None = None
        try:
            if method == "GET" and not write:
                response = self._read(route, params, headers, direct)
            else:
                response = self._send(method, route, params, json_body, data, headers)
            status = response.status_code
            return self._decode(method, route, response, write)
        except WordPressError as raised:
            error = raised
            status = raised.status
            raise
        finally:
            notify(method, route, status, error, started)

    def _send(self, method, route, params, json_body, data, headers) -> requests.Response:
        url = self.url(route)
        try:
            return _session(self.base_url, self.username).call(
                method,
                url,
                params=params,
                json=json_body,
                data=data,
                headers=headers,
                auth=self._auth,
                timeout=self.timeout,
            )
        except requests.RequestException as exc:
            raise http_session.network_error(method, url, exc) from exc

    def _read(self, route, params, headers, direct: bool) -> requests.Response:
        """A GET past any cache: fresh URL and ``no-cache``; as a POST served as GET when
        ``direct`` or when the answer still shows a cache hit."""
        fresh = {**(params or {}), roots.FRESH_PARAM: roots.fresh_value()}
        if not direct:
            asked = {**roots.NO_CACHE, **(headers or {})}
            response = self._send("GET", route, fresh, None, None, asked)
            hit = roots.cache_hit(response.headers)
            if hit is None or not 200 <= response.status_code < 300:
                return response
            log.warning("a cache answered GET %s (%s): reading it again as POST", route, hit)
        override = {**roots.OVERRIDE, **(headers or {})}
        response = self._send("POST", route, fresh, None, None, override)
        hit = roots.cache_hit(response.headers)
        if hit is not None:
            raise CachedAnswer(
                f"a cache in front of the REST API answered GET {route} from its store ({hit}), "
                f"even asked with no-cache, a fresh URL and as a POST: {roots.EXCLUDE_REST}",
                method="GET",
                url=self.url(route),
                status=response.status_code,
                evidence=hit,
            )
        return response

    def _decode(self, method: str, route: str, response: requests.Response, write: bool):
        url = self.url(route)
        if not 200 <= response.status_code < 300:
            raise error_for(method, url, response, self.base_url)
        return _json_of(method, url, response, write)

    # Posts (WordPress REST API, /wp/v2/posts)
    def create_post(self, fields: dict) -> dict:
        """``POST /wp/v2/posts``; returns the post in ``context=edit`` (raw fields)."""
        return self.call("POST", "/wp/v2/posts", write=True, json_body=fields)

    def update_post(self, post_id: int, fields: dict) -> dict:
        """``POST /wp/v2/posts/{id}``; returns the post in ``context=edit``."""
        return self.call("POST", f"/wp/v2/posts/{post_id}", write=True, json_body=fields)

    def delete_post(self, post_id: int) -> dict:
        """``DELETE /wp/v2/posts/{id}?force=true``: removed at once, not moved to the trash."""
        return self.call("DELETE", f"/wp/v2/posts/{post_id}", write=True, params={"force": "true"})

    def get_raw(
        self, route: str, params: dict | None = None, fresh: bool = True, direct: bool = False
    ) -> requests.Response:
        """One authenticated GET whose response is returned as it came (status, headers,
        body), for checks of the response itself (``gateway doctor``); ``fresh``: with
        ``no-cache`` and a fresh URL (False: as any other client would ask, so that a cache
        in front shows itself); ``direct``: sent as a POST with ``X-HTTP-Method-Override:
        GET`` and a fresh URL, the route no cache stores (``WP_REST_Server::serve_request``
        serves it as the GET), for reads whose completeness matters (the REST index).

        Raises:
            WordPressUnavailable / WordPressOutcomeUnknown: no response.
        """
        if not (fresh or direct):
            return self._send("GET", route, params, None, None, None)
        params = {**(params or {}), roots.FRESH_PARAM: roots.fresh_value()}
        if direct:
            return self._send("POST", route, params, None, None, roots.OVERRIDE)
        return self._send("GET", route, params, None, None, roots.NO_CACHE)

    def get_post(self, post_id: int, direct: bool = False) -> dict:
        """``GET /wp/v2/posts/{id}?context=edit``: raw title, content, excerpt, meta;
        ``direct``: as a POST WordPress serves as that GET (past a cache that drops query
        strings)."""
        return self.call(
            "GET",
            f"/wp/v2/posts/{post_id}",
            write=False,
            params={"context": "edit"},
            direct=direct,
        )

    def find_posts_by_title(self, title: str) -> list[dict]:
        """Posts of any editable status whose title matches ``title`` by search
        (``GET /wp/v2/posts?search=``); the caller compares the titles as readers see them
        (``gateway.operations.duplicates.as_read``)."""
        return self.call(
            "GET",
            "/wp/v2/posts",
            write=False,
            params={
                "search": title,
                "context": "edit",
                "per_page": 100,
                "status": "draft,pending,private,publish,future",
            },
        )

    def get_many(self, route: str, ids: list[int]) -> dict[int, dict]:
        """Read many objects of ``route`` (``/wp/v2/posts`` or ``/wp/v2/media``) in
        ``context=edit``, 100 ids per query (``include=``, any status). Returns them by id;
        ids WordPress does not return are absent from the result."""
        found: dict[int, dict] = {}
        for start in range(0, len(ids), 100):
            batch = ids[start : start + 100]
            params = {"include": ",".join(map(str, batch)), "per_page": 100, "context": "edit"}
            if route.endswith("/posts"):
                params["status"] = "any"
            for obj in self.call("GET", route, write=False, params=params):
                found[int(obj["id"])] = obj
        return found

    # Media (WordPress REST API, /wp/v2/media)
    def upload_media(self, content: bytes, filename: str, mime_type: str, fields: dict) -> dict:
        """``POST /wp/v2/media`` with the file as the raw body.

        ``fields`` (title, caption, alt_text, meta) travel as query parameters, so the
        operation key is part of the create request itself. A ``meta`` operation key also
        gives the attachment its slug (:func:`~gateway.wordpress.identifiers.attachment_slug`),
        so WordPress need not search for a free one. WordPress requires
        ``Content-Disposition`` (400 without it)."""
        params = {k: v for k, v in fields.items() if k != "meta" and v is not None}
        meta = fields.get("meta") or {}
        for key, value in meta.items():
            params[f"meta[{key}]"] = value
        if meta.get(OPERATION_KEY_META) and "slug" not in params:
            params["slug"] = attachment_slug(filename, meta[OPERATION_KEY_META])
        headers = {
            "Content-Type": mime_type,
            "Content-Disposition": f'attachment; filename="{quote(filename)}"',
        }
        return self.call(
            "POST", "/wp/v2/media", write=True, params=params, data=content, headers=headers
        )

    def update_media(self, media_id: int, fields: dict) -> dict:
        """``POST /wp/v2/media/{id}`` (``post`` parent, ``alt_text``, ``caption``, ``title``);
        returns the attachment in ``context=edit``."""
        return self.call("POST", f"/wp/v2/media/{media_id}", write=True, json_body=fields)

    def finish_upload(self, media_id: int, key: str, fields: dict) -> None:
        """Nothing to finish: a REST upload carries its fields and key in one request."""

    def get_media(self, media_id: int) -> dict:
        """``GET /wp/v2/media/{id}?context=edit``."""
        return self.call("GET", f"/wp/v2/media/{media_id}", write=False, params={"context": "edit"})

    def fetch_file(
        self, url: str, content_types: tuple[str, ...], max_bytes: int, deadline: float = 20.0
    ):
        """``GET url`` (an uploaded file of this site, e.g. an attachment's ``source_url``)
        with the site's credentials, streamed.

        Returns ``(content type, iterator of byte chunks)``; the iterator closes the
        response when exhausted, stops at ``max_bytes``, and stops ``deadline`` seconds after
        this call whatever WordPress still sends (each read returns what one socket read got,
        urllib3's ``read1``, so a dripping answer is cut on time; the per-read timeout alone
        restarts with every byte).

        Raises:
            WordPressNotFound: 404, or a content type outside ``content_types``, or a body
                announced larger than ``max_bytes``.
            WordPressUnavailable / WordPressRefused: as for :meth:`call`.
        """
        try:
            response = _session(self.base_url, self.username).call(
                "GET", url, auth=self._auth, timeout=self.timeout, stream=True
            )
        except requests.RequestException as exc:
            raise WordPressUnavailable(
                f"cannot fetch the file: {exc}", method="GET", url=url
            ) from exc
        if not 200 <= response.status_code < 300:
            response.close()
            raise error_for("GET", url, response, self.base_url)
        kind = response.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        length = response.headers.get("Content-Length", "")
        if kind not in content_types or (length.isdigit() and int(length) > max_bytes):
            response.close()
            raise WordPressNotFound(
                f"not an image this gateway shows ({kind or 'no type'}, {length or '?'} bytes)",
                method="GET",
                url=url,
                status=404,
            )

        ends = time.monotonic() + deadline

        def chunks():
            sent = 0
            try:
                while chunk := response.raw.read1(64 * 1024, decode_content=True):
                    sent += len(chunk)
                    if sent > max_bytes:
                        return
                    yield chunk
                    if time.monotonic() > ends:
                        log.warning("a file from %s took longer than %s s: cut", url, deadline)
                        return
            finally:
                response.close()

        return kind, chunks()

    # Terms (WordPress REST API, /wp/v2/categories and /wp/v2/tags)
    def search_terms(self, route: str, search: str, page: int, per_page: int = 100) -> list[dict]:
        """One page (``per_page`` terms, at most 100) of ``GET {route}?search=``
        (``route``: ``/wp/v2/tags`` or ``/wp/v2/categories``), empty terms included;
        WordPress matches the name or slug by ``LIKE``, the caller compares names exactly.
        Past the last page WordPress answers 400 ``rest_post_invalid_page_number``: an
        empty page here."""
        params = {"search": search, "per_page": per_page, "page": page, "hide_empty": "false"}
        try:
            return self.call("GET", route, write=False, params=params)
        except WordPressRefused as error:
            if error.code == "rest_post_invalid_page_number":
                return []
            raise

    def create_term(self, route: str, name: str) -> dict:
        """``POST {route}`` ``{"name"}``. An existing name is 400 ``term_exists`` with the
        existing id in ``data.term_id`` (WordPress 6.1 ``WP_REST_Terms_Controller``)."""
        return self.call("POST", route, write=True, json_body={"name": name})

    def get_term(self, route: str, term_id: int) -> dict:
        """``GET {route}/{id}``."""
        return self.call("GET", f"{route}/{term_id}", write=False)

    # Companion plugin (wp_test_site/publishing-gateway-companion)
    def companion_status(self) -> dict | None:
        """The companion plugin's status, or None when the plugin is absent (404)."""
        try:
            return self.call("GET", COMPANION_NAMESPACE + "/status", write=False)
        except WordPressNotFound:
            return None

    def wordpress_version(self) -> str | None:
        """The version WordPress reports (``"7.1.4"``), from the companion plugin's status
        route (1.3.0 and later); None without it: the REST index does not say.

        Raises:
            WordPressError: the status route failed other than with 404.
        """
        status = self.companion_status()
        version = status.get("wordpress") if isinstance(status, dict) else None
        return version if isinstance(version, str) and version else None

    def find_by_operation_keys(self, keys: list[str], since=None, types=None) -> list[dict]:
        """Every object (any type, any status) carrying one of ``keys``, in batches of up
        to :data:`LOOKUP_BATCH` keys per query (fewer when long keys would make the URL
        longer than :data:`LOOKUP_QUERY_BYTES`). Entries: ``operation_key``, ``id``, ``type``,
        ``status``, ``date_gmt``, ``title``. The plugin matches both identifier keys
        (``_gateway_operation_key`` and XML-RPC's ``gateway_operation_key``); ``since`` and
        ``types`` (the XML-RPC scan's bounds) are not needed here."""
        found: list[dict] = []
        for batch in lookup_batches(keys):
            body = self.call(
                "GET",
                COMPANION_NAMESPACE + "/objects",
                write=False,
                params={"keys": ",".join(batch)},
            )
            found.extend(body.get("objects", []))
        return found

    def set_operation_key(self, object_id: int, key: str, object_type: str) -> None:
        """Put ``key`` on ``object_id`` (``post`` or ``attachment``: an editor adopted it)
        with ``POST /wp/v2/{posts|media}/{id}`` ``meta``, unless it carries it already."""
        if any(o["id"] == object_id for o in self.find_by_operation_keys([key])):
            return
        route = "media" if object_type == "attachment" else "posts"
        self.call(
            "POST",
            f"/wp/v2/{route}/{object_id}",
            write=True,
            json_body={"meta": {OPERATION_KEY_META: key}},
        )

    def site_index(self) -> dict:
        """``GET {rest root}?_fields=url,home``: how the install names itself (its ``siteurl``
        and ``home`` options), whatever URL it was reached by. Read as a POST served as GET
        (``direct``): a cache keyed by path could hold another answer of the index."""
        return self.call("GET", "/", write=False, params={"_fields": "url,home"}, direct=True)

    def me(self) -> dict:
        """``GET /wp/v2/users/me?context=edit``: the authenticated user and capabilities."""
        return self.call("GET", "/wp/v2/users/me", write=False, params={"context": "edit"})
