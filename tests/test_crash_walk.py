"""Every crash point of each write path walked (issue 37 item 6), against the real test WordPress.

A path is first run once with counting on (:mod:`gateway.operations.crashes`): its request makes
C durable ledger commits and W WordPress requests, so it has C + 2W crash points (after each
commit, before each request, after each answer). Then for every point: a fresh app, the
path's set-up, the request dies there (an in-process :class:`SimulatedCrash`: the process
plays dead, so nothing more reaches the ledger or WordPress), every in-process state is thrown
away (a fresh app, a fresh thread: no thread-local clients, no context variables, the
companion cache forgotten), the ledger kept; a fresh app answers what the caller repeats (n8n:
the same request until it is answered; the notification worker: its next pass); one
reconciliation sweep. Each run must end as the uncrashed run ended: exactly one of each object
in WordPress (by operation key, the companion plugin's lookup), the job's status and phase
those of the uncrashed run (never ``in_progress`` where that one finished), and no operation
PREPARED or SENT.

A sample of the same points with real SIGKILLs of ``gateway serve`` is at the end.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import threading
import time

import agent_support
import pytest
import requests
from n8n_support import Receiver
from servers import Server
from support import OFFLINE_SITE
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from support import Gateway
from support import draft_body
from support import in_thread
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug

import gateway
from gateway.actions import deliveries
from gateway.actions import webhook_endpoints
from gateway.agents import submissions
from gateway.agents import tools as agent_tools
from gateway.agents import worker
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import PREPARED
from gateway.ledger.models import SENT
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Operation
from gateway.operations import crashes
from gateway.operations.crashes import SimulatedCrash
from gateway.recovery import reconciliation
from gateway.tenancy import sites
from gateway_tools.openai_standin import OpenAIStandIn as S

pytestmark = pytest.mark.wordpress

IMAGE = png_bytes((40, 120, 200), 4)
BLOCK_HTML = '<div class="pack"><a href="https://example.com/walk">Walk pack</a></div>'


# --------------------------------------------------------------------------- one "process"


def worth_retrying(answer) -> bool:
    """What a careful n8n workflow retries (``servers._worth_retrying``, for Flask's test
    responses): a 409/503 other than a review an editor must resolve, and any problem that
    says ``retryable: true``."""
    if answer.status_code in (409, 503) and problem_slug(answer) != "needs-review":
        return True
    body = answer.get_json(silent=True)
    return isinstance(body, dict) and body.get("retryable") is True


class Walk:
    """A gateway whose process can die at a counted point and be started again on one ledger.

    ``overrides`` are :class:`gateway.core.config.Config` fields of every app (e.g. the local
    image server's host for media from a URL)."""

    def __init__(self, wp_site: dict, ledger_url: str, **overrides):
        self.config = {
            "database_url": ledger_url,
            "secret_key": SECRET_KEY,
            "wp_timeout": 20.0,
            "inflight_window": 2.0,
            **overrides,
        }
        self.site = wp_site
        crashes.simulate()
        app = self._fresh_app()
        self.gw = Gateway(app, app.test_client(), wp_site)
        self.editor = self.gw.make_token("editor")

    def _fresh_app(self):
        if database.obj is not None:
            db.close_all()  # the dead process's connections (an open transaction rolls back)
        sites.forget_companion()  # a new process detects the plugin again
        return gateway.create_app(dict(self.config))

    def restart(self) -> Gateway:
        """The process died (or ended): a new one on the same ledger."""
        crashes.revive()
        app = self._fresh_app()
        self.gw.app, self.gw.client = app, app.test_client()
        return self.gw

    def in_ledger(self, function, *args):
        with self.gw.app.app_context(), database.connection_context():
            return function(*args)

    def retry(self, act, job_id: str, tries: int = 12):
        """What n8n does: the same request again until it is answered (a lost connection, a
        409 in flight or a 503 are retried after the answer's ``Retry-After``, at most 1 s)."""
        for _ in range(tries):
            answer = in_thread(act, self.gw, job_id)
            if not worth_retrying(answer):
                return answer
            wait = float(answer.headers.get("Retry-After", "1"))
            if problem_slug(answer) == "operation-in-progress":
                self.in_ledger(_time_passes, job_id, wait)  # the row's in-flight window
            else:
                time.sleep(min(wait, 1.0))
        return answer

    def sweep(self, job_id: str | None = None) -> dict:
        """One pass of the server's sweep, as it runs: after a SENT row's in-flight window
        (``job_id``'s rows are moved past it: :func:`_time_passes`), over the rows older than
        ``GATEWAY_INFLIGHT_WINDOW``."""
        config = self.gw.app.config["GATEWAY"]
        if job_id is not None:
            self.in_ledger(_time_passes, job_id, config.wp_timeout + 2 + config.inflight_window)
        return self.in_ledger(reconciliation.sweep, config)

    def rows(self, job_id: str) -> list[Operation]:
        return self.in_ledger(
            lambda: list(
                Operation.select().where(Operation.job_id == job_id).order_by(Operation.id)
            )
        )

    def job_state(self, job_id: str) -> tuple[str, str | None]:
        def read():
            job = records.get_job(TENANT, job_id)
            return records.status_of(job), job.phase

        return self.in_ledger(read)


def _time_passes(job_id: str, seconds: float) -> None:
    """Time passes for ``job_id``'s SENT/UNKNOWN rows (a caller waiting ``Retry-After`` for
    the in-flight window of a dead sender, the sweep's next pass): their ``sent_at`` and
    ``updated_at`` moved back in the ledger by ``seconds``, never slept for (as
    tests/test_notifications.py makes "a while ago")."""
    moved = dt.timedelta(seconds=seconds)
    stale = Operation.state.in_((SENT, UNKNOWN))
    for row in Operation.select().where(Operation.job_id == job_id, stale):
        Operation.update(
            sent_at=(row.sent_at or row.updated_at) - moved, updated_at=row.updated_at - moved
        ).where(Operation.id == row.id).execute()


# --------------------------------------------------------------------------- the paths


def _job(walk: Walk, job_id: str) -> None:
    assert walk.gw.put_job(job_id).status_code == 201


def _job_and_media(walk: Walk, job_id: str) -> None:
    _job(walk, job_id)
    assert walk.gw.put_media(job_id, "hero", IMAGE, "hero.png").status_code == 201


def _job_and_draft(walk: Walk, job_id: str) -> None:
    _job(walk, job_id)
    answer = walk.gw.put_draft(job_id, draft_body(title=f"Walk {job_id}"))
    assert answer.status_code == 201, answer.get_json()


def _drifted_draft(walk: Walk, job_id: str) -> None:
    _job_and_draft(walk, job_id)
    post_id = walk.gw.operations(job_id)[0]["remote_id"]
    walk.gw.wp_update_post(post_id, {"excerpt": "", "meta": {"rank_math_title": ""}})


def _approved_draft(walk: Walk, job_id: str) -> None:
    gw = walk.gw
    _job_and_draft(walk, job_id)
    assert (
        gw.client.post(
            f"/v1/jobs/{job_id}/approval-requests", json={}, headers=gw.headers()
        ).status_code
        == 201
    )
    check = gw.verification(job_id).get_json()
    granted = gw.client.post(
        f"/v1/jobs/{job_id}/approvals",
        json={
            "task_version": 1,
            "content_sha256": check["content_sha256"],
            "post_id": check["post_id"],
            "expires_at": (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).isoformat(),
        },
        headers=gw.headers(walk.editor),
    )
    assert granted.status_code == 201, granted.get_json()


def _media(gw, job_id):
    return gw.put_media(job_id, "hero", IMAGE, "hero.png")


def _draft_body(job_id: str) -> dict:
    return draft_body(
        title=f"Walk {job_id}",
        content="<p>Before the image.</p>\n{{media:hero}}\n<p>After it.</p>",
        featured_media={"slot": "hero"},
        body_media=["hero"],
        categories=[1],
        tags=[f"walk {job_id}"],
    )


def _draft(gw, job_id):
    return gw.put_draft(job_id, _draft_body(job_id))


def _block(gw, job_id):
    return gw.client.put(
        f"/v1/jobs/{job_id}/blocks/resources", json={"html": BLOCK_HTML}, headers=gw.headers()
    )


def _repair(gw, job_id):
    return gw.client.post(f"/v1/jobs/{job_id}/repair", json={}, headers=gw.headers())


def _publish(gw, job_id):
    return gw.client.post(f"/v1/jobs/{job_id}/publish", json={}, headers=gw.headers())


def _count_markers(walk: Walk, job_id: str) -> int:
    post_id = walk.gw.operations(job_id)[0]["remote_id"]
    content = walk.gw.wp_post(post_id)["content"]["raw"]
    digest = hashlib.sha256(BLOCK_HTML.encode()).hexdigest()[:16]
    return len(re.findall(rf"<!-- gateway:block name=resources digest={digest} -->", content))


def _wordpress(walk: Walk, job_id: str, path: str) -> dict:
    """What a user finds in WordPress for the job: objects per operation key, and what the
    path wrote (a tag, a block marker, the post's status and restored fields)."""
    gw = walk.gw
    keys = [op_key(job_id, "draft"), op_key(job_id, "media", "hero")]
    found = {key: sorted(o["id"] for o in gw.lookup(key)) for key in keys}
    seen = {"objects": {key.split("/v1/", 1)[1]: len(ids) for key, ids in found.items()}}
    posts = found[op_key(job_id, "draft")]
    if path == "draft" and posts:
        post = gw.wp_post(posts[0])
        tags = [t for t in gw.wp.get(f"{gw.wp_url}/wp-json/wp/v2/tags",
                                     params={"search": f"walk {job_id}"}, timeout=30).json()
                if t["name"] == f"walk {job_id}"]  # fmt: skip
        seen["tags"] = len(tags)
        seen["tag_on_post"] = [t["id"] for t in tags] == post["tags"]
        seen["featured"] = post["featured_media"] == found[op_key(job_id, "media", "hero")][0]
    if path == "block":
        seen["markers"] = _count_markers(walk, job_id)
    if path == "repair" and posts:
        post = gw.wp_post(posts[0])
        seen["excerpt"] = post["excerpt"]["raw"]
        seen["seo_title"] = post["meta"]["rank_math_title"]
    if path == "publish" and posts:
        seen["status"] = gw.wp_post(posts[0])["status"]
    return seen


PATHS = {
    # path: (its set-up, never crashed; the request walked, as n8n sends it)
    "media_upload": (_job, _media),
    "media_url": (_job, None),  # the request needs the image server's port: see the test
    "draft": (_job_and_media, _draft),
    "block": (_job_and_draft, _block),
    "repair": (_drifted_draft, _repair),
    "publish": (_approved_draft, _publish),
}


def _points(counted: dict[str, int]) -> list[tuple[str, int]]:
    return [(kind, n) for kind in crashes.COUNTED for n in range(1, counted[kind] + 1)]


def _outcome(walk: Walk, job_id: str, path: str) -> dict:
    rows = walk.rows(job_id)
    status, phase = walk.job_state(job_id)
    return {
        # a repair's slot is the digest of what it fixes (the job's own post): left out
        "rows": [(r.action, None if r.action == "repair" else r.slot, r.state) for r in rows],
        "status": status,
        "phase": phase,
        "wordpress": _wordpress(walk, job_id, path),
    }


def _run(walk: Walk, path: str, act, point: tuple[str, int] | None) -> dict:
    """One life of the path: set-up, the request (dying at ``point``), a restart, the
    caller's retries, one sweep; returns what the run ended with."""
    setup, _ = PATHS[path]
    job_id = new_job_id()
    walk.restart()
    crashes.simulate()
    setup(walk, job_id)
    if point is None:
        answer = in_thread(act, walk.gw, job_id)
        counted = crashes.counts()
    else:
        crashes.simulate({point[0]: point[1]})
        with pytest.raises(SimulatedCrash) as died:
            in_thread(act, walk.gw, job_id)
        assert died.value.args[0] == f"{point[0]}#{point[1]}", (path, point, died.value)
        walk.restart()
        answer = walk.retry(act, job_id)
        counted = {}
    assert answer.status_code in (200, 201), (path, point, answer.get_json())
    walk.sweep(job_id)
    verified = None
    if not path.startswith("media"):  # the pipeline's next step after a post's write
        check = walk.gw.verification(job_id)
        verified = (check.status_code, check.get_json().get("ok"))
    outcome = {**_outcome(walk, job_id, path), "verified": verified}
    stuck = [r for r in outcome["rows"] if r[2] in (PREPARED, SENT)]
    assert not stuck, (path, point, stuck)
    return {**outcome, "counted": counted}


# The PostgreSQL pass walks the paths whose outcome can depend on the ledger's dialect: media
# upload (media's own reuse UPDATE beside perform's claim), the draft (claims of the draft, its
# attachments and terms, the job's phase), notifications and the agent's tool call (their own
# claims: conditional UPDATEs of claimed_until and leases). Media from a URL differs from an
# upload only before the claim (the download); block, repair and publish write the ledger only
# through perform's claim and moves, which the draft already walks on PostgreSQL.
SAME_LEDGER_CODE = ("media_url", "block", "repair", "publish")


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=[pytest.mark.sqlite_pass] if p in SAME_LEDGER_CODE else [])
        for p in PATHS
    ],
)
def test_every_crash_point_of_a_write_path_ends_with_one_of_each_object(
    path, wp_site, ledger_url, record_property
):
    image_server = None
    overrides = {}
    if path == "media_url":
        image_server = _image_server()
        host = f"127.0.0.1:{image_server.server_address[1]}"
        overrides = {
            "media_url_schemes": frozenset({"http"}),
            "media_url_allow_hosts": frozenset({host}),
        }
    try:
        walk = Walk(wp_site, ledger_url, **overrides)
        act = PATHS[path][1] or _media_url_request(f"http://{host}/walk.png")
        baseline = _run(walk, path, act, None)
        counted = baseline.pop("counted")
        points = _points(counted)
        record_property("crash walk", f"{path}: {len(points)} points ({counted})")
        if path.startswith("media"):  # the run goes on (a draft): the upload is confirmed
            assert baseline["rows"] == [("media", "hero", "CONFIRMED")], baseline
        else:  # the run's post is written and verified by read-back
            assert baseline["verified"] == (200, True), baseline
            assert baseline["status"] == "completed", baseline
        _assert_one_of_each(path, baseline)
        differing = []
        for point in points:
            ended = _run(walk, path, act, point)
            ended.pop("counted")
            if ended != baseline:
                differing.append((point, {k: v for k, v in ended.items() if v != baseline[k]}))
        assert not differing, (f"{path}: {len(points)} points; ended otherwise:", differing)
    finally:
        crashes.stop()
        if image_server is not None:
            image_server.shutdown()
            image_server.server_close()


def _assert_one_of_each(path: str, outcome: dict) -> None:
    objects = outcome["wordpress"]["objects"]
    expected_media = 1 if path in ("media_upload", "media_url", "draft") else 0
    expected_posts = 0 if path.startswith("media") else 1
    assert objects == {"draft": expected_posts, "media/hero": expected_media}, outcome
    wordpress = outcome["wordpress"]
    if path == "draft":
        assert wordpress["tags"] == 1 and wordpress["tag_on_post"] and wordpress["featured"]
    if path == "block":
        assert wordpress["markers"] == 1
    if path == "repair":
        assert wordpress["excerpt"] == "A short summary."
        assert wordpress["seo_title"] == "Gateway SEO title"
    if path == "publish":
        assert wordpress["status"] == "publish"


def _media_url_request(url: str):
    def put(gw, job_id):
        return gw.client.put(
            f"/v1/jobs/{job_id}/media/hero", json={"source_url": url}, headers=gw.headers()
        )

    return put


def _image_server():
    from http.server import BaseHTTPRequestHandler
    from http.server import ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(IMAGE)))
            self.end_headers()
            self.wfile.write(IMAGE)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# --------------------------------------------------------------------------- notifications


def _decide(gw, job_id):
    return gw.client.post(
        f"/v1/jobs/{job_id}/notifications",
        json={"event": "ready_for_approval"},
        headers=gw.headers(),
    )


def _delivery_pass(walk: Walk) -> dict:
    """One pass of the worker's delivery thread, counted as one scope."""

    def one_pass():
        crashes.begin()
        return walk.in_ledger(deliveries.resend_pending, walk.gw.app.config["GATEWAY"])

    return in_thread(one_pass)


def _notification_outcome(walk: Walk, job_id: str, editors: Receiver) -> dict:
    def read():  # each notification's delivery to the tenant's URL (schema version 18)
        from gateway.ledger.models import Notification
        from gateway.ledger.models import WebhookDelivery

        rows = (
            WebhookDelivery.select(WebhookDelivery.state, Notification.key)
            .join(Notification, on=WebhookDelivery.event_id == Notification.id)
            .where(Notification.job_id == job_id)
            .objects()
        )
        return [(row.key, row.state) for row in rows]

    key = f"{TENANT}/{job_id}/v1/notify/ready_for_approval"
    mine = [k for k in editors.keys() if job_id in k]
    return {
        "rows": walk.in_ledger(read),
        "received_once_or_resent_under_one_key": bool(mine) and set(mine) == {key},
    }


def _claim_expired(job_id: str) -> None:
    """Time passes for a claim the dead sender left (``claimed_until``: the attempt's
    deadline plus 20 s): moved into the past in the ledger, never slept for."""
    from gateway.ledger.models import Notification
    from gateway.ledger.models import WebhookDelivery

    past = db.utcnow() - dt.timedelta(seconds=1)
    events = Notification.select(Notification.id).where(Notification.job_id == job_id)
    WebhookDelivery.update(claimed_until=past).where(
        WebhookDelivery.event_id.in_(events), WebhookDelivery.claimed_until.is_null(False)
    ).execute()


@pytest.mark.parametrize("scope", ["request", "delivery"])
def test_every_crash_point_of_a_notification_ends_delivered_under_one_key(
    scope, ledger_url, record_property
):
    """The decision (the request's scope: n8n retries it) and its delivery (the worker's
    pass: the next pass follows; a claim left by the dead sender expires after
    ``notification_timeout``)."""
    with Receiver() as editors:
        walk = Walk(
            OFFLINE_SITE,  # a notification never reaches WordPress
            ledger_url,
            notification_url_allow_hosts=frozenset({editors.url.split("/")[2]}),
            notification_timeout=1.0,
        )
        try:
            walk.in_ledger(
                webhook_endpoints.set_legacy_url,
                walk.gw.app.config["GATEWAY"],
                TENANT,
                editors.url,
            )

            def life(point):
                job_id = new_job_id()
                walk.restart()
                crashes.simulate()
                _job(walk, job_id)
                walk.in_ledger(
                    lambda: records.advance_phase(
                        records.get_job(TENANT, job_id), "approval_pending", post_id=7
                    )
                )
                if scope == "delivery":
                    assert _decide(walk.gw, job_id).status_code == 201
                    crashes.simulate({point[0]: point[1]} if point else {})
                    try:
                        _delivery_pass(walk)
                    except SimulatedCrash:
                        assert point is not None
                    else:
                        assert point is None, f"never died at {point}"
                    counted = crashes.counts()
                    walk.restart()
                else:
                    crashes.simulate({point[0]: point[1]} if point else {})
                    if point is None:
                        assert _decide(walk.gw, job_id).status_code == 201
                    else:
                        with pytest.raises(SimulatedCrash):
                            in_thread(_decide, walk.gw, job_id)
                        walk.restart()
                        assert walk.retry(_decide, job_id).status_code in (200, 201)
                    counted = crashes.counts()
                walk.in_ledger(_claim_expired, job_id)  # the next pass comes after it
                assert _delivery_pass(walk)["pending"] == 0, point
                walk.sweep()
                return _notification_outcome(walk, job_id, editors), counted

            baseline, counted = life(None)
            points = _points(counted)
            record_property("crash walk", f"notification {scope}: {len(points)} points ({counted})")
            assert baseline["received_once_or_resent_under_one_key"], baseline
            assert [state for _, state in baseline["rows"]] == ["DELIVERED"], baseline
            for point in points:
                ended, _ = life(point)
                message = f"notification {scope}: {len(points)} points, died at {point}"
                assert [s for _, s in ended["rows"]] == ["DELIVERED"], (message, ended)
                assert ended["received_once_or_resent_under_one_key"], (message, ended)
        finally:
            crashes.stop()


# --------------------------------------------------------------------------- an agent's tool call

standin = agent_support.standin  # the OpenAI stand-in fixture (tests/agent_support.py)


def test_every_crash_point_of_an_agent_tool_call_ends_with_one_post_one_submission(
    wp_site, ledger_url, standin, record_property
):
    """A session requires ``put_draft``; one worker pass (one scope) writes the draft and
    submits the tool result. After a crash the worker's next passes (the dead worker's
    leases expire after ``agent_lease_seconds``) must end with one post and one accepted
    submission, every resend under the one idempotency key."""
    walk = Walk(
        wp_site,
        ledger_url,
        openai_api_key=standin.api_key,
        openai_base_url=standin.base_url,
        openai_webhook_secret=standin.webhook_secret,
        agent_stale_after=0.0,
        agent_retry_after=0.0,
        agent_lease_seconds=1,
    )

    def one_pass():
        crashes.begin()
        return walk.in_ledger(worker.run_once, walk.gw.app.config["GATEWAY"])

    def settled(job_id: str) -> bool:
        rows = {r.action: r.state for r in walk.rows(job_id)}
        return rows.get("tool_result") == "CONFIRMED"

    def life(point):
        job_id = new_job_id()
        walk.restart()
        crashes.simulate()
        sid = standin.create_session(tools=agent_tools.definitions(), environment="none")
        assert agent_support.bind(walk.gw, job_id, sid).status_code == 201
        [call] = standin.require(sid, S.function_call("put_draft", draft_body(title=job_id)))
        crashes.simulate({point[0]: point[1]} if point else {})
        if point is None:
            in_thread(one_pass)
        else:
            with pytest.raises(SimulatedCrash):
                in_thread(one_pass)
        counted = crashes.counts()
        walk.restart()
        config = walk.gw.app.config["GATEWAY"]
        deadline = time.monotonic() + 15
        while not settled(job_id) and time.monotonic() < deadline:
            # the dead worker's SENT row outlives its in-flight window (moved, never slept)
            walk.in_ledger(_time_passes, job_id, config.wp_timeout + 2)
            in_thread(one_pass)  # the worker's next pass
            if not settled(job_id):
                time.sleep(0.25)  # the dead worker's lease runs out (1 s)
        walk.sweep(job_id)
        key = op_key(job_id, "draft")
        expected = submissions.idempotency_key(op_key(job_id, "tool_result", call["call_id"]))
        outcome = {
            "posts": walk.gw.count_objects(key, "post"),
            "accepted": len(
                [
                    e
                    for e in standin.events(sid, "agent.session.input.tool_result")
                    if e["call_id"] == call["call_id"]
                ]
            ),
            "keys": {p["key"] for p in standin.event_posts(sid)} == {expected},
            "rows": sorted((r.action, r.state) for r in walk.rows(job_id)),
        }
        return outcome, counted

    try:
        baseline, counted = life(None)
        points = _points(counted)
        record_property("crash walk", f"agent tool call: {len(points)} points ({counted})")
        assert baseline["posts"] == 1 and baseline["accepted"] == 1 and baseline["keys"], baseline
        assert not [r for r in baseline["rows"] if r[1] in (PREPARED, SENT)], baseline
        for point in points:
            ended, _ = life(point)
            assert ended == baseline, (
                f"agent tool call: {len(points)} points, died at {point}",
                ended,
            )
    finally:
        crashes.stop()


# --------------------------------------------------------------------------- real SIGKILLs


@pytest.mark.sqlite_pass  # a real process's death: the in-process walk covers both ledgers
def test_a_sample_of_the_draft_points_with_real_sigkills_of_gateway_serve(
    wp_site, ledger_url, tmp_path
):
    """The draft path's first and last ledger commit and its first WordPress answer, each in a
    real ``gateway serve`` that SIGKILLs itself there (the walk above raises in-process
    instead); restarted without the point, n8n's retry answers, ``gateway reconcile`` sweeps.
    The last commit's number is learnt from an in-process run of the same request."""
    walk = Walk(wp_site, ledger_url)
    try:
        counted = _run(walk, "draft", _draft, None)["counted"]
    finally:
        crashes.stop()
    sample = ["commit#1", f"commit#{counted['commit']}", "wp_after#1"]
    server = Server(wp_site, ledger_url, tmp_path)
    try:
        server.start()
        jobs_of = {}
        for point in sample:
            job_id = jobs_of[point] = new_job_id()
            put = server.call(
                "PUT", f"/v1/jobs/{job_id}", json={"site": SITE_NAME, "task_version": 1}
            )
            assert put.status_code == 201, put.text
            media = server.call(
                "PUT", f"/v1/jobs/{job_id}/media/hero", files={"file": ("hero.png", IMAGE)}
            )
            assert media.status_code == 201, media.text
        for point in sample:
            job_id = jobs_of[point]
            body = _draft_body(job_id)
            server.kill()
            server.start(crash_point=point)
            with pytest.raises(requests.ConnectionError):
                server.call("PUT", f"/v1/jobs/{job_id}/draft", json=body)
            server.kill()
            server.start()
            answer = server.retry("PUT", f"/v1/jobs/{job_id}/draft", json=body)
            assert answer.status_code in (200, 201), (point, answer.text)
        server._cli("reconcile", "--older-than", "0")
        for point in sample:
            job_id = jobs_of[point]
            rows = server.call("GET", f"/v1/jobs/{job_id}").json()
            assert {r["state"] for r in rows["operations"]} == {"CONFIRMED"}, (point, rows)
            assert rows["status"] != "in_progress", (point, rows)
            assert walk.gw.count_objects(op_key(job_id, "draft"), "post") == 1, point
            assert walk.gw.count_objects(op_key(job_id, "media", "hero")) == 1, point
    finally:
        server.kill()
