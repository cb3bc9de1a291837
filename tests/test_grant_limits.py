"""A principal's limits (issue 43): a set of sites and the MCP tools' routes only, checked by
the API whoever calls it, and the in-process adapter of the tool layer (a WSGI call of the
gateway's own app with the caller's principal in the environ, no token anywhere)."""

from __future__ import annotations

import dataclasses

from support import SITE_NAME
from support import TENANT
from support import draft_body
from support import new_job_id
from support import op_key

from gateway.api import routes
from gateway.core.callers import PRINCIPAL_ENVIRON
from gateway.core.callers import TOOL_ROUTES
from gateway.core.callers import flask_rule
from gateway.ledger.db import database
from gateway.mcp import tools
from gateway.mcp.client import GatewayAPI
from gateway.mcp.client import Problem
from gateway.mcp.client import WsgiTransport
from gateway.tenancy import tokens

SPECS = {spec.name: spec for spec in tools.SPECS}


def _principal(gw, token: str, **limits) -> tokens.Principal:
    with gw.app.app_context(), database.connection_context():
        principal = tokens.authenticate(token)
    return dataclasses.replace(principal, **limits)


def _run(gw, principal, tool: str, **arguments):
    runner = tools.Runner(GatewayAPI(WsgiTransport(gw.app), wait_seconds=0))
    try:
        return runner.run(SPECS[tool], principal, arguments, None).structured_content
    except Problem as problem:
        return problem.body


def _slug(body: dict) -> str:
    return body["type"].rsplit("/", 1)[-1]


def test_the_tool_routes_are_the_eight_tools_routes_and_routes_of_the_api():
    assert {(s.method, flask_rule(s.path)) for s in tools.SPECS} == TOOL_ROUTES
    rules = {(m, r.rule) for r in routes.bare_app().url_map.iter_rules() for m in r.methods}
    assert rules >= TOOL_ROUTES
    assert not any("publish" in rule or "approvals" in rule for _, rule in TOOL_ROUTES)


def test_in_process_a_grant_of_its_site_writes_one_post_and_another_site_nothing(gw):
    mine = _principal(gw, gw.token, sites=frozenset({SITE_NAME}), tools_only=True)
    other = dataclasses.replace(mine, sites=frozenset({"other"}))
    job_id = new_job_id()

    refused = _run(gw, other, "start_job", job_id=job_id, site=SITE_NAME, task_version=1)
    assert (refused["status"], _slug(refused)) == (403, "forbidden")
    assert gw.job(job_id).status_code == 404  # no job was made

    started = _run(gw, mine, "start_job", job_id=job_id, site=SITE_NAME, task_version=1)
    assert started["state"] == "in_progress", started
    # the job exists now; for the other site's grant it is not there, as another tenant's
    for tool, arguments in (("get_job", {}), ("put_draft", draft_body())):
        hidden = _run(gw, other, tool, job_id=job_id, **arguments)
        assert (hidden["status"], _slug(hidden)) == (404, "job-not-found"), hidden
    assert gw.count_objects([op_key(job_id, "draft")]) == 0

    written = _run(gw, mine, "put_draft", job_id=job_id, **draft_body())
    assert written["operation_key"] == op_key(job_id, "draft")
    again = _run(gw, mine, "put_draft", job_id=job_id, **draft_body())
    assert again["replayed"] is True
    assert gw.count_objects([op_key(job_id, "draft")]) == 1


def test_a_tools_only_principal_never_approves_or_publishes(offline_gw):
    gw = offline_gw
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    editor_token = gw.make_token("editor")
    for token, method, path in (
        (gw.token, "POST", f"/v1/jobs/{job_id}/publish"),
        (editor_token, "POST", f"/v1/jobs/{job_id}/approvals"),
        (gw.token, "GET", "/v1/jobs"),
        (editor_token, "POST", f"/v1/jobs/{job_id}/cancel"),
    ):
        principal = _principal(gw, token, tools_only=True)
        answer = gw.client.open(
            path, method=method, json={}, environ_base={PRINCIPAL_ENVIRON: principal}
        )
        assert answer.status_code == 403, (path, answer.get_json())
        assert answer.get_json()["type"].endswith("/forbidden")
    # its tools' routes stay open, and a route outside them is refused before its role check
    principal = _principal(gw, gw.token, tools_only=True)
    read = gw.client.get(f"/v1/jobs/{job_id}", environ_base={PRINCIPAL_ENVIRON: principal})
    assert read.status_code == 200, read.get_json()


def test_a_site_limited_principal_is_refused_the_routes_for_every_site(offline_gw):
    principal = _principal(offline_gw, offline_gw.token, sites=frozenset({SITE_NAME}))
    for path in ("/v1/jobs", "/v1/reviews", "/v1/job-changes"):
        answer = offline_gw.client.get(path, environ_base={PRINCIPAL_ENVIRON: principal})
        assert answer.status_code == 403, (path, answer.get_json())


def test_the_principal_key_cannot_be_set_by_a_header(offline_gw):
    # a header of that name reaches the environ as HTTP_GATEWAY.PRINCIPAL, never as the key
    answer = offline_gw.client.get(
        "/v1/jobs", headers={"gateway.principal": f"{TENANT}:workflow", "X-Gateway-Principal": "x"}
    )
    assert answer.status_code == 401
    assert PRINCIPAL_ENVIRON not in answer.request.environ
