"""Static checks of the exported n8n workflows (``n8n_workflows/*.json``); no n8n needed.

Every node that calls the gateway builds its URL from the workflow's *Gateway* node (no
``$env``: n8n 2.x blocks it) + ``/v1/...``, uses the Bearer Auth credential, retries connection
errors only (a refusal is read, never re-sent by Retry On Fail) and has a timeout; no other
node carries that credential; every webhook asks for the webhook credential; no workflow is its
own error workflow; the article is checked by the gateway before the job and any upload; no
WordPress credential, host or secret appears anywhere; every gateway path used exists in the
Flask app's URL map. When n8n is installed (its cache is present), the node types, versions and
parameter names are also checked against n8n's own node descriptions.
"""

from __future__ import annotations

import json
import re

import pytest
from n8n_support import CACHE_ROOT
from n8n_support import CREDENTIAL_ID
from n8n_support import CREDENTIAL_NAME
from n8n_support import CREDENTIAL_TYPE
from n8n_support import CURRENT_LINE
from n8n_support import DEFAULT_ALERT_URL
from n8n_support import DEFAULT_GATEWAY_URL
from n8n_support import ROOT
from n8n_support import WEBHOOK_CREDENTIAL_ID
from n8n_support import WEBHOOK_CREDENTIAL_NAME
from n8n_support import WORKFLOW_IDS
from n8n_support import WORKFLOWS
from n8n_support import installed
from n8n_support import node_descriptions
from n8n_support import validate_offline
from n8n_support import workflow_files
from werkzeug.exceptions import MethodNotAllowed
from werkzeug.exceptions import NotFound

HTTP = "n8n-nodes-base.httpRequest"
GATEWAY_PREFIX = "={{ $('Gateway').first().json.gateway_url }}/v1/"
EXPRESSION = re.compile(r"\{\{.*?\}\}")
TRIGGER = re.compile(r"(Trigger|\.webhook)$")

# Paths in docs/api.md that the workflows may call before the gateway serves them (add an entry
# only while another issue is adding that route, e.g. ("POST", "/v1/jobs/<job_id>/publish")).
# The test below fails on an entry whose route exists, so this list can only shrink. Empty now.
NOT_YET_IMPLEMENTED: set[tuple[str, str]] = set()


def workflows() -> list[dict]:
    return [json.loads(path.read_text("utf-8")) for path in workflow_files()]


def gateway_nodes(workflow: dict) -> list[dict]:
    return [n for n in workflow["nodes"] if n["type"] == HTTP and "gateway_url" in json.dumps(n)]


def notification_node(node: dict) -> bool:
    """The nodes asking the gateway to tell editors (``.../notifications``): issue 29 reworks
    them (notifications delivered by the sweep), so this issue left their error handling."""
    return node["parameters"]["url"].endswith("/notifications")


def reachable(workflow: dict, without: str | None = None) -> set[str]:
    """Nodes reachable from the triggers along connections, ``without`` one node."""
    targets: dict[str, set[str]] = {}
    for source, outputs in workflow["connections"].items():
        for branch in outputs["main"]:
            targets.setdefault(source, set()).update(t["node"] for t in branch or [])
    found = [n["name"] for n in workflow["nodes"] if TRIGGER.search(n["type"])]
    for name in found:
        found.extend(t for t in targets.get(name, ()) if t not in found and t != without)
    return set(found)


def test_the_workflows_are_exported_with_fixed_ids():
    found = {w["name"]: w for w in workflows()}
    assert set(found) == set(WORKFLOW_IDS)
    for name, workflow in found.items():
        assert workflow["id"] == WORKFLOW_IDS[name] and len(workflow["id"]) <= 16
        assert (WORKFLOWS / f"{name}.json").exists()
    assert found["article_pipeline"]["settings"]["errorWorkflow"] == WORKFLOW_IDS["recover_job"]


def test_no_workflow_is_its_own_error_workflow():
    """n8n runs a failed workflow that holds an Error Trigger as its own error workflow unless
    it names another (``executeErrorWorkflow``): recover_job did, and its failure started it
    again. recover_job and publish_approved name workflow_alert, which calls no gateway and
    whose own failure n8n does not hand to any error workflow (an ``error``-mode run)."""
    alert = WORKFLOW_IDS["workflow_alert"]
    for workflow in workflows():
        error_workflow = workflow["settings"].get("errorWorkflow")
        assert error_workflow != workflow["id"], workflow["name"]
        has_trigger = any(n["type"] == "n8n-nodes-base.errorTrigger" for n in workflow["nodes"])
        if workflow["id"] == alert:
            # a webhook too: n8n 2.x publishes only a workflow with a trigger, and runs an
            # error workflow only when it is published
            assert error_workflow is None and has_trigger
            assert any(n["type"].endswith(".webhook") for n in workflow["nodes"])
            assert gateway_nodes(workflow) == []  # the alert path does not need the gateway
        elif workflow["name"] != "article_pipeline":
            assert error_workflow == alert, workflow["name"]


def test_no_environment_variable_is_read_and_the_urls_come_from_the_gateway_node():
    for path in workflow_files():
        assert "$env" not in path.read_text("utf-8"), path.name
    for workflow in workflows():
        settings = [n for n in workflow["nodes"] if n["name"] == "Gateway"]
        if workflow["name"] == "workflow_alert":
            assert settings == []
            assert DEFAULT_ALERT_URL in json.dumps(workflow)
            continue
        assert len(settings) == 1 and settings[0]["type"] == "n8n-nodes-base.set"
        values = {
            a["name"]: a["value"] for a in settings[0]["parameters"]["assignments"]["assignments"]
        }
        assert values["gateway_url"] == DEFAULT_GATEWAY_URL  # replaced at import (README)
        assert json.dumps(workflow).count(DEFAULT_GATEWAY_URL) == 1, workflow["name"]


def test_every_webhook_asks_for_the_webhook_credential():
    webhooks = [(w, n) for w in workflows() for n in w["nodes"] if n["type"].endswith(".webhook")]
    assert len(webhooks) == 4  # the three runs and the alert's test
    for workflow, node in webhooks:
        assert node["parameters"]["authentication"] == "headerAuth", workflow["name"]
        assert node["credentials"] == {
            "httpHeaderAuth": {"id": WEBHOOK_CREDENTIAL_ID, "name": WEBHOOK_CREDENTIAL_NAME}
        }


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
def test_gateway_nodes_use_the_gateway_node_bearer_auth_retries_and_timeout(path):
    workflow = json.loads(path.read_text("utf-8"))
    calls = gateway_nodes(workflow)
    assert calls or workflow["name"] == "workflow_alert", "a workflow that never calls it?"
    for node in calls:
        where = f"{workflow['name']}/{node['name']}"
        params = node["parameters"]
        assert node["typeVersion"] == 4.2, where
        assert params["url"].startswith(GATEWAY_PREFIX), f"{where}: {params['url']}"
        assert params["authentication"] == "genericCredentialType", where
        assert params["genericAuthType"] == CREDENTIAL_TYPE, where
        assert node["credentials"] == {
            CREDENTIAL_TYPE: {"id": CREDENTIAL_ID, "name": CREDENTIAL_NAME}
        }, where
        assert node.get("retryOnFail") is True, where
        assert 2 <= node["maxTries"] <= 5, where  # n8n allows at most 5 tries ...
        assert 0 < node["waitBetweenTries"] <= 5000, where  # ... 5 s apart
        assert 0 < params["options"]["timeout"] <= 300_000, where
        if notification_node(node):
            continue
        # A status never fails the node, so Retry On Fail re-sends only what never got an
        # answer (the gateway down); the answer is read and a refusal is not sent again.
        answer = params["options"]["response"]["response"]
        assert answer == {"fullResponse": True, "neverError": True, "responseFormat": "json"}


@pytest.mark.parametrize("path", workflow_files(), ids=lambda p: p.name)
def test_only_gateway_nodes_carry_the_gateway_credential(path):
    workflow = json.loads(path.read_text("utf-8"))
    calls = {n["name"] for n in gateway_nodes(workflow)}
    for node in workflow["nodes"]:
        credentials = node.get("credentials", {})
        if node["name"] in calls:
            continue
        assert CREDENTIAL_TYPE not in credentials, node["name"]
        assert CREDENTIAL_ID not in json.dumps(node), node["name"]
        if node["type"] == HTTP:
            # image downloads, the alert: no authentication at all
            assert node["parameters"].get("authentication", "none") == "none", node["name"]
            assert "gateway_url" not in json.dumps(node), node["name"]
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
    # the uploads' answers are read together, once all are in: every image uploaded -> the
    # draft; otherwise the run stops (a refusal is never sent again; a retryable answer is
    # left to recover_job, which resumes from the resume point: no loop through the merges,
    # which n8n would then wait on forever)
    assert upload["parameters"]["options"]["response"]["response"]["neverError"] is True
    outputs = pipeline["connections"]["Uploads: answer?"]["main"]
    assert [[t["node"] for t in o] for o in outputs] == [
        ["Create draft: call"],
        ["Upload media: stop"],
    ]
    assert nodes["Upload media: stop"]["type"] == "n8n-nodes-base.stopAndError"


def test_the_gateway_checks_the_article_before_the_job_and_any_upload():
    """``POST /v1/articles/validate`` stands between the input and every write: without it,
    no job, upload or draft call can be reached; the draft it checks is built by the very
    expression the draft call sends."""
    pipeline = next(w for w in workflows() if w["name"] == "article_pipeline")
    nodes = {n["name"]: n for n in pipeline["nodes"]}
    writes = {"Create job: call", "Upload media", "Create draft: call", "Checkpoint body: call"}
    assert writes <= reachable(pipeline)
    assert not writes & reachable(pipeline, without="Check article: answer?")
    check = nodes["Check article: call"]["parameters"]
    assert check["url"].endswith("/v1/articles/validate") and check["method"] == "POST"
    draft = nodes["Create draft: call"]["parameters"]["jsonBody"]
    prefix = draft[: draft.index("return JSON.stringify(body);")]
    assert check["jsonBody"].startswith(prefix)
    refused = pipeline["connections"]["Check article: answer?"]["main"][2][0]["node"]
    assert nodes[refused]["type"] == "n8n-nodes-base.respondToWebhook"


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
    nodes = {n["name"]: n for n in pipeline["nodes"]}
    article = {"title": "T", "content": "<p>c</p>", "seo": {}, "categories": ["Reviews", 3],
               "tags": "12, Café ,gateway"}  # fmt: skip
    images = [{"slot": "hero", "content_base64": "iVBO"}, {"slot": "b", "url": "https://x.test/b"},
              {"slot": "c", "uploaded": True, "url": "https://x.test/c"}]  # fmt: skip

    def run(name: str):
        expression = nodes[name]["parameters"]["jsonBody"]
        assert expression.startswith("={{") and expression.endswith("}}")
        script = (
            f"const A = {json.dumps(article)}; const I = {json.dumps(images)};"
            "const $ = name => ({first: () => ({json: name === 'Body and SEO' ? {article: A}"
            " : {images: I}})});"
            f"console.log({expression[3:-2]});"
        )
        done = subprocess.run([node_js, "-e", script], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    body = run("Create draft: call")
    assert body["categories"] == ["Reviews", 3]
    assert body["tags"] == ["12", "Café", "gateway"]
    assert body["featured_media"] == {"slot": "hero"} and body["body_media"] == ["b", "c"]
    checked = run("Check article: call")
    assert checked["draft"] == body  # the gateway checks exactly what the draft will send
    assert checked["media"] == [
        {"slot": "hero", "content_base64": "iVBO"},
        {"slot": "b", "url": "https://x.test/b"},
        {"slot": "c"},  # uploaded by an earlier run: only referenced
    ]


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
            "type": CREDENTIAL_TYPE,
            "data": {"token": "<token>"},
        },
        {
            "id": WEBHOOK_CREDENTIAL_ID,
            "name": WEBHOOK_CREDENTIAL_NAME,
            "type": "httpHeaderAuth",
            "data": {"name": "Authorization", "value": "Bearer <webhook-token>"},
        },
    ]
    if installed():
        assert validate_offline(caller, node_descriptions()) == []


# Issues of n8n's v3 rules that the workflows keep on purpose: (rule, node name) -> why.
V3_KEPT = {
    ("always-output-data-multi-output-v3", "Jobs awaiting approval"): "an empty list still "
    "answers the webhook; on a refused list only the error output runs, as 3.0 fixes it",
    ("always-output-data-multi-output-v3", "Unfinished jobs"): "the same, for recover_job",
}


@pytest.mark.skipif(
    not (CACHE_ROOT / f"n8n-{CURRENT_LINE}" / ".installed").exists(),
    reason=f"n8n {CURRENT_LINE} is not installed (scripts/install_n8n.sh)",
)
def test_n8n_3_0s_breaking_change_rules_find_nothing_in_the_workflows():
    """n8n 3.0 cannot run here (no npm package, no container engine): n8n 2.41's own v3 rules
    (``dist/modules/breaking-changes/rules/v3/``, what its migration report runs) go over every
    exported workflow (``n8n_workflows/**.json``, the node's and the sample caller too) and
    find nothing: no "any workflow" caller policy, no Execute Workflow "each" mode, no removed
    node or helper (issue 54)."""
    import subprocess

    from n8n_support import node_binary

    cache = CACHE_ROOT / f"n8n-{CURRENT_LINE}"
    files = [
        str(p)
        for p in sorted(WORKFLOWS.glob("**/*.json"))
        if "nodes" in json.loads(p.read_text("utf-8"))
    ]
    done = subprocess.run(
        [str(node_binary(cache / "bin" / "n8n")), str(ROOT / "tests" / "n8n_v3_rules.js"),
         str(cache / "node_modules"), *files],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert {"caller-policy-any-removed-v3", "execute-workflow-each-mode-v3"} <= set(report["rules"])
    assert len(files) == 9
    found = [
        f"{i['workflow']}: {i['rule']}: {i['title']}"
        for i in report["issues"]
        if not any(rule == i["rule"] and f"'{node}'" in i["title"] for rule, node in V3_KEPT)
    ]
    assert not found, "\n".join(found)


def trigger_events() -> set[str]:
    """The values of the trigger node's *Events* options, read from its source (what ``tsc``
    compiles into the description n8n loads)."""
    source = (
        ROOT / "n8n-nodes-publishing-gateway" / "nodes" / "PublishingGatewayTrigger"
        / "PublishingGatewayTrigger.node.ts"
    ).read_text("utf-8")  # fmt: skip
    block = re.search(r"name: 'events',(.*?)\n\t\t\t\},", source, re.S)
    assert block, "the trigger has no 'events' property"
    options = re.search(r"options: \[(.*?)\]", block.group(1), re.S).group(1)
    return set(re.findall(r"value: '([a-z_]+)'", options))


def feed_events(document: dict) -> set[str]:
    """Every event ``GET /v1/job-changes`` documents: its 200 answer's
    ``changes[].events[]`` enum in the OpenAPI document (``$ref`` followed)."""

    def resolve(schema: dict) -> dict:
        while "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].split("/")[-1]]
        return schema

    answer = document["paths"]["/v1/job-changes"]["get"]["responses"]["200"]
    feed = resolve(answer["content"]["application/json"]["schema"])
    change = resolve(resolve(feed["properties"]["changes"])["items"])
    return set(resolve(resolve(change["properties"]["events"])["items"])["enum"])


def test_the_trigger_offers_every_event_the_changes_feed_documents(client):
    """Issue 54: as ``/v1/job-changes`` gains events (an editor's ``approved``, ...), the
    trigger must offer them: this fails when the served OpenAPI document names an event the
    trigger's *Events* list lacks (or the trigger offers one the feed never emits)."""
    answer = client.get("/openapi.json")
    assert answer.status_code == 200
    documented = feed_events(answer.get_json())
    assert {"approval_pending", "published", "needs_attention"} <= documented
    assert trigger_events() == documented
    row = next(
        line for line in (ROOT / "docs" / "api.md").read_text("utf-8").splitlines()
        if line.startswith("| `changes[].events` |")
    )  # fmt: skip
    assert all(f"`{event}`" in row for event in documented), row


def test_the_readmes_local_receiver_prints_each_post_and_answers_200(tmp_path):
    """The n8n README's receiver for the editors' and alert URLs (issue 54): started as the
    README says, it answers a POST 200 and prints it as one JSON line with its key."""
    import subprocess
    import sys
    import time

    import requests
    from support import free_port

    readme = (WORKFLOWS / "README.md").read_text("utf-8")
    assert "python3 -m gateway_tools.receiver --port 8099" in readme
    port = free_port()
    log = tmp_path / "receiver.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway_tools.receiver", "--port", str(port)],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while "receiving on" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        answer = requests.post(
            f"http://127.0.0.1:{port}/editors", json={"event": "published", "text": "Café"},
            headers={"Idempotency-Key": "t/j/v1/notify/published"}, timeout=10,
        )  # fmt: skip
        assert answer.status_code == 200 and answer.json() == {"ok": True}
    finally:
        process.terminate()
        process.wait(timeout=10)
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    assert lines == [
        {
            "path": "/editors",
            "idempotency_key": "t/j/v1/notify/published",
            "body": {"event": "published", "text": "Café"},
        }
    ]
