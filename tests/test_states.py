"""The names of the gateway's states live in one module, ``gateway/core/states.py``: the
ledger, the job records, the response schemas and the MCP tools use its names, and no other
module of the gateway writes one as a string of its own (tests/test_state_names.py)."""

from __future__ import annotations

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


def test_each_phase_set_is_named_once_and_they_nest():
    """The phase sets of core/states.py, from "out of the editors' hands" to "verified": each
    one step wider (why they differ: the comments beside them). No module spells them again
    (tests/test_state_names.py scans for the phases themselves)."""
    assert states.RELEASED_PHASES == {states.SCHEDULED, states.PUBLISHED}
    assert states.RELEASED_PHASES < states.RUN_DONE_PHASES < states.COMPLETED_PHASES
    assert states.COMPLETED_PHASES - states.RUN_DONE_PHASES == {states.VERIFIED}
    assert states.AWAITING_APPROVAL_PHASES == {states.VERIFIED, states.APPROVAL_PENDING}
    assert states.CLIENT_PHASES + tuple(p for p in states.PHASES if p in states.GATEWAY_PHASES) == (
        states.PHASES
    )
    not_phases = {states.NEEDS_ATTENTION, states.CANCELLED, *states.DECISIONS}
    announced = set(states.WORKFLOW_EVENTS) - not_phases
    assert announced - set(states.PER_ENTRY_EVENTS) == {states.APPROVAL_PENDING, states.PUBLISHED}
    assert announced & set(states.PER_ENTRY_EVENTS) == {
        states.COMMENTED,
        states.REVOKED,
        states.SCHEDULED,
    }


def test_the_event_vocabulary_is_one_tuple_each_event_described():
    """Issue 57: one vocabulary, every event described once, the alias pointing into it."""
    assert list(states.WORKFLOW_EVENT_DESCRIPTIONS) == list(states.WORKFLOW_EVENTS)
    assert len(set(states.WORKFLOW_EVENTS)) == len(states.WORKFLOW_EVENTS)
    assert set(states.EVENT_ALIASES.values()) <= set(states.WORKFLOW_EVENTS)
    assert states.CHANGE_EVENTS == states.WORKFLOW_EVENTS


def test_an_event_id_is_evt_and_32_hex_of_the_keys_sha256():
    """The public event id (the deliveries' ``webhook-id``): stable, from the key alone."""
    import hashlib

    from gateway.core.event_ids import event_id

    key = "acme/j1/v1/notify/approved"
    assert event_id(key) == "evt_" + hashlib.sha256(key.encode()).hexdigest()[:32]
    assert event_id(key) != event_id("acme/j1/v2/notify/approved")
