"""The names of the gateway's states live in one module, ``gateway/core/states.py``: the
ledger, the job records, the response schemas and the MCP tools use its names, and no other
module of the gateway writes an operation state as a string of its own."""

from __future__ import annotations

import ast

from support import ROOT
from support import new_job_id

from gateway.api import response_schemas
from gateway.core import states
from gateway.ledger import models
from gateway.mcp import tools


def test_the_ledger_and_the_answers_name_the_same_states():
    assert models.STATES == states.STATES == ("PREPARED", "SENT", "CONFIRMED", "FAILED", "UNKNOWN")
    assert models.Operation.state.default == states.PREPARED
    assert models.Notification.state.default == states.PENDING
    assert response_schemas.STATE["enum"] == list(states.STATES)
    assert response_schemas.STATUS["enum"] == list(states.STATUSES)
    described = tools.OUTPUT_SCHEMA["properties"]["state"]["description"]
    assert all(name in described for name in (*states.STATES, *states.STATUSES))
    assert set(states.COMPLETED_PHASES) <= set(states.GATEWAY_PHASES) <= set(states.PHASES)
    assert states.DRAFTING not in states.PHASES


def test_a_job_answers_and_filters_by_the_named_statuses(offline_gw):
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    job = offline_gw.client.get(f"/v1/jobs/{job_id}", headers=offline_gw.headers()).get_json()
    assert job["status"] == states.IN_PROGRESS
    listed = offline_gw.client.get(
        f"/v1/jobs?status={states.IN_PROGRESS}", headers=offline_gw.headers()
    ).get_json()
    assert job_id in [j["job_id"] for j in listed["jobs"]]
    refused = offline_gw.client.get("/v1/jobs?status=stuck", headers=offline_gw.headers())
    assert refused.status_code == 422
    assert [e["pointer"] for e in refused.get_json()["errors"]] == ["/status"]


def test_no_module_spells_an_operation_state_of_its_own():
    """Outside ``core/states.py`` an operation state is compared or stored by its name
    (``states.SENT``, ``models.SENT``), never as the string ``"SENT"``."""
    spelled = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        if path == ROOT / "gateway" / "core" / "states.py":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Constant) and node.value in states.STATES:
                spelled.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert spelled == []
