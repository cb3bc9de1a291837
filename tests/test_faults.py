"""Every fault the proxy injects, on both kinds of create (draft and media): after the client
retries as n8n's Retry On Fail would (up to 5 tries), WordPress holds exactly one object per
operation key; a definite refusal is FAILED after a single WordPress call, with no retry loop."""

from __future__ import annotations

import pytest
from support import draft_body
from support import new_job_id
from support import op_key
from support import png_bytes

from gateway_tools.fault_proxy import Fault

pytestmark = pytest.mark.wordpress
ROUTES = {"draft": r"^/wp-json/wp/v2/posts/?$", "media": r"^/wp-json/wp/v2/media/?$"}
TRANSIENT = {
    "drop_response": {},
    "delay": {"seconds": 6.0},  # past the gateway's 5 s WordPress timeout in these tests
    "status_after_forward_500": {"kind": "status_after_forward", "status": 500},
    "status_after_forward_502": {"kind": "status_after_forward", "status": 502},
    "status_without_forward": {"status": 500},
    "php_notice": {},
    "throttle_429": {"kind": "throttle", "status": 429},
    "throttle_503": {"kind": "throttle", "status": 503},
}


def _call(gw, action: str, job_id: str):
    if action == "media":
        return gw.put_media(job_id, "hero", png_bytes((40, 50, 60), 2))
    return gw.put_draft(job_id, draft_body(title=f"Fault {job_id}"))


def _with_retries(gw, action: str, job_id: str):
    for _ in range(5):  # n8n: at most 5 tries, whatever the status
        answer = _call(gw, action, job_id)
        if answer.status_code in (200, 201):
            return answer
    return answer


@pytest.mark.parametrize("action", ["draft", "media"])
@pytest.mark.parametrize("name", list(TRANSIENT))
def test_transient_fault_then_retries_leave_exactly_one_object(gwp, proxy, action, name):
    spec = dict(TRANSIENT[name])
    kind = spec.pop("kind", name)
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(Fault(kind=kind, method="POST", path=ROUTES[action], times=1, **spec))
    answer = _with_retries(gwp, action, job_id)
    assert answer.status_code in (200, 201), answer.get_json()
    key = op_key(job_id, action, "hero" if action == "media" else None)
    assert gwp.count_objects(key) == 1
    [row] = gwp.operations(job_id)
    assert row["state"] == "CONFIRMED"
    assert row["remote_id"] == gwp.lookup(key)[0]["id"]


@pytest.mark.parametrize("action", ["draft", "media"])
def test_definite_refusal_is_failed_after_one_call_and_not_retried(gwp, proxy, action):
    job_id = new_job_id()
    gwp.put_job(job_id)
    proxy.add_fault(Fault(kind="unauthorized", method="POST", path=ROUTES[action], times=None))
    answers = [_call(gwp, action, job_id) for _ in range(5)]
    assert {a.status_code for a in answers} == {502}
    assert all(a.get_json()["retryable"] is False for a in answers)
    assert proxy.count(method="POST", path=ROUTES[action]) == 1  # the ledger answers the rest
    [row] = gwp.operations(job_id)
    assert row["state"] == "FAILED"
    key = op_key(job_id, action, "hero" if action == "media" else None)
    assert gwp.count_objects(key) == 0
