"""The gateway as the MCP server's own authorization server (issue 43): the ``mcp`` SDK's
``OAuthAuthorizationServerProvider`` protocol, backed by the ledger.

Every method runs the ledger's synchronous functions (:mod:`gateway.tenancy.grants`,
:mod:`gateway.tenancy.oauth_tokens`, :mod:`gateway.tenancy.oauth_clients`) on a worker thread
(``anyio.to_thread.run_sync``) inside a ledger connection context: no ledger call blocks the
listener's event loop, and each call has its own pooled connection.

What the SDK's handlers check before a method here is called (``mcp/server/auth/handlers``) is
not checked again: PKCE S256 and the verifier, a code's or refresh token's client and expiry,
the redirect URI at ``/token``. What this module adds:

* **One resource** (RFC 8707): ``authorize`` binds a request without ``resource``, or with
  this server's as clients spell it (:mod:`gateway.oauth.resources`), to the MCP endpoint's
  URL and refuses another one (``invalid_target``); every code and token carries
  it, and :class:`AccessToken` ``resource`` lets ``AuthSettings(validate_token_resource=True)``
  refuse a token issued for another URL. ``/token`` is checked by :mod:`gateway.oauth.routes`.
* **Single use and families**: a reused code or refresh token revokes its grant
  (:mod:`gateway.tenancy.oauth_tokens`); a failed redemption or rotation is ``invalid_grant``.
* **A refused refresh says why** (:mod:`gateway.oauth.refusals`): expired (when), retired,
  its grant revoked (when, by what kind of revocation), used already (reuse detected); an
  unknown token and another client's say the same. The SDK's handler answers "refresh token
  does not exist" for whatever ``load_refresh_token`` does not return, and catches
  ``TokenError`` only from ``exchange_refresh_token``; so a refused token is returned as a
  :class:`GatewayRefreshToken` with ``refusal`` set, which passes the handler's checks (the
  caller's client, no expiry, every scope of the server) and is refused by
  ``exchange_refresh_token`` with its words.
* **Clients**: an ``https://`` client id is a Client ID Metadata Document
  (:mod:`gateway.oauth.client_documents`, off with ``GATEWAY_OAUTH_CIMD=off``), any other a
  dynamic registration of a public client (RFC 7591). Both come back as :class:`GatewayClient`:
  loopback redirect URIs match on any port (RFC 8252 §7.3) and scopes are clamped, never
  refused.
* **Expiry of what is left over** is lazy: a registration forgets expired registrations and
  stale cached documents (:func:`gateway.tenancy.oauth_clients.forget_expired`), an
  authorisation request forgets decided or expired requests and old codes and tokens
  (:func:`gateway.tenancy.grants.forget_expired`). An expired registration is never served in
  between (:func:`gateway.tenancy.oauth_clients.known` reads its expiry).

Sources: RFC 6749 §4.1 and §10.5-10.6; RFC 7009; RFC 7591; RFC 7636; RFC 8252 §7.3 and §8.3;
RFC 8707; RFC 9207; OAuth 2.1 (draft-ietf-oauth-v2-1) §4.1.3 and §4.3.1; MCP authorization
(revision 2026-07-28).
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import json
import logging
import math
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode
from urllib.parse import urlsplit

import anyio.to_thread
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.provider import AuthorizationCode
from mcp.server.auth.provider import AuthorizationParams
from mcp.server.auth.provider import AuthorizeError
from mcp.server.auth.provider import RefreshToken
from mcp.server.auth.provider import RegistrationError
from mcp.server.auth.provider import TokenError
from mcp.shared.auth import InvalidRedirectUriError
from mcp.shared.auth import OAuthClientInformationFull
from mcp.shared.auth import OAuthToken
from pydantic import AnyUrl
from pydantic import ValidationError

from gateway.core.config import Config
from gateway.ledger import db
from gateway.ledger.db import database
from gateway.oauth import client_documents
from gateway.oauth import redirects
from gateway.oauth.refusals import Said
from gateway.oauth.refusals import describe
from gateway.oauth.resources import names_resource
from gateway.oauth.resources import same_resource
from gateway.tenancy import grants
from gateway.tenancy import oauth_clients
from gateway.tenancy import oauth_tokens

log = logging.getLogger(__name__)

CONSENT_PATH = "/review/oauth"
#: The longest ``state`` kept for a client (characters): clients send 22-64; it is stored with
#: the pending request and returned in the redirect (RFC 6749 §4.1.1 sets no limit).
MAX_STATE_CHARS = 1024
#: The largest client metadata a registration may store (bytes of JSON), as a metadata
#: document may be (:mod:`gateway.oauth.client_documents`).
MAX_METADATA_BYTES = 5 * 1024

#: ``error_description`` of ``/authorize``'s ``temporarily_unavailable``: the whole seconds
#: until one of the client's waiting requests expires (:func:`gateway.tenancy.grants.room_at`).
_BUSY = (
    "too many sign-in requests of this app wait unopened for an editor; the next expires "
    "in {seconds} seconds: start the sign-in again then"
)
_BUSY_SAID = re.compile(r"the next expires in (\d+) seconds")


def busy_description(seconds: int) -> str:
    """The ``error_description`` (RFC 6749 §4.1.2.1's characters) of ``/authorize``'s
    ``temporarily_unavailable``: a place frees in ``seconds`` (a whole number, at least 1)."""
    return _BUSY.format(seconds=seconds)


def busy_seconds(description: str | None) -> int | None:
    """The seconds a :func:`busy_description` names, or None for any other text: the
    ``Retry-After`` of the refusal (:class:`gateway.oauth.routes.NoErrorRedirects`; the SDK
    hands on only the error code and its description)."""
    said = _BUSY_SAID.search(description or "")
    return int(said.group(1)) if said else None


LOOPBACK_HOSTS = frozenset({"localhost"})


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class GatewayClient(OAuthClientInformationFull):
    """A client as the gateway accepts it: always public (no secret), and

    * ``validate_redirect_uri``: a registered URI matches exactly; a loopback one (``http``,
      host ``127.0.0.1``, ``[::1]`` or ``localhost``) also with any port, the rest of it
      exact (RFC 8252 §7.3: a native app's port is chosen at run time). The URI asked for
      is returned, port and all; ``/token`` then compares it exactly.
    * ``validate_scope``: scopes are clamped to the gateway's (:func:`grants.clamp_scopes`),
      never refused: a refusal would be an error redirect to a client no editor approved.

    Raises (``validate_redirect_uri``): ``InvalidRedirectUriError`` (shown to the user by
    ``/authorize``, never redirected)."""

    def validate_redirect_uri(self, redirect_uri: AnyUrl | None) -> AnyUrl:
        if redirect_uri is None or redirect_uri in (self.redirect_uris or []):
            return super().validate_redirect_uri(redirect_uri)
        asked = urlsplit(str(redirect_uri))
        if asked.scheme == "http" and _is_loopback(asked.hostname):
            for registered in self.redirect_uris or []:
                known = urlsplit(str(registered))
                same = (known.scheme, known.hostname, known.path, known.query) == (
                    asked.scheme,
                    asked.hostname,
                    asked.path,
                    asked.query,
                )
                if same and not asked.fragment and not asked.username:
                    return redirect_uri
        raise InvalidRedirectUriError(f"Redirect URI '{redirect_uri}' not registered for client")

    def validate_scope(self, requested_scope: str | None) -> list[str] | None:
        return grants.clamp_scopes(requested_scope.split() if requested_scope else None)


class GatewayCode(AuthorizationCode):
    """An authorization code as the ledger describes it (no secret but the code itself)."""

    grant_id: int


class GatewayRefreshToken(RefreshToken):
    """A refresh token as the ledger describes it, or a refused one: ``refusal`` set
    (:class:`gateway.oauth.refusals.Said`: what ``/token`` answers and logs), ``client_id``
    the caller's, ``scopes`` all of the server's, no expiry, ``grant_id`` None for an unknown
    token."""

    grant_id: int | None
    refusal: Said | None = None


def _client(client_id: str, metadata: dict) -> GatewayClient | None:
    """The client of ``metadata`` (as accepted), always public; None when it does not parse."""
    fields = {k: v for k, v in metadata.items() if k not in ("client_secret", "client_id")}
    fields.update(client_id=client_id, token_endpoint_auth_method="none")
    fields.pop("client_secret_expires_at", None)
    try:
        return GatewayClient.model_validate(fields)
    except ValidationError:
        return None


def principal(seen: oauth_tokens.GrantAccess, issuer: str) -> dict[str, Any]:
    """What an access token speaks for, as the MCP listener uses it: ``tenant``, ``sites``
    (sorted list of site names), ``grant_id``, ``principal_hash`` (the grant's stable caller
    key, not a secret), ``scopes``, ``client_id``, ``resource`` and ``iss``."""
    return {
        "iss": issuer,
        "tenant": seen.tenant,
        "sites": sorted(seen.sites),
        "grant_id": seen.grant_id,
        "principal_hash": seen.principal_hash,
        "scopes": list(seen.scopes),
        "client_id": seen.client_id,
        "resource": seen.resource,
    }


class GatewayProvider:
    """The authorization server, one per MCP listener process.

    Args:
        config: the gateway's settings: ``oauth_access_minutes``, ``oauth_refresh_days``,
            ``oauth_code_seconds`` (read by the consent page, not here),
            ``oauth_pending_minutes``, ``oauth_cimd``, ``oauth_cimd_cache_seconds``,
            ``oauth_cimd_allow_hosts``, ``oauth_dcr``, ``oauth_dcr_unused_hours`` (the
            ``_seconds`` parsed values are in the setting's own unit: minutes, days, hours).
        issuer_url: the authorization server's issuer (RFC 8414 §2), the gateway's public
            ``https://`` address without a trailing slash, e.g. ``https://gw.example``.
        consent_base: where the review site is reached (``<consent_base>/review/oauth``).
        resource_url: the MCP endpoint's URL, the one resource (default ``<issuer>/mcp``).
        cafile: a CA bundle to trust when fetching metadata documents (tests), else the
            system's.
        clock: naive UTC now (tests), default :func:`gateway.ledger.db.utcnow`.
    """

    def __init__(
        self,
        config: Config,
        issuer_url: str,
        consent_base: str,
        resource_url: str | None = None,
        cafile: str | None = None,
        clock: Callable[[], dt.datetime] = db.utcnow,
    ):
        self.config = config
        self.issuer = issuer_url.rstrip("/")
        self.resource = resource_url or f"{self.issuer}/mcp"
        self.origin_is_ours = urlsplit(self.issuer).path in ("", "/")
        self.consent_url = f"{consent_base.rstrip('/')}{CONSENT_PATH}"
        self.cafile = cafile
        self.clock = clock
        self.lifetimes = oauth_tokens.Lifetimes(
            access=dt.timedelta(minutes=config.oauth_access_minutes),
            refresh=dt.timedelta(days=config.oauth_refresh_days),
            reuse_grace=dt.timedelta(seconds=config.oauth_refresh_grace_seconds),
        )

    def names_resource(self, asked: str | None) -> bool:
        """Whether a client's ``resource`` parameter names this server
        (:func:`names_resource`; the origin counts when the issuer is a bare origin)."""
        return names_resource(asked, self.resource, self.origin_is_ours)

    # ------------------------------------------------------------------ plumbing

    @staticmethod
    def _in_ledger(call: Callable[[], Any]) -> Any:
        with database.connection_context():
            return call()

    async def _run(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)`` on a worker thread inside a ledger connection context."""
        bound = functools.partial(call, *args, **kwargs)
        return await anyio.to_thread.run_sync(functools.partial(self._in_ledger, bound))

    # ------------------------------------------------------------------ clients

    def client_sync(self, client_id: str) -> GatewayClient | None:
        """:meth:`get_client` for a caller on a thread inside a ledger connection context
        (the consent page): the cached document or registration, a document fetched now, or
        None (unknown, expired, CIMD off, or the document refused: logged with its reason)."""
        now = self.clock()
        if client_documents.is_document_url(client_id):
            if not self.config.oauth_cimd:
                return None
            row = oauth_clients.known(client_id, now)
            if row is not None and row.kind == oauth_clients.CIMD:
                return _client(client_id, row.metadata)
            try:
                document = client_documents.fetch(
                    client_id, self.config.oauth_cimd_allow_hosts, self.cafile
                )
            except client_documents.DocumentRefused as why:
                log.warning("client metadata document refused: %s", why)
                return None
            client = _client(client_id, document)
            if client is None:
                log.warning("client metadata document refused: its fields do not parse")
                return None
            cache_for = dt.timedelta(seconds=self.config.oauth_cimd_cache_seconds)
            oauth_clients.remember_document(client_id, document, cache_for, now)
            return client
        row = oauth_clients.known(client_id, now)
        if row is None or row.kind != oauth_clients.DCR:
            return None
        return _client(client_id, row.metadata)

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        """The client ``client_id``: a metadata document URL (CIMD; fetched through the
        egress guard, cached ``oauth_cimd_cache_seconds``) or a dynamic registration; None
        when unknown, expired or refused. Always a :class:`GatewayClient` (public)."""
        return await self._run(self.client_sync, client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        """Keep a dynamic registration (RFC 7591 §3.2.1) under the client id the SDK minted,
        forgotten after ``oauth_dcr_unused_hours`` unless an editor approves it. Expired
        registrations and stale documents are forgotten first (lazily, here).

        Raises:
            RegistrationError: ``invalid_redirect_uri`` for a redirect URI a browser must not
                be sent to (:func:`gateway.oauth.redirects.redirect_uri_problem`);
                ``invalid_client_metadata`` for metadata larger than
                :data:`MAX_METADATA_BYTES` as stored, or for anything but a public client
                (``token_endpoint_auth_method`` ``none``, no secret): the SDK would compare a
                secret in clear. :mod:`gateway.oauth.routes` refuses these before the SDK
                mints one; this is the second check.
        """
        if client_info.token_endpoint_auth_method != "none" or client_info.client_secret:
            raise RegistrationError(
                "invalid_client_metadata", "only public clients: token_endpoint_auth_method none"
            )
        for uri in client_info.redirect_uris or []:
            problem = redirects.redirect_uri_problem(str(uri))
            if problem is not None:
                raise RegistrationError("invalid_redirect_uri", f"{uri}: {problem}")
        metadata = client_info.model_dump(
            mode="json",
            exclude_none=True,
            exclude={"client_id", "client_secret", "client_secret_expires_at"},
        )
        if len(json.dumps(metadata).encode()) > MAX_METADATA_BYTES:
            raise RegistrationError(
                "invalid_client_metadata", f"the metadata is larger than {MAX_METADATA_BYTES} bytes"
            )
        unused_for = dt.timedelta(hours=self.config.oauth_dcr_unused_hours)

        def keep() -> None:
            now = self.clock()
            oauth_clients.forget_expired(now)
            oauth_clients.register(metadata, unused_for, now, client_id=client_info.client_id)

        await self._run(keep)

    # ------------------------------------------------------------------ authorization

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        """Keep the checked request for an editor (:func:`grants.open_pending`, valid
        ``oauth_pending_minutes``) and send the browser to the consent page,
        ``<consent_base>/review/oauth?request=<pending id>``. A request without ``resource``,
        or one spelling this server's as clients do (:meth:`names_resource`), is bound to
        the MCP endpoint's canonical URL; scopes were clamped by :class:`GatewayClient`.

        Raises:
            AuthorizeError: ``invalid_target`` when ``resource`` names another resource;
                ``invalid_request`` for a ``state`` longer than :data:`MAX_STATE_CHARS`;
                ``temporarily_unavailable`` when ``oauth_pending_per_client`` of the client's
                requests wait unclaimed already, saying in how many seconds the next of them
                expires (:func:`busy_description`; each shown to the user by the route, never
                redirected to the client).
        """
        resource = params.resource or self.resource
        if not self.names_resource(resource):
            raise AuthorizeError("invalid_target", "the resource is not this MCP server")
        if params.state is not None and len(params.state) > MAX_STATE_CHARS:
            raise AuthorizeError("invalid_request", f"state is longer than {MAX_STATE_CHARS}")
        lifetime = dt.timedelta(minutes=self.config.oauth_pending_minutes)

        def keep() -> str:
            now = self.clock()
            grants.forget_expired(now)
            room_at = grants.room_at(client.client_id, self.config.oauth_pending_per_client, now)
            if room_at is not None:
                seconds = max(1, math.ceil((room_at - now).total_seconds()))
                raise AuthorizeError("temporarily_unavailable", busy_description(seconds))
            return grants.open_pending(
                client.client_id,
                str(params.redirect_uri),
                params.redirect_uri_provided_explicitly,
                params.code_challenge,
                self.resource,
                params.scopes or [],
                params.state,
                lifetime,
                now,
            )

        pending_id = await self._run(keep)
        return f"{self.consent_url}?{urlencode({'request': pending_id})}"

    # ------------------------------------------------------------------ codes

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> GatewayCode | None:
        """The code for the SDK's checks, or None: unknown, another client's, its grant
        revoked, or presented again (then its grant is revoked: OAuth 2.1 §4.1.3)."""
        view = await self._run(oauth_tokens.code_view, authorization_code, self.clock())
        if view is None or view.client_id != client.client_id:
            return None
        return GatewayCode(
            code=authorization_code,
            scopes=view.scopes,
            expires_at=view.expires_at,
            client_id=view.client_id,
            code_challenge=view.code_challenge,
            redirect_uri=AnyUrl(view.redirect_uri),
            redirect_uri_provided_explicitly=view.redirect_uri_explicit,
            resource=view.resource,
            grant_id=view.grant_id,
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: GatewayCode
    ) -> OAuthToken:
        """Redeem the code once: an access token (``oauth_access_minutes``) and a refresh
        token (``oauth_refresh_days``). An approved registration stops expiring.

        Raises:
            TokenError: ``invalid_target`` when the grant is bound to another resource (the
                issuer moved); ``invalid_grant`` when another request redeemed the code first
                (its grant is then revoked), it expired, or its grant was revoked.
        """
        if not same_resource(authorization_code.resource, self.resource):
            raise TokenError("invalid_target", "the grant is for another resource")

        def redeem() -> oauth_tokens.Issued | None:
            now = self.clock()
            issued = oauth_tokens.redeem_code(authorization_code.code, self.lifetimes, now)
            if issued is not None:
                oauth_clients.note_approved(client.client_id, now)
            return issued

        issued = await self._run(redeem)
        if issued is None:
            raise TokenError("invalid_grant", "the authorization code is not valid")
        return _token(issued)

    # ------------------------------------------------------------------ refresh tokens

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> GatewayRefreshToken:
        """The refresh token for the SDK's checks (:func:`oauth_tokens.refresh_check`), or,
        when it is refused, a stand-in whose ``refusal`` :meth:`exchange_refresh_token`
        answers (:func:`gateway.oauth.refusals.describe`): unknown or another client's,
        expired or retired, its grant revoked, or used already (then its grant is revoked
        now: a rotated token presented again, RFC 6819 §5.2.2.3) unless it is its grant's
        last rotation within ``oauth_refresh_grace_seconds`` (:func:`oauth_tokens.rotate`).
        Never None: the SDK would answer its own "refresh token does not exist"."""
        seen = await self._run(
            oauth_tokens.refresh_check, refresh_token, self.clock(), self.lifetimes.reuse_grace
        )
        said = describe(seen, client.client_id)
        if said is not None:
            return _refused(client.client_id, refresh_token, said)
        return GatewayRefreshToken(
            token=refresh_token,
            client_id=seen.client_id,
            scopes=seen.scopes,
            expires_at=int(seen.expires_at),
            resource=seen.resource,
            subject=seen.principal_hash,
            grant_id=seen.grant_id,
        )

    async def exchange_refresh_token(
        self,
        client: OAuthClientInformationFull,
        refresh_token: GatewayRefreshToken,
        scopes: list[str],
    ) -> OAuthToken:
        """Rotate: the refresh token is used once for a new access and refresh token (the
        grant's scopes; ``scopes`` the SDK checked are a subset of them); presented again
        within ``oauth_refresh_grace_seconds`` of its rotation, a pair of its own
        (:func:`oauth_tokens.rotate`: claude.ai refreshes from two nodes at once,
        PrefectHQ/fastmcp#4264). A refusal is logged (info) with its grant, never the token.

        Raises:
            TokenError: ``invalid_grant`` with the refusal's description
                (:mod:`gateway.oauth.refusals`) when :meth:`load_refresh_token` refused it, or
                when the rotation fails (used by a racing request meanwhile: the grant is then
                revoked; expired; the grant revoked); ``invalid_target`` when the grant is
                bound to another resource.
        """
        if refresh_token.refusal is not None:
            raise _refusal(client.client_id, refresh_token.refusal)
        if not same_resource(refresh_token.resource, self.resource):
            raise TokenError("invalid_target", "the grant is for another resource")

        def rotate() -> oauth_tokens.Issued | Said:
            issued = oauth_tokens.rotate(refresh_token.token, self.lifetimes, self.clock())
            if issued is not None:
                return issued
            seen = oauth_tokens.refresh_check(
                refresh_token.token, self.clock(), self.lifetimes.reuse_grace
            )
            return describe(seen, client.client_id) or Said(
                "the refresh token could not be rotated; try again",
                f"grant {refresh_token.grant_id}: the rotation lost to a concurrent one",
                refresh_token.grant_id,
            )

        issued = await self._run(rotate)
        if isinstance(issued, Said):
            raise _refusal(client.client_id, issued)
        return _token(issued)

    # ------------------------------------------------------------------ access tokens

    def access_sync(self, token: str) -> AccessToken | None:
        """:meth:`load_access_token` for a caller on a thread inside a ledger connection
        context."""
        seen = oauth_tokens.access(token, self.clock())
        if seen is None:
            return None
        return AccessToken(
            token=token,
            client_id=seen.client_id,
            scopes=seen.scopes,
            expires_at=int(seen.expires_at),
            resource=seen.resource,
            subject=seen.principal_hash,
            claims=principal(seen, self.issuer),
        )

    async def load_access_token(self, token: str) -> AccessToken | None:
        """Who the bearer token speaks for, read from the ledger at every call (a revoked
        grant is refused at its next call; no cache), or None: unknown, expired, revoked.
        ``resource`` is the one the grant was bound to (for ``validate_token_resource``);
        ``claims`` are :func:`principal`'s (``tenant``, ``sites``, ``grant_id``,
        ``principal_hash``, ...); ``subject`` is the ``principal_hash``."""
        return await self._run(self.access_sync, token)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        """RFC 7009: revoking an access or a refresh token ends its grant's whole family
        (the SDK checked the token is the calling client's). Nothing for an unknown one.
        A refused refresh token's stand-in (:meth:`load_refresh_token`; the SDK asks for a
        refresh token first under ``token_type_hint=refresh_token``) is looked up as an
        access token, as the SDK would have next: it revokes only a live access token of
        the caller's."""
        if isinstance(token, GatewayRefreshToken) and token.refusal is not None:
            access = await self.load_access_token(token.token)
            if access is None or access.client_id != token.client_id:
                return
            token = access
        revoked = await self._run(
            oauth_tokens.revoke_token, token.token, token.client_id, self.clock()
        )
        if revoked:
            log.info("an OAuth grant was revoked by its client (RFC 7009)")

    # ------------------------------------------------------------------ the listener's seam

    def principal_for(self, token: str, resource: str | None = None) -> dict[str, Any] | None:
        """The principal of an OAuth access token for the MCP listener's token verifier
        (synchronous: call it on a thread inside ``database.connection_context()``), or None:
        unknown, expired, revoked, or (``resource`` given) issued for another resource. The
        dict is :func:`principal`'s. Notes the grant's last use at most once a minute."""
        seen = oauth_tokens.access(token, self.clock())
        if seen is None or (resource is not None and not same_resource(seen.resource, resource)):
            return None
        return principal(seen, self.issuer)


def _refused(client_id: str, token: str, said: Said) -> GatewayRefreshToken:
    """The stand-in for a refused refresh token presented by ``client_id`` (see
    :class:`GatewayRefreshToken`): the same for an unknown token and another client's."""
    return GatewayRefreshToken(
        token=token,
        client_id=client_id,
        scopes=list(grants.SCOPES),
        expires_at=None,
        grant_id=said.grant_id,
        refusal=said,
    )


def _refusal(client_id: str, said: Said) -> TokenError:
    """The ``invalid_grant`` error of a refused refresh (RFC 6749 §5.2), logged at info."""
    log.info("OAuth refresh refused for client %s: %s", client_id, said.logged)
    return TokenError("invalid_grant", said.description)


def _token(issued: oauth_tokens.Issued) -> OAuthToken:
    return OAuthToken(
        access_token=issued.access_token,
        expires_in=issued.expires_in,
        scope=" ".join(issued.scopes),
        refresh_token=issued.refresh_token,
    )
