"""The MCP authorization server (OAuth 2.1, issue 43): the ``mcp`` SDK's
``OAuthAuthorizationServerProvider`` backed by the ledger (:mod:`gateway.tenancy.grants`,
:mod:`gateway.tenancy.oauth_tokens`, :mod:`gateway.tenancy.oauth_clients`), clients named by
their metadata document (fetched through the egress guard) or registered dynamically, the one
resource and how clients spell it (:mod:`gateway.oauth.resources`), what the editor's
consent page shows of a request, and the page a browser gets when ``/authorize`` refuses
(:mod:`gateway.oauth.error_pages`, Jinja on the review site's templates). It knows no Flask;
the consent page is the review site's (:mod:`gateway.api`), the endpoints are served by the
MCP listener beside ``gateway serve``. docs/mcp.md tells how clients connect,
docs/security.md what it guarantees.
"""
