"""The HTTP layer of the REST client: one ``requests`` session per site, user and thread, whose
calls go straight to its transport adapter's connection pool, and the meaning of the exceptions
that path raises.

**The adapter path** (:meth:`Session.call`). ``requests.Session.request`` spends about a third
of the client's CPU per call around the actual send: it merges the session's headers, params,
auth, hooks and cookie jar through generic mapping code, and reads the environment on every
call (``*_PROXY``/``NO_PROXY`` through :func:`urllib.request.getproxies`, which walks all of
``os.environ``, then ``REQUESTS_CA_BUNDLE`` and ``CURL_CA_BUNDLE``). :meth:`Session.call`
prepares the request itself (:class:`requests.PreparedRequest`: the same URL, body, header and
Basic-auth encoding), takes the environment settings once per scheme and host (a gateway
process does not change its environment while it runs) and hands the request to
``session.get_adapter(url).send(...)``: requests' :class:`~requests.adapters.HTTPAdapter`,
urllib3's pool underneath, with the proxy, CA bundle and client certificate the environment
gives, as ``Session.send`` would. The session's cookie jar is kept as ``Session.send`` keeps it.

**No retry at the pool.** The adapter is mounted with ``Retry(total=0, read=False)`` (what
requests' ``HTTPAdapter`` uses by default, said here so that nobody raises it by accident):
urllib3 then neither opens a second connection after a failed one nor sends a request again
after a reset or a timeout. A write goes out once; what happened to it is the ledger's question
(reconciliation), never the pool's.

**Errors by type** (:func:`network_error`). ``HTTPAdapter.send`` wraps urllib3's exceptions in
requests' (a connection failure as ``ConnectionError(MaxRetryError(reason=...))``, a proxy's
as ``ProxyError``); the urllib3 exception underneath decides, never the message text:

==========================================  ==========================================
urllib3 / requests exception                the gateway's error
==========================================  ==========================================
``NameResolutionError``                     :class:`WordPressUnavailable`, not sent
``NewConnectionError`` (e.g. refused)       :class:`WordPressUnavailable`, not sent
``ConnectTimeoutError``                     :class:`WordPressUnavailable`, not sent
``ReadTimeoutError`` (``ReadTimeout``)      :class:`WordPressOutcomeUnknown`
any other ``ConnectionError`` (a reset,     :class:`WordPressOutcomeUnknown`
``ProtocolError``, TLS), a body cut short
(``ChunkedEncodingError``,
``ContentDecodingError``)
==========================================  ==========================================

A connection that could not be made (through a proxy too: urllib3's ``ProxyError`` carries the
original error) means the request never left: ``sent=False``.

**The call hook** (:data:`CALL_HOOK`): a slot the gateway's fault tests fill (this package
imports nothing of the gateway), called around every :meth:`Session.call`. ``HTTPAdapter.send``
writes the request and reads the answer's head in one call, so the public API has no moment
"request written, answer not read": the hook sees ``before`` (nothing sent yet) and ``after``
(the answer read; for a streamed call, its head).
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from requests.cookies import extract_cookies_to_jar
from requests.exceptions import ChunkedEncodingError
from requests.exceptions import ContentDecodingError
from urllib3.exceptions import ConnectTimeoutError
from urllib3.exceptions import MaxRetryError
from urllib3.exceptions import NameResolutionError
from urllib3.exceptions import NewConnectionError
from urllib3.exceptions import ProxyError
from urllib3.exceptions import ReadTimeoutError
from urllib3.util.retry import Retry

from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressOutcomeUnknown
from gateway.wordpress.errors import WordPressUnavailable
from gateway.wordpress.errors import shortened

USER_AGENT = "publishing-gateway/0.1"
# A reset, a TLS failure or a closed pool (ConnectionError), or a body cut short: after sending.
_LOST = (requests.ConnectionError, ChunkedEncodingError, ContentDecodingError)
MAX_CACHED_HOSTS = 64

#: None in production. Otherwise called as ``CALL_HOOK(moment, method, url)`` with ``moment``
#: ``"before"`` (about to send) and ``"after"`` (the answer read) of every :meth:`Session.call`
#: that got an answer; it may raise (a fault test's simulated crash), and whatever it raises
#: leaves the call as it is.
CALL_HOOK: Callable[[str, str, str], None] | None = None


def no_retries() -> Retry:
    """urllib3's retry policy for every WordPress call: none at all (see the module)."""
    return Retry(total=0, read=False)


class Session(requests.Session):
    """A :class:`requests.Session` whose environment settings are computed once per host and
    whose :meth:`call` sends through the adapter's pool (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self.headers["User-Agent"] = USER_AGENT
        self._settings: dict[tuple, dict] = {}
        for prefix in ("https://", "http://"):
            self.mount(prefix, HTTPAdapter(max_retries=no_retries()))

    def merge_environment_settings(self, url, proxies, stream, verify, cert) -> dict:
        """:meth:`requests.Session.merge_environment_settings`, cached per scheme and host
        (and ``stream``/``verify``/``cert`` argument); calls with their own ``proxies``, or a
        session with ``trust_env`` off, take requests' path unchanged."""
        if proxies or not self.trust_env:
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        parts = urlsplit(url)
        key = (parts.scheme, parts.netloc, stream, verify, cert)
        settings = self._settings.get(key)
        if settings is None:
            settings = super().merge_environment_settings(url, {}, stream, verify, cert)
            if len(self._settings) < MAX_CACHED_HOSTS:
                self._settings[key] = settings
        return {**settings, "proxies": dict(settings["proxies"])}

    def call(
        self,
        method: str,
        url: str,
        *,
        auth: tuple[str, str],
        timeout: float,
        params=None,
        json=None,
        data: bytes | None = None,
        headers: dict | None = None,
        stream: bool = False,
    ) -> requests.Response:
        """One request sent through the adapter's pool, redirects not followed.

        Args:
            method, url: e.g. ``"GET"``, ``"http://127.0.0.1:8081/wp-json/wp/v2/posts"``.
            auth: ``(username, password)`` for HTTP Basic auth.
            timeout: seconds, for connecting and for each read.
            params, json, data: the query and the body, as ``requests`` takes them.
            headers: added to the session's (``User-Agent``, ``Accept``,
                ``Accept-Encoding``, ``Connection``); a ``None`` value removes one.
            stream: False reads the whole body before returning (the connection goes back to
                the pool); True leaves it to the caller (``iter_content``, then ``close``).

        Returns:
            the :class:`requests.Response`, whatever its status.

        Raises:
            requests.RequestException: as ``HTTPAdapter.send`` raises it (or, while reading the
                body, ``Response.content``); :func:`network_error` says what it means.
        """
        if params and isinstance(params, dict) and "?" not in url and "#" not in url:
            query = query_string(params)
            url, params = (f"{url}?{query}" if query else url), None
        request = requests.PreparedRequest()
        request.prepare(
            method=method,
            url=url,
            headers=self._headers(headers),
            data=data,
            params=params,
            auth=auth,
            cookies=self.cookies,
            json=json,
        )
        settings = self.merge_environment_settings(request.url, {}, None, None, None)
        hook = CALL_HOOK
        if hook is not None:
            hook("before", method, request.url)
        response = self.get_adapter(request.url).send(
            request,
            stream=stream,
            timeout=timeout,
            verify=settings["verify"],
            cert=settings["cert"],
            proxies=settings["proxies"],
        )
        extract_cookies_to_jar(self.cookies, request, response.raw)  # as Session.send does
        if not stream:
            response.content  # noqa: B018 - read now: the connection returns to the pool
        if hook is not None:
            hook("after", method, request.url)
        return response

    def _headers(self, extra: dict | None) -> requests.structures.CaseInsensitiveDict:
        merged = self.headers.copy()
        for name, value in (extra or {}).items():
            if value is None:
                merged.pop(name, None)
            else:
                merged[name] = value
        return merged


def query_string(params: dict) -> str:
    """``params`` as the query string ``requests`` would write for them
    (``PreparedRequest._encode_params``: a list value repeats its key, ``None`` values are
    left out, UTF-8, ``+`` for spaces), without its generic checks of the argument's type,
    which cost about 0.1 ms per call (``tests/test_wordpress_network.py`` compares the two)."""
    pairs = []
    for key, values in params.items():
        if isinstance(values, str | bytes) or not hasattr(values, "__iter__"):
            values = (values,)
        pairs.extend((key, value) for value in values if value is not None)
    return urlencode(pairs)


def network_error(method: str, url: str, error: requests.RequestException) -> WordPressError:
    """The :mod:`gateway.wordpress.errors` exception for a call that got no complete answer,
    chosen by the type of ``error`` and of the urllib3 exception it wraps (the table in the
    module docstring; urllib3 2.x / requests ``HTTPAdapter``).

    Raises:
        requests.RequestException: ``error`` itself when it is none of those (an invalid URL
            or header, a missing CA bundle file: a fault of the call, not of the network).
    """
    cause = _urllib3_cause(error)
    facts = {"method": method, "url": url, "origin": "network"}
    if isinstance(cause, NameResolutionError):
        return WordPressUnavailable(
            f"cannot resolve the host name {urlsplit(url).hostname!r}: no address for it (a "
            "DNS failure or a misspelt site URL)",
            sent=False,
            **facts,
        )
    if isinstance(cause, NewConnectionError):  # before its base class ConnectTimeoutError
        return WordPressUnavailable("connection refused", sent=False, **facts)
    if isinstance(cause, ConnectTimeoutError):
        return WordPressUnavailable(f"connect timeout: {error}", sent=False, **facts)
    if isinstance(error, requests.Timeout) or isinstance(cause, ReadTimeoutError):
        return WordPressOutcomeUnknown("read timeout", **facts)  # also while reading the body
    if isinstance(error, _LOST):
        return WordPressOutcomeUnknown("connection lost: " + shortened(str(error), 200), **facts)
    raise error


def _urllib3_cause(error: requests.RequestException) -> BaseException | None:
    """The urllib3 exception under requests' wrapper: ``HTTPAdapter.send`` passes it (or the
    ``MaxRetryError`` holding it as ``reason``) as the first argument; a proxy's
    ``ProxyError`` holds the original error."""
    cause = error.args[0] if error.args else None
    if isinstance(cause, MaxRetryError):
        cause = cause.reason
    if isinstance(cause, ProxyError):
        cause = cause.original_error
    return cause
