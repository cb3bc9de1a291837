"""Issue 10, point 1: an object is bound to an operation or a job only when it is provably
that operation's. The takeover an authorization probe found (tenant B adopts and publishes
tenant A's post through a review decision, two tenants' sites pointing at one WordPress) must
fail, and every path that binds a WordPress object id is tried with a foreign object.

All against the real test WordPress; the companion plugin is hidden from a site by the fault
proxy (its routes answer 404), as in the probe.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import time

import pytest
import requests
from support import TENANT
from support import draft_body
from support import hide_companion
from support import new_job_id
from support import op_key
from support import png_bytes
from support import problem_slug

from gateway.ledger.db import database
from gateway.ledger.models import Approval
from gateway.ledger.models import Job
from gateway.ledger.models import Operation
from gateway.ledger.models import Review
from gateway.ledger.models import Site
from gateway.recovery import reconciliation
from gateway.tenancy import sites
from gateway_tools.fault_proxy import Fault

pytestmark = pytest.mark.wordpress
OTHER = "beta"  # the second tenant
CREATE = r"^/wp-json/wp/v2/posts/?$"


@pytest.fixture(autouse=True)
def _fresh_companion_detection():
    """Site ids restart in every test's ledger: never carry a detection over."""
    sites.forget_companion()
    yield
    sites.forget_companion()


def wp_sql(site: dict, sql: str) -> None:
    database_ = site["database"]
    subprocess.run(
        ["mariadb", "-h", database_["host"], "-P", str(database_["port"]), "-u", "root",
         database_["name"], "-e", sql],
        check=True, timeout=30,
    )  # fmt: skip


def resolve(gw, review_id: int, post_id: int, editor: str):
    return gw.client.post(
        f"/v1/reviews/{review_id}/resolve",
        json={"decision": "same_as", "post_id": post_id},
        headers=gw.headers(editor),
    )


def make_draft(gw, job_id: str, title: str, token=None) -> int:
    assert gw.put_job(job_id, token=token).status_code == 201
    answer = gw.put_draft(job_id, draft_body(title=title), token=token)
    assert answer.status_code == 201, answer.get_json()
    return answer.get_json()["post_id"]


def ledger(gw):
    return _Ledger(gw.app)


class _Ledger:
    def __init__(self, app):
        self.app = app

    def __enter__(self):
        self.ctx = self.app.app_context()
        self.ctx.push()
        database.connect(reuse_if_open=True)
        return self

    def __exit__(self, *exc):
        database.close()
        self.ctx.pop()


def row(tenant: str, key: str) -> Operation:
    return Operation.get(Operation.tenant == tenant, Operation.operation_key == key)


def test_tenant_b_cannot_take_over_tenant_a_post_through_a_review(gw, proxy):
    """The probe: B's site (through the proxy, no companion visible) loses a draft response;
    A's post with the same title appears; B's editor answers ``same_as`` with A's post. A's
    post is held by A in the ledger, so it is not even a suspect, and cannot be adopted."""
    hide_companion(proxy)
    gw.add_site(proxy.url, tenant=OTHER)  # another URL, the same WordPress install
    b_flow, b_editor = gw.make_token("workflow", OTHER), gw.make_token("editor", OTHER)
    title = f"Shared {new_job_id()}"
    job_b = new_job_id()
    assert gw.put_job(job_b, token=b_flow).status_code == 201
    proxy.add_fault(Fault(kind="drop_response", method="POST", path=CREATE))
    assert gw.put_draft(job_b, draft_body(title=title), token=b_flow).status_code == 503
    job_a = new_job_id()
    a_post = make_draft(gw, job_a, title)  # tenant A, straight to WordPress, companion present
    a_before = gw.wp_post(a_post)
    time.sleep(3.2)  # without the guard, absence is provable only after the in-flight window
    retry = gw.put_draft(job_b, draft_body(title=title), token=b_flow)
    assert retry.status_code == 409 and problem_slug(retry) == "needs-review"
    review = gw.client.get("/v1/reviews", headers=gw.headers(b_editor)).get_json()["reviews"][0]
    suspects = [s["id"] for s in review["detail"]["suspects"]]
    assert a_post not in suspects and len(suspects) == 1  # B's own post, lost with its answer

    taken = resolve(gw, review["review_id"], a_post, b_editor)
    assert taken.status_code == 422 and taken.get_json()["errors"][0]["pointer"] == "/post_id"
    with ledger(gw):
        b_row = row(OTHER, f"{OTHER}/{job_b}/v1/draft")
        assert b_row.state != "CONFIRMED" and b_row.remote_id is None
        assert Review.get_by_id(review["review_id"]).status == "open"
    # B's own lost post is still B's to adopt; afterwards B's calls reach only that post.
    b_post = suspects[0]
    assert resolve(gw, review["review_id"], b_post, b_editor).status_code == 200
    check = gw.client.get(f"/v1/jobs/{job_b}/verification", headers=gw.headers(b_flow))
    assert check.get_json()["post_id"] == b_post
    body = {
        "task_version": 1,
        "content_sha256": check.get_json()["content_sha256"],
        "post_id": b_post,
        "expires_at": (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat(),
    }
    approvals = f"/v1/jobs/{job_b}/approvals"
    assert gw.client.post(approvals, json=body, headers=gw.headers(b_editor)).status_code == 201
    published = gw.client.post(f"/v1/jobs/{job_b}/publish", headers=gw.headers(b_flow))
    assert published.status_code == 201 and published.get_json()["post_id"] == b_post
    a_after = gw.wp_post(a_post)
    assert a_after["status"] == "draft" and a_after["modified_gmt"] == a_before["modified_gmt"]
    assert a_after["featured_media"] == a_before["featured_media"]
    assert a_after["meta"]["_gateway_operation_key"] == op_key(job_a, "draft")


def test_same_as_accepts_only_one_of_the_review_suspects(gw, proxy):
    hide_companion(proxy)
    gw.add_site(proxy.url)
    editor = gw.make_token("editor")
    title = f"Only suspects {new_job_id()}"
    job_id = new_job_id()
    gw.put_job(job_id)
    proxy.add_fault(Fault(kind="drop_response", method="POST", path=CREATE))
    assert gw.put_draft(job_id, draft_body(title=title)).status_code == 503
    time.sleep(3.2)
    assert problem_slug(gw.put_draft(job_id, draft_body(title=title))) == "needs-review"
    review = gw.client.get("/v1/reviews", headers=gw.headers(editor)).get_json()["reviews"][0]
    author = gw.site["users"]["author"]
    unrelated = requests.post(
        gw.wp_url + "/wp-json/wp/v2/posts", timeout=30,
        auth=(author["username"], author["app_password"]),
        json={"title": "not a suspect", "status": "draft"},
    ).json()["id"]  # fmt: skip
    refused = resolve(gw, review["review_id"], unrelated, editor)
    assert refused.status_code == 422 and refused.get_json()["errors"][0]["pointer"] == "/post_id"
    assert gw.operations(job_id)[0]["state"] != "CONFIRMED"


def _open_review(gw, job_id: str, suspect: int) -> int:
    """A suspected-duplicate review on the job's UNKNOWN draft naming ``suspect``."""
    key = op_key(job_id, "draft")
    with ledger(gw):
        Operation.update(state="UNKNOWN", remote_id=None).where(
            Operation.operation_key == key
        ).execute()
        Job.update(post_id=None, phase=None).where(Job.job_id == job_id).execute()
        return Review.create(
            tenant=TENANT, job_id=job_id, operation_key=key, kind="suspected_duplicate",
            detail={"title": "t", "suspects": [{"id": suspect, "title": "t"}]},
        ).id  # fmt: skip


def test_same_as_refuses_a_keyless_post_another_tenant_holds_on_the_same_install(
    gw, proxy, wp_site
):
    """Only the ledger can tell: the post carries no key (it was lost), and tenant B reaches
    the install by another URL than A."""
    job_a = new_job_id()
    a_post = make_draft(gw, job_a, f"Keyless {job_a}")
    wp_sql(wp_site, f"DELETE FROM wp_postmeta WHERE post_id={a_post} AND "
                    "meta_key='_gateway_operation_key'")  # fmt: skip
    gw.add_site(proxy.url, tenant=OTHER)
    b_flow, b_editor = gw.make_token("workflow", OTHER), gw.make_token("editor", OTHER)
    job_b = new_job_id()
    make_draft(gw, job_b, f"B {job_b}", token=b_flow)
    with ledger(gw):
        key = f"{OTHER}/{job_b}/v1/draft"
        Operation.update(state="UNKNOWN", remote_id=None).where(
            Operation.operation_key == key
        ).execute()
        review_id = Review.create(
            tenant=OTHER, job_id=job_b, operation_key=key, kind="suspected_duplicate",
            detail={"suspects": [{"id": a_post}]},
        ).id  # fmt: skip
    refused = resolve(gw, review_id, a_post, b_editor)
    assert refused.status_code == 409 and problem_slug(refused) == "foreign-object"
    assert job_a in refused.get_json()["detail"]
    with ledger(gw):
        assert row(OTHER, key).state == "UNKNOWN"
        a_site, b_site = Site.get(Site.tenant == TENANT), Site.get(Site.tenant == OTHER)
        assert a_site.url != b_site.url  # two URLs ...
        assert a_site.install_url and a_site.install_url == b_site.install_url  # ... one install


def test_same_as_refuses_an_object_of_the_wrong_type(gw):
    job_id = new_job_id()
    gw.put_job(job_id)
    media = gw.put_media(job_id, "hero", png_bytes((1, 2, 3)))
    attachment = media.get_json()["media_id"]
    assert gw.put_draft(job_id, draft_body(title=f"Type {job_id}")).status_code == 201
    review_id = _open_review(gw, job_id, attachment)
    refused = resolve(gw, review_id, attachment, gw.make_token("editor"))
    assert refused.status_code == 409 and problem_slug(refused) == "foreign-object"


def test_same_as_refuses_a_post_carrying_another_operation_key(gw):
    job_one, job_two = new_job_id(), new_job_id()
    first = make_draft(gw, job_one, f"Keyed {job_one}")
    make_draft(gw, job_two, f"Two {job_two}")
    with ledger(gw):  # the ledger forgets job one's binding: only the key on the post tells
        Operation.delete().where(Operation.job_id == job_one).execute()
    review_id = _open_review(gw, job_two, first)
    refused = resolve(gw, review_id, first, gw.make_token("editor"))
    assert refused.status_code == 409 and op_key(job_one, "draft") in refused.get_json()["detail"]


def test_reconciliation_does_not_adopt_an_object_another_job_holds(gw, wp_site):
    """A lookup by key finds a post that carries this job's key too (legacy data), but the
    ledger binds that post to another job: recover does not confirm it."""
    job_one, job_two = new_job_id(), new_job_id()
    first = make_draft(gw, job_one, f"Held {job_one}")
    gw.put_job(job_two)
    key_two = op_key(job_two, "draft")
    wp_sql(wp_site, "INSERT INTO wp_postmeta (post_id, meta_key, meta_value) VALUES "
                    f"({first}, '_gateway_operation_key', '{key_two}')")  # fmt: skip
    with ledger(gw):
        Operation.create(
            operation_key=key_two, tenant=TENANT, job_id=job_two, task_version=1,
            action="draft", binds="post", request_hash="x", state="UNKNOWN", attempts=1,
            intent={"sent": {}, "expected": {}, "update_of": None},
        )  # fmt: skip
    report = gw.recover(job_two).get_json()
    assert report["completed"] == [] and "not provably" in report["unknown"][0]["reason"]
    with ledger(gw):
        counts = reconciliation.sweep(gw.app.config["GATEWAY"], older_than=0)
        assert counts["refused"] == 1 and counts["confirmed"] == 0
        assert row(TENANT, key_two).state == "UNKNOWN" and row(TENANT, key_two).remote_id is None


def test_companion_existing_id_of_a_foreign_object_is_refused(gw, wp_site):
    """The guard answers a create with ``existing_id`` of a post another job holds."""
    job_one, job_two = new_job_id(), new_job_id()
    first = make_draft(gw, job_one, f"Guarded {job_one}")
    gw.put_job(job_two)
    key_two = op_key(job_two, "draft")
    wp_sql(wp_site, "INSERT INTO wp_postmeta (post_id, meta_key, meta_value) VALUES "
                    f"({first}, '_gateway_operation_key', '{key_two}')")  # fmt: skip
    answer = gw.put_draft(job_two, draft_body(title=f"Two {job_two}"))
    assert answer.status_code == 409 and problem_slug(answer) == "foreign-object"
    assert gw.operations(job_two)[0]["state"] != "CONFIRMED"
    assert gw.count_objects(op_key(job_two, "draft")) == 1  # nothing created besides


def _foreign_binding(gw) -> tuple[str, int, dict]:
    """Job two bound to job one's post, as a ledger written before ownership was checked."""
    job_one, job_two = new_job_id(), new_job_id()
    first = make_draft(gw, job_one, f"Bound {job_one}")
    gw.put_job(job_two)
    with ledger(gw):
        source = row(TENANT, op_key(job_one, "draft"))
        Operation.create(
            operation_key=op_key(job_two, "draft"), tenant=TENANT, job_id=job_two,
            task_version=1, action="draft", binds="post", request_hash="x", state="CONFIRMED",
            remote_id=first, intent=source.intent, receipt=source.receipt, attempts=1,
        )  # fmt: skip
        Job.update(post_id=first, phase="verified").where(Job.job_id == job_two).execute()
    return job_two, first, gw.wp_post(first)


@pytest.mark.parametrize("path", ["verification", "repair", "block", "approve", "publish"])
def test_a_job_bound_to_another_jobs_post_cannot_touch_it(gw, path):
    job_id, post_id, before = _foreign_binding(gw)
    gw.wp_update_post(post_id, {"excerpt": "drifted"})  # something a repair would fix
    before = gw.wp_post(post_id)
    editor = gw.make_token("editor")
    digest = "0" * 64
    if path == "publish":
        with ledger(gw):
            Approval.create(
                tenant=TENANT, job_id=job_id, task_version=1, post_id=post_id,
                content_sha256=digest, approved_by="test-editor",
                expires_at=dt.datetime.utcnow() + dt.timedelta(hours=1),
            )  # fmt: skip
    calls = {
        "verification": lambda: gw.verification(job_id),
        "repair": lambda: gw.client.post(f"/v1/jobs/{job_id}/repair", headers=gw.headers()),
        "block": lambda: gw.client.put(
            f"/v1/jobs/{job_id}/blocks/cta", json={"html": "<p>x</p>"}, headers=gw.headers()
        ),
        "approve": lambda: gw.client.post(
            f"/v1/jobs/{job_id}/approvals",
            json={
                "task_version": 1,
                "content_sha256": digest,
                "post_id": post_id,
                "expires_at": (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat(),
            },
            headers=gw.headers(editor),
        ),  # fmt: skip
        "publish": lambda: gw.client.post(f"/v1/jobs/{job_id}/publish", headers=gw.headers()),
    }
    answer = calls[path]()
    assert answer.status_code == 409 and problem_slug(answer) == "foreign-object", answer.data
    after = gw.wp_post(post_id)
    assert after["modified_gmt"] == before["modified_gmt"] and after["status"] == "draft"


def test_an_adoption_racing_another_jobs_binding_is_undone(gw, monkeypatch):
    """The check passes (as if job one bound the post just after it), the UPDATE commits, and
    the re-check after it sets the operation back: never two jobs bound to one post."""
    from gateway.operations import ownership

    job_one, job_two = new_job_id(), new_job_id()
    first = make_draft(gw, job_one, f"Race {job_one}")
    make_draft(gw, job_two, f"Race two {job_two}")
    review_id = _open_review(gw, job_two, first)
    monkeypatch.setattr(ownership, "check_adoptable", lambda *args, **kwargs: None)
    refused = resolve(gw, review_id, first, gw.make_token("editor"))
    assert refused.status_code == 409 and "at the same moment" in refused.get_json()["detail"]
    with ledger(gw):
        two = row(TENANT, op_key(job_two, "draft"))
        assert two.state == "UNKNOWN" and two.remote_id is None
        assert [r.job_id for r in ownership.holders(_Target(gw), first)] == [job_one]


class _Target:
    """The pieces of a target :func:`ownership.holders` reads, for the test's own site."""

    def __init__(self, gw):
        self.config = gw.app.config["GATEWAY"]
        self.site = Site.get(Site.tenant == TENANT)
        self.client = sites.client_for(self.site, self.config.secret_key, 5)


def test_an_approval_naming_another_jobs_post_is_refused(gw):
    """An id that arrives in a request: the approval body names job one's post for job two."""
    job_one, job_two = new_job_id(), new_job_id()
    first = make_draft(gw, job_one, f"Approve one {job_one}")
    make_draft(gw, job_two, f"Approve two {job_two}")
    theirs = gw.verification(job_one).get_json()
    body = {
        "task_version": 1,
        "content_sha256": theirs["content_sha256"],
        "post_id": first,
        "expires_at": (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat(),
    }
    editor = gw.make_token("editor")
    refused = gw.client.post(f"/v1/jobs/{job_two}/approvals", json=body, headers=gw.headers(editor))
    assert refused.status_code == 409 and problem_slug(refused) == "approval-stale"
    assert refused.get_json()["post_id"] != first
    assert gw.job(job_two).get_json()["approvals"] == []
