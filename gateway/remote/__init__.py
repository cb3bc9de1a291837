"""The remote MCP listener ``gateway serve`` starts beside its WSGI workers (issue 43;
docs/mcp.md "Remote MCP from gateway serve"): an ASGI app served by uvicorn in a child
process, above :mod:`gateway.app` in the layers since its tools call the gateway's own app in
process (a WSGI call with the caller's principal in the environ: no token is passed on).

* :mod:`.settings` - where it listens and which URLs it names (no SDK import: the main
  process of ``gateway serve`` reads it);
* :mod:`.address_gate` - per-client-address limits for every path that takes no token;
* :mod:`.listener` - the app (the MCP SDK's streamable HTTP app, an OAuth 2.1 resource
  server) and the process's entry point.
"""
