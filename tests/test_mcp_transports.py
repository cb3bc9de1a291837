"""``gateway mcp`` on the SDK's public API, every protocol revision it serves tested over the
real transports, and a terminal user's server (issue 42, items 3 to 5). The only timed claim
is the issue's own: Ctrl-C ends the stdio server within 2 s."""

from __future__ import annotations

import ast
import base64
import json
import os
import re
import signal
import subprocess
import time
import tomllib
from importlib.metadata import version
from pathlib import Path

import anyio
import mcp_support
import pytest
from fastmcp import Client
from fastmcp.client.transports import StdioTransport
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp.exceptions import ToolError
from mcp_support import HANDSHAKE
from mcp_support import MODERN
from mcp_support import TOOLS
from mcp_support import HttpMcp
from mcp_support import count_objects
from mcp_support import http_session
from mcp_support import mcp_command
from mcp_support import stdio_session
from support import SITE_NAME
from support import SQLITE_PASS_ONLY
from support import new_job_id
from support import op_key
from support import png_bytes

ROOT = Path(__file__).resolve().parent.parent
# The SDK's public modules gateway/mcp may import (its low-level server, transports, types);
# never mcp.server.mcpserver's utilities (ArgModelBase, FuncMetadata).
PUBLIC = {
    "mcp",
    "mcp.types",
    "mcp.types.version",
    "mcp.server.lowlevel",
    "mcp.server.stdio",
    "mcp.server.transport_security",
    "mcp.shared.exceptions",
}


def _imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_server_uses_the_sdks_public_api_pinned_to_the_tested_minor():
    used = set()
    for path in (ROOT / "gateway" / "mcp").glob("*.py"):
        used |= {m for m in _imported(path) if m == "mcp" or m.startswith("mcp.")}
    assert used and used <= PUBLIC, used - PUBLIC
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [pin] = [d for d in project["dependencies"] if re.match(r"mcp\b", d)]
    major, minor = (int(part) for part in version("mcp").split(".")[:2])
    assert pin == f"mcp>={major}.{minor},<{major}.{minor + 1}", pin


shared_proxy, gateway, gw_proxy = mcp_support.FIXTURES  # the module's gateway (mcp_support)


def _draft(job_id: str) -> dict:
    return {
        "job_id": job_id,
        "title": f"Revisions {job_id}",
        "content": "<p>Over every revision.</p>",
        "excerpt": "Revisions.",
        "seo": {"title": "R", "description": "Revisions", "focus_keyword": "mcp"},
    }


@pytest.mark.wordpress
@SQLITE_PASS_ONLY
@pytest.mark.parametrize("revision", [MODERN, HANDSHAKE])
def test_a_client_of_each_revision_over_stdio_and_http_gets_one_post(
    gateway, wp_site, tmp_path, revision
):
    """The ``mcp`` SDK's own client at 2026-07-28 (``server/discover``, stateless) and at
    2025-11-25 (``initialize``), over stdio and streamable HTTP against one job: both list the
    tools, the draft put over one transport is the stored receipt over the other, the job's
    resource reads alike, and a request key in ``_meta`` returns the first result."""
    job_id = new_job_id()
    server = HttpMcp(gateway.url, tmp_path)
    seen: dict = {}

    async def main():
        async with (
            stdio_session(gateway.url, gateway.token, tmp_path, revision=revision) as local,
            http_session(server.url, gateway.token, revision) as remote,
        ):
            for session in (local, remote):
                listed = (await session.list_tools()).tools
                assert sorted(t.name for t in listed) == sorted(TOOLS)
                assert all("$ref" not in json.dumps(t.input_schema) for t in listed)
            start = {"job_id": job_id, "site": SITE_NAME, "task_version": 1}
            assert not (await local.call_tool("start_job", start)).is_error
            first = await remote.call_tool("put_draft", _draft(job_id))
            again = await local.call_tool("put_draft", _draft(job_id))
            seen["drafts"] = [first, again]
            key = {"idempotencyKey": f"note-{job_id}"}
            block = {"job_id": job_id, "name": "note", "html": "<p>N</p>"}
            seen["blocks"] = [
                await local.call_tool("insert_block", block, meta=key),
                await remote.call_tool("insert_block", block, meta=key),
            ]
            seen["states"] = [
                json.loads((await s.read_resource(f"gateway://jobs/{job_id}")).contents[0].text)
                for s in (local, remote)
            ]

    try:
        anyio.run(main)
    finally:
        server.stop()
    first, again = seen["drafts"]
    assert not first.is_error and not again.is_error, (first.content, again.content)
    assert again.structured_content["replayed"] is True
    post_id = first.structured_content["answer"]["post_id"]
    assert again.structured_content["answer"]["post_id"] == post_id
    stored, replayed = seen["blocks"]
    replayed_key = "publishing-gateway/request-key-replayed"  # beside the SDK's own _meta
    assert not stored.is_error and replayed_key not in (stored.meta or {}), stored.content
    assert (replayed.meta or {}).get(replayed_key) is True, replayed.meta
    assert replayed.structured_content == stored.structured_content
    assert [s["job"]["post_id"] for s in seen["states"]] == [post_id, post_id]
    assert count_objects(wp_site, [op_key(job_id, "draft")])[op_key(job_id, "draft")] == 1


@pytest.mark.wordpress
@SQLITE_PASS_ONLY
def test_fastmcp_client_over_stdio_and_http(gateway, wp_site, tmp_path):
    """FastMCP's ``Client`` (it probes ``server/discover`` and speaks 2026-07-28) over both
    transports: the tools load, a call with the optional arguments ``null`` uploads one image,
    and a refusal is raised as a tool error, not a result."""
    job_id = new_job_id()
    server = HttpMcp(gateway.url, tmp_path)
    env = {"GATEWAY_URL": gateway.url, "GATEWAY_TOKEN": gateway.token}
    command, *args = mcp_command()
    image = base64.b64encode(png_bytes((10, 10, 200), 4)).decode()
    seen = []

    async def main():
        clients = (
            Client(StdioTransport(command, args, env=env)),
            Client(StreamableHttpTransport(server.url, auth=gateway.token)),
        )
        for client in clients:
            async with client:
                assert client.session.protocol_version == MODERN
                listed = await client.list_tools()
                assert sorted(t.name for t in listed) == sorted(TOOLS)
                start = {"job_id": job_id, "site": SITE_NAME, "task_version": 1}
                await client.call_tool("start_job", start)
                upload = {
                    "job_id": job_id, "slot": "hero", "content_base64": image,
                    "source_url": None, "filename": None, "alt_text": None, "caption": None,
                    "title": None, "idempotency_key": None,
                }  # fmt: skip
                seen.append((await client.call_tool("upload_media", upload)).structured_content)
                with pytest.raises(ToolError, match="validation-failed"):
                    await client.call_tool("upload_media", {**upload, "source_url": "x"})

    try:
        anyio.run(main)
    finally:
        server.stop()
    assert [s["answer"]["media_id"] for s in seen][0] == seen[1]["answer"]["media_id"]
    assert seen[1]["replayed"] is True
    hero = op_key(job_id, "media", "hero")
    assert count_objects(wp_site, [hero])[hero] == 1


NOWHERE = "http://127.0.0.1:9"  # the gateway is not asked: these tests need none


def test_ctrl_c_ends_the_stdio_server_within_2_s_with_stdin_held_open(tmp_path):
    """A terminal user's Ctrl-C (SIGINT) ends ``gateway mcp`` while its stdin is still open
    (the SDK's reader thread blocked on it): exit status 130, within 2 s of the signal."""
    env = {**os.environ, "GATEWAY_URL": NOWHERE, "GATEWAY_TOKEN": "not-asked"}
    with open(tmp_path / "mcp.log", "wb") as errors:
        server = subprocess.Popen(
            mcp_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=env
        )
    try:
        hello = {
            "jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": HANDSHAKE, "capabilities": {},
                       "clientInfo": {"name": "terminal", "version": "1"}},
        }  # fmt: skip
        server.stdin.write(json.dumps(hello).encode() + b"\n")
        server.stdin.flush()
        answer = json.loads(server.stdout.readline())  # serving, stdin open and idle
        assert answer["result"]["protocolVersion"] == HANDSHAKE, answer
        server.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 2.0
        status = server.wait(timeout=30)  # the generous bound; the deadline is the claim
        assert time.monotonic() <= deadline, "SIGINT took longer than 2 s"
        assert status == 130, status
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=10)
        server.stdin.close()
        server.stdout.close()


def test_the_http_transport_prints_its_url_and_revisions_on_start(tmp_path):
    server = HttpMcp(NOWHERE, tmp_path)
    try:
        printed = server.log_path.read_text()
    finally:
        server.stop()
    assert f"http://127.0.0.1:{server.port}/mcp" in printed, printed
    assert MODERN in printed and HANDSHAKE in printed and "2024-11-05" in printed, printed
