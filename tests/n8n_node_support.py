"""Helpers for the n8n community node tests (``tests/test_n8n_node.py``): build, lint and pack
``n8n-nodes-publishing-gateway`` the way its README says, install the tarball into an n8n user
folder's ``nodes/`` (as a self-hosted user does), and build the workflows that use the node.

Facts relied on (measured with n8n 1.123.81 and 2.8.4 on Node.js 20): n8n loads community
packages from ``{N8N_USER_FOLDER}/.n8n/nodes/node_modules`` (those listed in that folder's
``package.json``); a package's node type is ``{package name}.{node name}``; its ``n8n-workflow``
import resolves to n8n's own copy (the package has no runtime dependencies and installs without
its peer dependency).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

from n8n_support import N8nGateway

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "n8n-nodes-publishing-gateway"
PACKAGE_NAME = "n8n-nodes-publishing-gateway"
NODE_TYPE = f"{PACKAGE_NAME}.publishingGateway"
TOOL_TYPE = f"{PACKAGE_NAME}.publishingGatewayTool"
TRIGGER_TYPE = f"{PACKAGE_NAME}.publishingGatewayTrigger"
CREDENTIAL_TYPE = "publishingGatewayApi"
CREDENTIAL_ID = "pgwNodeCredent01"


def _run(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    done = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        output = f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        raise RuntimeError(f"{' '.join(args)} failed:\n{output}")
    return done


def build() -> Path:
    """``npm ci --ignore-scripts`` (when ``node_modules`` is missing), ``npm run build``
    (``tsc`` and the icons) and ``npm pack``: the tarball's path.

    Raises:
        RuntimeError: a step failed (its output is in the message).
    """
    # One build at a time per checkout: test processes running side by side share the folder.
    with open(PACKAGE.parent / ".n8n-node-build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (PACKAGE / "node_modules" / ".bin" / "tsc").exists():
            _run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"], PACKAGE)
        _run(["npm", "run", "build"], PACKAGE)
        packed = _run(["npm", "pack", "--ignore-scripts", "--json"], PACKAGE)
        name = json.loads(packed.stdout)[0]["filename"]
        return PACKAGE / name


def lint() -> subprocess.CompletedProcess:
    """``n8n-node lint`` (``@n8n/node-cli``, the linter n8n's verification uses)."""
    return subprocess.run(
        ["npx", "n8n-node", "lint"],
        cwd=PACKAGE,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "CI": "true", "NO_COLOR": "1"},
    )


def install_into(user_folder: Path, tarball: Path) -> Path:
    """Install the packed tarball the way the README says for self-hosted n8n:
    ``cd ~/.n8n/nodes && npm install --omit=peer <tarball>``. Returns the nodes folder."""
    nodes = user_folder / ".n8n" / "nodes"
    nodes.mkdir(parents=True, exist_ok=True)
    if not (nodes / "package.json").exists():
        manifest = {"name": "installed-nodes", "private": True}
        (nodes / "package.json").write_text(json.dumps(manifest))
    _run(
        ["npm", "install", "--omit=peer", "--ignore-scripts", "--no-audit", "--no-fund",
         str(tarball)],
        nodes,
    )  # fmt: skip
    return nodes


def credential(base_url: str, token: str) -> dict:
    """The node's credential as ``n8n import:credentials`` takes it."""
    return {
        "id": CREDENTIAL_ID,
        "name": "Publishing Gateway",
        "type": CREDENTIAL_TYPE,
        "data": {"baseUrl": base_url, "token": token},
    }


def _node(name: str, node_type: str, version: float, x: int, parameters: dict, **extra) -> dict:
    return {
        "id": f"{abs(hash((name, node_type))) % 10**12:012d}",
        "name": name,
        "type": node_type,
        "typeVersion": version,
        "position": [x, 300],
        "parameters": parameters,
        **extra,
    }


GATEWAY_CREDENTIALS = {CREDENTIAL_TYPE: {"id": CREDENTIAL_ID, "name": "Publishing Gateway"}}


def article_workflow(workflow_id: str, items: list[dict], on_error: str | None = None) -> dict:
    """Manual trigger → a Set node that emits ``items`` → the node's "Publish Article"
    operation (one run per item). ``on_error``: the node's "On Error" setting
    (``continueRegularOutput`` = Continue On Fail, ``continueErrorOutput``)."""
    extra = {"onError": on_error} if on_error else {}
    gateway = _node(
        "Publish article",
        NODE_TYPE,
        1,
        500,
        {"resource": "article", "operation": "publishArticle"},
        credentials=GATEWAY_CREDENTIALS,
        **extra,
    )
    items_node = _node(
        "Articles",
        "n8n-nodes-base.set",
        3.4,
        200,
        {"mode": "raw", "jsonOutput": json.dumps({"items": items}), "options": {}},
    )
    split = _node("One item each", "n8n-nodes-base.splitOut", 1, 350, {"fieldToSplitOut": "items"})
    return {
        "id": workflow_id,
        "name": f"node test {workflow_id}",
        "active": False,
        "nodes": [
            _node("Start", "n8n-nodes-base.manualTrigger", 1, 0, {}),
            items_node,
            split,
            gateway,
        ],
        "connections": {
            "Start": {"main": [[{"node": "Articles", "type": "main", "index": 0}]]},
            "Articles": {"main": [[{"node": "One item each", "type": "main", "index": 0}]]},
            "One item each": {"main": [[{"node": "Publish article", "type": "main", "index": 0}]]},
        },
        "settings": {"executionOrder": "v1"},
    }


def run_data(result: dict | None, node: str) -> list[list[dict]]:
    """The items of each output of ``node``'s last run in an ``n8n execute`` result."""
    if not result:
        return []
    runs = result.get("data", {}).get("resultData", {}).get("runData", {}).get(node) or []
    if not runs:
        return []
    outputs = runs[-1].get("data", {}).get("main", [])
    return [[item["json"] for item in (output or [])] for output in outputs]


class GatewayServer(N8nGateway):
    """``gateway serve`` on its own port and ledger (a tenant of its own on the shared test
    WordPress), restartable on the same ledger: killed mid-run, started again."""

    def __init__(
        self, folder: Path, site: dict, tenant: str, editors_url: str, env: dict | None = None
    ) -> None:
        super().__init__(folder, site, tenant, editors_url, token_name="n8n-node", env=env)

    def requests_logged(self, method: str, path_suffix: str) -> list[int]:
        """Statuses of the gateway's ``request`` log lines for ``METHOD …path_suffix``."""
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if (
                isinstance(record, dict)
                and record.get("message") == "request"
                and record.get("method") == method
                and str(record.get("path", "")).endswith(path_suffix)
            ):
                found.append(int(record["status"]))
        return found


def agent_workflow(workflow_id: str, job_id: str, chat_model_url: str) -> dict:
    """Manual trigger → a Set node giving the conversation's job → n8n's AI Agent, with n8n's
    OpenAI chat model (chat completions, ``baseURL`` = ``chat_model_url``) and the node as its
    tool ("Job: Get"). The tool's job id is the conversation's, from the workflow
    (``$('Conversation')``), never a ``$fromAI`` parameter the model fills."""
    conversation = _node(
        "Conversation",
        "n8n-nodes-base.set",
        3.4,
        200,
        {"mode": "raw", "jsonOutput": json.dumps({"job_id": job_id}), "options": {}},
    )
    agent = _node(
        "AI Agent",
        "@n8n/n8n-nodes-langchain.agent",
        2.2,
        450,
        {"promptType": "define", "text": "What is the state of this conversation's job?",
         "options": {}},
    )  # fmt: skip
    model = _node(
        "OpenAI Chat Model",
        "@n8n/n8n-nodes-langchain.lmChatOpenAi",
        1.2,
        400,
        {"model": {"__rl": True, "mode": "id", "value": "gpt-4.1-mini"},
         "options": {"baseURL": chat_model_url}},
        credentials={"openAiApi": {"id": "pgwNodeOpenAi001", "name": "OpenAI stand-in"}},
    )  # fmt: skip
    tool = _node(
        "Publishing Gateway job",
        TOOL_TYPE,
        1,
        550,
        {"resource": "job", "operation": "get",
         "jobId": "={{ $('Conversation').first().json.job_id }}"},
        credentials=GATEWAY_CREDENTIALS,
    )  # fmt: skip
    link = {"main": [[{"node": "Conversation", "type": "main", "index": 0}]]}
    return {
        "id": workflow_id,
        "name": f"agent test {workflow_id}",
        "active": False,
        "nodes": [_node("Start", "n8n-nodes-base.manualTrigger", 1, 0, {}), conversation,
                  agent, model, tool],
        "connections": {
            "Start": link,
            "Conversation": {"main": [[{"node": "AI Agent", "type": "main", "index": 0}]]},
            "OpenAI Chat Model": {
                "ai_languageModel": [[{"node": "AI Agent", "type": "ai_languageModel",
                                       "index": 0}]]
            },
            "Publishing Gateway job": {
                "ai_tool": [[{"node": "AI Agent", "type": "ai_tool", "index": 0}]]
            },
        },
        "settings": {"executionOrder": "v1"},
    }  # fmt: skip


def openai_credential(api_key: str, base_url: str) -> dict:
    return {
        "id": "pgwNodeOpenAi001",
        "name": "OpenAI stand-in",
        "type": "openAiApi",
        "data": {"apiKey": api_key, "url": base_url},
    }


def trigger_workflow(workflow_id: str, events: list[str], forward_url: str) -> dict:
    """The polling trigger (every minute; n8n also polls once when it activates the workflow)
    → an HTTP Request node that POSTs each event to ``forward_url`` (the test's receiver)."""
    trigger = _node(
        "Publishing Gateway Trigger",
        TRIGGER_TYPE,
        1,
        0,
        {"pollTimes": {"item": [{"mode": "everyMinute"}]}, "events": events},
        credentials=GATEWAY_CREDENTIALS,
    )
    forward = _node(
        "Forward event",
        "n8n-nodes-base.httpRequest",
        4.2,
        250,
        {"method": "POST", "url": forward_url, "sendBody": True, "specifyBody": "json",
         "jsonBody": "={{ JSON.stringify($json) }}", "options": {}},
    )  # fmt: skip
    return {
        "id": workflow_id,
        "name": f"trigger test {workflow_id}",
        "active": False,
        "nodes": [trigger, forward],
        "connections": {
            "Publishing Gateway Trigger": {
                "main": [[{"node": "Forward event", "type": "main", "index": 0}]]
            }
        },
        "settings": {"executionOrder": "v1"},
    }


def package_descriptions() -> dict[str, dict]:
    """Node type name -> ``{"versions", "properties"}`` of the built package's nodes, read
    from ``dist/`` with Node.js, in
    the shape of :func:`n8n_support.node_descriptions` (a polling trigger also takes n8n's
    ``pollTimes``)."""
    script = (
        "const p=require('./package.json');const out={};"
        "for(const f of p.n8n.nodes){const m=require('./'+f);"
        "for(const k of Object.keys(m)){const d=new m[k]().description;"
        "out[p.name+'.'+d.name]={versions:[].concat(d.version),"
        "properties:d.properties.map(x=>x.name).concat(d.polling?['pollTimes']:[])};}}"
        "console.log(JSON.stringify(out));"
    )
    done = _run(["node", "-e", script], PACKAGE)
    found = {}
    for name, description in json.loads(done.stdout).items():
        found[name] = {
            "versions": {float(v) for v in description["versions"]},
            "properties": set(description["properties"]),
        }
    return found
