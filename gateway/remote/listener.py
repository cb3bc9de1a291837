"""The remote MCP listener: the gateway's MCP tools at ``<public>/mcp`` as an OAuth 2.1
resource server (MCP 2026-07-28 and 2025-11-25 "Authorization"), on the ``mcp`` SDK's public
``Server.streamable_http_app`` (stateless, JSON answers, its bearer check and its Protected
Resource Metadata, RFC 9728, at ``/.well-known/oauth-protected-resource/mcp``), served by
uvicorn in a child process of ``gateway serve`` (:class:`gateway.server.Background` starts it,
restarts it when it dies and stops it).

Its tools are :func:`gateway.mcp.server.build`'s, one code path with ``gateway mcp``; they
call the gateway's own app (:func:`gateway.app.create_app`, made once in this process) in
process, as the principal the bearer token stands for (:class:`Grants`), so no token is passed
on and validation, request keys, shares, rate limits and logs are the HTTP API's own.

Bearer tokens accepted (:class:`Verifier`): a gateway token of the tenant (first-party, for
headless clients), and an access token of an editor's OAuth grant
(:func:`authorization_server`: the gateway's own authorization server, :mod:`gateway.oauth`,
whose routes this listener serves too). Every principal here is ``tools_only``.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from collections.abc import Sequence

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings

from gateway.core import config as config_module
from gateway.core import logs
from gateway.core import mcp_listen
from gateway.ledger.db import database
from gateway.mcp import server as mcp_server
from gateway.mcp.client import GatewayAPI
from gateway.mcp.client import WsgiTransport
from gateway.oauth import routes as oauth_routes
from gateway.oauth.provider import GatewayProvider
from gateway.remote.address_gate import AddressGate
from gateway.tenancy import tokens
from gateway.tenancy.tokens import Principal

log = logging.getLogger(__name__)
#: The scope every token of this resource carries (the tools: drafts, never publishing); the
#: metadata lists it (``scopes_supported``) and the bearer check requires it.
SCOPE = "gateway:tools"
CLAIM = "gateway_principal"  # the AccessToken claim carrying the principal's fields

OAuthHook = Callable[[str], Principal | None]


def no_oauth(_token: str) -> Principal | None:
    """The default ``oauth_principal`` hook: no OAuth token is known."""
    return None


def claims_of(principal: Principal) -> dict:
    """The principal's fields as an ``AccessToken`` claim (JSON: ``sites`` sorted or None);
    its ``token_hash`` is a SHA-256, never a token."""
    return {
        CLAIM: {
            "tenant": principal.tenant,
            "role": principal.role,
            "name": principal.name,
            "token_hash": principal.token_hash,
            "sites": None if principal.sites is None else sorted(principal.sites),
            "tools_only": principal.tools_only,
        }
    }


def principal_of(access: AccessToken) -> Principal:
    """The principal :func:`claims_of` put in ``access``, always ``tools_only``.

    Raises:
        KeyError: ``access`` does not carry :data:`CLAIM` (not verified by :class:`Verifier`).
    """
    fields = dict(access.claims[CLAIM])
    sites = fields.pop("sites")
    fields["tools_only"] = True
    return Principal(**fields, sites=None if sites is None else frozenset(sites))


class Verifier:
    """The SDK's ``TokenVerifier``: a bearer token to an ``AccessToken`` whose ``resource`` is
    ``resource`` (this listener's ``/mcp`` URL; the SDK's ``validate_token_resource`` compares
    it, RFC 8707), ``client_id`` the token's name, ``subject`` its tenant, ``scopes``
    [:data:`SCOPE`], ``claims`` the principal (:func:`claims_of`); its ``token`` field holds
    the principal's ``token_hash``, never the token. Looked up on every request (a revoked
    token or grant is refused at once): a gateway token first
    (:func:`gateway.tenancy.tokens.authenticate`), then ``oauth_principal``, both in a worker
    thread inside a ledger connection."""

    def __init__(self, resource: str, oauth_principal: OAuthHook = no_oauth):
        self.resource = resource
        self.oauth_principal = oauth_principal

    def _principal(self, token: str) -> Principal | None:
        with database.connection_context():
            return tokens.authenticate(token) or self.oauth_principal(token)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The access the bearer ``token`` gives, or None (unknown, revoked, expired)."""
        if not token.strip():
            return None
        principal = await anyio.to_thread.run_sync(self._principal, token.strip())
        if principal is None:
            return None
        return AccessToken(
            token=principal.token_hash,
            client_id=principal.name,
            scopes=[SCOPE],
            resource=self.resource,
            subject=principal.tenant,
            claims=claims_of(principal),
        )


class Grants:
    """Where a tool call's caller comes from here: the principal of the request's verified
    token (the SDK's ``get_access_token()``), for :func:`gateway.mcp.server.build`."""

    def of(self, ctx) -> Principal:
        """The caller of the current request.

        Raises:
            Problem: ``unauthenticated`` - no verified token (the bearer check lets none
                through; a guard all the same).
        """
        access = get_access_token()
        if access is None or not (access.claims or {}).get(CLAIM):
            raise mcp_server._unauthenticated("send 'Authorization: Bearer <token>'")
        return principal_of(access)


def asgi_app(
    cfg,
    gateway_app,
    oauth_principal: OAuthHook = no_oauth,
    auth_server_provider=None,
    routes: Sequence = (),
):
    """The listener's ASGI app: the SDK's streamable HTTP app at ``/mcp`` (stateless, JSON),
    Host and Origin checked (:func:`gateway.mcp.server.transport_security`: the loopback
    names when bound there, and the public URL's host), bearer tokens through
    :class:`Verifier` (401 with ``WWW-Authenticate: Bearer ... resource_metadata="..."``
    otherwise), the Protected Resource Metadata naming the issuer, the authorization
    server's routes when ``auth_server_provider`` is given, ``routes`` added; all but
    ``/mcp`` behind :class:`gateway.remote.address_gate.AddressGate`. ``gateway_app``: the
    WSGI app the tools call.

    Raises:
        ConfigError: see :func:`gateway.core.mcp_listen.of`; or no listener configured.
    """
    where = mcp_listen.of(cfg)
    if where is None:
        raise config_module.ConfigError("GATEWAY_MCP_LISTEN is empty: no listener to build")
    api = GatewayAPI(WsgiTransport(gateway_app))
    server = mcp_server.build(api, Grants())
    security = mcp_server.transport_security(
        where.host, allow_hosts=(where.public_host,), allow_origins=(where.public_origin,)
    )
    app = server.streamable_http_app(
        streamable_http_path=mcp_listen.MCP_PATH,
        stateless_http=True,
        json_response=True,
        transport_security=security,
        host=where.host,
        auth=AuthSettings(
            issuer_url=where.issuer,
            resource_server_url=where.resource,
            validate_token_resource=True,
            required_scopes=[SCOPE],
        ),
        token_verifier=Verifier(where.resource, oauth_principal),
        auth_server_provider=auth_server_provider,
        custom_starlette_routes=list(routes),
    )
    return AddressGate(app, cfg, token_path=mcp_listen.MCP_PATH)


def authorization_server(cfg, where, review_url: str) -> tuple[GatewayProvider, OAuthHook]:
    """The gateway's own authorization server for this listener (issuer ``where.issuer``,
    consent page on the review site at ``review_url``: the public address behind the TLS
    proxy, the API's own without one, :func:`gateway.core.mcp_listen.review_base`) and the
    ``oauth_principal`` hook its access tokens go through: a live grant's tenant, its sites,
    its stable caller key (``principal_hash``) as the principal's ``token_hash``; only tokens
    issued for
    ``where.resource`` (RFC 8707). The routes are mounted by the caller
    (:func:`gateway.oauth.routes.routes`), not by the SDK's ``auth_server_provider``, so that
    the gateway's wrappers stand in front of them."""
    provider = GatewayProvider(cfg, where.issuer, review_url, resource_url=where.resource)

    def grant_principal(token: str) -> Principal | None:
        seen = provider.principal_for(token, where.resource)
        if seen is None:
            return None
        return Principal(
            tenant=seen["tenant"],
            role="workflow",
            name=f"oauth-grant-{seen['grant_id']}",
            token_hash=seen["principal_hash"],
            sites=frozenset(seen["sites"]),
            tools_only=True,
        )

    return provider, grant_principal


def main(argv: Sequence[str] | None = None) -> None:
    """The listener process (``python -m gateway.remote.listener --log-format json``): the
    configuration, the gateway's app (ledger bound, checked), then uvicorn on
    ``GATEWAY_MCP_LISTEN`` until SIGTERM or SIGINT.

    Raises:
        ConfigError, LedgerError: as :func:`gateway.app.create_app`; see :func:`asgi_app`.
    """
    import uvicorn

    from gateway.app import create_app

    parser = argparse.ArgumentParser(prog="gateway-mcp-listener")
    parser.add_argument("--log-format", choices=logs.FORMATS, default="json")
    parser.add_argument("--review-url", help="where editors reach the review site")
    options = parser.parse_args(argv)
    logs.configure(options.log_format)
    cfg = config_module.load()
    where = mcp_listen.of(cfg)
    if where is None:
        raise config_module.ConfigError("GATEWAY_MCP_LISTEN is empty: no listener to start")
    provider, hook = authorization_server(cfg, where, options.review_url or where.issuer)
    app = asgi_app(cfg, create_app(), hook, routes=oauth_routes.routes(provider))
    log.info("remote MCP listener at %s (bound to %s:%s)", where.resource, where.host, where.port)
    uvicorn.Server(server_config(app, where)).run()


def server_config(app, where: mcp_listen.Listener):
    """uvicorn's configuration for the listener (a ``uvicorn.Config``): bound to
    ``where.host:where.port``, its lines through the gateway's format, no access log (a path
    may carry OAuth parameters, and each tool call writes the API's own request line), and
    **no forwarded headers** (``proxy_headers=False``): uvicorn would otherwise take the
    client address and scheme from ``X-Forwarded-For``/``-Proto`` of any loopback peer
    (its default ``forwarded_allow_ips``), although ``GATEWAY_PROXY_HOPS`` is unset.
    :class:`gateway.remote.address_gate.AddressGate` reads ``X-Forwarded-For`` as
    ``GATEWAY_PROXY_HOPS`` says; nothing reads the scheme (every URL the listener names is
    built from ``GATEWAY_PUBLIC_URL``). ``timeout_keep_alive`` (5 s) and h11's 16 KiB cap on
    an incomplete request head stay uvicorn's defaults."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=where.host,
        port=where.port,
        log_level="warning",
        log_config=None,
        access_log=False,
        proxy_headers=False,
    )


if __name__ == "__main__":  # pragma: no cover - run by gateway serve
    main()
