"""The authorization server's HTTP endpoints, for the MCP listener to mount (issue 43):
the ``mcp`` SDK's own routes (``create_auth_routes``), each wrapped where the SDK does not
give what the gateway guarantees.

``routes(provider)`` returns Starlette routes for

* ``GET /.well-known/oauth-authorization-server`` (RFC 8414): the SDK's metadata plus
  ``client_id_metadata_document_supported: true`` when CIMD is on (the SDK's client then uses
  its document URL instead of registering:
  ``mcp.client.auth.utils.should_use_client_metadata_url``),
  ``authorization_response_iss_parameter_supported: true`` (RFC 9207: the consent page's
  redirect carries ``iss``, :func:`gateway.oauth.redirects.client_redirect`),
  ``code_challenge_methods_supported: ["S256"]``, ``token_endpoint_auth_methods_supported:
  ["none"]`` (public clients only), ``scopes_supported: ["gateway:tools"]``; no
  ``registration_endpoint`` when DCR is off.
* ``GET /.well-known/oauth-authorization-server/mcp``: the same document at the RFC 8414 §3.1
  path-inserted URL of the MCP endpoint (clients that take ``<public>/mcp`` for the issuer
  ask there first, as the SDK's client does: ``mcp.client.auth.utils``), and
  ``GET /.well-known/oauth-protected-resource``: the protected resource metadata (RFC 9728)
  of ``/mcp`` at the origin's root too, the document the listener serves at
  ``/.well-known/oauth-protected-resource/mcp`` (for clients that look at the root first).
* ``GET|POST /authorize``: the SDK's handler behind :class:`NoErrorRedirects`: the only
  redirect that leaves it is to the consent page; every error (unknown client, a redirect URI
  not registered, no PKCE or not S256, a wrong resource, a bad ``response_type``) is a 400 JSON
  answer to the user, never a redirect to a client no editor approved (an open redirect, with
  CIMD and DCR anyone can name any redirect URI). A client metadata document that could not
  be used is said as such (:class:`DocumentErrors`: "TLS failed fetching the document: ...",
  not the SDK's "Client ID ... not found"). A browser (``Accept`` preferring ``text/html``)
  gets each refusal as a page instead of JSON, same status and headers
  (:class:`gateway.oauth.error_pages.ErrorPages`).
* ``POST /token``: the SDK's handler behind :class:`ResourceCheck`: a ``resource`` other than
  the MCP endpoint, as clients spell it (:meth:`GatewayProvider.names_resource`: a trailing
  slash, the bare origin), is ``invalid_target`` (RFC 8707 §2; the SDK does not pass it to
  the provider).
* ``POST /register`` (only with ``GATEWAY_OAUTH_DCR`` on): the SDK's handler behind
  :class:`RegistrationGuard`: ``GATEWAY_OAUTH_DCR_RATE`` per client address, and public clients
  only (a missing ``token_endpoint_auth_method`` is replaced by ``none``, RFC 7591 §3.2.1
  lets the server replace values and the answer says so; any other is refused before the SDK
  would mint a secret).
* ``POST /revoke`` (RFC 7009): the SDK's handler behind :class:`PublicRevocation` (the SDK's
  form requires a ``client_secret`` member, which a public client does not send: without this
  its revocation would be a 400); revoking ends the grant's family.

The client address is the ASGI ``client`` of the request: behind a TLS proxy the listener's
:class:`gateway.remote.address_gate.AddressGate` sets it from the trusted ``X-Forwarded-For``
hops (``GATEWAY_PROXY_HOPS``). The protected
resource metadata (RFC 9728) and ``/mcp`` are the listener's (``create_protected_resource_routes``,
``AuthSettings(validate_token_resource=True)``).

Sources: RFC 6749 §4.1.2.1 and §10.15; RFC 7009; RFC 7591 §3; RFC 8414; RFC 8707 §2;
RFC 9207; OAuth 2.1 §4.1.2.1 and §7.12 (open redirectors); CIMD draft §5.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from urllib.parse import parse_qs
from urllib.parse import urlsplit

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import FixedWindowRateLimiter
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.routes import build_metadata
from mcp.server.auth.routes import cors_middleware
from mcp.server.auth.routes import create_auth_routes
from mcp.server.auth.routes import create_protected_resource_routes
from mcp.server.auth.settings import ClientRegistrationOptions
from mcp.server.auth.settings import RevocationOptions
from mcp.shared.auth import OAuthMetadata
from pydantic import AnyHttpUrl
from pydantic import ConfigDict
from pydantic import TypeAdapter
from starlette.routing import Route
from starlette.types import ASGIApp
from starlette.types import Message
from starlette.types import Receive
from starlette.types import Scope
from starlette.types import Send

from gateway.oauth import client_documents
from gateway.oauth.error_pages import ErrorPages
from gateway.oauth.provider import MAX_METADATA_BYTES
from gateway.oauth.provider import GatewayProvider
from gateway.oauth.provider import busy_seconds
from gateway.tenancy import grants

METADATA_PATH = "/.well-known/oauth-authorization-server"
AUTHORIZE_PATH = "/authorize"  # the SDK's (create_auth_routes), at the issuer's root
PROTECTED_PATH = "/.well-known/oauth-protected-resource"
MAX_FORM_BYTES = 64 * 1024
#: The largest registration request read (RFC 7591 §2 metadata as JSON; the metadata stored
#: is capped again, :data:`gateway.oauth.provider.MAX_METADATA_BYTES`).
MAX_REGISTRATION_BYTES = MAX_METADATA_BYTES
NO_STORE = [(b"cache-control", b"no-store"), (b"pragma", b"no-cache")]
_ISSUER = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))


def issuer_url(issuer: str) -> AnyHttpUrl:
    """The issuer as the SDK renders it (no trailing slash added to an empty path), so that
    RFC 8414 §3.3 and RFC 9207 string comparisons by clients hold."""
    return _ISSUER.validate_python(issuer.rstrip("/"))


async def _answer(send: Send, status: int, body: dict, extra: list | None = None) -> None:
    content = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), *NO_STORE, *(extra or [])]
    headers.append((b"content-length", str(len(content)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


async def _read_body(receive: Receive, cap: int) -> bytes | None:
    """The request's whole body, or None when it is larger than ``cap`` bytes."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > cap:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _is_form(scope: Scope) -> bool:
    """Whether the request says its body is ``application/x-www-form-urlencoded``, the only
    body ``/token`` and ``/revoke`` take (RFC 6749 §4.1.3, RFC 7009 §2.1): what the wrappers
    read is then what the SDK's form parser reads."""
    headers = dict(scope.get("headers", []))
    kind = headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
    return kind == b"application/x-www-form-urlencoded"


async def _form_only(send: Send) -> None:
    await _answer(
        send,
        400,
        {
            "error": "invalid_request",
            "error_description": "the body must be application/x-www-form-urlencoded",
        },
    )


def replay(body: bytes, receive: Receive) -> Receive:
    """An ASGI ``receive`` that hands ``body`` (a request body read whole) over once as one
    ``http.request`` message, then waits on the real one (a disconnect)."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


class NoErrorRedirects:
    """ASGI wrapper of the SDK's ``/authorize``: a redirect anywhere but to the consent page
    (``allowed_prefix``) is replaced by a JSON answer to the user with the SDK's ``error`` and
    ``error_description`` (never its ``state``; a browser gets it as a page,
    :class:`gateway.oauth.error_pages.ErrorPages`): 400, or 503 for
    ``temporarily_unavailable`` (the status RFC 6749 §4.1.2.1 stands that code in for) with
    ``Retry-After``: the seconds until the next of the client's waiting requests expires, as
    its description says (:func:`gateway.oauth.provider.busy_seconds`), else
    ``longest_wait`` (the seconds a request waits: the most a place can take to free). The
    SDK redirects errors to the client's redirect URI once it knows the client and the URI
    (RFC 6749 §4.1.2.1); here no editor has approved that client yet, so that would be an
    open redirect."""

    def __init__(self, app: ASGIApp, allowed_prefix: str, longest_wait: int):
        self.app = app
        self.allowed_prefix = allowed_prefix
        self.longest_wait = longest_wait

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replaced = False

        async def guarded(message: Message) -> None:
            nonlocal replaced
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers", []))
                location = headers.get(b"location", b"").decode("latin-1")
                redirect = 300 <= message["status"] < 400
                if redirect and not location.startswith(self.allowed_prefix):
                    replaced = True
                    query = parse_qs(urlsplit(location).query)
                    error = query.get("error", ["invalid_request"])[0]
                    description = query.get("error_description", [None])[0]
                    busy = error == "temporarily_unavailable"
                    retry = busy_seconds(description) or self.longest_wait
                    await _answer(
                        send,
                        503 if busy else 400,
                        {"error": error, "error_description": description},
                        [(b"retry-after", str(retry).encode())] if busy else None,
                    )
                    return
            if not replaced:
                await send(message)

        await self.app(scope, receive, guarded)


class DocumentErrors:
    """ASGI wrapper of the SDK's ``/authorize``: its 400 "Client ID '<id>' not found" for a
    client id that is a metadata document URL whose fetch was refused gets that refusal's
    reason instead (:func:`gateway.oauth.client_documents.refusal_of`: a TLS failure, no
    answer in time, a status, a field), so the person in the browser, and the operator they
    tell, see what to fix. Any other answer passes unchanged."""

    NOT_FOUND = re.compile(r"Client ID '(https://[^']+)' not found")

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def checked(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 400:
                held.append(message)
                return
            if held and message["type"] == "http.response.body":
                await _answer(send, 400, self._said(message.get("body", b"")))
                return
            await send(message)

        await self.app(scope, receive, checked)

    def _said(self, body: bytes) -> dict:
        answer = json.loads(body)
        found = self.NOT_FOUND.fullmatch(answer.get("error_description") or "")
        why = found and client_documents.refusal_of(found.group(1))
        if why:
            answer["error_description"] = (
                f"the client metadata document {found.group(1)} cannot be used: {why}"
            )
        return answer


async def _form(scope: Scope, receive: Receive, send: Send) -> bytes | None:
    """The request's form body (at most :data:`MAX_FORM_BYTES`), or None once a refusal was
    sent: not ``application/x-www-form-urlencoded`` (``invalid_request``), or too large
    (413)."""
    if not _is_form(scope):
        await _form_only(send)
        return None
    body = await _read_body(receive, MAX_FORM_BYTES)
    if body is None:
        await _answer(send, 413, {"error": "invalid_request", "error_description": "too large"})
    return body


class ResourceCheck:
    """ASGI wrapper of the SDK's ``/token``: a ``resource`` parameter (RFC 8707, any number of
    them) for which ``names_resource`` is false is answered 400 ``invalid_target`` before the
    SDK sees the request; no ``resource`` is the one resource. A body that is not
    ``application/x-www-form-urlencoded`` (multipart, which the SDK's parser would also read)
    is ``invalid_request``. The form is read once (at most
    :data:`MAX_FORM_BYTES`, else 413) and handed to the SDK as it came."""

    def __init__(self, app: ASGIApp, names_resource: Callable[[str], bool]):
        self.app = app
        self.names_resource = names_resource

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await _form(scope, receive, send)
        if body is None:
            return
        asked = parse_qs(body.decode("latin-1")).get("resource", [])
        if any(not self.names_resource(value) for value in asked):
            await _answer(
                send,
                400,
                {"error": "invalid_target", "error_description": "the resource is not this server"},
            )
            return
        await self.app(scope, replay(body, receive), send)


class PublicRevocation:
    """ASGI wrapper of the SDK's ``/revoke``: a form without ``client_secret`` gets an empty
    one before the SDK reads it (its ``RevocationRequest`` requires the member; a public
    client, ``token_endpoint_auth_method`` ``none``, has no secret to send: RFC 7009 §2.1
    asks client authentication only of confidential clients). An empty secret authenticates
    nothing: the SDK ignores it for a public client and refuses it for any other."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        body = await _form(scope, receive, send)
        if body is None:
            return
        if "client_secret" not in parse_qs(body.decode("latin-1"), keep_blank_values=True):
            body += b"&client_secret=" if body else b"client_secret="
        await self.app(scope, replay(body, receive), send)


class RegistrationGuard:
    """ASGI wrapper of the SDK's ``/register`` (RFC 7591): at most ``rate`` (``(calls,
    seconds)``, None = no limit) registrations per client address in this process (429
    with ``Retry-After`` past it, counted before the body is read), and public clients only:
    a missing ``token_endpoint_auth_method`` becomes ``none`` (RFC 7591 §3.2.1: the server may
    replace a value; the answer shows it), any other is refused ``invalid_client_metadata``
    before the SDK would mint a client secret."""

    def __init__(self, app: ASGIApp, rate: tuple[int, int] | None):
        self.app = app
        self.rate = rate
        self._lock = threading.Lock()
        self._limiter: FixedWindowRateLimiter | None = None

    def _retry_after(self, address: str) -> int | None:
        if self.rate is None:
            return None
        with self._lock:
            if self._limiter is None:
                self._limiter = FixedWindowRateLimiter(MemoryStorage())
            limiter = self._limiter
        item = RateLimitItemPerSecond(*self.rate)
        if limiter.hit(item, "oauth-register", address):
            return None
        reset = limiter.get_window_stats(item, "oauth-register", address).reset_time
        return max(1, math.ceil(reset - time.time()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        address = (scope.get("client") or ("unknown", 0))[0]
        retry = self._retry_after(address)
        if retry is not None:
            await _answer(
                send,
                429,
                {"error": "temporarily_unavailable", "error_description": "too many registrations"},
                [(b"retry-after", str(retry).encode())],
            )
            return
        body = await _read_body(receive, MAX_REGISTRATION_BYTES)
        if body is None:  # RFC 7591 §3.2.2: a registration error is a 400
            too_large = f"the client metadata is larger than {MAX_REGISTRATION_BYTES} bytes"
            await _answer(
                send, 400, {"error": "invalid_client_metadata", "error_description": too_large}
            )
            return
        try:
            asked = json.loads(body)
        except ValueError:
            asked = None
        if isinstance(asked, dict):
            method = asked.get("token_endpoint_auth_method")
            if method is None:
                asked["token_endpoint_auth_method"] = "none"
                body = json.dumps(asked).encode()
            elif method != "none":
                await _answer(
                    send,
                    400,
                    {
                        "error": "invalid_client_metadata",
                        "error_description": "only public clients: token_endpoint_auth_method none",
                    },
                )
                return
        await self.app(scope, replay(body, receive), send)


def metadata(provider: GatewayProvider) -> OAuthMetadata:
    """The authorization server's metadata (RFC 8414 §2), the SDK's ``build_metadata`` with
    the gateway's fields (see the module's docstring)."""
    config = provider.config
    built = build_metadata(
        issuer_url(provider.issuer),
        None,
        ClientRegistrationOptions(enabled=config.oauth_dcr, valid_scopes=list(grants.SCOPES)),
        RevocationOptions(enabled=True),
    )
    return built.model_copy(
        update={
            "token_endpoint_auth_methods_supported": ["none"],
            "revocation_endpoint_auth_methods_supported": ["none"],
            "code_challenge_methods_supported": ["S256"],
            "client_id_metadata_document_supported": True if config.oauth_cimd else None,
            "authorization_response_iss_parameter_supported": True,
        }
    )


def well_known(provider: GatewayProvider) -> list[Route]:
    """The metadata routes: the authorization server's (RFC 8414) at its own URL and at the
    URL path-inserted with the resource's path, and the resource's (RFC 9728, the SDK's
    ``create_protected_resource_routes`` with the listener's arguments) at the root."""
    handler = cors_middleware(MetadataHandler(metadata(provider)).handle, ["GET", "OPTIONS"])
    inserted = METADATA_PATH + urlsplit(provider.resource).path.rstrip("/")
    (resource,) = create_protected_resource_routes(
        AnyHttpUrl(provider.resource), [issuer_url(provider.issuer)], list(grants.SCOPES)
    )
    get = ["GET", "OPTIONS"]
    built = [Route(path, handler, methods=get) for path in dict.fromkeys([METADATA_PATH, inserted])]
    return [*built, Route(PROTECTED_PATH, resource.endpoint, methods=get)]


def routes(provider: GatewayProvider) -> list[Route]:
    """The authorization server's routes for the MCP listener's Starlette app (paths at the
    root of the issuer: the metadata of :func:`well_known`, ``/authorize``, ``/token``,
    ``/register`` when DCR is on, ``/revoke``). The listener adds the protected resource
    metadata at its RFC 9728 URL and ``/mcp``, and its per-address limits around these
    routes."""
    config = provider.config
    registration = ClientRegistrationOptions(
        enabled=config.oauth_dcr,
        valid_scopes=None,  # clamped at /authorize, never refused
        default_scopes=list(grants.SCOPES),
    )
    sdk_routes = create_auth_routes(
        provider,
        issuer_url(provider.issuer),
        client_registration_options=registration,
        revocation_options=RevocationOptions(enabled=True),
    )
    wrappers: dict[str, Callable[[ASGIApp], ASGIApp]] = {
        AUTHORIZE_PATH: lambda app: ErrorPages(
            NoErrorRedirects(
                DocumentErrors(app),
                f"{provider.consent_url}?request=",
                math.ceil(config.oauth_pending_minutes * 60),
            ),
            config.oauth_dcr_unused_hours,
        ),
        "/token": lambda app: ResourceCheck(app, provider.names_resource),
        "/register": lambda app: RegistrationGuard(app, config.oauth_dcr_rate),
        "/revoke": PublicRevocation,
    }
    built = well_known(provider)
    for route in sdk_routes:
        if route.path == METADATA_PATH:
            continue
        wrap = wrappers.get(route.path)
        app = wrap(route.app) if wrap else route.app
        built.append(Route(route.path, app, methods=sorted(route.methods or [])))
    return built
