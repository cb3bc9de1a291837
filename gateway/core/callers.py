"""How a caller reaches the HTTP API besides an ``Authorization: Bearer`` token, and what a
caller limited to the MCP tools may call (docs/api.md "Callers limited to sites or to the
tools").

* :data:`PRINCIPAL_ENVIRON` - the WSGI environ key under which an in-process caller (the
  remote MCP listener, :mod:`gateway.remote`) hands the API its caller's principal instead of
  a token. A remote client cannot set it: HTTP headers reach the environ only as ``HTTP_*``
  keys (PEP 3333), and no key holds a dot there.
* :data:`TOOL_ROUTES` - the ``(method, Flask rule)`` of every route the eight MCP tools call
  (:data:`gateway.mcp.tools.SPECS`; a test checks the two agree): all a ``tools_only``
  principal may call. Approving and publishing are not among them.
"""

from __future__ import annotations

PRINCIPAL_ENVIRON = "gateway.principal"

TOOL_ROUTES: frozenset[tuple[str, str]] = frozenset(
    {
        ("PUT", "/v1/jobs/<job_id>"),  # start_job
        ("GET", "/v1/jobs/<job_id>"),  # get_job (and the resource gateway://jobs/{job_id})
        ("PUT", "/v1/jobs/<job_id>/media/<slot>"),  # upload_media
        ("PUT", "/v1/jobs/<job_id>/draft"),  # put_draft
        ("PUT", "/v1/jobs/<job_id>/blocks/<name>"),  # insert_block
        ("GET", "/v1/jobs/<job_id>/verification"),  # verify
        ("POST", "/v1/jobs/<job_id>/approval-requests"),  # request_approval
        ("POST", "/v1/jobs/<job_id>/recover"),  # recover
    }
)


def flask_rule(path: str) -> str:
    """A tool spec's path (``/v1/jobs/{job_id}/media/{slot}``) as its Flask rule
    (``/v1/jobs/<job_id>/media/<slot>``)."""
    return path.replace("{", "<").replace("}", ">")
