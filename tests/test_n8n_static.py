"""Static checks of the exported n8n workflows (``n8n_workflows/*.json``); no n8n needed.

Every node that calls the gateway builds its URL from ``{{ $env.GATEWAY_URL }}`` + ``/v1/...``,
uses the Header Auth credential, retries (within n8n's limits) and has a timeout; no other node
carries that credential; no WordPress credential, host or secret appears anywhere; every gateway
path used exists in the Flask app's URL map. When n8n is installed (its cache is present), the
node types, versions and parameter names are also checked against n8n's own node descriptions.
"""

from __future__ import annotations

import json
import re

import pytest
from n8n_support import CREDENTIAL_ID
from n8n_support import CREDENTIAL_NAME
from n8n_support import WORKFLOW_IDS
from n8n_support import WORKFLOWS
from n8n_support import installed
from n8n_support import node_descriptions
from n8n_support import validate_offline
from n8n_support import workflow_files
from werkzeug.exceptions import MethodNotAllowed
from werkzeug.exceptions import NotFound

HTTP = "n8n-nodes-base.httpRequest"
GATEWAY_PREFIX = "={{ $env.GATEWAY_URL }}/v1/"
EXPRESSION = re.compile(r"\{\{.*?\}\}")
TRIGGER = re.compile(r"(Trigger|\.webhook)$")

# Paths in docs/api.md that the workflows may call before the gateway serves them (add an entry
# only while another issue is adding that route, e.g. ("POST", "/v1/jobs/<job_id>/publish")).
# The test below fails on an entry whose route exists, so this list can only shrink. Empty now.
NOT_YET_IMPLEMENTED: set[tuple[str, str]] = set()


def workflows() -> list[dict]:
    return [json.loads(path.read_text("utf-8")) for path in workflow_files()]


def gateway_nodes(workflow: dict) -> list[dict]:
    return [n for n in workflow["nodes"] if n["type"] == HTTP and "GATEWAY_URL" in json.dumps(n)]


def test_the_three_workflows_are_exported_with_fixed_ids():
    found = {w["name"]: w for w in workflows()}
    assert set(found) == set(WORKFLOW_IDS)
    for name, workflow in found.items():
        assert workflow["id"] == WORKFLOW_IDS[name] and len(workflow["id"]) <= 16
        assert (WORKFLOWS / f"{name}.json").exists()
    assert found["article_pipeline"]["settings"]["errorWorkflow"] == WORKFLOW_IDS["recover_job"]


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_workflow_shape(path):
    workflow = json.loads(path.read_text("utf-8"))
    assert isinstance(workflow["name"], str) and workflow["name"] == path.stem
    assert isinstance(workflow["nodes"], list) and workflow["nodes"]
    assert isinstance(workflow["connections"], dict) and workflow["connections"]
    names = [n["name"] for n in workflow["nodes"]]
    assert len(names) == len(set(names)), "node names must be unique"
    assert any(n["type"] == "n8n-nodes-base.stickyNote" for n in workflow["nodes"])
    for source, outputs in workflow["connections"].items():
        assert source in names
        for branch in outputs["main"]:
            assert all(target["node"] in names for target in branch)
    # every node runs from some trigger (reachable along connections)
    targets: dict[str, set[str]] = {}
    for source, outputs in workflow["connections"].items():
        for branch in outputs["main"]:
            targets.setdefault(source, set()).update(t["node"] for t in branch)
    reached = [n["name"] for n in workflow["nodes"] if TRIGGER.search(n["type"])]
    assert reached, "no trigger"
    for name in reached:
        reached.extend(t for t in targets.get(name, ()) if t not in reached)
    for node in workflow["nodes"]:
        if node["type"] != "n8n-nodes-base.stickyNote":
            assert node["name"] in reached, f"{node['name']} is never reached from a trigger"


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_gateway_nodes_use_env_url_header_auth_retries_and_timeout(path):
    workflow = json.loads(path.read_text("utf-8"))
    calls = gateway_nodes(workflow)
    assert calls, "a workflow that never calls the gateway?"
    for node in calls:
        where = f"{workflow['name']}/{node['name']}"
        params = node["parameters"]
        assert node["typeVersion"] == 4.2, where
        assert params["url"].startswith(GATEWAY_PREFIX), f"{where}: {params['url']}"
        assert params["authentication"] == "genericCredentialType", where
        assert params["genericAuthType"] == "httpHeaderAuth", where
        assert node["credentials"] == {
            "httpHeaderAuth": {"id": CREDENTIAL_ID, "name": CREDENTIAL_NAME}
        }, where
        assert node.get("retryOnFail") is True, where
        assert 2 <= node["maxTries"] <= 5, where  # n8n allows at most 5 tries ...
        assert 0 < node["waitBetweenTries"] <= 5000, where  # ... 5 s apart
        assert 0 < params["options"]["timeout"] <= 300_000, where


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_only_gateway_nodes_carry_the_gateway_credential(path):
    workflow = json.loads(path.read_text("utf-8"))
    calls = {n["name"] for n in gateway_nodes(workflow)}
    for node in workflow["nodes"]:
        credentials = node.get("credentials", {})
        if node["name"] in calls:
            continue
        assert "httpHeaderAuth" not in credentials, node["name"]
        assert CREDENTIAL_ID not in json.dumps(node), node["name"]
        if node["type"] == HTTP:
            # the editors' webhook, image downloads: no authentication at all
            assert node["parameters"].get("authentication", "none") == "none", node["name"]
            assert "GATEWAY_URL" not in json.dumps(node), node["name"]
    # editors are told by the gateway (once per job version and event), never by a workflow
    assert "EDITOR_WEBHOOK_URL" not in json.dumps(workflow)


WORDPRESS_SECRETS = [
    re.compile(r"wp-json", re.I),
    re.compile(r"/wp/v2/"),
    re.compile(r"wordpress(Api|OAuth2Api)", re.I),
    re.compile(r"\b[A-Za-z0-9]{4}( [A-Za-z0-9]{4}){5}\b"),  # application password
    re.compile(r"Bearer [A-Za-z0-9_\-]{16,}"),  # a token literal
    re.compile(r"\bsk-[A-Za-z0-9]{16,}"),
    re.compile(r"https?://(?!\{)[^\s\"']*(127\.0\.0\.1|localhost|\.example)", re.I),
    re.compile(r"password", re.I),
]


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_no_wordpress_host_password_or_token(path):
    text = path.read_text("utf-8")
    for pattern in WORDPRESS_SECRETS:
        match = pattern.search(text)
        assert match is None, f"{path.name}: {match.group(0)!r} looks like a WordPress secret"
    for node in json.loads(text)["nodes"]:
        for kind in node.get("credentials", {}):
            assert "wordpress" not in kind.lower(), node["name"]
        assert not node["type"].lower().endswith("wordpress"), node["name"]


def gateway_calls() -> list[tuple[str, str, str]]:
    """(workflow/node, method, path with each ``{{...}}`` replaced by a placeholder)."""
    calls = []
    for workflow in workflows():
        for node in gateway_nodes(workflow):
            params = node["parameters"]
            path = params["url"][len(GATEWAY_PREFIX) - len("/v1/") :].split("?")[0]
            calls.append(
                (
                    f"{workflow['name']}/{node['name']}",
                    params.get("method", "GET"),
                    EXPRESSION.sub("x1", path),
                )
            )
    return calls


def test_every_gateway_path_exists_in_the_url_map(app):
    adapter = app.url_map.bind("gateway.test")
    rules = {rule.rule: rule for rule in app.url_map.iter_rules()}
    missing, used_allowance = [], set()
    for where, method, path in gateway_calls():
        try:
            adapter.match(path, method=method)
        except (NotFound, MethodNotAllowed):
            allowed = [
                (m, rule)
                for m, rule in NOT_YET_IMPLEMENTED
                if m == method and re.fullmatch(re.sub(r"<[^>]+>", "[^/]+", rule), path)
            ]
            if allowed:
                used_allowance.update(allowed)
            else:
                missing.append(f"{where}: {method} {path}")
    assert not missing, f"gateway paths not in the URL map: {missing}"
    stale = {entry for entry in NOT_YET_IMPLEMENTED if entry[1] in rules}
    assert not stale, f"now implemented, remove from NOT_YET_IMPLEMENTED: {sorted(stale)}"
    assert used_allowance <= NOT_YET_IMPLEMENTED


def test_pipeline_uploads_binary_multipart_file_and_converts_base64():
    pipeline = json.loads((WORKFLOWS / "article_pipeline.json").read_text("utf-8"))
    nodes = {n["name"]: n for n in pipeline["nodes"]}
    upload = next(n for n in gateway_nodes(pipeline) if "/media/" in n["parameters"]["url"])
    assert upload["parameters"]["method"] == "PUT"
    assert upload["parameters"]["contentType"] == "multipart-form-data"
    binary = [
        p
        for p in upload["parameters"]["bodyParameters"]["parameters"]
        if p.get("parameterType") == "formBinaryData"
    ]
    assert [(p["name"], p["inputDataFieldName"]) for p in binary] == [("file", "file")]
    convert = [n for n in nodes.values() if n["type"] == "n8n-nodes-base.convertToFile"]
    assert convert and convert[0]["parameters"]["operation"] == "toBinary"
    assert convert[0]["parameters"]["binaryPropertyName"] == "file"
    triggers = {n["type"] for n in nodes.values()}
    assert {"n8n-nodes-base.webhook", "n8n-nodes-base.executeWorkflowTrigger"} <= triggers


@pytest.mark.skipif(not installed(), reason="n8n is not installed (scripts/install_n8n.sh)")
def test_n8n_knows_every_node_type_version_and_parameter():
    descriptions = node_descriptions()
    problems = [p for w in workflows() for p in validate_offline(w, descriptions)]
    assert not problems, "\n".join(problems)


def test_the_draft_body_passes_category_and_tag_names_as_names():
    """The article pipeline's draft expression, run by Node.js with the n8n ``$()`` lookups
    stubbed: names stay strings (``"12"`` too), ids stay numbers, a comma list is split."""
    import shutil
    import subprocess

    node_js = shutil.which("node")
    if node_js is None:
        pytest.skip("Node.js is not installed")
    pipeline = next(w for w in workflows() if w["name"] == "article_pipeline")
    draft = next(n for n in pipeline["nodes"] if "body.tags" in json.dumps(n))
    expression = draft["parameters"]["jsonBody"]
    assert expression.startswith("={{") and expression.endswith("}}")
    article = {"title": "T", "content": "<p>c</p>", "seo": {}, "categories": ["Reviews", 3],
               "tags": "12, Café ,gateway"}  # fmt: skip
    script = (
        f"const A = {json.dumps(article)};"
        "const $ = name => ({first: () => ({json: name === 'Body and SEO' ? {article: A}"
        " : {images: [{slot: 'hero'}]}})});"
        f"console.log({expression[3:-2]});"
    )
    done = subprocess.run([node_js, "-e", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["categories"] == ["Reviews", 3]
    assert body["tags"] == ["12", "Café", "gateway"]


EXAMPLES = WORKFLOWS / "examples"


def test_the_shipped_examples_match_each_other_and_hold_no_secret():
    """The README's sample payload, the caller workflow that carries it, and the credential
    file to import (a placeholder where the token goes)."""
    payload = json.loads((EXAMPLES / "article.json").read_text("utf-8"))
    caller = json.loads((EXAMPLES / "sample_caller.json").read_text("utf-8"))
    sample = next(n for n in caller["nodes"] if n["type"] == "n8n-nodes-base.set")
    assert json.loads(sample["parameters"]["jsonOutput"]) == payload
    run = next(n for n in caller["nodes"] if n["type"] == "n8n-nodes-base.executeWorkflow")
    assert run["parameters"]["workflowId"]["value"] == WORKFLOW_IDS["article_pipeline"]
    assert payload["job_id"] and len(payload["images"]) == 3
    credentials = json.loads((EXAMPLES / "credentials.json").read_text("utf-8"))
    assert credentials == [
        {
            "id": CREDENTIAL_ID,
            "name": CREDENTIAL_NAME,
            "type": "httpHeaderAuth",
            "data": {"name": "Authorization", "value": "Bearer <token>"},
        }
    ]
    if installed():
        assert validate_offline(caller, node_descriptions()) == []
