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
import hashlib
import json
import os
import subprocess
import uuid
from pathlib import Path

import requests
from n8n_support import N8nGateway

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "n8n-nodes-publishing-gateway"
PACKAGE_NAME = "n8n-nodes-publishing-gateway"
NODE_TYPE = f"{PACKAGE_NAME}.publishingGateway"
TOOL_TYPE = f"{PACKAGE_NAME}.publishingGatewayTool"
TRIGGER_TYPE = f"{PACKAGE_NAME}.publishingGatewayTrigger"
EVENT_TRIGGER_TYPE = f"{PACKAGE_NAME}.publishingGatewayEventTrigger"
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
    # One build per checkout and source: test processes running side by side share the folder,
    # and a second build would empty ``dist/`` under a test of the other process reading it.
    with open(PACKAGE.parent / ".n8n-node-build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp, sources = PACKAGE / "dist" / ".built-from", _sources_digest()
        packed = (
            PACKAGE
            / f"{PACKAGE_NAME}-{json.loads((PACKAGE / 'package.json').read_text())['version']}.tgz"
        )
        if packed.exists() and stamp.exists() and stamp.read_text() == sources:
            return packed
        if not (PACKAGE / "node_modules" / ".bin" / "tsc").exists():
            _run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"], PACKAGE)
        _run(["npm", "run", "build"], PACKAGE)
        done = _run(["npm", "pack", "--ignore-scripts", "--json"], PACKAGE)
        stamp.write_text(sources)
        return PACKAGE / json.loads(done.stdout)[0]["filename"]


def _sources_digest() -> str:
    """SHA-256 over the package's sources (path and bytes of every file ``npm run build`` and
    ``npm pack`` read), so that an unchanged checkout is built once."""
    digest = hashlib.sha256()
    names = ("package.json", "package-lock.json", "tsconfig.json", "README.md", "CHANGELOG.md")
    files = [PACKAGE / name for name in names]
    for folder in ("nodes", "credentials", "icons"):
        files += sorted(path for path in (PACKAGE / folder).rglob("*") if path.is_file())
    for path in files:
        digest.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


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
WRONG_CREDENTIAL_ID = "pgwNodeWrongTok1"
WRONG_CREDENTIALS = {
    CREDENTIAL_TYPE: {"id": WRONG_CREDENTIAL_ID, "name": "Publishing Gateway (wrong token)"}
}


def wrong_credential(base_url: str) -> dict:
    """The node's credential with a token the gateway never issued."""
    return {
        "id": WRONG_CREDENTIAL_ID,
        "name": "Publishing Gateway (wrong token)",
        "type": CREDENTIAL_TYPE,
        "data": {"baseUrl": base_url, "token": "pgw_not-a-token-of-this-gateway"},
    }


def webhook_credential(token: str) -> dict:
    """The Header Auth credential the shipped workflows' webhooks ask for
    (``n8n_workflows/examples/node_credentials.json``, ``<webhook-token>`` filled in)."""
    return {
        "id": "pgwWebhookToken1",
        "name": "Workflow webhooks token",
        "type": "httpHeaderAuth",
        "data": {"name": "Authorization", "value": f"Bearer {token}"},
    }


def _webhook(path: str, response_mode: str = "lastNode") -> dict:
    parameters = {"httpMethod": "POST", "path": path, "responseMode": response_mode,
                  "options": {}}  # fmt: skip
    if response_mode == "lastNode":
        parameters["responseData"] = "allEntries"
    webhook_id = str(uuid.uuid5(uuid.NAMESPACE_URL, path))
    return _node("Webhook", "n8n-nodes-base.webhook", 2, 0, parameters, webhookId=webhook_id)


def _chain(workflow_id: str, name: str, nodes: list[dict]) -> dict:
    connections = {
        a["name"]: {"main": [[{"node": b["name"], "type": "main", "index": 0}]]}
        for a, b in zip(nodes, nodes[1:], strict=False)
    }
    return {
        "id": workflow_id,
        "name": name,
        "active": False,
        "nodes": nodes,
        "connections": connections,
        "settings": {"executionOrder": "v1"},
    }


def items_workflow(workflow_id: str, path: str, on_error: str | None) -> dict:
    """``POST /webhook/{path}`` with ``{"items": [article, ...]}`` → one item each → the
    node's Publish Article (version 2: Site and Task Version from the item, the article JSON
    without them); the webhook answers with every item of the node's output (n8n's "last
    node", all entries). ``on_error``: the node's On Error (``continueRegularOutput`` =
    Continue On Fail; None: stop the workflow)."""
    extra = {"onError": on_error} if on_error else {}
    gateway = _node(
        "Publish article",
        NODE_TYPE,
        2,
        500,
        {"resource": "article", "operation": "publishArticle", "jobId": "={{ $json.job_id }}",
         "site": "={{ $json.site || 'blog' }}", "taskVersion": "={{ $json.task_version || 1 }}",
         "article": "={{ { article: $json.article, images: $json.images } }}"},
        credentials=GATEWAY_CREDENTIALS,
        **extra,
    )  # fmt: skip
    split = _node("One item each", "n8n-nodes-base.splitOut", 1, 250,
                  {"fieldToSplitOut": "body.items"})  # fmt: skip
    return _chain(workflow_id, f"node test {path}", [_webhook(path), split, gateway])


def fields_workflow(workflow_id: str, path: str) -> dict:
    """``POST /webhook/{path}`` with ``{job_id, title, content, excerpt, seo, categories,
    hero_url}`` → the node's version 3 Publish Article with its fields (Article Input:
    Fields; categories as ids, as its list gives them; the featured image from a URL in the
    slot ``hero``) → Job: Get Many (version 3, phase approval_pending, Limit 2); the webhook
    answers every item of the last node."""
    body = "$('Webhook').first().json.body"
    publish = _node(
        "Publish from fields",
        NODE_TYPE,
        3,
        250,
        {"resource": "article", "operation": "publishArticle", "articleInput": "fields",
         "jobId": f"={{{{ {body}.job_id }}}}", "site": "blog", "taskVersion": 1,
         "title": f"={{{{ {body}.title }}}}", "content": f"={{{{ {body}.content }}}}",
         "excerpt": f"={{{{ {body}.excerpt }}}}", "seoTitle": f"={{{{ {body}.seo.title }}}}",
         "seoDescription": f"={{{{ {body}.seo.description }}}}",
         "focusKeyword": f"={{{{ {body}.seo.focus_keyword }}}}",
         "categories": f"={{{{ {body}.categories }}}}", "featuredImage": "url",
         "featuredImageUrl": f"={{{{ {body}.hero_url }}}}", "featuredSlot": "hero",
         "featuredAlt": "The hero"},
        credentials=GATEWAY_CREDENTIALS,
    )  # fmt: skip
    listing = _node(
        "Get many jobs",
        NODE_TYPE,
        3,
        500,
        {"resource": "job", "operation": "list", "phase": "approval_pending",
         "returnAll": False, "limit": 2},
        credentials=GATEWAY_CREDENTIALS,
    )  # fmt: skip
    return _chain(workflow_id, f"node test {path}", [_webhook(path), publish, listing])


def editor_session(n8n_url: str) -> requests.Session:
    """A session of n8n's editor, as its browser has one: the owner set up (a fresh n8n has
    none) or signed in (same routes on 2.8 and 2.41). Raises on any other answer."""
    session = requests.Session()
    session.headers["browser-id"] = "pgw-node-tests"  # n8n binds its auth cookie to it
    owner = {"email": "owner@example.invalid", "firstName": "Node", "lastName": "Tests",
             "password": "Pgw-node-tests-1"}  # fmt: skip
    answer = session.post(f"{n8n_url}/rest/owner/setup", json=owner, timeout=60)
    if answer.status_code != 200:  # set up already: sign in
        signin = {"emailOrLdapLoginId": owner["email"], "email": owner["email"],
                  "password": owner["password"]}  # fmt: skip
        answer = session.post(f"{n8n_url}/rest/login", json=signin, timeout=60)
    answer.raise_for_status()
    return session


def deactivate_in_the_editor(n8n_url: str, workflow_id: str) -> None:
    """Deactivate (2.x: unpublish) a workflow as the editor's toggle does, in the running n8n
    (``POST /rest/workflows/{id}/deactivate``, 2.8 and 2.41): n8n removes its triggers, so a
    webhook trigger's ``delete`` runs. Raises on any other answer than 200."""
    answer = editor_session(n8n_url).post(
        f"{n8n_url}/rest/workflows/{workflow_id}/deactivate", json={}, timeout=120
    )
    answer.raise_for_status()


def event_trigger_workflow(workflow_id: str, events: list[str]) -> dict:
    """The webhook trigger (``events``) → a No Op: each delivery's item is the execution's
    output, read from n8n's own database."""
    trigger = _node(
        "Publishing Gateway Trigger",
        EVENT_TRIGGER_TYPE,
        1,
        0,
        {"events": events},
        credentials=GATEWAY_CREDENTIALS,
        webhookId=str(uuid.uuid5(uuid.NAMESPACE_URL, f"event-trigger/{workflow_id}")),
    )
    heard = _node("Heard", "n8n-nodes-base.noOp", 1, 250, {})
    return _chain(workflow_id, f"event trigger test {workflow_id}", [trigger, heard])


def listed_in_the_editor(n8n_url: str, method: str, parameters: dict) -> list[dict]:
    """What n8n's editor lists for one of the node's (version 3) ``loadOptions`` methods, as
    its browser asks for it: the owner set up (a fresh n8n has none) and signed in, then
    ``POST /rest/dynamic-node-parameters/options`` with the node's current parameters and the
    gateway credential (same route on 1.123, 2.8 and 2.41). Raises on any other answer."""
    session = editor_session(n8n_url)
    answer = session.post(
        f"{n8n_url}/rest/dynamic-node-parameters/options",
        json={"nodeTypeAndVersion": {"name": NODE_TYPE, "version": 3}, "methodName": method,
              "path": "parameters.categories", "currentNodeParameters": parameters,
              "credentials": GATEWAY_CREDENTIALS},
        timeout=120,
    )  # fmt: skip
    answer.raise_for_status()
    return answer.json()["data"]


def merged(workflow_id: str, name: str, parts: dict[str, dict]) -> dict:
    """One workflow holding every part's nodes (``{tag: workflow}``), each node renamed
    ``"{tag}: {name}"`` (connections and ``$('name')`` references with it): webhooks on
    several paths in one workflow, activated once."""
    nodes, connections = [], {}
    for tag, part in parts.items():
        names = {n["name"]: f"{tag}: {n['name']}" for n in part["nodes"]}
        for original in part["nodes"]:
            node = json.loads(json.dumps(original))
            node["name"] = names[node["name"]]
            node["id"] = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{workflow_id}/{node['name']}"))
            text = json.dumps(node["parameters"])
            for old, new in names.items():
                text = text.replace(f"$('{old}')", f"$('{new}')")
            node["parameters"] = json.loads(text)
            nodes.append(node)
        for source, kinds in part["connections"].items():
            connections[names[source]] = {
                kind: [[{**t, "node": names[t["node"]]} for t in branch] for branch in branches]
                for kind, branches in kinds.items()
            }
    return {"id": workflow_id, "name": name, "active": False, "nodes": nodes,
            "connections": connections, "settings": {"executionOrder": "v1"}}  # fmt: skip


def run_data(result: dict | None, node: str) -> list[list[dict]]:
    """The items of each output of ``node``'s last run in an execution's data."""
    if not result:
        return []
    runs = result.get("resultData", result.get("data", {}).get("resultData", {}))
    runs = runs.get("runData", {}).get(node) or []
    if not runs:
        return []
    outputs = runs[-1].get("data", {}).get("main", [])
    return [[item["json"] for item in (output or [])] for output in outputs]


def unflatten(text: str):
    """n8n's stored execution data (``execution_data.data``, the ``flatted`` format: a JSON
    array whose first entry is the value, every string and object inside referred to by its
    index as a string) as plain JSON."""
    table = json.loads(text)
    revived: dict[int, object] = {}

    def revive(index: int):
        if index in revived:
            return revived[index]
        value = table[index]
        if isinstance(value, list):
            revived[index] = out = []
            out.extend(resolve(v) for v in value)
            return out
        if isinstance(value, dict):
            revived[index] = out = {}
            for key, member in value.items():
                out[key] = resolve(member)
            return out
        revived[index] = value
        return value

    def resolve(value):
        return revive(int(value)) if isinstance(value, str) else value

    return revive(0)


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


def agent_workflow(workflow_id: str, path: str, chat_model_url: str, tool: dict) -> dict:
    """``POST /webhook/{path}`` with ``{"job_id"}`` → n8n's AI Agent, with n8n's OpenAI chat
    model (chat completions, ``baseURL`` = ``chat_model_url``) and ``tool`` (the node as its
    tool, from :func:`job_tool` or :func:`article_tool`); the webhook answers the agent's
    output. The tool's job id is the request's, from the workflow (``$('Webhook')``), never a
    parameter the model fills."""
    agent = _node(
        "AI Agent",
        "@n8n/n8n-nodes-langchain.agent",
        2.2,
        450,
        {"promptType": "define", "text": "Do what the tool is for with this conversation's job.",
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
    workflow = _chain(workflow_id, f"agent test {path}", [_webhook(path), agent])
    workflow["nodes"] += [model, tool]
    workflow["connections"].update({
        "OpenAI Chat Model": {
            "ai_languageModel": [[{"node": "AI Agent", "type": "ai_languageModel", "index": 0}]]
        },
        tool["name"]: {"ai_tool": [[{"node": "AI Agent", "type": "ai_tool", "index": 0}]]},
    })  # fmt: skip
    return workflow


JOB_OF_THE_REQUEST = "={{ $('Webhook').first().json.body.job_id }}"


def job_tool() -> dict:
    """The node as a tool: Job → Get, for the request's job."""
    return _node(
        "Publishing Gateway job",
        TOOL_TYPE,
        1,
        550,
        {"resource": "job", "operation": "get", "jobId": JOB_OF_THE_REQUEST},
        credentials=GATEWAY_CREDENTIALS,
    )


def article_tool() -> dict:
    """The node as a tool (version 2): Article → Publish Article for the request's job, with
    the site and task version the workflow's author set; the article JSON is the model's
    (``$fromAI``)."""
    return _node(
        "Publishing Gateway article",
        TOOL_TYPE,
        2,
        550,
        {"resource": "article", "operation": "publishArticle", "jobId": JOB_OF_THE_REQUEST,
         "site": "blog", "taskVersion": 1,
         "article": "={{ $fromAI('article', 'The article: article (title, content, excerpt, "
                    "seo) and images (slot, content_base64, filename, alt_text)', 'json') }}"},
        credentials=GATEWAY_CREDENTIALS,
    )  # fmt: skip


def openai_credential(api_key: str, base_url: str) -> dict:
    return {
        "id": "pgwNodeOpenAi001",
        "name": "OpenAI stand-in",
        "type": "openAiApi",
        "data": {"apiKey": api_key, "url": base_url},
    }


def trigger_workflow(
    workflow_id: str, events: list[str], forward_url: str, credentials: dict | None = None
) -> dict:
    """The polling trigger (every minute; n8n also polls once when it activates the workflow,
    and that first poll starts the feed from now) → an HTTP Request node that POSTs each event
    to ``forward_url`` (the test's receiver)."""
    trigger = _node(
        "Publishing Gateway Trigger",
        TRIGGER_TYPE,
        1,
        0,
        {"pollTimes": {"item": [{"mode": "everyMinute"}]}, "events": events},
        credentials=credentials or GATEWAY_CREDENTIALS,
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


#: Node.js run against the built ``dist/`` (``n8n-workflow`` from the package's dev
#: dependencies): the node's retry, error items and trigger with a scripted request helper in
#: place of n8n's, waits shortened (``RETRY.baseSeconds``; the retry window 2 s instead of
#: 120, or a node's own Retry For with ``setRetryWindow``); prints one JSON object of findings.
CONTRACT_SCRIPT = r"""
const { NodeApiError } = require('n8n-workflow');
const gc = require('./dist/nodes/PublishingGateway/GatewayClient.js');
const { PublishingGatewayTrigger } = require(
  './dist/nodes/PublishingGatewayTrigger/PublishingGatewayTrigger.node.js');
gc.RETRY.baseSeconds = 0.002;
gc.RETRY.windowSeconds = 2;  // Retry For, scaled down: a Retry-After of 1 s still fits
const node = { id: '1', name: 'Gateway', type: 'x.publishingGateway', typeVersion: 2,
  position: [0, 0], parameters: {} };
const problem = (status, slug, retryable, headers = {}) => () => ({ statusCode: status, headers,
  body: { type: gc.PROBLEM_BASE + slug, title: slug, status, detail: slug, retryable } });
const ok = (status = 200, body = {}) => () => ({ statusCode: status, headers: {}, body });
const cut = (code, message) => () => {  // what n8n's helper throws: the axios error wrapped
  const error = new Error(message); error.code = code; error.name = 'AxiosError';
  throw new NodeApiError(node, error);
};
function context(script, extra = {}) {
  const calls = [];
  return { calls, ctx: { getNode: () => node, logger: { warn() {} },
    getCredentials: async () => ({ baseUrl: 'http://gw/' }),
    helpers: { async httpRequestWithAuthentication(_name, options) {
      calls.push(`${options.method} ${options.url.replace('http://gw', '')}` +
        (options.qs && options.qs.cursor ? `?cursor=${options.qs.cursor}` : '') +
        (options.body ? ' ' + JSON.stringify(options.body) : ''));
      return script.shift()(options);
    } }, ...extra } };
}
async function run(script, window, method = 'PUT', path = '/v1/jobs/J/draft', body = { a: 1 }) {
  const { calls, ctx } = context(script);
  if (window !== undefined) gc.setRetryWindow(ctx, window);
  const started = Date.now();
  try {
    const answer = await gc.gatewayRequest(ctx, method, path, body);
    return { calls, answer, seconds: (Date.now() - started) / 1000 };
  } catch (error) {
    return { calls, seconds: (Date.now() - started) / 1000, name: error.name,
      httpCode: error.httpCode, item: gc.errorItemJson(error) };
  }
}
async function poll(script, state, parameters) {
  const { calls, ctx } = context(script, {
    getNodeParameter: (name, fallback) => (name in parameters ? parameters[name] : fallback),
    getWorkflowStaticData: () => state, getMode: () => 'trigger' });
  try {
    const out = await new PublishingGatewayTrigger().poll.call(ctx);
    return { calls, emitted: out ? out[0].map((i) => i.json.job_id) : [], state };
  } catch (error) {
    return { calls, error: error.message, name: error.name, state };
  }
}
const { loadOptions } = require('./dist/nodes/PublishingGateway/ArticleFields.js');
async function listed(script, site) {  // the Categories list of the node's editor
  const { calls, ctx } = context(script, {
    getCurrentNodeParameter: (name) => (name === 'site' ? site : undefined) });
  try {
    return { calls, options: await loadOptions.getCategories.call(ctx) };
  } catch (error) {
    return { calls, error: error.message };
  }
}
const changes = (ids, cursor) => ok(200, { next_cursor: cursor,
  changes: ids.map((id) => ({ job_id: id, events: ['approval_pending'] })) });
(async () => {
  const out = {
    retry_after: await run([problem(503, 'wordpress-unavailable', true, { 'retry-after': '1' }),
      ok(201)]),
    too_long: await run([problem(429, 'rate-limited', true, { 'retry-after': '120' })]),
    definite_502: await run([problem(502, 'wordpress-refused', false)]),
    retryable_502: await run(Array(60).fill(problem(502, 'media-download-failed', true)), 0.5),
    bug_500: await run([problem(500, 'internal-server-error', false), ok(200)]),
    refused: await run([cut('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:1'),
      cut('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:1'), ok(200)]),
    reset: await run([cut('ECONNRESET', 'socket hang up'),
      cut('ECONNREFUSED', 'connect ECONNREFUSED 127.0.0.1:1'), ok(200), ok(200)]),
    unreachable: await run(Array(60).fill(cut('ECONNREFUSED', 'connect ECONNREFUSED x')), 0.5),
    no_retry: await run(Array(60).fill(cut('ECONNREFUSED', 'connect ECONNREFUSED x')), 0),
    shorter: await run([problem(503, 'wordpress-unavailable', true, { 'retry-after': '1' }),
      ok(201)], 0.5),
    now: await poll([ok(200, { next_cursor: 'c-now', changes: [] }), changes(['B'], 'c-2')], {},
      { events: ['approval_pending'] }),
    old_gateway: await poll([problem(422, 'validation-failed', false), changes(['OLD'], 'c-1')],
      {}, { events: ['approval_pending'] }),
    history: await poll([changes(['OLD'], 'c-1')], {},
      { events: ['approval_pending'], startFrom: 'history' }),
    token: await poll([problem(401, 'unauthenticated', false)], {},
      { events: ['approval_pending'] }),
  };
  const next = [changes(['B'], 'c-2')];
  out.now_next = await poll(next, out.now.state, { events: ['approval_pending'] });
  const terms = { site: 'blog', taxonomy: 'categories', truncated: false, terms: [
    { id: 3, name: 'Sports', parent: 0 }, { id: 5, name: 'Local', parent: 3 },
    { id: 7, name: 'Arts & Crafts', parent: 0 }] };
  out.categories = await listed([ok(200, terms)], 'blog');
  out.expression_site = await listed([], '={{ $json.site }}');
  console.log(JSON.stringify(out));
})();
"""


def contract() -> dict:
    """The findings of :data:`CONTRACT_SCRIPT` (run with Node.js in the package folder)."""
    return json.loads(_run(["node", "-e", CONTRACT_SCRIPT], PACKAGE, timeout=120).stdout)


#: Node.js run against the built ``dist/``: the webhook trigger's activation methods with a
#: scripted request helper in place of n8n's, and its ``webhook()`` on deliveries signed by
#: the test in Python (``standardwebhooks``); reads ``{"secret", "deliveries": [{"name",
#: "headers", "body"}]}`` on stdin, prints one JSON object of findings.
EVENT_TRIGGER_SCRIPT = r"""
const gc = require('./dist/nodes/PublishingGateway/GatewayClient.js');
const { PublishingGatewayEventTrigger } = require(
  './dist/nodes/PublishingGatewayEventTrigger/PublishingGatewayEventTrigger.node.js');
gc.RETRY.baseSeconds = 0.002;
const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const URL = 'http://n8n.test/webhook/abc/webhook';
const TEST_URL = 'http://n8n.test/webhook-test/abc/webhook';  // the editor listening
const node = { id: '1', name: 'Gateway Trigger', type: 'x', typeVersion: 1, position: [0, 0],
  parameters: {} };
const ok = (status, body = {}) => () => ({ statusCode: status, headers: {}, body });
const problem = (status, slug) => () => ({ statusCode: status, headers: {}, body: {
  type: gc.PROBLEM_BASE + slug, title: slug, status, detail: slug, retryable: false } });
const trigger = new PublishingGatewayEventTrigger();
async function hook(method, script, state, events, url = URL) {
  const calls = [];
  const ctx = { getNode: () => node, logger: { warn() {} }, getWorkflow: () => ({ id: 'wf1' }),
    getNodeParameter: (name) => (name === 'events' ? events : undefined),
    getNodeWebhookUrl: () => url, getWorkflowStaticData: () => state,
    getCredentials: async () => ({ baseUrl: 'http://gw/' }),
    helpers: { async httpRequestWithAuthentication(_name, options) {
      calls.push(`${options.method} ${options.url.replace('http://gw', '')}` +
        (options.body ? ' ' + JSON.stringify(options.body) : ''));
      return script.shift()(options);
    } } };
  try {
    const answer = await trigger.webhookMethods.default[method].call(ctx);
    return { calls, answer, state };
  } catch (error) {
    return { calls, error: error.message, state };
  }
}
async function deliver(delivery, events) {
  let status = null, sent = null;
  const response = { status(code) { status = code; return this; },
    json(body) { sent = body; return this; } };
  const headers = Object.fromEntries(Object.entries(delivery.headers).map(
    ([k, v]) => [k.toLowerCase(), v]));
  const ctx = { getNode: () => node, logger: { warn() {} },
    getWorkflowStaticData: () => ({ endpoints: {
      [TEST_URL]: { id: 'ep_t', secret: input.other, events: ['approved'] },
      [URL]: { id: 'ep_1', secret: input.secret, events: ['approved'] } } }),
    getRequestObject: () => ({ rawBody: Buffer.from(delivery.body, 'utf8') }),
    getResponseObject: () => response, getHeaderData: () => headers,
    getBodyData: () => JSON.parse(delivery.body),
    getNodeParameter: (name) => (name === 'events' ? events : undefined),
    helpers: { returnJsonArray: (v) => [].concat(v).map((json) => ({ json })) } };
  const out = await trigger.webhook.call(ctx);
  return { status, sent, noWebhookResponse: out.noWebhookResponse === true,
    items: out.workflowData ? out.workflowData[0].map((i) => i.json) : null };
}
const endpoint = (id, url, types) => ({ id, url, event_types: types, description: null });
(async () => {
  const out = { deliveries: {} };
  out.create = await hook('create', [
    ok(200, { endpoints: [endpoint('ep_old', URL, ['approved']),
      endpoint('ep_other', 'http://elsewhere/x', ['approved'])] }),
    ok(204), ok(201, { ...endpoint('ep_new', URL, ['approved']), secret: 'whsec_AAAA' }),
    ok(200, { endpoints: [endpoint('ep_new', URL, ['approved']),
      endpoint('ep_twin', URL, ['approved'])] }), ok(204)],
    {}, ['approved', 'approved']);
  out.no_secret = await hook('create', [ok(200, { endpoints: [] }),
    ok(201, { ...endpoint('ep_x', URL, ['approved']), secret: null })], {}, ['approved']);
  const registered = () => ({ endpoints: { [URL]: { id: 'ep_new', secret: 'whsec_AAAA',
    events: ['approved'] } } });
  out.exists = await hook('checkExists', [ok(200, { endpoints: [endpoint('ep_new', URL,
    ['approved'])] })], registered(), ['approved']);
  out.changed = await hook('checkExists', [ok(200, { endpoints: [endpoint('ep_new', URL,
    ['approved'])] }), ok(204)], registered(), ['approved', 'published']);
  out.gone = await hook('checkExists', [ok(200, { endpoints: [] })], registered(), ['approved']);
  out.never = await hook('checkExists', [], {}, ['approved']);
  out.deleted = await hook('delete', [problem(404, 'not-found')], registered(), ['approved']);
  // the editor listens for a test event: its URL's endpoint beside the production one
  const both = registered();
  out.test_exists = await hook('checkExists', [], both, ['approved'], TEST_URL);
  out.test_create = await hook('create', [ok(200, { endpoints: [endpoint('ep_new', URL,
    ['approved'])] }), ok(201, { ...endpoint('ep_t', TEST_URL, ['approved']),
    secret: 'whsec_BBBB' }), ok(200, { endpoints: [] })], both, ['approved'], TEST_URL);
  out.test_delete = await hook('delete', [ok(204)], both, ['approved'], TEST_URL);
  out.refused = await hook('create', [problem(401, 'unauthenticated')], {}, ['approved']);
  for (const delivery of input.deliveries) {
    out.deliveries[delivery.name] = await deliver(delivery, ['approved', 'changes_requested']);
  }
  console.log(JSON.stringify(out));
})();
"""


def event_trigger_contract(secret: str, other: str, deliveries: list[dict]) -> dict:
    """The findings of :data:`EVENT_TRIGGER_SCRIPT` for ``deliveries`` (``{"name", "headers",
    "body"}``, the body as the raw text sent) to a node holding two endpoints: the production
    URL's with ``secret`` and the test URL's with ``other``."""
    done = subprocess.run(
        ["node", "-e", EVENT_TRIGGER_SCRIPT],
        cwd=PACKAGE,
        input=json.dumps({"secret": secret, "other": other, "deliveries": deliveries}),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the event trigger script failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout)
