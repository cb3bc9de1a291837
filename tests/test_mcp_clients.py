"""MCP tools for the clients as they really behave (issue 52), against the real test WordPress:

* a client that fills every advertised property, ``"null"`` for the ones it does not mean
  (``["null"]`` for an array), and sends arrays and objects as JSON text, as Claude Code does
  (anthropics/claude-code#95239, anthropics/claude-code#22394, github/copilot-cli#4301), gets
  exactly one draft and its images; its placeholder request key on two jobs writes both, and a
  key a refused call carried still serves its next write (the ``mcp`` SDK over stdio,
  FastMCP over streamable HTTP);
* every result of a job with a 100 KB article, English or Chinese, is under 25,000 bytes of
  UTF-8 (anthropics/claude-code#45766: Claude Code's 25,000-token cap; a token is at least a
  byte), and ``read_text`` gives the article back in pages that fit, its SHA-256 as stubbed.

The door itself (no WordPress): free text keeps the word ``null``; the agent sessions'
function tools pass the same door.
"""

from __future__ import annotations

import base64
import contextlib
import json

import anyio
import mcp_support
import pytest
import requests
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from mcp_support import HttpMcp
from mcp_support import count_objects
from mcp_support import http_session
from mcp_support import stdio_session
from mcp_support import takes_array
from support import SITE_NAME
from support import SQLITE_PASS_ONLY
from support import new_job_id
from support import op_key
from support import png_bytes

import gateway.composition  # noqa: F401 - registers the actions the agents' tools come from
from gateway.agents import tools as agent_tools
from gateway.core import tool_schemas
from gateway.core import validation
from gateway.mcp import paging
from gateway.mcp import tools

shared_proxy, gateway, gw_proxy = mcp_support.FIXTURES  # the module's gateway (mcp_support)
CAP = 25_000  # bytes of UTF-8: at most one token each


def as_claude_code_sends(tool, given: dict) -> dict:
    """Every advertised property of ``tool``: the ``given`` value (an array or object as JSON
    text), else the text ``"null"`` (``["null"]`` for an array)."""
    sent = {}
    for name, schema in tool.input_schema["properties"].items():
        if name in given:
            value = given[name]
            sent[name] = json.dumps(value) if isinstance(value, list | dict) else value
        else:
            sent[name] = ["null"] if takes_array(schema) else "null"
    return sent


class Door:
    """One client's calls as raw MCP results: the ``mcp`` SDK's ``ClientSession`` or a
    FastMCP ``Client`` (its ``*_mcp`` methods)."""

    def __init__(self, client, fastmcp: bool):
        self.client, self.fastmcp, self.tools = client, fastmcp, {}

    async def load(self):
        listed = await self.client.list_tools()
        self.tools = {t.name: t for t in (listed if self.fastmcp else listed.tools)}

    async def call(self, name: str, given: dict, meta: dict | None = None):
        arguments = as_claude_code_sends(self.tools[name], given)
        if self.fastmcp:
            return await self.client.call_tool_mcp(name, arguments, meta=meta)
        return await self.client.call_tool(name, arguments, meta=meta)


@contextlib.asynccontextmanager
async def door(kind: str, gateway, tmp_path):
    if kind == "mcp-stdio":
        async with stdio_session(gateway.url, gateway.token, tmp_path) as session:
            yield Door(session, fastmcp=False)
        return
    server = HttpMcp(gateway.url, tmp_path)
    try:
        async with Client(StreamableHttpTransport(server.url, auth=gateway.token)) as client:
            yield Door(client, fastmcp=True)
    finally:
        server.stop()


def _ok(result) -> dict:
    assert not result.is_error, result.content
    return result.structured_content


def _wp(site: dict, path: str) -> dict:
    admin = site["users"]["admin"]
    found = requests.get(
        site["url"].rstrip("/") + "/wp-json/wp/v2/" + path,
        params={"context": "edit"},
        auth=(admin["username"], admin["app_password"]),
        timeout=30,
    )
    found.raise_for_status()
    return found.json()


@pytest.mark.wordpress
@SQLITE_PASS_ONLY
@pytest.mark.parametrize("kind", ["mcp-stdio", "fastmcp-http"])
def test_a_client_filling_every_property_with_null_gets_one_draft_and_its_images(
    gateway, wp_site, tmp_path, kind
):
    job, other = new_job_id(), new_job_id()
    key = f"shared-{job}"  # carried first by a refused call on the other job
    seen = {}

    async def main():
        async with door(kind, gateway, tmp_path) as client:
            await client.load()
            for job_id in (job, other):
                start = {"job_id": job_id, "site": SITE_NAME, "task_version": 1}
                _ok(await client.call("start_job", start))
            for slot, rgb in (("hero", (200, 20, 20)), ("inline", (20, 20, 200))):
                image = base64.b64encode(png_bytes(rgb, 4)).decode()
                upload = {"job_id": job, "slot": slot, "content_base64": image}
                seen[slot] = _ok(await client.call("upload_media", upload))
            no_draft = {"job_id": other, "name": "note", "html": "<p>N</p>", "idempotency_key": key}
            seen["refused"] = await client.call("insert_block", no_draft)
            draft = {
                "job_id": job, "title": f"Claude {job}", "excerpt": "Every property given.",
                "content": "<p>Filled with null.</p>{{media:inline}}",
                "seo": {"title": "C", "description": "Claude Code", "focus_keyword": "null"},
                "featured_media": {"slot": "hero"}, "body_media": ["inline"],
                "tags": ["alpha", "beta"],
            }  # fmt: skip
            seen["draft"] = _ok(await client.call("put_draft", draft))
            seo = {"title": "", "description": "", "focus_keyword": ""}
            plain = {"job_id": other, "title": f"Other {other}", "content": "<p>O</p>",
                     "excerpt": "", "seo": seo}  # fmt: skip
            _ok(await client.call("put_draft", plain))  # the same key "null" as the first draft
            block = {"job_id": job, "name": "note", "html": "<p>N</p>", "idempotency_key": key}
            _ok(await client.call("insert_block", block))
            empty = {"idempotencyKey": ""}  # a placeholder key in _meta: no key
            theirs = {"job_id": other, "name": "note", "html": "<p>N</p>"}
            _ok(await client.call("insert_block", theirs, meta=empty))

    anyio.run(main)
    assert seen["refused"].is_error  # no draft yet: refused, and the key not kept
    keys = [op_key(job, "draft"), op_key(other, "draft"), op_key(job, "media", "hero"),
            op_key(job, "media", "inline")]  # fmt: skip
    assert count_objects(wp_site, keys) == dict.fromkeys(keys, 1)
    for job_id in (job, other):  # a block lives in its post: its ledger row says it was written
        rows = gateway.call("GET", f"/v1/jobs/{job_id}").json()["operations"]
        blocks = [r["state"] for r in rows if r["action"] == "block"]
        assert blocks == ["CONFIRMED"], rows
    verified = gateway.call("GET", f"/v1/jobs/{job}/verification").json()
    assert verified["ok"] is True, verified
    post = _wp(wp_site, f"posts/{seen['draft']['answer']['post_id']}")
    assert len(post["tags"]) == 2 and post["featured_media"] == seen["hero"]["answer"]["media_id"]
    hero = _wp(wp_site, f"media/{seen['hero']['answer']['media_id']}")
    assert hero["alt_text"] == "null"  # free text: the word as sent, never dropped


def _article(language: str) -> str:
    """About 100 KB of UTF-8 HTML: quotes and links (escaped in JSON) or Chinese (3 bytes a
    character)."""
    if language == "en":
        para = '<p>The "gateway" writes once: <a href="https://example.com/a">a link</a>.</p>\n'
    else:
        para = "<p>网关只写一次：每个作业、每个任务版本、每个动作，只写一次。</p>\n"
    count = 100_000 // len(para.encode()) + 1
    return "".join(f"{para[:3]}{i} {para[3:]}" for i in range(count))


def _size(result) -> int:
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def _stubs(node) -> list[dict]:
    if isinstance(node, dict):
        if node.get("omitted"):
            return [node]
        return [s for value in node.values() for s in _stubs(value)]
    return [s for value in node for s in _stubs(value)] if isinstance(node, list) else []


ALT = "网关示意图，显示工作流与账本之间的关系" * 4  # the tryout's: 228 bytes, shorter than a stub
CAPTION = "图注：" + "这是一张说明图片的较长图注文字，" * 8


class Reader:
    """Reads back everything a result left out (text stubs, object stubs, a list's
    more-items marker) with ``read_text``, page by page, each page's result kept."""

    def __init__(self, session):
        self.session, self.pages = session, []

    async def pages_of(self, stub: dict) -> list[dict]:
        offset, answers = stub["read_with"]["arguments"]["offset"], []
        while offset is not None:
            arguments = {**stub["read_with"]["arguments"], "offset": offset}
            self.pages.append(await self.session.call_tool("read_text", arguments))
            answers.append(_ok(self.pages[-1])["answer"])
            offset = answers[-1]["next_offset"]
        return answers

    async def whole(self, node):
        """``node`` as the gateway answered it, every stub read back."""
        if isinstance(node, list):
            if node and isinstance(node[-1], dict) and node[-1].get("omitted") == "items":
                rest = [i for page in await self.pages_of(node[-1]) for i in page["items"]]
                node = [*node[:-1], *rest]
            return [await self.whole(item) for item in node]
        if not isinstance(node, dict):
            return node
        if node.get("omitted") == "text":
            return "".join(page["text"] for page in await self.pages_of(node))
        if node.get("omitted") == "object":
            node = {k: v for page in await self.pages_of(node) for k, v in page["entries"].items()}
        return {key: await self.whole(value) for key, value in node.items()}


@pytest.mark.wordpress
@SQLITE_PASS_ONLY
@pytest.mark.parametrize("language, transport, images", [("en", "stdio", 0), ("zh", "http", 40)])
def test_every_result_of_a_100_kb_article_fits_and_reads_back_in_pages(
    gateway, wp_site, tmp_path, language, transport, images
):
    """Issue 52, item 4, and the tryout's worst case after it: a 100 KB Chinese article and
    40 images with long alt texts and captions (a ledger row per upload and per attachment;
    get_job was 135 KB). Every result and the job resource stay under 25,000 bytes, and the
    job read back through every stub and marker is the gateway's own answer."""
    job_id = new_job_id()
    article = _article(language) + "".join(f"{{{{media:s{i}}}}}\n" for i in range(1, images))
    assert len(article.encode()) >= 100_000
    server = HttpMcp(gateway.url, tmp_path) if transport == "http" else None
    results, read = {}, {}

    async def main():
        opened = (
            stdio_session(gateway.url, gateway.token, tmp_path)
            if server is None
            else http_session(server.url, gateway.token)
        )
        async with opened as session:
            job = {"job_id": job_id}
            results["start_job"] = await session.call_tool(
                "start_job", {**job, "site": SITE_NAME, "task_version": 1}
            )
            for i in range(images):
                image = base64.b64encode(png_bytes((i, 9, 99), 2)).decode()
                upload = {**job, "slot": f"s{i}", "content_base64": image,
                          "alt_text": f"{ALT}{i}", "caption": f"{CAPTION}{i}"}  # fmt: skip
                results[f"upload_media s{i}"] = await session.call_tool("upload_media", upload)
            seo = {"title": "L", "description": "Long", "focus_keyword": "long"}
            draft = {**job, "title": f"Long {job_id}", "content": article, "excerpt": "Long.",
                     "seo": seo}  # fmt: skip
            if images:
                draft.update(featured_media={"slot": "s0"},
                             body_media=[f"s{i}" for i in range(1, images)])  # fmt: skip
            calls = [
                ("put_draft", draft),
                ("put_draft", draft),  # the stored receipt
                ("insert_block", {**job, "name": "note", "html": "<p>N</p>"}),
                ("verify", job),
                ("recover", job),
                ("request_approval", job),
            ]
            for name, arguments in calls:
                results[name] = await session.call_tool(name, arguments)
            results["get_job"] = await session.call_tool("get_job", job)
            resource = await session.read_resource(f"gateway://jobs/{job_id}")
            results["resource"] = resource

            reader = Reader(session)
            read["job"] = await reader.whole(_ok(results["get_job"])["answer"])
            for stub in _stubs(json.loads(resource.contents[0].text)):
                arguments = {**stub["read_with"]["arguments"]}
                read.setdefault("resource", []).append(
                    await session.call_tool("read_text", arguments)
                )
            read["pages"] = reader.pages

    try:
        anyio.run(main)
    finally:
        if server is not None:
            server.stop()
    for name, result in results.items():
        assert not getattr(result, "is_error", False), (name, result)
        assert _size(result) < CAP, (name, _size(result))
    assert results["put_draft"].structured_content["state"] == "CONFIRMED"
    assert max(_size(p) for p in read["pages"]) < CAP and len(read["pages"]) > 1
    job = gateway.call("GET", f"/v1/jobs/{job_id}").json()
    assert read["job"] == job  # everything reachable, nothing changed on the way
    assert read["resource"] and not any(r.is_error for r in read["resource"])
    assert max(_size(r) for r in read["resource"]) < CAP
    assert len(job["operations"]) == 2 + 2 * images  # draft, block; media and attach each
    drafts = [r for r in job["operations"] if r["action"] == "draft"]
    assert drafts[0]["receipt"]["sent"]["content"].startswith(_article(language))
    assert count_objects(wp_site, [op_key(job_id, "draft")]) == {op_key(job_id, "draft"): 1}


def _door(arguments: dict, schema: dict):
    return tool_schemas.at_the_door(arguments, schema, validation.text_pattern())


def test_the_door_drops_placeholders_only_where_a_value_cannot_be_the_word():
    """Issue 52, item 2, on the MCP tool and the agents' function tool alike: ``"null"``,
    ``""`` and ``["null"]`` are "not given" for an identifier, a URL, base64, an array or an
    object; JSON text of an array or object is parsed; free text keeps the word ``null``."""
    spec = {s.name: s for s in tools.SPECS}
    media = tools.input_schema(spec["upload_media"])
    sent = {"job_id": "J", "slot": "hero", "content_base64": "null", "source_url": "null",
            "filename": "null", "alt_text": "null", "caption": "", "title": "null",
            "idempotency_key": ""}  # fmt: skip
    assert _door(sent, media) == {
        "job_id": "J", "slot": "hero", "filename": "null", "alt_text": "null", "caption": "",
        "title": "null",
    }  # fmt: skip
    draft = {"title": "null", "content": "<p>C</p>", "excerpt": "null", "slug": "null",
             "seo": '{"title": "", "description": "", "focus_keyword": "null"}',
             "featured_media": "null", "body_media": ["null"], "categories": '["null"]',
             "tags": '["a", "b"]'}  # fmt: skip
    expected = {"title": "null", "content": "<p>C</p>", "excerpt": "null",
                "seo": {"title": "", "description": "", "focus_keyword": "null"},
                "tags": ["a", "b"]}  # fmt: skip
    assert _door(draft, agent_tools.parameters("put_draft")) == expected
    assert _door({"job_id": "J", **draft}, tools.input_schema(spec["put_draft"])) == {
        "job_id": "J",
        **expected,
    }
    # a required identifier is never dropped: the validation says what is wrong
    assert _door({"job_id": "J", "slot": "null"}, media) == {"job_id": "J", "slot": "null"}
    # not JSON of the property's type: left for the validation to refuse
    assert _door({"tags": "a, b"}, agent_tools.parameters("put_draft")) == {"tags": "a, b"}


def test_a_text_is_inline_once_and_stubbed_only_as_far_as_the_bound_needs():
    """Issue 52, item 4: a 10 KB article in a receipt's ``sent`` and ``expected`` is inline
    once (a stub the second time); a 100 KB one is a stub both times; short texts stay."""

    def size(body) -> int:
        return len(json.dumps(body, ensure_ascii=False).encode())

    for chars, inline in ((10_000, 1), (100_000, 0)):
        article = "文" * (chars // 3)
        receipt = {"sent": {"content": article, "title": "T"}, "expected": {"content": article}}
        out = paging.fitted(receipt, "J-1", size)
        assert size(out) < paging.MAX_RESULT_BYTES and out["sent"]["title"] == "T"
        contents = [out["sent"]["content"], out["expected"]["content"]]
        assert contents.count(article) == inline, (chars, inline)
        assert all(c == article or c["sha256"] == paging.digest(article) for c in contents)


def _read_back(node, body, job_id: str):
    """``node`` (a fitted part of ``body``) with every stub and marker read back through
    :func:`paging.find` and :func:`paging.page`, as ``read_text`` does."""

    def pages(stub: dict) -> list[dict]:
        found, offset, out = (
            paging.find(body, stub["sha256"]),
            stub["read_with"]["arguments"]["offset"],
            [],
        )
        while offset is not None:
            out.append(paging.page(found, offset, job_id))
            assert paging.cost(out[-1]) < paging.MAX_RESULT_BYTES
            offset = out[-1]["next_offset"]
        return out

    if isinstance(node, list):
        if node and isinstance(node[-1], dict) and node[-1].get("omitted") == "items":
            node = [*node[:-1], *(i for p in pages(node[-1]) for i in p["items"])]
        return [_read_back(item, body, job_id) for item in node]
    if not isinstance(node, dict):
        return node
    if node.get("omitted") == "text":
        return "".join(p["text"] for p in pages(node))
    if node.get("omitted") == "object":
        node = {k: v for p in pages(node) for k, v in p["entries"].items()}
    return {key: _read_back(value, body, job_id) for key, value in node.items()}


def test_no_body_makes_a_result_past_the_bound_and_every_part_reads_back():
    """The tryout's shapes without WordPress (issue 52 follow-up): 300 ledger rows with short
    texts (a 71-byte "sha256:..." twice, a 228-byte alt text: shorter than a stub, so never
    stubbed), one object of 800 members, and a root of 3,000 members (the last resort).
    Every result fits, and every part reads back as it was."""
    alt = "网关示意图，显示工作流与账本之间的关系" * 4
    mark = "sha256:" + "c5" * 32
    receipt = {"expected": mark, "actual": mark}
    rows = [
        {"operation_key": f"acme/J-1/v1/media/s{i}", "alt_text": f"{alt}{i}", "receipt": receipt}
        for i in range(300)
    ]
    members = {f"s{i}": {"alt_text": alt, "n": i} for i in range(800)}
    body = {"job_id": "J-1", "operations": rows, "media_metadata": members}
    shapes = [body, {f"k{i}": i for i in range(3_000)}]
    for shape in shapes:
        answer = tools.sized({"job_id": "J-1", "answer": shape})["answer"]
        assert _size(tools.call_result({"job_id": "J-1", "answer": answer}, True)) < CAP
        assert _read_back(answer, shape, "J-1") == shape
    stubs = _stubs(tools.sized({"job_id": "J-1", "answer": body})["answer"])
    assert not [s for s in stubs if s["omitted"] == "text"]  # no text longer than its stub
    assert {s["omitted"] for s in stubs} == {"items", "object"}
