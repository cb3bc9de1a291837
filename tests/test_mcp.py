"""The gateway's tools over MCP (docs/mcp.md), driven by the official SDK's own clients
(``stdio_client`` / ``streamable_http_client`` + ``ClientSession``) against ``gateway mcp``, a
real ``gateway serve`` and the real test WordPress (behind the fault proxy, which counts the
requests that reach it). Run once, in the SQLite pass: the MCP server keeps no ledger of its
own, and the gateway's ledger code it calls is the same on every database."""

from __future__ import annotations

import base64
import json
import subprocess
import time

import anyio
import mcp_support
import pytest
import requests
from mcp_support import FOUR
from mcp_support import TOOLS
from mcp_support import HttpMcp
from mcp_support import McpGateway
from mcp_support import count_objects
from mcp_support import http_session
from mcp_support import kill_stdio_server
from mcp_support import problem_of
from mcp_support import slug
from mcp_support import stdio_session
from support import SITE_NAME
from support import SQLITE_PASS_ONLY
from support import gateway_command
from support import new_job_id
from support import op_key
from support import png_bytes
from support import site_runtime

from gateway_tools.fault_proxy import Fault

pytestmark = [pytest.mark.wordpress, SQLITE_PASS_ONLY]
POSTS = r"^/wp-json/wp/v2/posts/?$"
shared_proxy, gateway, gw_proxy = mcp_support.FIXTURES  # the module's gateway (mcp_support)


def _writes(proxy) -> int:
    """Requests that could write, forwarded to WordPress."""
    return sum(
        proxy.count(method=m, path=r"^/wp-json/", forwarded=True)
        for m in ("POST", "PUT", "PATCH", "DELETE")
    )


def _draft(job_id: str, hero: bool = False, **overrides) -> dict:
    """put_draft's arguments; ``hero``: with the featured image of slot ``hero``."""
    draft = {
        "job_id": job_id,
        "title": f"MCP {job_id}",
        "content": "<p>Written by an agent over MCP.</p>",
        "excerpt": "An MCP job.",
        "seo": {"title": "MCP SEO", "description": "Over MCP", "focus_keyword": "mcp"},
        **overrides,
    }
    if hero:
        draft["featured_media"] = {"slot": "hero"}
    return draft


async def _call(session, name: str, arguments: dict, **kwargs):
    result = await session.call_tool(name, arguments, **kwargs)
    if not result.is_error:
        assert set(FOUR) <= set(result.structured_content), result
    return result


async def _full_job(session, job_id: str, image: dict) -> dict:
    """List the tools, then run the job: media, draft, block, verify, request approval.
    Returns each tool's structured result."""
    listed = (await session.list_tools()).tools
    assert sorted(t.name for t in listed) == sorted(TOOLS)  # no publish, no approve
    for tool in listed:
        assert tool.output_schema and set(FOUR) <= set(tool.output_schema["required"])
        assert tool.annotations is not None and tool.annotations.idempotent_hint is True
    reads = {t.name for t in listed if t.annotations.read_only_hint}
    assert reads == {"verify", "get_job", "read_text"}
    done = {}
    steps = [
        ("start_job", {"job_id": job_id, "site": SITE_NAME, "task_version": 1}),
        ("upload_media", {"job_id": job_id, "slot": "hero", "alt_text": "A hero", **image}),
        ("put_draft", _draft(job_id, hero=True)),
        ("insert_block", {"job_id": job_id, "name": "sources", "html": "<p>Sources</p>"}),
        ("verify", {"job_id": job_id}),
        ("request_approval", {"job_id": job_id}),
    ]
    for name, arguments in steps:
        result = await _call(session, name, arguments)
        assert not result.is_error, (name, result.content[0].text)
        done[name] = result.structured_content
    assert done["put_draft"]["operation_key"] == op_key(job_id, "draft")
    assert done["put_draft"]["state"] == "CONFIRMED"
    assert done["upload_media"]["operation_key"] == op_key(job_id, "media", "hero")
    assert done["verify"]["state"] == "verified"
    assert done["request_approval"]["state"] == "approval_pending"
    return done


def _credentials(site: dict) -> list[str]:
    return [user["app_password"] for user in site["users"].values()]


def test_a_full_job_over_stdio_replans_for_free_and_names_the_bump(
    gateway, gw_proxy, wp_site, tmp_path
):
    job_id = new_job_id()
    media = tmp_path / "media"
    media.mkdir()
    (media / "hero.png").write_bytes(png_bytes((20, 120, 200), 4))
    outside = tmp_path / "secret.png"
    outside.write_bytes(png_bytes())
    seen = []

    async def main():
        async with stdio_session(gateway.url, gateway.token, tmp_path, media) as session:
            done = await _full_job(session, job_id, {"path": str(media / "hero.png")})
            seen.append(done)
            writes = _writes(gw_proxy)
            # a re-planned call: same arguments, a new request id -> the stored receipt
            again = await _call(session, "put_draft", _draft(job_id, hero=True))
            assert again.structured_content["replayed"] is True
            assert (
                again.structured_content["answer"]["post_id"]
                == done["put_draft"]["answer"]["post_id"]
            )
            assert _writes(gw_proxy) == writes  # 0 WordPress writes
            changed = await _call(session, "put_draft", _draft(job_id, True, title="Changed"))
            problem = problem_of(changed)
            assert slug(problem) == "operation-key-reused" and "bump" in problem["next_step"]
            refused = await _call(
                session, "upload_media", {"job_id": job_id, "slot": "x", "path": str(outside)}
            )
            assert problem_of(refused)["errors"][0]["pointer"] == "/path"
            assert _writes(gw_proxy) == writes
            keyed = {"job_id": job_id, "name": "keyed", "html": "<p>K</p>", "idempotency_key": "k1"}
            first = await _call(session, "insert_block", keyed)
            assert first.meta is None and first.structured_content["replayed"] is False
            retried = await _call(session, "insert_block", keyed)
            assert retried.meta == {"publishing-gateway/request-key-replayed": True}
            assert retried.structured_content == first.structured_content  # the first result
            read = await session.read_resource(f"gateway://jobs/{job_id}")
            state = json.loads(read.contents[0].text)
            assert state["job"]["phase"] == "approval_pending"
            assert state["verification"]["ok"] is True
            seen.append(state)
            # issue 56: an editor sends the version back; get_job's answer says so, with the note
            editor = {"Authorization": "Bearer " + gateway.make_token(role="editor")}
            sent_back = requests.post(
                f"{gateway.url}/v1/jobs/{job_id}/changes-requests",
                json={"task_version": 1, "note": "A shorter title, please."},
                headers=editor,
                timeout=30,
            )
            assert sent_back.status_code == 201, sent_back.text
            job = (await _call(session, "get_job", {"job_id": job_id})).structured_content
            decision = job["answer"]["decision"]
            assert (decision["decision"], decision["note"]) == (
                "changes_requested",
                "A shorter title, please.",
            )
            assert [n["note"] for n in job["answer"]["notes"]] == ["A shorter title, please."]

    anyio.run(main)
    counts = count_objects(wp_site, [op_key(job_id, "draft"), op_key(job_id, "media", "hero")])
    assert list(counts.values()) == [1, 1]
    text = json.dumps(seen) + (tmp_path / "mcp.log").read_text()
    assert not any(secret in text for secret in _credentials(wp_site))


def test_a_full_job_over_streamable_http_with_each_callers_token(gateway, wp_site, tmp_path):
    job_id = new_job_id()
    server = HttpMcp(gateway.url, tmp_path)
    other = gateway.make_token(tenant="other")
    seen = []
    try:
        image = {"content_base64": base64.b64encode(png_bytes((90, 20, 20), 4)).decode()}

        async def main():
            async with http_session(server.url, gateway.token) as session:
                seen.append(await _full_job(session, job_id, image))
            async with http_session(server.url, other) as session:
                hidden = await _call(session, "get_job", {"job_id": job_id})
                assert slug(problem_of(hidden)) == "job-not-found"
                seen.append(problem_of(hidden))
                with pytest.raises(Exception, match="job-not-found"):
                    await session.read_resource(f"gateway://jobs/{job_id}")

        anyio.run(main)
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        bare = requests.post(server.url, json=message, timeout=10)
        assert bare.status_code == 401 and "Bearer" in bare.headers["WWW-Authenticate"]
        wrong = requests.post(
            server.url, json=message, headers={"Authorization": "Bearer nope"}, timeout=10
        )
        assert wrong.status_code == 401
        foreign = requests.post(
            server.url,
            json=message,
            headers={"Authorization": f"Bearer {gateway.token}", "Origin": "https://evil.test"},
            timeout=10,
        )
        assert foreign.status_code == 403
    finally:
        server.stop()
    assert count_objects(wp_site, [op_key(job_id, "draft")])[op_key(job_id, "draft")] == 1
    text = json.dumps(seen, default=str) + server.log_path.read_text()
    assert not any(secret in text for secret in _credentials(wp_site))


def _row_state(gateway, job_id: str, action: str) -> str | None:
    rows = gateway.call("GET", f"/v1/jobs/{job_id}").json().get("operations", [])
    return next((r["state"] for r in rows if r["action"] == action), None)


async def _kill_while_in_flight(gateway, tmp_path, job_id: str, action: str, call) -> None:
    """Start ``call(session)`` over stdio; SIGKILL the MCP server once the gateway's ``action``
    row of the job is SENT (the WordPress request is in flight)."""
    finished = []

    async def calling(session):
        await call(session)
        finished.append(True)

    async with stdio_session(gateway.url, gateway.token, tmp_path) as session:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(calling, session)
            while _row_state(gateway, job_id, action) != "SENT":
                assert not finished, f"{action} was answered before it could be in flight"
                await anyio.sleep(0.05)
            kill_stdio_server(tmp_path)
            tasks.cancel_scope.cancel()


def _block(job_id: str, html: str = "<p>A</p>") -> dict:
    return {"job_id": job_id, "name": "note", "html": html}


def test_a_killed_mcp_process_loses_nothing_and_its_request_key_returns_the_first_result(
    gateway, gw_proxy, wp_site, tmp_path
):
    job_id = new_job_id()
    key = {"idempotencyKey": f"block-{job_id}"}  # _meta, named after SEP-3182's field

    async def start():
        async with stdio_session(gateway.url, gateway.token, tmp_path) as session:
            assert not (
                await _call(
                    session, "start_job", {"job_id": job_id, "site": SITE_NAME, "task_version": 1}
                )
            ).is_error

    async def put_draft(session):
        await session.call_tool("put_draft", _draft(job_id))

    async def keyed_block(session):
        await session.call_tool("insert_block", _block(job_id), meta=key)

    async def then():
        async with stdio_session(gateway.url, gateway.token, tmp_path) as session:
            again = await _call(session, "put_draft", _draft(job_id))
            assert not again.is_error, again.content
            assert again.structured_content["replayed"] or again.structured_content["reconciled"]
            keyed = await _call(session, "insert_block", _block(job_id), meta=key)
            assert not keyed.is_error, keyed.content
            assert keyed.structured_content["replayed"] is False  # the first result, as it was
            assert keyed.meta == {"publishing-gateway/request-key-replayed": True}
            other = await _call(session, "insert_block", _block(job_id, "<p>B</p>"), meta=key)
            assert slug(problem_of(other)) == "request-key-reused"

    anyio.run(start)
    gw_proxy.add_fault(Fault(kind="delay", seconds=2.0, method="POST", path=POSTS, times=1))
    anyio.run(_kill_while_in_flight, gateway, tmp_path, job_id, "draft", put_draft)
    # The gateway finishes the draft its dead client asked for; the block needs the post.
    deadline = time.monotonic() + 60
    while _row_state(gateway, job_id, "draft") != "CONFIRMED" and time.monotonic() < deadline:
        time.sleep(0.2)
    updates = r"^/wp-json/wp/v2/posts/\d+"
    gw_proxy.add_fault(Fault(kind="delay", seconds=2.0, method="POST", path=updates, times=1))
    anyio.run(_kill_while_in_flight, gateway, tmp_path, job_id, "block", keyed_block)
    posts = gw_proxy.count(method="POST", path=POSTS, forwarded=True)
    anyio.run(then)
    assert gw_proxy.count(method="POST", path=POSTS, forwarded=True) == posts == 1
    counts = count_objects(wp_site, [op_key(job_id, "draft")])
    assert counts[op_key(job_id, "draft")] == 1
    live = gateway.call("GET", f"/v1/jobs/{job_id}/verification").json()
    assert live["ok"] is True, live


def test_gateway_killed_after_wordpress_committed_then_the_same_call_is_reconciled(
    wp_site, ledger_url, tmp_path, proxy
):
    server = McpGateway(wp_site, ledger_url, tmp_path, site_url=proxy.url)
    job_id = new_job_id()
    try:
        server.start(crash_point="after_wordpress_response")

        async def main():
            async with stdio_session(server.url, server.token, tmp_path) as session:
                await _call(
                    session, "start_job", {"job_id": job_id, "site": SITE_NAME, "task_version": 1}
                )
                lost = await _call(session, "put_draft", _draft(job_id))
                problem = problem_of(lost)
                assert slug(problem) == "gateway-connection-lost", problem
                assert "recover" in problem["next_step"] and problem["retryable"] is True
                server.kill()  # gateway serve, every worker
                server.start()  # same port, same ledger, no crash point
                again = await _call(session, "put_draft", _draft(job_id))  # same MCP process
                assert not again.is_error, again.content
                result = again.structured_content
                assert result["reconciled"] or result["replayed"], result

        anyio.run(main)
    finally:
        server.kill()
    assert proxy.count(method="POST", path=POSTS, forwarded=True) == 1
    assert count_objects(wp_site, [op_key(job_id, "draft")])[op_key(job_id, "draft")] == 1


def test_two_mcp_clients_put_the_same_draft_at_once_one_post(gateway, gw_proxy, wp_site, tmp_path):
    job_id = new_job_id()
    gw_proxy.add_fault(Fault(kind="delay", seconds=1.0, method="POST", path=POSTS, times=1))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    results = []

    async def client(folder):
        async with stdio_session(gateway.url, gateway.token, folder) as session:
            await _call(
                session, "start_job", {"job_id": job_id, "site": SITE_NAME, "task_version": 1}
            )
            results.append(await _call(session, "put_draft", _draft(job_id)))

    async def main():
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(client, tmp_path / "a")
            tasks.start_soon(client, tmp_path / "b")

    anyio.run(main)
    assert all(not r.is_error for r in results), [r.content for r in results]
    post_ids = {r.structured_content["answer"]["post_id"] for r in results}
    assert len(post_ids) == 1
    assert gw_proxy.count(method="POST", path=POSTS, forwarded=True) == 1
    assert count_objects(wp_site, [op_key(job_id, "draft")])[op_key(job_id, "draft")] == 1


def test_gateway_demo_mcp_prints_each_call_a_refused_replan_and_a_recovered_crash(wp_site):
    site_json = site_runtime(wp_site.get("instance", "")) / "site.json"  # this line's site
    done = subprocess.run(
        [*gateway_command(), "demo", "--mcp", "--site-json", str(site_json)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    out = done.stdout
    assert out.count("  -> ") >= 16  # every tool call is printed with its outcome
    assert "replayed=True" in out and "refused: operation-key-reused" in out
    assert "SIGKILLed" in out and "reconciled=True" in out or "replayed=True" in out
    assert "RESULT: OK" in out and "MCP SDK 2." in out
