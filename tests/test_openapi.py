"""The OpenAPI document (``GET /openapi.json``): a valid OpenAPI 3.1 document of every route in
the URL map, whose request bodies are the schema files the views validate with, whose problem
types are the exception tree's, and whose response schemas match what the views answer."""

from __future__ import annotations

import ast
import base64
import datetime as dt
import io
import json
import subprocess

import pytest
from openapi_check import Conformance
from openapi_spec_validator import validate
from support import JPEG_BYTES
from support import ROOT
from support import draft_body
from support import gateway_command
from support import new_job_id
from support import png_bytes

from gateway.api import openapi
from gateway.api.contract import OPERATIONS
from gateway.core import exceptions as exc
from gateway.core import validation

SCHEMAS = ROOT / "gateway" / "schemas"


@pytest.fixture
def document(client) -> dict:
    answer = client.get("/openapi.json")  # no Authorization header: the contract is public
    assert answer.status_code == 200
    assert answer.mimetype == "application/json"
    return answer.get_json()


def test_document_is_valid_openapi_3_1(document):
    validate(document)  # raises on any violation of the OpenAPI 3.1 schema
    assert document["openapi"] == "3.1.0"
    assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


def test_every_route_is_documented_and_nothing_else(app, document):
    in_map = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        path = openapi.openapi_path(rule.rule)
        in_map |= {f"{m} {path}" for m in rule.methods - {"HEAD", "OPTIONS"}}
    documented = {f"{m.upper()} {p}" for p, ops in document["paths"].items() for m in ops}
    assert documented == in_map
    assert openapi.undocumented(app) == [], "add these routes to gateway/api/contract.py"
    assert openapi.stale(app) == [], "these contract entries name routes that are gone"
    assert set(OPERATIONS) == in_map
    assert len(in_map) >= 28


def test_cli_prints_the_same_document(app, document):
    done = subprocess.run(
        [*gateway_command(), "openapi"], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == document


def test_request_bodies_are_the_schema_files(document):
    components = document["components"]["schemas"]
    used = set()
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is None:
                continue
            name = body["schema"]["$ref"].rsplit("/", 1)[-1]
            used.add(name.removeprefix("request."))
            on_disk = json.loads((SCHEMAS / f"{name.removeprefix('request.')}.json").read_text())
            assert _without_refs(components[name]) == _without_refs(on_disk), (method, path)
    shared = set(validation.SHARED_SCHEMAS)  # referred to by the others, as components.Text
    assert used == {p.stem for p in SCHEMAS.glob("*.json")} - shared, "a schema no route uses"
    draft = components["request.draft"]["properties"]["body_media"]["items"]["$ref"]
    assert draft == "#/components/schemas/request.draft/$defs/slot"  # resolvable in place


def _without_refs(node):
    if isinstance(node, dict):
        return {k: _without_refs(v) for k, v in node.items() if k != "$ref"}
    if isinstance(node, list):
        return [_without_refs(v) for v in node]
    return node


def test_views_validate_with_the_documented_schema(offline_gw, document):
    """An empty object sent to each JSON route is refused listing exactly the required fields
    of the schema the document names: the view validates with that very schema."""
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    tokens = {role: offline_gw.make_token(role) for role in ("workflow", "editor", "admin")}
    checked = 0
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is None or not path.startswith("/v1/"):
                continue
            schema = document["components"]["schemas"][body["schema"]["$ref"].rsplit("/", 1)[-1]]
            role = operation["x-roles"][0]
            url = path.format(
                job_id=job_id, slot="hero", name="box", review_id=1, endpoint_id="ep_0"
            )
            sent = {"not_a_field": 1} if not schema.get("required") else {}
            answer = offline_gw.client.open(
                url,
                method=method.upper(),
                json=sent,
                headers=offline_gw.headers(tokens[role]),
            )
            assert answer.status_code == 422, (method, path, answer.get_json())
            pointers = {e["pointer"] for e in answer.get_json()["errors"]}
            expected = {"/" + n for n in schema.get("required", [])} or {"/not_a_field"}
            assert pointers == expected, (method, path)
            checked += 1
    assert checked >= 12


def test_problem_types_are_the_exception_tree(document):
    listed = document["x-problem-types"]
    classes = [exc.GatewayError]
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        if cls is not exc.GatewayError:
            assert listed[cls.slug]["status"] == cls.status
            assert listed[cls.slug]["type"] == exc.PROBLEM_BASE + cls.slug
    enum = document["components"]["schemas"]["Problem"]["properties"]["type"]["enum"]
    assert enum == [exc.PROBLEM_BASE + slug for slug in listed]


def test_framework_errors_and_headers_are_documented(client, document):
    check = Conformance(document)
    listed = document["x-problem-types"]
    for method, path, status in (("GET", "/nowhere", 404), ("DELETE", "/healthz", 405)):
        answer = client.open(path, method=method)
        assert answer.status_code == status
        assert answer.mimetype == "application/problem+json"
        slug = answer.get_json()["type"].rsplit("/", 1)[-1]
        assert listed[slug]["status"] == status
    answer = client.get("/v1/jobs", headers={"X-Request-Id": "n8n-exec-42"})
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    assert answer.headers["X-Request-Id"] == "n8n-exec-42"
    check.check("GET", "/v1/jobs", 401, answer.mimetype, answer.get_json())
    response = document["paths"]["/v1/jobs"]["get"]["responses"]["401"]
    assert set(response["headers"]) == {"X-Request-Id", "WWW-Authenticate"}
    made = client.get("/healthz", headers={"X-Request-Id": "<script> " + "x" * 300})
    assert len(made.headers["X-Request-Id"]) == 32  # not echoed: one the gateway made
    draft = document["paths"]["/v1/jobs/{job_id}/draft"]["put"]
    assert "Idempotent-Replayed" in draft["responses"]["200"]["headers"]
    assert "Retry-After" in draft["responses"]["503"]["headers"]
    assert any(p.get("name") == "X-Fencing-Token" for p in draft["parameters"])


def test_responses_conform_without_wordpress(offline_gw, document):
    """Calls that never reach WordPress, checked against the documented status and schema."""
    check = Conformance(document)
    gw, job_id = offline_gw, new_job_id()
    editor, wf, job = gw.headers(gw.make_token("editor")), gw.headers(), f"/v1/jobs/{job_id}"
    published = {"phase": "published", "artifacts": []}
    sources = {"phase": "sources_collected", "artifacts": []}
    calls = [
        ("GET", "/healthz", None, {}),
        ("PUT", job, {"site": "blog", "task_version": 1}, wf),
        ("PUT", job, {"site": "blog", "task_version": 1}, wf),
        ("PUT", job, {"site": "nosuch", "task_version": 1}, wf),
        ("GET", job, None, wf),
        ("GET", "/v1/jobs?status=in_progress&limit=5", None, wf),
        ("GET", "/v1/jobs?status=bogus", None, wf),
        ("POST", f"{job}/lease", {"owner": "w1", "ttl_seconds": 60}, wf),
        ("POST", f"{job}/lease", {"owner": "w2", "ttl_seconds": 60}, wf),
        ("PUT", f"{job}/draft", draft_body(), wf),
        ("DELETE", f"{job}/lease", {"owner": "w1", "fencing_token": 1}, wf),
        ("POST", f"{job}/checkpoints", published, wf),
        ("POST", f"{job}/checkpoints", sources, wf),
        ("GET", f"{job}/verification", None, wf),
        ("GET", "/v1/reviews", None, editor),
        ("POST", "/v1/reviews/999999/resolve", {"decision": "distinct"}, editor),
        ("GET", "/v1/report", None, wf),
        ("GET", "/v1/report", None, editor),
        ("POST", f"{job}/cancel", {"reason": "test"}, editor),
        ("PUT", f"{job}/draft", draft_body(), wf),
        ("GET", "/v1/jobs/nosuch-job", None, wf),
        ("GET", "/openapi.json", None, {}),
    ]  # fmt: skip
    statuses = []
    for method, url, body, headers in calls:
        answer = gw.client.open(url, method=method, json=body, headers=headers)
        payload = answer.get_json(silent=True)
        check.check(method, url, answer.status_code, answer.mimetype, payload)
        statuses.append(answer.status_code)
    assert statuses == [
        200, 201, 200, 422, 200, 200, 422, 200, 409, 409, 200, 403, 201, 404, 200, 404, 403,
        200, 200, 409, 404, 200,
    ]  # fmt: skip


@pytest.mark.wordpress
def test_responses_conform_with_wordpress(gw, document):
    """One job through every WordPress-backed route, each answer checked against the
    documented statuses, headers and schemas."""
    check = Conformance(document)
    job_id, editor = new_job_id(), gw.headers(gw.make_token("editor"))
    job, wf = f"/v1/jobs/{job_id}", gw.headers()
    answers = []

    def call(method, url, body=None, headers=wf, **kwargs):
        if body is not None:
            kwargs["json"] = body
        answer = gw.client.open(url, method=method, headers=headers, **kwargs)
        check.check(method, url, answer.status_code, answer.mimetype, answer.get_json(silent=True))
        answers.append(answer.status_code)
        return answer

    call("PUT", job, {"site": "blog", "task_version": 1})
    image = {"file": (io.BytesIO(png_bytes()), "a.png"), "alt_text": "a"}
    call("PUT", f"{job}/media/hero", data=image, content_type="multipart/form-data")
    jpeg = {"content_base64": base64.b64encode(JPEG_BYTES).decode(), "filename": "b.jpg"}
    call("PUT", f"{job}/media/side", jpeg)
    body = draft_body(content="<p>x</p>{{media:hero}}", body_media=["hero"])
    call("PUT", f"{job}/draft", body)
    replay = call("PUT", f"{job}/draft", body)
    assert replay.headers["Idempotent-Replayed"] == "true"
    call("PUT", f"{job}/blocks/box", {"html": "<p>box</p>"})
    verification = call("GET", f"{job}/verification").get_json()
    call("POST", f"{job}/repair")
    call("POST", f"{job}/recover")
    call("POST", f"{job}/approval-requests")
    expires = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat()
    approval = {
        "task_version": 1,
        "content_sha256": verification["content_sha256"],
        "post_id": verification["post_id"],
        "expires_at": expires,
    }
    approval_id = call("POST", f"{job}/approvals", approval, editor).get_json()["approval_id"]
    call("POST", f"{job}/publish")
    call("POST", f"{job}/publish")
    call("DELETE", f"{job}/approvals/{approval_id}", headers=editor)
    call("GET", job)
    call("PUT", f"{job}/media/bad", data={"file": (io.BytesIO(b"%PDF-1.4"), "x.pdf")})
    assert answers == [
        201,
        201,
        201,
        201,
        200,
        201,
        200,
        200,
        200,
        201,
        201,
        201,
        200,
        200,
        200,
        415,
    ]


def test_every_problem_extension_in_the_code_is_documented(document):
    """Keyword arguments given to an exception of the tree anywhere in ``gateway/`` (beyond
    ``retry_after``) are problem members: each must be in the Problem schema."""
    members = set(document["components"]["schemas"]["Problem"]["properties"])
    used = set()
    for source in (ROOT / "gateway").rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "exc"
                and node.func.attr[:1].isupper()
            ):
                used |= {k.arg for k in node.keywords if k.arg and k.arg != "retry_after"}
    assert used, "no exception raised with extension members found"
    assert sorted(used - members) == []
