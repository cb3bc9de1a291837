"""Every registered action of the *lookup* kind, against the real test WordPress: WordPress
stores the write but the response is lost and the gateway's immediate lookup fails (fault
proxy); then ``POST /recover`` - and, separately, the sweep - finds the operation by lookup:
CONFIRMED, 0 further WordPress writes, and the same request again is a replay.

These run in the SQLite pass only: the ledger rules they rely on are exercised on PostgreSQL by
``test_recovery.py`` and ``test_faults.py``, and ``.ci/run`` has to stay within 30 minutes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import CALLS
from support import Gateway
from support import draft_body
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug

from gateway.actions.blocks import html_digest
from gateway.agents import submissions
from gateway.ledger.db import database
from gateway.operations import registry
from gateway.recovery import reconciliation
from gateway_tools.fault_proxy import Fault

# Fault tests per action run in the SQLite pass only (deselected in the PostgreSQL pass): the
# PostgreSQL pass covers the same ledger rules in test_recovery and test_faults.
pytestmark = [pytest.mark.wordpress, pytest.mark.sqlite_pass]
POST_CREATE = r"^/wp-json/wp/v2/posts/?$"
POST_UPDATE = r"^/wp-json/wp/v2/posts/\d+/?$"
MEDIA_CREATE = r"^/wp-json/wp/v2/media/?$"
KEY_LOOKUP = r"^/wp-json/publishing-gateway/v1/objects"
BLOCK_HTML = "<aside class='promo'>Resource pack</aside>"


def _post(gw: Gateway, path: str, body=None, token=None):
    return gw.client.post(path, json=body or {}, headers=gw.headers(token))


def _draft(gw: Gateway, job_id: str) -> int:
    answer = gw.put_draft(job_id, draft_body(title=f"Recover {job_id}"))
    assert answer.status_code == 201, answer.get_json()
    return answer.get_json()["post_id"]


def _drift(gw: Gateway, job_id: str) -> None:
    gw.wp_update_post(_draft(gw, job_id), {"title": "changed behind the gateway's back"})


def _approved(gw: Gateway, job_id: str) -> None:
    _draft(gw, job_id)
    assert _post(gw, f"/v1/jobs/{job_id}/approval-requests").status_code == 201
    check = gw.verification(job_id).get_json()
    expires = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat()
    body = {
        "task_version": 1,
        "content_sha256": check["content_sha256"],
        "post_id": check["post_id"],
        "expires_at": expires,
    }
    editor = gw.make_token("editor")
    assert _post(gw, f"/v1/jobs/{job_id}/approvals", body, token=editor).status_code == 201


@dataclass
class Case:
    """How to bring a job to the action, send it, and where its write and lookup go."""

    prepare: Callable[[Gateway, str], None]
    send: Callable[[Gateway, str], object]
    write: str  # the POST route of the write whose response is lost
    lookup: str  # the GET route of the immediate lookup, failed once
    lookup_after: int  # GETs of that route the request makes before its write
    key: Callable[[str], str | None]  # the operation key (None: derived from WordPress state)
    next_actions: list[str]  # after recover
    repeat_replays: bool = True  # repair: a repeat finds nothing to fix (200, no operation)


CASES = {
    "media": Case(
        prepare=lambda gw, job_id: None,
        send=lambda gw, job_id: gw.put_media(job_id, "hero", png_bytes((1, 2, 3), 2)),
        write=MEDIA_CREATE,
        lookup=KEY_LOOKUP,
        lookup_after=0,
        key=lambda job_id: op_key(job_id, "media", "hero"),
        next_actions=["create_draft", "upload_media"],
    ),
    "draft": Case(
        prepare=lambda gw, job_id: None,
        send=lambda gw, job_id: gw.put_draft(job_id, draft_body(title=f"Recover {job_id}")),
        write=POST_CREATE,
        lookup=KEY_LOOKUP,
        lookup_after=0,
        key=lambda job_id: op_key(job_id, "draft"),
        next_actions=["request_approval"],
    ),
    "block": Case(
        prepare=_draft,
        send=lambda gw, job_id: gw.client.put(
            f"/v1/jobs/{job_id}/blocks/promo", json={"html": BLOCK_HTML}, headers=gw.headers()
        ),
        write=POST_UPDATE,
        lookup=POST_UPDATE,
        lookup_after=1,  # the block's send reads the live content first
        key=lambda job_id: op_key(job_id, "block", f"promo/{html_digest(BLOCK_HTML)}"),
        next_actions=["request_approval"],
    ),
    "repair": Case(
        prepare=_drift,
        send=lambda gw, job_id: _post(gw, f"/v1/jobs/{job_id}/repair"),
        write=POST_UPDATE,
        lookup=POST_UPDATE,
        lookup_after=1,  # repair reads the live post to find the drift
        key=lambda job_id: None,  # keyed by the drifted revision
        next_actions=["request_approval"],
        repeat_replays=False,
    ),
    "publish": Case(
        prepare=_approved,
        send=lambda gw, job_id: _post(gw, f"/v1/jobs/{job_id}/publish"),
        write=POST_UPDATE,
        lookup=POST_UPDATE,
        lookup_after=1,  # publishing re-reads the live post against the approval
        key=lambda job_id: op_key(job_id, "publish"),
        next_actions=["none"],
    ),
}


# Lookup actions whose write does not answer its own request (a site-scoped term inside a
# draft call, an attach after the draft stands, an unschedule inside a cancel), so this file's
# lost-response-then-recover shape does not fit. Where their lost writes are tested instead;
# None: not yet covered by a fault test (left open).
COVERED_ELSEWHERE = {
    "attach": "test_action_recovery.py::test_lost_attach_then_recover_or_the_sweep_confirms",
    "term": "test_terms.py::test_a_lost_tag_creation_is_found_by_name_not_created_twice",
    "unschedule": "test_scheduling.py::"
    "test_cancel_while_wordpress_fails_leaves_the_unschedule_to_the_sweep",
}


# Actions of the *idempotent resend* kind and the test that shows a resend carries the same
# key (the receiver deduplicates on it, or the write is an idempotent update).
RESENT_WITH_THE_SAME_KEY = {
    "media_meta": "test_action_recovery.py::test_lost_media_metadata_update_is_resent_by_recover",
    "notify": "test_notifications.py::"
    "test_an_undelivered_notification_is_resent_by_the_sweep_with_the_same_key",
    # Agent-session inputs share one sender (gateway.agents.submissions.send): the
    # idempotency key is derived from the operation key, whichever input it is.
    **{
        name: "test_agents.py::"
        "test_crash_between_write_and_submission_ends_in_one_post_one_submission"
        for name in submissions.ACTIONS
    },
}


def _exists(where: str) -> bool:
    path, name = where.split("::")
    return f"def {name}(" in (Path(__file__).parent / path).read_text("utf-8")


def test_every_lookup_action_has_a_fault_case():
    lookup_kind = {a.name for a in registry.all_actions() if a.recovery == registry.LOOKUP}
    assert set(CASES) | set(COVERED_ELSEWHERE) == lookup_kind
    assert not set(CASES) & set(COVERED_ELSEWHERE)
    assert all(_exists(where) for where in COVERED_ELSEWHERE.values())


def test_every_resend_action_has_a_same_key_test():
    resend_kind = {a.name for a in registry.all_actions() if a.recovery == registry.RESEND}
    assert set(RESENT_WITH_THE_SAME_KEY) == resend_kind
    assert all(_exists(where) for where in RESENT_WITH_THE_SAME_KEY.values())


def _lose_response(gwp: Gateway, proxy, name: str) -> tuple[str, Case, dict]:
    """Job ready, then the action's write stored by WordPress with its response lost and the
    immediate lookup failing: 503 ``outcome-unknown``, the row UNKNOWN."""
    case, job_id = CASES[name], new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    case.prepare(gwp, job_id)
    writes = CALLS["rest"]["write"]  # not a read served as GET (a POST too)
    proxy.add_fault(Fault(kind="drop_response", path=case.write, **writes))
    proxy.add_fault(
        Fault(
            kind="status_without_forward",
            status=503,
            method="GET",
            path=case.lookup,
            after=case.lookup_after,
        )
    )
    lost = case.send(gwp, job_id)
    assert lost.status_code == 503 and problem_slug(lost) == "outcome-unknown", lost.get_json()
    assert proxy.faults == []  # both faults were used
    [row] = [r for r in gwp.operations(job_id) if r["action"] == name]
    assert row["state"] == "UNKNOWN"
    if case.key(job_id) is not None:
        assert row["operation_key"] == case.key(job_id)
    return job_id, case, row


def _writes(proxy, case: Case) -> int:
    return proxy.count(path=case.write, forwarded=True, **CALLS["rest"]["write"])


def _then_repeat_is_a_replay(gwp: Gateway, proxy, job_id: str, case: Case, name: str) -> None:
    [row] = [r for r in gwp.operations(job_id) if r["action"] == name]
    assert row["state"] == "CONFIRMED" and row["receipt"]["reconciled"] is True
    again = case.send(gwp, job_id)
    assert again.status_code == 200, again.get_json()
    if case.repeat_replays:
        assert again.headers.get("Idempotent-Replayed") == "true"
        assert again.get_json()["operation_key"] == row["operation_key"]
    else:
        assert again.get_json()["fixes"] == {}
    assert _writes(proxy, case) == 1  # the one lost write, nothing since


def _check_wordpress(gwp: Gateway, job_id: str, name: str, row: dict) -> None:
    """What a user would check in WordPress: one object, one block, the post live..."""
    if name in ("media", "draft"):
        assert gwp.count_objects(row["operation_key"]) == 1
        return
    post = gwp.wp_post(gwp.job(job_id).get_json()["post_id"])
    if name == "block":
        assert post["content"]["raw"].count("<!-- gateway:block name=promo ") == 1
    elif name == "repair":
        assert post["title"]["raw"] == f"Recover {job_id}"
    else:
        assert post["status"] == "publish"


@pytest.mark.parametrize("name", list(CASES))
def test_lost_response_then_recover_confirms_by_lookup(gwp, proxy, name):
    job_id, case, row = _lose_response(gwp, proxy, name)
    recovered = gwp.recover(job_id)
    assert recovered.status_code == 200
    report = recovered.get_json()
    assert report["unknown"] == [] and report["needs_review"] == []
    [done] = [e for e in report["completed"] if e["operation_key"] == row["operation_key"]]
    assert done["reconciled"] is True and done["action"] == name
    assert report["status"] == "completed" or name == "media"
    assert report["next_allowed_actions"] == case.next_actions
    assert _writes(proxy, case) == 1
    _check_wordpress(gwp, job_id, name, row)
    _then_repeat_is_a_replay(gwp, proxy, job_id, case, name)


@pytest.mark.parametrize("name", list(CASES))
def test_lost_response_then_the_sweep_confirms_by_lookup(gwp, proxy, name):
    job_id, case, row = _lose_response(gwp, proxy, name)
    with gwp.app.app_context(), database.connection_context():
        counts = reconciliation.sweep(gwp.app.config["GATEWAY"], older_than=0)
    assert counts["examined"] == 1 and counts["confirmed"] == 1, counts
    assert _writes(proxy, case) == 1
    _check_wordpress(gwp, job_id, name, row)
    _then_repeat_is_a_replay(gwp, proxy, job_id, case, name)
    if name == "publish":
        assert gwp.job(job_id).get_json()["phase"] == "published"


MEDIA_UPDATE = r"^/wp-json/wp/v2/media/\d+/?$"


@pytest.mark.parametrize("by", ["recover", "sweep"])
def test_lost_attach_then_recover_or_the_sweep_confirms(gwp, proxy, by):
    """The draft stands (201) while attaching its image loses its response and the immediate
    read of the attachment fails: the ``attach`` row is UNKNOWN; recover (or the sweep) finds
    the attachment's parent set: CONFIRMED, no further write; the draft again is a replay."""
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    assert gwp.put_media(job_id, "hero", png_bytes((4, 5, 6), 2)).status_code == 201
    proxy.add_fault(Fault(kind="drop_response", method="POST", path=MEDIA_UPDATE))
    proxy.add_fault(
        Fault(kind="status_without_forward", status=503, method="GET", path=MEDIA_UPDATE)
    )
    body = draft_body(title=f"Attach {job_id}", featured_media={"slot": "hero"})
    drafted = gwp.put_draft(job_id, body)
    assert drafted.status_code == 201, drafted.get_json()
    assert proxy.faults == []
    key = op_key(job_id, "attach", "hero")
    assert {r["operation_key"]: r["state"] for r in gwp.operations(job_id)}[key] == "UNKNOWN"
    if by == "recover":
        report = gwp.recover(job_id).get_json()
        [done] = [e for e in report["completed"] if e["operation_key"] == key]
        assert done["reconciled"] is True and report["unknown"] == []
    else:
        with gwp.app.app_context(), database.connection_context():
            counts = reconciliation.sweep(gwp.app.config["GATEWAY"], older_than=0)
        assert counts["examined"] == 1 and counts["confirmed"] == 1, counts
    rows = {r["operation_key"]: r for r in gwp.operations(job_id)}
    assert rows[key]["state"] == "CONFIRMED" and rows[key]["receipt"]["reconciled"] is True
    media_id, post_id = rows[key]["receipt"]["media_id"], drafted.get_json()["post_id"]
    assert gwp.wp_media(media_id)["post"] == post_id
    again = gwp.put_draft(job_id, body)
    assert again.status_code == 200 and again.headers.get("Idempotent-Replayed") == "true"
    assert proxy.count(method="POST", path=MEDIA_UPDATE, forwarded=True) == 1


def test_lost_media_metadata_update_is_resent_by_recover(gwp, proxy):
    """Repair writes drifted image metadata back as a ``media_meta`` operation (idempotent
    resend kind); its response is lost: UNKNOWN, nothing to look up. ``recover`` sends the
    same update again under the same operation key: CONFIRMED, the metadata restored, one row."""
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    hero = gwp.put_media(job_id, "hero", png_bytes((7, 8, 9), 3), "hero.png", alt_text="Alt")
    media_id = hero.get_json()["media_id"]
    body = draft_body(title=f"Meta {job_id}", featured_media={"slot": "hero"})
    assert gwp.put_draft(job_id, body).status_code == 201
    drifted = gwp.wp.post(f"{gwp.wp_url}/wp-json/wp/v2/media/{media_id}", json={"alt_text": ""})
    assert drifted.status_code == 200
    proxy.reset_log()
    proxy.add_fault(Fault(kind="drop_response", method="POST", path=MEDIA_UPDATE))
    lost = _post(gwp, f"/v1/jobs/{job_id}/repair")
    assert lost.status_code == 503 and problem_slug(lost) == "outcome-unknown", lost.get_json()
    [row] = [r for r in gwp.operations(job_id) if r["action"] == "media_meta"]
    assert row["state"] == "UNKNOWN" and row["attempts"] == 1
    report = gwp.recover(job_id).get_json()
    [done] = [e for e in report["completed"] if e["action"] == "media_meta"]
    assert done["operation_key"] == row["operation_key"] and done["reconciled"] is True
    [after] = [r for r in gwp.operations(job_id) if r["action"] == "media_meta"]
    assert after["operation_key"] == row["operation_key"]  # the same key, sent again
    assert after["state"] == "CONFIRMED" and after["attempts"] == 2
    assert gwp.wp_media(media_id)["alt_text"] == "Alt"
    assert proxy.count(method="POST", path=MEDIA_UPDATE, forwarded=True) == 2
    assert gwp.verification(job_id).get_json()["ok"] is True


@pytest.mark.parametrize("cancelled", [False, True])
def test_an_absent_attach_is_resent_by_the_sweep_unless_the_job_was_cancelled(
    gwp, proxy, cancelled
):
    """The draft stands (201) while attaching its image meets a 503 page from in front of
    WordPress (the proxy answers without forwarding): the ``attach`` row is UNKNOWN and the
    attachment has no parent. No client call repeats an attach, so the sweep sends it
    again once it finds it absent - unless an editor cancelled the job meanwhile: then no
    write reaches WordPress and the row stays UNKNOWN for a person."""
    job_id = new_job_id()
    assert gwp.put_job(job_id).status_code == 201
    assert gwp.put_media(job_id, "hero", png_bytes((7, 8, 9), 2)).status_code == 201
    proxy.add_fault(
        Fault(kind="status_without_forward", status=503, method="POST", path=MEDIA_UPDATE)
    )
    body = draft_body(title=f"Absent attach {job_id}", featured_media={"slot": "hero"})
    drafted = gwp.put_draft(job_id, body)
    assert drafted.status_code == 201, drafted.get_json()
    key = op_key(job_id, "attach", "hero")
    rows = {r["operation_key"]: r for r in gwp.operations(job_id)}
    assert rows[key]["state"] == "UNKNOWN" and proxy.faults == [], rows[key]
    media_id, post_id = (
        rows[op_key(job_id, "media", "hero")]["remote_id"],
        drafted.get_json()["post_id"],
    )
    assert not gwp.wp_media(media_id)["post"]  # nothing reached WordPress
    if cancelled:
        editor = gwp.make_token("editor")
        done = gwp.client.post(
            f"/v1/jobs/{job_id}/cancel", json={"reason": "pulled"}, headers=gwp.headers(editor)
        )
        assert done.status_code == 200, done.get_json()
    with gwp.app.app_context(), database.connection_context():
        reconciliation.sweep(gwp.app.config["GATEWAY"], older_than=0)
    rows = {r["operation_key"]: r for r in gwp.operations(job_id)}
    sent = proxy.count(method="POST", path=MEDIA_UPDATE, forwarded=True)
    if cancelled:
        assert sent == 0 and rows[key]["state"] == "UNKNOWN", rows[key]
        assert not gwp.wp_media(media_id)["post"]
    else:
        assert sent == 1 and rows[key]["state"] == "CONFIRMED", rows[key]
        assert gwp.wp_media(media_id)["post"] == post_id
