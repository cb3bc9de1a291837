"""Schemas every client reads (issues 42 and 52): each tool of ``gateway mcp`` and each function
tool of the OpenAI Agents sessions (``gateway/agents/tools.py``) advertises its arguments in
OpenAI's strict subset of keywords - no ``$ref``, closed objects, the optional properties
nullable - while the schema files keep validating; an MCP tool requires only what its call
needs, an agents' function tool (sent to OpenAI in strict mode) every property. Then the
OpenAI Agents SDK, with its strict conversion on (``null`` for every argument not meant) and
off (the text ``"null"``), drives ``upload_media`` and ``put_draft`` over stdio and
streamable HTTP against the real test WordPress: one attachment, one post."""

from __future__ import annotations

import base64
import copy
import json

import anyio
import mcp_support
import pytest
from agents import Agent
from agents import RunConfig
from agents import Runner
from agents.items import ModelResponse
from agents.mcp import MCPServerStdio
from agents.mcp import MCPServerStreamableHttp
from agents.models.interface import Model
from agents.strict_schema import ensure_strict_json_schema
from agents.usage import Usage
from mcp_support import HttpMcp
from mcp_support import count_objects
from mcp_support import mcp_command
from mcp_support import takes_array
from openai.types.responses import ResponseFunctionToolCall
from openai.types.responses import ResponseOutputMessage
from openai.types.responses import ResponseOutputText
from support import SITE_NAME
from support import SQLITE_PASS_ONLY
from support import new_job_id
from support import op_key
from support import png_bytes

import gateway.composition  # noqa: F401 - registers the actions the agents' tools come from
from gateway.agents import tools as agent_tools
from gateway.core import exceptions as exc
from gateway.core import tool_schemas
from gateway.core import validation
from gateway.mcp import tools
from gateway.mcp.client import GatewayAPI
from gateway.mcp.client import Problem

shared_proxy, gateway, gw_proxy = mcp_support.FIXTURES  # the module's gateway (mcp_support)
# What a strict client may meet: OpenAI's strict subset, nothing else (tool_schemas).
ALLOWED = {
    "type", "description", "properties", "required", "additionalProperties", "items", "enum",
    "const", "anyOf", "pattern", "minimum", "maximum",
}  # fmt: skip
NOWHERE = "http://127.0.0.1:9"  # nothing listens: a call that reached it would say so


def _every_advertised() -> list[tuple[str, dict, dict]]:
    """(name, advertised schema, validating schema) of every MCP tool (with and without local
    paths) and every agents' function tool."""
    found = []
    for spec in tools.SPECS:
        for paths in (False, True):
            advertised = tools.advertised_schema(spec, paths)
            found.append((f"mcp:{spec.name}", advertised, tools.input_schema(spec, paths)))
    for definition in agent_tools.definitions():
        name = definition["name"]
        found.append((f"agents:{name}", definition["parameters"], agent_tools.parameters(name)))
    return found


def _walk(node, seen: list) -> None:
    if isinstance(node, dict):
        seen.append(node)
        for key in ("properties",):
            for sub in node.get(key, {}).values():
                _walk(sub, seen)
        if isinstance(node.get("items"), dict):
            _walk(node["items"], seen)
        for sub in node.get("anyOf", []):
            _walk(sub, seen)


def _nullable(node: dict) -> bool:
    kind = node.get("type")
    return (
        (isinstance(kind, list) and "null" in kind)
        or {"type": "null"} in node.get("anyOf", [])
        or None in node.get("enum", [])
    )


@pytest.mark.parametrize("name, advertised, validating", _every_advertised())
def test_every_advertised_schema_is_closed_without_ref_and_says_what_is_required(
    name, advertised, validating
):
    """Issue 52, item 1: an MCP tool's ``required`` is what the call needs (Claude Code fills
    every required property: anthropics/claude-code#95239); the agent sessions' function
    tools, sent to OpenAI in strict mode, keep every property required. Either way the
    optional ones take null, and the Agents SDK's strict conversion keeps them taking it."""
    assert "$ref" not in json.dumps(advertised) and "$defs" not in advertised
    strict = name.startswith("agents:")
    nodes: list = []
    _walk(advertised, nodes)
    for node in nodes:
        assert set(node) <= ALLOWED, (name, set(node) - ALLOWED)
        if "properties" in node or node.get("type") in ("object", ["object", "null"]):
            assert node["additionalProperties"] is False, (name, node)
            assert set(node["required"]) <= set(node["properties"]), (name, node)
            if strict:
                assert node["required"] == list(node["properties"]), (name, node)
        assert "(?" not in node.get("pattern", ""), (name, node["pattern"])
        # Cursor refuses every value of a property typed by a list (cursor/cursor#3540)
        assert strict or not isinstance(node.get("type"), list), (name, node)
    needed = validating.get("required", [])
    optional = set(validating["properties"]) - set(needed)
    assert advertised["required"] == (list(advertised["properties"]) if strict else needed)
    converted = ensure_strict_json_schema(copy.deepcopy(advertised))
    assert converted["required"] == list(advertised["properties"])
    for prop, sub in advertised["properties"].items():
        assert _nullable(sub) is (prop in optional), (name, prop)
        assert _nullable(converted["properties"][prop]) is (prop in optional), (name, prop)
    if strict:  # the Agents SDK's own strict conversion finds nothing to change
        assert converted == advertised


def test_a_blank_term_name_is_refused_by_every_door_and_nothing_is_sent():
    """``validation.inline_shared`` keeps term_name's own not-blank pattern beside the text
    rule: a blank tag is refused by the MCP tool (before any call: the gateway URL has no
    listener) and by the agents' put_draft, at its pointer; a tag with a tab is refused too."""
    runner = tools.Runner(GatewayAPI(NOWHERE, timeout=5, wait_seconds=0))
    spec = next(s for s in tools.SPECS if s.name == "put_draft")
    draft = {
        "title": "T", "content": "<p>C</p>", "excerpt": "", "slug": None,
        "seo": {"title": "", "description": "", "focus_keyword": ""},
        "featured_media": None, "body_media": None, "categories": [{"name": " ", "parent": 0}],
    }  # fmt: skip
    for tags, pointer in ((["   "], "/tags/0"), (["ok", "a\x07b"], "/tags/1")):
        with pytest.raises(Problem) as refused:
            runner.run(spec, "token", {"job_id": "J-1", **draft, "tags": tags}, None)
        pointers = [e["pointer"] for e in refused.value.body["errors"]]
        assert refused.value.slug == "validation-failed" and pointer in pointers, pointers
        assert "/categories/0" in pointers  # the blank name of a {name, parent} category
        with pytest.raises(exc.ValidationFailed) as again:
            arguments = tool_schemas.without_nulls({**draft, "tags": tags}, _draft_parameters())
            validation.check(agent_tools._validator("put_draft"), arguments, "draft")
        assert pointer in [e["pointer"] for e in again.value.problem()["errors"]]


def test_a_template_leftover_tag_is_refused_by_the_mcp_and_agent_doors():
    """Issue 44 (n8n-io/n8n#18181): a tag named ``{{ $json.tag }}`` is refused as
    ``template-leftover`` at its pointer by the MCP tool (before any call: the gateway URL
    has no listener) and by the agents' put_draft, as by the HTTP route (test_api_edges)."""
    runner = tools.Runner(GatewayAPI(NOWHERE, timeout=5, wait_seconds=0))
    spec = next(s for s in tools.SPECS if s.name == "put_draft")
    draft = {
        "title": "T", "content": "<p>C</p>", "excerpt": "", "slug": None,
        "seo": {"title": "", "description": "", "focus_keyword": ""},
        "featured_media": None, "body_media": None, "categories": None,
        "tags": ["news", "{{ $json.tag }}"],
    }  # fmt: skip
    with pytest.raises(Problem) as refused:
        runner.run(spec, "token", {"job_id": "J-1", **draft}, None)
    assert refused.value.slug == "template-leftover"
    assert [e["pointer"] for e in refused.value.body["errors"]] == ["/tags/1"]
    with pytest.raises(exc.TemplateLeftover) as again:
        arguments = tool_schemas.without_nulls(draft, _draft_parameters())
        validation.check(agent_tools._validator("put_draft"), arguments, "draft")
    assert [e["pointer"] for e in again.value.problem()["errors"]] == ["/tags/1"]


def _draft_parameters() -> dict:
    return agent_tools.parameters("put_draft")


class StrictModel(Model):
    """A model as OpenAI's strict mode makes one: it calls the planned tools with every
    property of each tool's schema, ``absent`` where the plan gives none (``null``; a model
    without strict mode may write the text ``"null"``, ``["null"]`` for an array:
    anthropics/claude-code#95239), and records the tools it was given and the outputs it got
    back."""

    def __init__(self, plan: list[tuple[str, dict]], strict: bool = True):
        self.strict = strict
        self.plan = list(plan)
        self.outputs: dict = {}  # call id -> the tool's output, in the order of the calls
        self.tools: dict = {}

    async def get_response(self, system_instructions, input, model_settings, tools, *a, **k):
        self.tools = {t.name: t for t in tools}
        if isinstance(input, list):
            for item in input:
                if item.get("type") == "function_call_output":
                    self.outputs.setdefault(item["call_id"], item["output"])
        if not self.plan:
            text = ResponseOutputText(text="done", type="output_text", annotations=[])
            done = ResponseOutputMessage(
                id="m", content=[text], role="assistant", status="completed", type="message"
            )
            return ModelResponse(output=[done], usage=Usage(), response_id=None)
        name, given = self.plan.pop(0)
        schema = self.tools[name].params_json_schema
        assert self.tools[name].strict_json_schema is self.strict  # converted or as listed
        arguments = {
            prop: given[prop] if prop in given else self._absent(sub)
            for prop, sub in schema["properties"].items()
        }
        call = ResponseFunctionToolCall(
            id=f"fc{len(self.plan)}", call_id=f"call{len(self.plan)}-{name}", name=name,
            arguments=json.dumps(arguments), type="function_call", status="completed",
        )  # fmt: skip
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def _absent(self, schema: dict):
        if self.strict:
            return None
        return ["null"] if takes_array(schema) else "null"

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def _plan(job_id: str) -> list[tuple[str, dict]]:
    image = base64.b64encode(png_bytes((30, 160, 60), 4)).decode()
    return [
        ("start_job", {"job_id": job_id, "site": SITE_NAME, "task_version": 1}),
        ("upload_media", {"job_id": job_id, "slot": "hero", "content_base64": image}),
        (
            "put_draft",
            {
                "job_id": job_id,
                "title": f"Strict {job_id}",
                "content": "<p>Called by a strict model.</p>",
                "excerpt": "Strict.",
                "seo": {"title": "S", "description": "Strict", "focus_keyword": "strict"},
                "featured_media": {"slot": "hero"},
            },
        ),
    ]


async def _run_agent(server, job_id: str, strict: bool) -> list[dict]:
    model = StrictModel(_plan(job_id), strict)
    async with server:
        agent = Agent(
            name="writer",
            instructions="Publish the job.",
            mcp_servers=[server],
            mcp_config={"convert_schemas_to_strict": strict},
        )
        config = RunConfig(model=model, tracing_disabled=True)
        await Runner.run(agent, "Draft it.", run_config=config, max_turns=8)
    assert not model.plan
    return [json.loads(_text(output)) for output in model.outputs.values()]


def _text(output) -> str:
    """A tool's output as the model got it: text, or content items (``input_text``)."""
    return output if isinstance(output, str) else "".join(item["text"] for item in output)


@pytest.mark.wordpress
@SQLITE_PASS_ONLY
@pytest.mark.parametrize("transport, strict", [("stdio", True), ("http", True), ("stdio", False)])
def test_the_agents_sdk_with_and_without_strict_schemas_uploads_and_drafts(
    gateway, gw_proxy, wp_site, tmp_path, transport, strict
):
    """Issue 52, item 1: with ``convert_schemas_to_strict`` every property is required again
    and a model sends ``null`` for each optional one; without it, the text ``"null"``
    (``["null"]`` for an array). Either way: one attachment, one post."""
    job_id = new_job_id()
    http = None
    if transport == "stdio":
        env = {"GATEWAY_URL": gateway.url, "GATEWAY_TOKEN": gateway.token}
        command, *args = mcp_command()
        server = MCPServerStdio(
            params={"command": command, "args": args, "env": env},
            client_session_timeout_seconds=60,
        )
    else:
        http = HttpMcp(gateway.url, tmp_path)
        server = MCPServerStreamableHttp(
            params={"url": http.url, "headers": {"Authorization": f"Bearer {gateway.token}"}},
            client_session_timeout_seconds=60,
        )
    try:
        outputs = anyio.run(_run_agent, server, job_id, strict)
    finally:
        if http is not None:
            http.stop()
    started, media, draft = outputs
    assert started["job_id"] == job_id and started["answer"]["task_version"] == 1, started
    assert media["operation_key"] == op_key(job_id, "media", "hero"), media
    assert media["state"] == draft["state"] == "CONFIRMED", draft
    live = gateway.call("GET", f"/v1/jobs/{job_id}/verification").json()
    assert live["ok"] is True and live["post_id"] == draft["answer"]["post_id"], live
    counts = count_objects(wp_site, [op_key(job_id, "draft"), op_key(job_id, "media", "hero")])
    assert list(counts.values()) == [1, 1]
