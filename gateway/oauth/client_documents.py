"""Client ID Metadata Documents (CIMD, issue 43): a client whose ``client_id`` is an HTTPS URL
names the JSON document that describes it; the authorization server fetches it, checks it and
caches it.

* **Fetched through the egress guard** (:mod:`gateway.actions.egress`): HTTPS only, every
  address the host resolves to public unless its ``host:port`` is listed verbatim in
  ``GATEWAY_OAUTH_CIMD_ALLOW_HOSTS`` (a loopback test server; the list only widens: an
  unlisted public host is still fetched, an unlisted loopback or private one never), the
  connection pinned to the checked address, TLS verified for the URL's host, one deadline
  (:data:`DEADLINE_SECONDS`) for the whole exchange, at most :data:`MAX_BYTES` read, and no
  redirect followed (a 3xx is a refusal).
* **Checked**: a JSON object whose ``client_id`` equals the URL it was fetched from, a public
  client (``token_endpoint_auth_method`` ``none``, no ``client_secret``), at least one
  ``redirect_uris`` entry.
* **One fetch per host at a time, and a failure remembered** (:class:`Fetches`): while a
  document of a host is being fetched, another fetch from that host is refused at once (the
  caller's slot and thread are not held waiting on a slow server), and a host whose fetch
  did not answer (no answer within the deadline, TLS, no connection) is refused without a fetch for
  :data:`FAILURE_SECONDS`: a slow or broken document server costs the listener one
  deadline per host and window, however often the request is sent again (issue 53). A TLS
  failure is said as such (:func:`refusal_of` keeps the last reason per URL, for the answer
  ``/authorize`` gives the browser).
* **Cached** by the caller in the ledger (:func:`gateway.tenancy.oauth_clients.remember_document`)
  for ``GATEWAY_OAUTH_CIMD_CACHE_SECONDS``.

Sources: OAuth Client ID Metadata Document (draft-ietf-oauth-client-id-metadata-document)
§3 (the URL), §4 (the document), §6 (fetching: no redirects, a size limit, SSRF); MCP
authorization (revision 2026-07-28), "Client ID Metadata Documents".
"""

from __future__ import annotations

import json
import threading
import time
from urllib.parse import urlsplit

from gateway.actions import egress
from gateway.oauth import redirects

MAX_BYTES = 5 * 1024
DEADLINE_SECONDS = 5.0
SETTING = "GATEWAY_OAUTH_CIMD_ALLOW_HOSTS"
SCHEMES = frozenset({"https"})
FAILURE_SECONDS = 60.0  # a host whose fetch failed is not asked again for this long
REMEMBERED = 1024  # refusals kept (per URL) and failed hosts, the oldest forgotten first


class DocumentRefused(Exception):
    """The client metadata document cannot be used (``why`` in words, no secret)."""


def is_document_url(client_id: str) -> bool:
    """Whether ``client_id`` has the form of a metadata document URL (CIMD §3): ``https``,
    a host, a path other than ``/``, no fragment, no credentials, no ``.`` or ``..`` segment.
    Other client ids are registrations (RFC 7591)."""
    try:
        parts = urlsplit(client_id)
    except ValueError:
        return False
    segments = parts.path.split("/")
    return (
        parts.scheme == "https"
        and bool(parts.hostname)
        and parts.path not in ("", "/")
        and not parts.fragment
        and "@" not in parts.netloc
        and "." not in segments
        and ".." not in segments
    )


def _written_host(url: str) -> str:
    """``host:port`` as the URL writes it, the default port added (egress's allow-list form)."""
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return netloc if parts.port is not None else f"{netloc}:{egress.DEFAULT_PORTS['https']}"


class Fetches:
    """Which document hosts are being fetched, which failed lately (a monotonic time each),
    and the last refusal per URL, for the whole process (threads of the listener)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._busy: set[str] = set()
        self._failed: dict[str, tuple[float, str]] = {}
        self._refusals: dict[str, str] = {}

    def begin(self, host: str) -> None:
        """Claim ``host`` for one fetch.

        Raises:
            DocumentRefused: ``host`` failed within :data:`FAILURE_SECONDS` (its reason
                again), or a fetch from it is in flight.
        """
        with self._lock:
            failed = self._failed.get(host)
            if failed is not None and time.monotonic() - failed[0] < FAILURE_SECONDS:
                raise DocumentRefused(f"{failed[1]} (not fetched again for {FAILURE_SECONDS:g} s)")
            if host in self._busy:
                raise DocumentRefused("another document of its host is being fetched; retry")
            self._busy.add(host)

    def end(self, host: str, failure: str | None) -> None:
        """Release ``host``; ``failure``: why its fetch failed (remembered), None when done."""
        with self._lock:
            self._busy.discard(host)
            if failure is None:
                self._failed.pop(host, None)
                return
            self._failed[host] = (time.monotonic(), failure)
            _trim(self._failed)

    def refused(self, url: str, why: str | None) -> None:
        with self._lock:
            self._refusals.pop(url, None)
            if why is not None:
                self._refusals[url] = why
                _trim(self._refusals)

    def refusal(self, url: str) -> str | None:
        with self._lock:
            return self._refusals.get(url)


def _trim(kept: dict) -> None:
    while len(kept) > REMEMBERED:
        del kept[next(iter(kept))]


FETCHES = Fetches()


def refusal_of(url: str) -> str | None:
    """Why the last fetch of the document at ``url`` was refused (words, no secret), or None
    (never refused, or fetched since)."""
    return FETCHES.refusal(url)


def fetch(url: str, allow_hosts: frozenset[str], cafile: str | None = None) -> dict:
    """Fetch and check the metadata document at ``url`` (blocking: at most
    :data:`DEADLINE_SECONDS`; one fetch per host at a time, a failed host not fetched again
    for :data:`FAILURE_SECONDS`: :class:`Fetches`). ``allow_hosts``: ``host:port`` entries
    that may be loopback or private (``GATEWAY_OAUTH_CIMD_ALLOW_HOSTS``); ``cafile``: a CA
    bundle to trust instead of the system's (tests). Returns the document (a dict) as
    fetched; the reason of a refusal is kept for :func:`refusal_of`.

    Raises:
        DocumentRefused: not a document URL, the egress guard refused it, no answer within
            the deadline, a TLS failure (said as such), a status other than 200 (a redirect
            included), a body over :data:`MAX_BYTES`, not a JSON object, or a document that
            fails :func:`check`; its host failed lately or is being fetched.
    """
    try:
        document = _fetch(url, allow_hosts, cafile)
    except DocumentRefused as why:
        FETCHES.refused(url, str(why))
        raise
    FETCHES.refused(url, None)
    return document


def _fetch(url: str, allow_hosts: frozenset[str], cafile: str | None) -> dict:
    if not is_document_url(url):
        raise DocumentRefused("the client id is not an https URL with a path")
    host = _written_host(url)
    listed = allow_hosts if host in allow_hosts else frozenset()
    FETCHES.begin(host)
    failure = None
    try:
        answer = _get(url, listed, cafile)
    except _Unreachable as why:  # what cost a deadline: remembered; the rest is instant
        failure = str(why)
        raise DocumentRefused(failure) from None
    finally:
        FETCHES.end(host, failure)
    if answer.status != 200:
        raise DocumentRefused(f"the document answered {answer.status}, not 200")
    try:
        document = json.loads(answer.content)
    except (UnicodeDecodeError, ValueError):
        raise DocumentRefused("the document is not JSON") from None
    check(url, document)
    return document


def _get(url: str, listed: frozenset[str], cafile: str | None) -> egress.Answer:
    """The egress guard's answer for ``url``; its refusals as :class:`DocumentRefused`, a
    host that did not answer (no connection, TLS, named so, the deadline) as
    :class:`_Unreachable`."""
    try:
        where = egress.resolve(url, SCHEMES, listed, SETTING)
        return egress.request(
            where,
            "GET",
            time.monotonic() + DEADLINE_SECONDS,
            MAX_BYTES,
            headers={"Accept": "application/json"},
            cafile=cafile,
        )
    except egress.Failed as error:
        if "SSL" in str(error):
            raise _Unreachable(f"TLS failed fetching the document: {error}") from None
        raise _Unreachable(f"Failed: {error}") from None
    except (egress.Refused, egress.ResolverUnavailable, egress.TooLarge) as error:
        raise DocumentRefused(f"{type(error).__name__}: {error}") from None


class _Unreachable(DocumentRefused):
    """No answer from the host: no connection, TLS, the deadline (remembered per host)."""


def check(url: str, document: object) -> None:
    """Check a fetched document against the URL it came from (CIMD §4).

    Raises:
        DocumentRefused: not a JSON object; ``client_id`` differs from ``url``; a
            ``client_secret``, or a ``token_endpoint_auth_method`` other than ``none`` (a
            missing one is RFC 7591's ``client_secret_basic``: only public clients, this
            server holds no client key); no ``redirect_uris``, or one a browser must not be
            sent to (:func:`gateway.oauth.redirects.redirect_uri_problem`).
    """
    if not isinstance(document, dict):
        raise DocumentRefused("the document is not a JSON object")
    if document.get("client_id") != url:
        raise DocumentRefused("the document's client_id is not the URL it was fetched from")
    if "client_secret" in document or document.get("token_endpoint_auth_method") != "none":
        raise DocumentRefused("only public clients (token_endpoint_auth_method: none)")
    uris = document.get("redirect_uris")
    if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
        raise DocumentRefused("the document names no redirect_uris")
    for uri in uris:
        problem = redirects.redirect_uri_problem(uri)
        if problem is not None:
            raise DocumentRefused(f"redirect_uris: {problem}")
