"""Racing and doubled MCP calls (issue 42, item 1): while WordPress takes a second per write (a
delaying fault proxy), one client sends each write twice at once (as Claude Code was seen doing)
and a second client sends it too. Every caller ends with the first call's answer - the same
attachment, the same post - and WordPress holds one of each: the MCP server waits for the
job's operation to settle (``GET /v1/jobs/{job_id}``) and sends the call once more, instead of
handing the gateway's ``operation-in-progress`` to the model."""

from __future__ import annotations

import base64

import anyio
import mcp_support
import pytest
from mcp_support import HttpMcp
from mcp_support import McpGateway
from mcp_support import count_objects
from mcp_support import http_session
from mcp_support import stdio_session
from support import SITE_NAME
from support import SQLITE_PASS_ONLY
from support import new_job_id
from support import op_key
from support import png_bytes

from gateway.mcp.client import GatewayAPI
from gateway.mcp.client import Problem
from gateway_tools.fault_proxy import Fault

pytestmark = [pytest.mark.wordpress, SQLITE_PASS_ONLY]
shared_proxy, gateway, gw_proxy = mcp_support.FIXTURES  # the module's gateway (mcp_support)
MEDIA = r"^/wp-json/wp/v2/media/?$"
POSTS = r"^/wp-json/wp/v2/posts/?$"
POST = r"^/wp-json/wp/v2/posts/\d+/?$"
# The companion plugin's lookup by operation key: while it fails, a second request cannot
# prove where the first one's write is, and the gateway answers operation-in-progress.
LOOKUP = Fault(
    kind="status_without_forward",
    status=503,
    method="GET",
    path="^/wp-json/publishing-gateway/v1/objects",
)


def _steps(job_id: str) -> list[tuple[str, dict, str]]:
    """(tool, arguments, the answer's id member) of the three writes, in order."""
    image = base64.b64encode(png_bytes((200, 40, 90), 4)).decode()
    draft = {
        "job_id": job_id,
        "title": f"Raced {job_id}",
        "content": "<p>Sent twice at once.</p>",
        "excerpt": "A raced job.",
        "seo": {"title": "Raced", "description": "Raced over MCP", "focus_keyword": "race"},
        "featured_media": {"slot": "hero"},
    }
    return [
        ("upload_media", {"job_id": job_id, "slot": "hero", "content_base64": image}, "media_id"),
        ("put_draft", draft, "post_id"),
        ("insert_block", {"job_id": job_id, "name": "notes", "html": "<p>N</p>"}, "post_id"),
    ]


def test_a_doubled_call_and_a_second_client_get_the_first_answer(
    gateway, gw_proxy, wp_site, tmp_path
):
    job_id = new_job_id()
    started = gateway.call("PUT", f"/v1/jobs/{job_id}", json={"site": SITE_NAME, "task_version": 1})
    assert started.status_code == 201, started.text
    for path in (MEDIA, POSTS, POST):  # every first write answers after 1 s
        gw_proxy.add_fault(Fault(kind="delay", seconds=1.0, method="POST", path=path, times=1))
    gw_proxy.add_fault(LOOKUP)
    server = HttpMcp(gateway.url, tmp_path)
    answers: dict[str, list] = {}

    async def main():
        async with (
            stdio_session(gateway.url, gateway.token, tmp_path) as doubled,
            http_session(server.url, gateway.token) as second,
        ):
            for name, arguments, _ in _steps(job_id):
                results = answers.setdefault(name, [])

                async def call(session, name=name, arguments=arguments, results=results):
                    results.append(await session.call_tool(name, arguments))

                async with anyio.create_task_group() as tasks:
                    for session in (doubled, doubled, second):
                        tasks.start_soon(call, session)

    try:
        anyio.run(main)
    finally:
        server.stop()
    for name, _, member in _steps(job_id):
        results = answers[name]
        assert [r.is_error for r in results] == [False] * 3, [r.content[0].text for r in results]
        ids = {r.structured_content["answer"][member] for r in results}
        keys = {r.structured_content["operation_key"] for r in results}
        states = {r.structured_content["state"] for r in results}
        assert len(ids) == 1 and states == {"CONFIRMED"}, (name, ids, states)
        assert len(keys) == 1
    post_id = answers["put_draft"][0].structured_content["answer"]["post_id"]
    assert {r.structured_content["answer"]["post_id"] for r in answers["insert_block"]} == {post_id}
    counts = count_objects(wp_site, [op_key(job_id, "draft"), op_key(job_id, "media", "hero")])
    assert list(counts.values()) == [1, 1]
    assert gw_proxy.count(method="POST", path=MEDIA, forwarded=True) == 1
    assert gw_proxy.count(method="POST", path=POSTS, forwarded=True) == 1
    job = gateway.call("GET", f"/v1/jobs/{job_id}").json()
    assert job["post_id"] == post_id
    assert {r["state"] for r in job["operations"]} == {"CONFIRMED"}


def test_a_write_still_in_flight_after_the_bound_names_recover(gateway, gw_proxy):
    """An outcome still unknown when the wait's bound (here 1 s) has passed is a problem whose
    next step is ``recover``; the waiting call's turn is given back."""
    from gateway.mcp import tools

    job_id = new_job_id()
    gateway.call("PUT", f"/v1/jobs/{job_id}", json={"site": SITE_NAME, "task_version": 1})
    gw_proxy.add_fault(Fault(kind="delay", seconds=4.0, method="POST", path=POSTS, times=1))
    gw_proxy.add_fault(LOOKUP)
    patient = GatewayAPI(gateway.url)
    hasty = GatewayAPI(gateway.url, wait_seconds=1.0)
    runner = tools.Runner(hasty)
    spec = next(s for s in tools.SPECS if s.name == "put_draft")
    body = dict(_steps(job_id)[1][1])
    del body["featured_media"]
    path = f"/v1/jobs/{job_id}/draft"
    answers: list = []
    problems: list = []

    def first():
        answers.append(patient.call(gateway.token, "PUT", path, _without_job(body), job_id=job_id))

    async def main():
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(anyio.to_thread.run_sync, first)
            while _state(gateway, job_id) != "SENT":
                await anyio.sleep(0.05)
            with pytest.raises(Problem) as raised:
                await anyio.to_thread.run_sync(runner.run, spec, gateway.token, body, None)
            problems.append(raised.value)

    anyio.run(main)
    [answer], [problem] = answers, problems
    assert problem.slug == "operation-in-progress"
    assert "recover" in tools.next_step(problem.slug, problem.body)
    assert problem.retry_after is not None and problem.retry_after > 1  # the gateway's own
    assert answer.body["state"] == "CONFIRMED"
    assert hasty._waiting == {}
    assert gw_proxy.count(method="POST", path=POSTS, forwarded=True) == 1


def _without_job(arguments: dict) -> dict:
    return {k: v for k, v in arguments.items() if k != "job_id"}


def _state(gateway, job_id: str) -> str | None:
    rows = gateway.call("GET", f"/v1/jobs/{job_id}").json().get("operations", [])
    return next((r["state"] for r in rows if r["action"] == "draft"), None)


def test_a_busy_site_is_waited_out_and_each_job_gets_its_post(wp_site, ledger_url, tmp_path, proxy):
    """With one WordPress call per site at a time (``GATEWAY_SITE_CONCURRENCY=1``), job B's
    draft sent while job A's is in WordPress is answered 429 ``site-busy`` (nothing sent): the
    MCP server sends it again after its backoff, and each job ends with its one post."""
    server = McpGateway(wp_site, ledger_url, tmp_path, site_url=proxy.url)
    server.env["GATEWAY_SITE_CONCURRENCY"] = "1"
    jobs = [new_job_id(), new_job_id()]
    proxy.add_fault(Fault(kind="delay", seconds=1.5, method="POST", path=POSTS, times=1))
    results = {}
    try:
        server.start()
        for job_id in jobs:
            started = server.call(
                "PUT", f"/v1/jobs/{job_id}", json={"site": SITE_NAME, "task_version": 1}
            )
            assert started.status_code == 201, started.text

        async def draft(session, job_id):
            arguments = {**_steps(job_id)[1][1], "featured_media": None}
            results[job_id] = await session.call_tool("put_draft", arguments)

        async def main():
            async with stdio_session(server.url, server.token, tmp_path) as session:
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(draft, session, jobs[0])
                    while _state(server, jobs[0]) != "SENT":  # A holds the site's one slot
                        await anyio.sleep(0.05)
                    tasks.start_soon(draft, session, jobs[1])

        anyio.run(main)
        busy = [line for line in server.logs().splitlines() if '"status":429' in line]
    finally:
        server.kill()
    assert [results[j].is_error for j in jobs] == [False, False], [
        results[j].content[0].text for j in jobs
    ]
    posts = {results[j].structured_content["answer"]["post_id"] for j in jobs}
    assert len(posts) == 2
    assert proxy.count(method="POST", path=POSTS, forwarded=True) == 2
    counts = count_objects(wp_site, [op_key(j, "draft") for j in jobs])
    assert list(counts.values()) == [1, 1]
    assert busy and all(jobs[1] in line for line in busy)  # B was told to wait, and waited
