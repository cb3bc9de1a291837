"""The gateway's tools over the Model Context Protocol (``gateway mcp``; docs/mcp.md): an MCP
server built on the official ``mcp`` SDK's public low-level API (``mcp.server.lowlevel``), over
stdio and stateless streamable HTTP, for agents built anywhere (Claude Desktop and Code, the
OpenAI Agents SDK, FastMCP, Cursor, n8n's AI Agent node).

A face like :mod:`gateway.api`, but a *client* of the gateway's HTTP API: it holds no
WordPress credential and no ledger, so it may run on the agent's machine. It imports only
:mod:`gateway.core` (request schemas through :mod:`gateway.core.validation`, problem types),
which ``.importlinter`` enforces.

* :mod:`.client` - the HTTP calls to the gateway, and what a lost connection means;
* :mod:`.tools` - the job-keyed tools: schemas, annotations, results and errors;
* :mod:`.server` - the MCP server: tools, resources, stdio and streamable HTTP (bearer
  tokens passed through, Origin and Host checked).
"""
