"""``gateway demo --mcp``: the main job driven over the Model Context Protocol.

A real ``gateway serve`` as in ``gateway demo``; an MCP client (the official SDK's
``stdio_client`` + ``ClientSession``, as Claude Desktop or the OpenAI Agents SDK would)
starts ``gateway mcp`` over stdio and calls its tools as an agent would. Each call and its
outcome is printed. The agent re-plans one call (the same ``put_draft`` again: the stored
receipt, no WordPress write) and changes the draft under the same task version (refused:
bump the version). A second job runs through the fault proxy: the MCP server is SIGKILLed
while its ``put_draft`` is in flight to WordPress, a new MCP server is started, and the same
call returns the post written once. The report counts the objects in WordPress by key.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import time
from importlib.metadata import version

import anyio
import requests
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters
from mcp.client.stdio import stdio_client

from gateway_tools import demo as base_demo
from gateway_tools.demo import TENANT
from gateway_tools.demo import Demo
from gateway_tools.demo import say
from gateway_tools.fault_proxy import Fault

POSTS = r"^/wp-json/wp/v2/posts/?$"


def _shown(arguments: dict) -> str:
    parts = []
    for name, value in arguments.items():
        text = json.dumps(value, ensure_ascii=False)
        parts.append(f"{name}={text if len(text) <= 32 else text[:29] + '...'}")
    return ", ".join(parts)


class McpDemo(Demo):
    """The main job over MCP, a re-plan, a refused change and an MCP server crash."""

    def __init__(self, site: dict):
        super().__init__(site)
        self.media = self.workdir / "media"
        self.outcomes: list[tuple[str, dict]] = []
        self._errlog = None  # the MCP servers' stderr (mcp.log), open while jobs run

    def params(self, gw) -> StdioServerParameters:
        """``gateway mcp`` over stdio, its pid written to ``mcp.pid`` (``exec`` keeps it)."""
        env = {
            "GATEWAY_URL": gw.base_url,
            "GATEWAY_TOKEN": gw.session.headers["Authorization"].removeprefix("Bearer "),
            "GATEWAY_MCP_MEDIA_ROOTS": str(self.media),
            "PIDFILE": str(self.workdir / "mcp.pid"),
            "PATH": os.environ.get("PATH", ""),
        }
        command = [sys.executable, "-m", "gateway.cli", "mcp"]
        return StdioServerParameters(
            command="sh", args=["-c", 'echo $$ > "$PIDFILE"; exec "$@"', "sh", *command], env=env
        )

    async def call(self, session: ClientSession, name: str, arguments: dict) -> dict:
        """One tool call, printed with its outcome; returns the structured result, or the
        problem (with ``error: True``) for a tool error."""
        say(f"  -> {name}({_shown(arguments)})")
        result = await session.call_tool(name, arguments)
        if result.is_error:
            text = result.content[0].text
            problem = json.loads(text[text.index("{") :])
            slug = problem["type"].rsplit("/", 1)[-1]
            say(f"     refused: {slug}; next step: {problem['next_step']}")
            self.outcomes.append((name, {"error": True, **problem}))
            return {"error": True, "slug": slug, **problem}
        done = result.structured_content
        say(
            f"     {done['state']} {done['operation_key'] or ''} replayed={done['replayed']} "
            f"reconciled={done['reconciled']}"
        )
        self.outcomes.append((name, done))
        return done

    async def job_a(self, gw, article: dict) -> dict:
        job_id = f"mcp-article-{self.run_id}"
        say(
            f"\n[1/2] job {job_id}: an agent over MCP (stdio); site flaky is the test "
            "WordPress behind the fault proxy, which counts what reaches WordPress"
        )
        async with stdio_client(self.params(gw), errlog=self._errlog) as (read, write):
            async with ClientSession(read, write) as session:
                init = await session.initialize()
                tools = (await session.list_tools()).tools
                say(f"  connected to {init.server_info.name} {init.server_info.version}: "
                    f"{', '.join(t.name for t in tools)}")  # fmt: skip
                await self.call(
                    session, "start_job", {"job_id": job_id, "site": "flaky", "task_version": 1}
                )
                for img in article["images"]:
                    path = str(self.media / img["file"])  # a local file: stdio only
                    await self.call(session, "upload_media", {
                        "job_id": job_id, "slot": img["slot"], "path": path,
                        "alt_text": img["alt_text"], "title": img["title"],
                    })  # fmt: skip
                draft = {"job_id": job_id, **base_demo.draft_body(article)}
                first = await self.call(session, "put_draft", draft)
                writes = self.writes()
                say("  the agent re-plans and calls put_draft again (a new request id):")
                again = await self.call(session, "put_draft", draft)
                self.check(
                    f"re-planned put_draft: replayed, {self.writes() - writes} WordPress writes",
                    again.get("replayed") is True and self.writes() == writes,
                )
                say("  the agent changes the title under the same task version:")
                changed = await self.call(session, "put_draft", {**draft, "title": "Changed"})
                self.check(
                    "the change is refused and the agent is told to bump the task version",
                    changed.get("slug") == "operation-key-reused"
                    and "bump" in changed.get("next_step", ""),
                )
                block = {"job_id": job_id, "name": "sources", "html": "<p>Sources: the seed.</p>"}
                await self.call(session, "insert_block", block)
                verified = await self.call(session, "verify", {"job_id": job_id})
                self.check("verify: every field read back", verified.get("state") == "verified")
                asked = await self.call(session, "request_approval", {"job_id": job_id})
                self.check(
                    "request_approval: in front of editors (no tool publishes)",
                    asked.get("state") == "approval_pending",
                )
        return {"job_id": job_id, "post_id": first["answer"]["post_id"], "media": article["images"]}

    async def job_b(self, gw, article: dict, images: dict) -> dict:
        job_id = f"mcp-article-{self.run_id}-crash"
        say(f"\n[2/2] job {job_id}: the MCP server is SIGKILLed while put_draft is in flight")
        draft = {"job_id": job_id, **base_demo.draft_body(article)}
        async with stdio_client(self.params(gw), errlog=self._errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                await self.call(
                    session, "start_job", {"job_id": job_id, "site": "flaky", "task_version": 1}
                )
                for img in article["images"]:
                    content = base64.b64encode(images[img["file"]]).decode()
                    await self.call(session, "upload_media", {
                        "job_id": job_id, "slot": img["slot"], "content_base64": content,
                        "filename": img["file"], "alt_text": img["alt_text"],
                    })  # fmt: skip
                self.proxy.add_fault(
                    Fault(kind="delay", seconds=2.0, method="POST", path=POSTS, times=1)
                )
                say("  fault proxy: WordPress answers POST /wp/v2/posts 2 s late")
                say(f"  -> put_draft({_shown(draft)})")
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(session.call_tool, "put_draft", draft)
                    while self.draft_state(gw, job_id) != "SENT":
                        await anyio.sleep(0.05)
                    os.kill(int((self.workdir / "mcp.pid").read_text()), signal.SIGKILL)
                    say("     the MCP server is SIGKILLed (the gateway's write is in flight)")
                    tasks.cancel_scope.cancel()
        async with stdio_client(self.params(gw), errlog=self._errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                say("  a new MCP server; the agent reads where the job stands, then continues:")
                state = await session.read_resource(f"gateway://jobs/{job_id}")
                job = json.loads(state.contents[0].text)["job"]
                drafted = [o["state"] for o in job["operations"] if o["action"] == "draft"]
                say(f"     gateway://jobs/{job_id}: status {job['status']}, draft {drafted}")
                again = await self.call(session, "put_draft", draft)
        self.check(
            "the same put_draft after the crash returns the post written once",
            again.get("replayed") is True or again.get("reconciled") is True,
        )
        return {"job_id": job_id, "post_id": again["answer"]["post_id"], "media": article["images"]}

    def writes(self) -> int:
        """Requests that could write and reached WordPress (through the fault proxy: both
        jobs use the site ``flaky``, the test WordPress behind it)."""
        return sum(
            self.proxy.count(method=m, path=r"^/wp-json/", forwarded=True)
            for m in ("POST", "PUT", "PATCH", "DELETE")
        )

    def draft_state(self, gw, job_id: str) -> str | None:
        rows = gw.job(job_id).json().get("operations", [])
        return next((r["state"] for r in rows if r["action"] == "draft"), None)

    def mcp_report(self, jobs: list[dict], started: float) -> int:
        say("\nReport")
        for job in jobs:
            draft_key = f"{TENANT}/{job['job_id']}/v1/draft"
            media_keys = [f"{TENANT}/{job['job_id']}/v1/media/{i['slot']}" for i in job["media"]]
            counts = self.count([draft_key, *media_keys])
            say(f"  {job['job_id']}: post {job['post_id']}")
            self.check(f"posts carrying the draft key in WordPress: {counts[draft_key]}",
                       counts[draft_key] == 1)  # fmt: skip
            attachments = sum(counts[k] for k in media_keys)
            self.check(f"attachments carrying the media keys: {attachments}", attachments == 3)
        passwords = [u["app_password"] for u in self.site["users"].values()]
        text = json.dumps(self.outcomes) + (self.workdir / "mcp.log").read_text(errors="replace")
        self.check(
            "no WordPress credential in any MCP result or the MCP server's log",
            not any(p in text for p in passwords),
        )
        failed = [label for label, ok in self.checks if not ok]
        say(
            f"  time: {time.monotonic() - started:.1f} s; checks: "
            f"{len(self.checks) - len(failed)}/{len(self.checks)} ok; MCP SDK {version('mcp')}"
        )
        say(
            "RESULT: "
            + (
                "OK: one post and 3 media per job over MCP, a re-plan answered from the ledger, "
                "a change refused with the bump named, an MCP server crash recovered without a "
                "duplicate"
                if not failed
                else "FAILED: " + "; ".join(failed)
            )
        )
        return 1 if failed else 0


def run_mcp_demo(site_json: str | None = None, keep: bool = False) -> int:
    """Run the MCP demo against the site in ``site_json``; 0 = every check ok, 1 = a check
    failed. The demo's ledger directory is removed afterwards unless ``keep``.

    Raises:
        DemoUnavailable: the test WordPress is not up, or ``gateway serve`` did not start.
    """
    site = base_demo.load_site(site_json)
    started = time.monotonic()
    say(f"Publishing Gateway MCP demo against WordPress at {site['url']}")
    demo = McpDemo(site)
    finished = False
    try:
        gw = demo.setup()
        article, images = base_demo.load_article()
        demo.media.mkdir()
        for name, content in images.items():
            (demo.media / name).write_bytes(content)
        with open(demo.workdir / "mcp.log", "w") as errlog:
            demo._errlog = errlog

            async def both():
                return [await demo.job_a(gw, article), await demo.job_b(gw, article, images)]

            jobs = anyio.run(both)
        status = demo.mcp_report(jobs, started)
        finished = True
        return status
    except requests.RequestException as error:
        say(f"the gateway could not be reached: {error}")
        return 1
    finally:
        demo.close(keep or not finished)
