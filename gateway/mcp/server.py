"""``gateway mcp``: the MCP server, on the official ``mcp`` SDK's public low-level API
(``mcp.server.lowlevel.Server`` with ``on_list_tools``, ``on_call_tool``, ``on_list_resources``,
``on_list_resource_templates``, ``on_read_resource``; ``types.Tool(input_schema=...,
output_schema=...)``; ``stdio_server()``; ``Server.streamable_http_app()``), over stdio or
stateless streamable HTTP (docs/mcp.md).

* **stdio** (local clients): one gateway token, from the environment (``GATEWAY_TOKEN``); local
  image files may be uploaded from the folders the operator allows (``--media-root``). Ctrl-C
  (SIGINT) or SIGTERM ends it at once, even with stdin still open: the process holds no state.
* **streamable HTTP** (remote clients): stateless (``stateless_http``: no session is kept, any
  process may answer any request), JSON answers, binds 127.0.0.1 unless told otherwise, checks
  Host and Origin whatever the bind address (the SDK's ``TransportSecuritySettings``), and
  every request must carry the caller's own gateway token (``Authorization: Bearer``), which is
  checked with the gateway (401 otherwise) and passed through on every call, so each caller
  sees only its tenant. No OAuth: put it behind a TLS proxy. It prints its URL and the
  protocol revisions it serves when it starts.

Protocol revisions (the SDK's, :data:`REVISIONS`): 2026-07-28 (stateless, ``server/discover``)
and, through ``initialize``, 2025-11-25 back to 2024-11-05, over both transports.

Tools (:mod:`gateway.mcp.tools`) are listed with their advertised input schemas and an
``outputSchema``; their arguments are validated against the gateway's JSON Schema files here
(and again by the gateway). Their calls are synchronous (``requests``) and run in worker
threads (``anyio.to_thread``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path

import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS
from mcp.types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import JSONResponse

from gateway.core import listening
from gateway.core import tool_schemas
from gateway.core import validation
from gateway.core.exceptions import PROBLEM_BASE
from gateway.core.version import VERSION
from gateway.mcp import paging
from gateway.mcp import tools
from gateway.mcp.client import Caller
from gateway.mcp.client import GatewayAPI
from gateway.mcp.client import Problem

log = logging.getLogger(__name__)
LOOPBACK = ("127.0.0.1", "localhost", "::1")
TOKEN_CHECK_SECONDS = 60.0  # a token the gateway accepted is not asked about again for this long
JOB_RESOURCE = "gateway://jobs/{job_id}"
# The revisions served: the stateless one (server/discover), then the initialize ones, newest
# first (the SDK's, over both transports; docs/mcp.md "Protocol revisions").
REVISIONS = (*reversed(MODERN_PROTOCOL_VERSIONS), *reversed(HANDSHAKE_PROTOCOL_VERSIONS))
EXIT_GRACE_SECONDS = 0.5  # after a signal: how long the served requests get to be cancelled
INSTRUCTIONS = (
    "Publishing Gateway: exactly-once WordPress writes for one job at a time. Every write is "
    "keyed by job_id, task version, action and slot, never by your call: calling a tool again "
    "with the same arguments is always safe and writes nothing twice. Read where a job stands "
    "first (the resource gateway://jobs/{job_id}, or get_job), then continue: start_job, "
    "upload_media, put_draft, insert_block, verify, request_approval. To change content "
    "already written, bump the task version (start_job). After outcome-unknown or a lost "
    "answer, call recover and then the same tool with the same arguments. Leave out the "
    "optional arguments you do not mean (or send null). What a result leaves out (a long "
    "text, a list's further items, a large object) is a stub with its sha256 and read_with: "
    "read it with read_text. Publishing needs an editor's approval: no tool publishes."
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
    token of the HTTP request the call came in (streamable HTTP; never a fixed one). The
    listener of ``gateway serve`` passes its own kind instead (any object whose ``of(ctx)``
    gives a caller: :class:`gateway.remote.listener.Grants`, principals)."""

    def __init__(self, fixed: str | None = None):
        self.fixed = fixed

    def of(self, ctx) -> str:
        """The token for the request of ``ctx`` (the SDK's ``ServerRequestContext``: its
        ``request`` is the HTTP request over streamable HTTP, None over stdio).

        Raises:
            Problem: ``unauthenticated`` - an HTTP request without a bearer token.
        """
        if self.fixed is not None:
            return self.fixed
        request = ctx.request
        header = request.headers.get("authorization", "") if request is not None else ""
        token = header[7:].strip() if header.startswith("Bearer ") else ""
        if not token:
            raise _unauthenticated("send 'Authorization: Bearer <gateway token>'")
        return token


def _meta_key(ctx) -> str | None:
    """The client's request key from the ``tools/call`` request's ``_meta``, if any; a
    placeholder (:data:`gateway.core.tool_schemas.PLACEHOLDERS`: ``"null"``, ``""``) is
    none, as in the arguments (docs/mcp.md, "Request keys")."""
    meta = ctx.meta or {}
    key = meta.get(tools.REQUEST_KEY_META) if hasattr(meta, "get") else None
    return None if key is None or str(key) in tool_schemas.PLACEHOLDERS else str(key)


def _resource_error(problem: Problem) -> MCPError:
    """A resource that cannot be read: "not found" (-32602, as the SDK's own resources say
    it) for a job this token's tenant does not have or a malformed id, else -32603; the
    message is the problem's JSON with its ``next_step``."""
    body = {**problem.body, "next_step": tools.next_step(problem.slug, problem.body)}
    text = json.dumps(body, ensure_ascii=False)
    code = (
        types.INVALID_PARAMS
        if problem.slug in ("job-not-found", "validation-failed")
        else (types.INTERNAL_ERROR)
    )
    return MCPError(code=code, message=text)


def read_job(api: GatewayAPI, token: Caller, job_id: str) -> dict:
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


def fitted_job(job: dict, job_id: str) -> dict:
    """The job resource's JSON (:func:`read_job`) sized for clients with caps: its long texts,
    lists and objects stubs and markers as far as needed (:func:`gateway.mcp.paging.fitted`;
    read them with ``read_text``), the resource as sent (its JSON text, escaped once more in
    the message) under the bound."""

    def size(body) -> int:
        sent = json.dumps(json.dumps(body, ensure_ascii=False), ensure_ascii=False)
        return len(sent.encode())

    return paging.fitted(job, job_id, size)


def build(api: GatewayAPI, tokens: Tokens, roots: tuple[Path, ...] = ()) -> Server:
    """The MCP server: every tool of :data:`gateway.mcp.tools.SPECS` and the resource
    template ``gateway://jobs/{job_id}``, calling the gateway at ``api`` as the caller
    ``tokens.of(ctx)`` gives for each request (a token, or a principal in process)."""
    runner = tools.Runner(api, roots)
    specs = {spec.name: spec for spec in tools.SPECS}
    listed = types.ListToolsResult(
        tools=[
            types.Tool(
                name=spec.name,
                title=spec.title,
                description=spec.description,
                input_schema=runner.schema_of(spec),
                output_schema=tools.OUTPUT_SCHEMA,
                annotations=spec.annotations,
            )
            for spec in tools.SPECS
        ]
    )
    template = types.ResourceTemplate(
        name="job",
        title="A job's state and verification",
        uri_template=JOB_RESOURCE,
        description="The job (task version, phase, status, ledger operations, reviews, "
        "approvals) and its post's verification by read-back: read it before acting.",
        mime_type="application/json",
    )

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return listed

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        spec = specs.get(params.name)
        if spec is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"no tool {params.name!r}")
        arguments = dict(params.arguments or {})
        try:
            token = tokens.of(ctx)
            return await anyio.to_thread.run_sync(
                runner.run, spec, token, arguments, _meta_key(ctx)
            )
        except Problem as problem:
            return tools.error_result(problem)

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])  # one per job: the template

    async def list_templates(ctx, params) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(ctx, params: types.ReadResourceRequestParams):
        uri = str(params.uri)
        prefix = JOB_RESOURCE.removesuffix("{job_id}")
        if not uri.startswith(prefix):
            raise MCPError(code=types.INVALID_PARAMS, message=f"no resource {uri!r}")
        try:
            job = await anyio.to_thread.run_sync(
                read_job, api, tokens.of(ctx), uri.removeprefix(prefix)
            )
        except Problem as problem:
            raise _resource_error(problem) from None
        text = json.dumps(fitted_job(job, uri.removeprefix(prefix)), ensure_ascii=False)
        contents = types.TextResourceContents(uri=uri, mime_type="application/json", text=text)
        return types.ReadResourceResult(contents=[contents])

    return Server(
        "publishing-gateway",
        version=VERSION,
        title="Publishing Gateway",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
    )


def serve_stdio(gateway_url: str, token: str, roots: tuple[Path, ...] = ()) -> None:
    """Serve over stdio with one gateway ``token`` until the client closes the pipe, or until
    SIGINT (Ctrl-C) or SIGTERM: then the served requests are cancelled and the process exits
    (status 130 or 143) within :data:`EXIT_GRACE_SECONDS`, even while the SDK's stdin reader
    still waits on an open pipe (its worker thread cannot be interrupted). The process holds
    no state: a write in flight is the gateway's to finish, and ``recover`` tells its outcome.
    """
    received = anyio.run(_stdio, build(GatewayAPI(gateway_url), Tokens(token), roots))
    if received is not None:
        sys.exit(128 + received)


async def _stdio(server: Server) -> int | None:
    """Serve until stdin closes (None) or a signal came and serving ended in time (its
    number); past :data:`EXIT_GRACE_SECONDS` after a signal the process exits itself."""
    serving = anyio.CancelScope()
    received: list[int] = []
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(_exit_on_signal, serving, received)
        with serving:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
        tasks.cancel_scope.cancel()  # serving ended: no signal to wait for
    return received[0] if received else None


async def _exit_on_signal(serving: anyio.CancelScope, received: list[int]) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            received.append(int(signum))
            serving.cancel()
            await anyio.sleep(EXIT_GRACE_SECONDS)  # cancelled first if serving ends in time
            sys.stderr.flush()  # the SDK's stdin reader is still blocked: do not wait for it
            os._exit(128 + signum)


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
    print(started_line(host, port, options.get("path", "/mcp")), file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def started_line(host: str, port: int, path: str) -> str:
    """What ``gateway mcp --transport http`` prints when it starts: its URL and the protocol
    revisions it serves (:data:`REVISIONS`)."""
    where = f"[{host}]" if ":" in host else host
    return (
        f"gateway mcp: MCP over streamable HTTP at http://{where}:{port}{path} "
        f"(revisions {', '.join(REVISIONS)}; Authorization: Bearer <gateway token>)"
    )
