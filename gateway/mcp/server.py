"""``gateway mcp``: the MCP server (official ``mcp`` SDK, ``mcp.server.mcpserver.MCPServer``)
over stdio or stateless streamable HTTP (docs/mcp.md).

* **stdio** (local clients): one gateway token, from the environment (``GATEWAY_TOKEN``); local
  image files may be uploaded from the folders the operator allows (``--media-root``).
* **streamable HTTP** (remote clients): stateless (``stateless_http``: no session is kept, any
  process may answer any request), JSON answers, binds 127.0.0.1 unless told otherwise, checks
  Host and Origin whatever the bind address (the SDK's ``TransportSecuritySettings``), and
  every request must carry the caller's own gateway token (``Authorization: Bearer``), which is
  checked with the gateway (401 otherwise) and passed through on every call, so each caller
  sees only its tenant. No OAuth: put it behind a TLS proxy.

Tools (:mod:`gateway.mcp.tools`) are registered with input schemas from the gateway's JSON
Schema files and an ``outputSchema``; their arguments are validated against those schemas here
(and again by the gateway), not by pydantic models.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult
from pydantic import ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.core import listening
from gateway.core import validation
from gateway.core.exceptions import PROBLEM_BASE
from gateway.core.version import VERSION
from gateway.mcp import tools
from gateway.mcp.client import GatewayAPI
from gateway.mcp.client import Problem

log = logging.getLogger(__name__)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
TOKEN_CHECK_SECONDS = 60.0  # a token the gateway accepted is not asked about again for this long
INSTRUCTIONS = (
    "Publishing Gateway: exactly-once WordPress writes for one job at a time. Every write is "
    "keyed by job_id, task version, action and slot, never by your call: calling a tool again "
    "with the same arguments is always safe and writes nothing twice. Read where a job stands "
    "first (the resource gateway://jobs/{job_id}, or get_job), then continue: start_job, "
    "upload_media, put_draft, insert_block, verify, request_approval. To change content "
    "already written, bump the task version (start_job). After outcome-unknown or a lost "
    "answer, call recover and then the same tool with the same arguments. Publishing needs an "
    "editor's approval: no tool publishes."
)


def _unauthenticated(detail: str) -> Problem:
    return Problem(
        {
            "type": PROBLEM_BASE + "unauthenticated",
            "title": "Missing or unknown token",
            "status": 401,
            "detail": detail,
            "retryable": False,
        }
    )


class Tokens:
    """Where a call's gateway token comes from: one ``fixed`` token (stdio), or the bearer
    token of the HTTP request the call came in (streamable HTTP; never a fixed one)."""

    def __init__(self, fixed: str | None = None):
        self.fixed = fixed

    def of(self, ctx: Context) -> str:
        """The token for the call in ``ctx``.

        Raises:
            Problem: ``unauthenticated`` - an HTTP request without a bearer token.
        """
        if self.fixed is not None:
            return self.fixed
        request = ctx.request_context.request
        header = request.headers.get("authorization", "") if request is not None else ""
        token = header[7:].strip() if header.startswith("Bearer ") else ""
        if not token:
            raise _unauthenticated("send 'Authorization: Bearer <gateway token>'")
        return token


class _Arguments(ArgModelBase):
    """A tool's arguments as one dict: they are checked against the tool's JSON Schema
    (:meth:`gateway.mcp.tools.Runner.run`), not by a pydantic model."""

    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)

    def model_dump_one_level(self) -> dict:
        return {"arguments": dict(self.model_extra or {})}


def _meta_key(ctx: Context) -> str | None:
    """The client's request key from the ``tools/call`` request's ``_meta``, if any."""
    meta = ctx.request_context.meta or {}
    key = meta.get(tools.REQUEST_KEY_META) if hasattr(meta, "get") else None
    return None if key is None else str(key)


def _tool(spec: tools.Spec, runner: tools.Runner, tokens: Tokens) -> Tool:
    def run(arguments: dict, ctx: Context) -> CallToolResult:
        try:
            return runner.run(spec, tokens.of(ctx), arguments, _meta_key(ctx))
        except Problem as problem:
            raise tools.tool_error(problem) from None

    return Tool(
        fn=run,
        name=spec.name,
        title=spec.title,
        description=spec.description,
        parameters=runner.schema_of(spec),
        fn_metadata=FuncMetadata(arg_model=_Arguments, output_schema=tools.OUTPUT_SCHEMA),
        is_async=False,  # requests: run in a worker thread by the SDK
        context_kwarg="ctx",
        annotations=spec.annotations,
    )


def _resource_error(problem: Problem) -> ResourceError:
    body = {**problem.body, "next_step": tools.next_step(problem.slug, problem.body)}
    text = json.dumps(body, ensure_ascii=False)
    if problem.slug in ("job-not-found", "validation-failed"):
        return ResourceNotFoundError(text)
    return ResourceError(text)


def read_job(api: GatewayAPI, token: str, job_id: str) -> dict:
    """``gateway://jobs/{job_id}``: ``{"job": GET /v1/jobs/{job_id}, "verification": GET
    .../verification, or None with ``verification_problem`` when there is nothing to verify
    or WordPress cannot be read}``.

    Raises:
        Problem: the job cannot be read (unknown to this token's tenant, a malformed id).
    """
    if not validation.JOB_ID.fullmatch(job_id):
        raise tools._local_problem(f"job_id must match {validation.JOB_ID.pattern}", "/job_id")
    job = api.call(token, "GET", f"/v1/jobs/{job_id}").body
    try:
        checked = api.call(token, "GET", f"/v1/jobs/{job_id}/verification").body
        return {"job": job, "verification": checked}
    except Problem as problem:
        return {"job": job, "verification": None, "verification_problem": problem.body}


def build(api: GatewayAPI, tokens: Tokens, roots: tuple[Path, ...] = ()) -> MCPServer:
    """The MCP server: every tool of :data:`gateway.mcp.tools.SPECS` and the resource
    ``gateway://jobs/{job_id}``, calling the gateway at ``api`` with ``tokens``."""
    runner = tools.Runner(api, roots)
    server = MCPServer(
        "publishing-gateway",
        title="Publishing Gateway",
        version=VERSION,
        instructions=INSTRUCTIONS,
        tools=[_tool(spec, runner, tokens) for spec in tools.SPECS],
        log_level="WARNING",
    )

    @server.resource(
        "gateway://jobs/{job_id}",
        name="job",
        title="A job's state and verification",
        description="The job (task version, phase, status, ledger operations, reviews, "
        "approvals) and its post's verification by read-back: read it before acting.",
        mime_type="application/json",
    )
    def job_resource(job_id: str, ctx: Context) -> str:
        try:
            return json.dumps(read_job(api, tokens.of(ctx), job_id), ensure_ascii=False)
        except Problem as problem:
            raise _resource_error(problem) from None

    return server


def serve_stdio(gateway_url: str, token: str, roots: tuple[Path, ...] = ()) -> None:
    """Serve over stdio with one gateway ``token`` until the client closes the pipe."""
    build(GatewayAPI(gateway_url), Tokens(token), roots).run("stdio")


def transport_security(
    host: str, allow_hosts: tuple[str, ...] = (), allow_origins: tuple[str, ...] = ()
) -> TransportSecuritySettings:
    """The Host and Origin checks for a server bound to ``host``: the loopback names (any
    port) when bound to a loopback address, else exactly ``allow_hosts``; Origins: the
    loopback ones and ``allow_origins``. A request without an Origin (not a browser) passes.

    Raises:
        ValueError: bound to a non-loopback address without ``allow_hosts``.
    """
    hosts = list(allow_hosts)
    if host in LOOPBACK:
        hosts += ["127.0.0.1:*", "localhost:*", "[::1]:*"]
    elif not hosts:
        raise ValueError(
            f"bound to {host}: say which Host names clients use (--allow-host, e.g. "
            "mcp.example.com, as the TLS proxy in front forwards it)"
        )
    origins = ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", *allow_origins]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


class BearerGate:
    """ASGI middleware in front of the MCP endpoint: Host and Origin first (the SDK's
    checks), then a bearer token the gateway knows (401 problem+json otherwise; a token
    accepted once is not asked about again for :data:`TOKEN_CHECK_SECONDS`)."""

    def __init__(self, app, api: GatewayAPI, security: TransportSecuritySettings):
        self.app = app
        self.api = api
        self.checks = TransportSecurityMiddleware(security)
        self.known: dict[str, float] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        refused = await self.checks.validate_request(request, is_post=False)
        if refused is None:
            refused = await self._token_refusal(request.headers.get("authorization", ""))
        if refused is not None:
            return await refused(scope, receive, send)
        return await self.app(scope, receive, send)

    async def _token_refusal(self, header: str):
        token = header[7:].strip() if header.startswith("Bearer ") else ""
        if not token:
            return _problem_response(
                _unauthenticated("send 'Authorization: Bearer <gateway token>'")
            )
        digest = hashlib.sha256(token.encode()).hexdigest()
        if self.known.get(digest, 0) > time.monotonic():
            return None
        try:
            valid = await anyio.to_thread.run_sync(self.api.token_valid, token)
        except Problem as problem:
            return _problem_response(problem)
        if not valid:
            return _problem_response(_unauthenticated("the gateway does not know this token"))
        if len(self.known) > 1024:
            self.known.clear()
        self.known[digest] = time.monotonic() + TOKEN_CHECK_SECONDS
        return None


def _problem_response(problem: Problem) -> JSONResponse:
    status = int(problem.body.get("status") or 503)
    headers = {"WWW-Authenticate": 'Bearer realm="publishing-gateway"'} if status == 401 else {}
    return JSONResponse(
        problem.body, status_code=status, headers=headers, media_type="application/problem+json"
    )


def http_app(
    gateway_url: str,
    host: str = "127.0.0.1",
    path: str = "/mcp",
    allow_hosts: tuple[str, ...] = (),
    allow_origins: tuple[str, ...] = (),
):
    """The ASGI app of the streamable HTTP server (stateless, JSON answers) behind
    :class:`BearerGate`.

    Raises:
        ValueError: see :func:`transport_security`.
    """
    api = GatewayAPI(gateway_url)
    security = transport_security(host, allow_hosts, allow_origins)
    app = build(api, Tokens()).streamable_http_app(
        streamable_http_path=path,
        stateless_http=True,
        json_response=True,
        transport_security=security,
        host=host,
    )
    return BearerGate(app, api, security)


def serve_http(gateway_url: str, host: str, port: int, **options) -> None:
    """Serve streamable HTTP with uvicorn until stopped (SIGINT, SIGTERM).

    Raises:
        ValueError: see :func:`transport_security`.
        PortInUse: something listens on ``host:port`` already (uvicorn would log it and
            exit 1; :mod:`gateway.core.listening`).
    """
    import uvicorn

    app = http_app(gateway_url, host, **options)
    listening.refuse_busy_port(host, port)
    uvicorn.run(app, host=host, port=port, log_level="warning")
