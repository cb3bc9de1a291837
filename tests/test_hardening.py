"""Issue 10, points 2-6: approvals need evidence; identifiers are what they look like; no 500
for bad input; review-page sessions end when they should; bounded cost of ``GET /review``.

Point 1 (ownership of WordPress objects) is in ``test_ownership.py``.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sqlite3
from pathlib import Path

import pytest
from support import SECRET_KEY
from support import TENANT
from support import draft_body
from support import new_job_id
from support import problem_slug
from test_migrations import cli
from test_ownership import _fresh_companion_detection  # noqa: F401 (autouse fixture)
from test_ownership import hide_companion
from test_ownership import ledger
from test_review_page import _csrf
from test_review_page import _sign_in

from gateway.ledger.models import EditorSession
from gateway.ledger.models import Job
from gateway.ledger.models import Token
from gateway.tenancy import sites
from gateway.tenancy import tokens

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HUGE = "99999999999999999999"


def approve(gw, job_id: str, editor: str, days: float = 1.0):
    check = gw.verification(job_id).get_json()
    body = {
        "task_version": 1,
        "content_sha256": check["content_sha256"],
        "post_id": check["post_id"],
        "expires_at": (dt.datetime.now(dt.UTC) + dt.timedelta(days=days)).isoformat(),
    }
    return gw.client.post(f"/v1/jobs/{job_id}/approvals", json=body, headers=gw.headers(editor))


def new_draft(gw, title: str | None = None) -> str:
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    answer = gw.put_draft(job_id, draft_body(title=title or f"Hardening {job_id}"))
    assert answer.status_code == 201, answer.get_json()
    return job_id


# --------------------------------------------------------------------------- 2. approvals


@pytest.mark.wordpress
def test_an_approval_needs_a_read_back_that_verifies(gw):
    job_id = new_draft(gw)
    editor = gw.make_token("editor")
    gw.wp_update_post(gw.verification(job_id).get_json()["post_id"], {"excerpt": ""})
    refused = approve(gw, job_id, editor)  # the digest of the live (drifted) post
    assert refused.status_code == 409 and problem_slug(refused) == "verification-failed"
    assert refused.get_json()["failed_fields"] == ["excerpt"]
    assert gw.job(job_id).get_json()["approvals"] == []


@pytest.mark.wordpress
def test_fields_the_site_cannot_check_do_not_block_and_are_listed(gwp, proxy):
    hide_companion(proxy)
    job_id = new_draft(gwp)
    asked = gwp.client.post(f"/v1/jobs/{job_id}/approval-requests", headers=gwp.headers())
    assert asked.status_code == 201, asked.get_json()
    unchecked = ["seo.description", "seo.focus_keyword", "seo.title"]
    assert asked.get_json()["unchecked_fields"] == unchecked
    granted = approve(gwp, job_id, gwp.make_token("editor"))
    assert granted.status_code == 201 and granted.get_json()["unchecked_fields"] == unchecked


@pytest.mark.wordpress
def test_an_expiry_beyond_the_cap_is_422(gw):
    job_id = new_draft(gw)
    editor = gw.make_token("editor")
    too_late = approve(gw, job_id, editor, days=7.1)
    assert too_late.status_code == 422 and too_late.get_json()["errors"][0]["pointer"] == (
        "/expires_at"
    )
    assert approve(gw, job_id, editor, days=6.9).status_code == 201


def test_token_names_are_unique_per_tenant(offline_gw, ledger_url):
    with ledger(offline_gw):
        tokens.create_token(TENANT, "workflow", "alice")
        with pytest.raises(ValueError, match="already has a token named 'alice'"):
            tokens.create_token(TENANT, "editor", "alice")
        tokens.create_token("other", "editor", "alice")  # another tenant: its own names
        assert tokens.revoke_tokens(TENANT, "alice") == 1
        with pytest.raises(ValueError):  # revoked names stay taken: records name one token
            tokens.create_token(TENANT, "workflow", "alice")
    done = cli(ledger_url, "tokens", "create", "--tenant", TENANT, "--role", "admin", "--name",
               "alice")  # fmt: skip
    assert done.returncode == 2 and "already has a token named 'alice'" in done.stderr


def test_a_token_revoked_by_the_cli_is_refused_at_the_very_next_request(offline_gw, ledger_url):
    """No process remembers a token (issue 32: a token memo would have to keep this, and the
    agent worker relies on it): ``gateway tokens revoke``, another process on the same ledger,
    refuses this app's very next request, its pooled connection and everything else warm
    from the requests the token just made."""
    gw = offline_gw
    token = gw.make_token("workflow", name="memo")
    job_id = new_job_id()
    assert gw.put_job(job_id, token=token).status_code == 201
    for _ in range(3):
        assert gw.client.get(f"/v1/jobs/{job_id}", headers=gw.headers(token)).status_code == 200
    revoked = cli(ledger_url, "tokens", "revoke", "--tenant", TENANT, "--name", "memo")
    assert json.loads(revoked.stdout)["revoked"] == 1, revoked.stderr
    refused = gw.client.get(f"/v1/jobs/{job_id}", headers=gw.headers(token))
    assert refused.status_code == 401, refused.get_json()
    assert gw.put_job(new_job_id(), token=token).status_code == 401  # writes too
    assert gw.client.get(f"/v1/jobs/{job_id}", headers=gw.headers()).status_code == 200


def test_the_migration_renames_duplicate_token_names_and_says_so(tmp_path):
    path = tmp_path / "ledger-0.1.0.db"
    with sqlite3.connect(path) as connection:
        connection.executescript((FIXTURES / "ledger-0.1.0.sql").read_text())
        for number, role in ((2, "workflow"), (3, "editor")):
            connection.execute(
                "INSERT INTO token VALUES (?, ?, 'acme', ?, 'alice', '2026-11-30 10:00:00', NULL)",
                (number, f"{number:064x}", role),
            )
    url = f"sqlite:///{path}"
    migrated = cli(url, "init-db")
    assert migrated.returncode == 0, migrated.stderr
    assert "renamed from 'alice' to 'alice-editor-3'" in migrated.stderr
    with sqlite3.connect(path) as connection:
        names = connection.execute("SELECT id, name FROM token ORDER BY id").fetchall()
        columns = {row[1] for row in connection.execute("PRAGMA table_info(site)")}
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        indexes = {row[1] for row in connection.execute("PRAGMA index_list(operation)")}
    assert names == [(1, "fixture"), (2, "alice"), (3, "alice-editor-3")]
    assert {"install_url", "install_home"} <= columns and "editor_session" in tables
    assert "operation_remote_id" in indexes
    revoked = cli(url, "tokens", "revoke", "--tenant", "acme", "--name", "alice")
    assert json.loads(revoked.stdout)["revoked"] == 1


# --------------------------------------------------------------------------- 3. identifiers


def test_identifiers_match_as_a_whole(offline_gw):
    gw = offline_gw
    refused = gw.client.put("/v1/jobs/nl1%0A", json={"site": "blog", "task_version": 1},
                            headers=gw.headers())  # fmt: skip
    assert refused.status_code == 422
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    for path in (f"/v1/jobs/{job_id}/blocks/cta%0A", f"/v1/jobs/{job_id}/media/hero%0A"):
        answer = gw.client.put(path, json={"html": "<p>x</p>"}, headers=gw.headers())
        assert answer.status_code == 422, path
    body = draft_body(slug="ok\n", featured_media={"slot": "hero\n"}, body_media=["a\n"])
    answer = gw.put_draft(job_id, body)
    pointers = {e["pointer"] for e in answer.get_json()["errors"]}
    assert answer.status_code == 422 and pointers == {
        "/slug",
        "/featured_media/slot",
        "/body_media/0",
    }
    with ledger(gw):
        assert [j.job_id for j in Job.select()] == [job_id]
        for tenant in ("acme\n", "Acme Corp", ""):
            with pytest.raises(ValueError, match="tenant"):
                tokens.create_token(tenant, "workflow", "x")
            with pytest.raises(ValueError, match="tenant"):
                sites.add_site(SECRET_KEY, tenant, "blog", "http://x", "u", "p")


def test_every_pattern_of_the_openapi_document_ends_input_in_python_and_ecma_262():
    """Schema files, path parameters and X-Request-Id: anchored at both ends in a way both
    dialects read alike, and whole-match in Python too."""
    from gateway.api import http
    from gateway.api import openapi
    from gateway.api import routes
    from gateway.core import validation

    found = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                found.append(node["pattern"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(openapi.build(routes.bare_app()))
    ids = [p for p in found if p.startswith("^") and "\\u0000" not in p]  # text.json: any text
    assert len(ids) >= 5
    for pattern in ids:
        assert pattern.startswith("^") and pattern.endswith(r"(?![\s\S])"), pattern
        assert re.search(pattern, "ok\n") is None  # jsonschema's re.search
    for compiled in (validation.JOB_ID, validation.SLOT, validation.TENANT, http.REQUEST_ID):
        assert compiled.fullmatch("ok") and not compiled.fullmatch("ok\n")
        assert not re.search(compiled.pattern, "ok\n")


# --------------------------------------------------------------------------- 4. bad input


def test_ids_beyond_the_ledger_integer_range_are_4xx(offline_gw):
    gw = offline_gw
    editor = gw.make_token("editor")
    job_id = new_job_id()
    gw.put_job(job_id)
    answers = [
        gw.client.post(f"/v1/reviews/{HUGE}/resolve", json={"decision": "distinct"},
                       headers=gw.headers(editor)),
        gw.client.get(f"/v1/jobs?after={HUGE}", headers=gw.headers()),
        gw.client.get("/v1/jobs?limit=%C2%B2", headers=gw.headers()),
        gw.client.delete(f"/v1/jobs/{job_id}/approvals/{HUGE}", headers=gw.headers(editor)),
        gw.client.post(f"/v1/jobs/{job_id}/checkpoints", headers={**gw.headers(),
                       "X-Fencing-Token": HUGE}, json={"phase": "sources_collected",
                       "artifacts": []}),
        gw.client.post(f"/v1/jobs/{job_id}/approvals", headers=gw.headers(editor),
                       json={"task_version": 1, "content_sha256": "0" * 64, "post_id": 2**40,
                             "expires_at": "2030-01-01T00:00:00+00:00"}),
    ]  # fmt: skip
    for answer in answers:
        assert answer.status_code in (404, 422), answer.get_data(as_text=True)
        assert answer.mimetype == "application/problem+json"


def test_deeply_nested_json_is_4xx(offline_gw):
    gw = offline_gw
    job_id = new_job_id()
    gw.put_job(job_id)
    too_deep_to_parse = gw.put_draft(job_id, "[" * 100_000 + "]" * 100_000)
    assert (
        too_deep_to_parse.status_code == 400 and problem_slug(too_deep_to_parse) == "invalid-json"
    )
    nested = {"phase": "sources_collected", "artifacts": [], "data": {}}
    inner = nested["data"]
    for _ in range(100):
        inner["x"] = {}
        inner = inner["x"]
    deep = gw.client.post(f"/v1/jobs/{job_id}/checkpoints", json=nested, headers=gw.headers())
    assert deep.status_code == 422 and problem_slug(deep) == "validation-failed"


def test_checkpoint_data_over_one_mebibyte_is_refused(offline_gw):
    gw = offline_gw
    job_id = new_job_id()
    gw.put_job(job_id)
    body = {"phase": "sources_collected", "artifacts": [], "data": {"notes": "a" * (1 << 20)}}
    answer = gw.client.post(f"/v1/jobs/{job_id}/checkpoints", json=body, headers=gw.headers())
    assert answer.status_code == 422 and answer.get_json()["errors"][0]["pointer"] == "/data"
    assert gw.job(job_id).get_json()["checkpoints"] == []
    body["data"] = {"notes": "a" * 1000}
    ok = gw.client.post(f"/v1/jobs/{job_id}/checkpoints", json=body, headers=gw.headers())
    assert ok.status_code == 201


# --------------------------------------------------------------------------- 5. sessions


def _cookie(answer) -> str:
    return re.search(r"gateway_review=([^;]*)", answer.headers["Set-Cookie"]).group(1)


def test_the_cookie_carries_only_a_random_id_and_logout_ends_the_session(offline_gw):
    gw = offline_gw
    client = gw.app.test_client()
    signed_in = _sign_in(client, gw.make_token("editor"))
    sid = _cookie(signed_in)
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", sid)  # no data, no signature: an id
    assert client.get("/review").status_code == 200
    logout = client.post("/review/logout", data={"csrf_token": _csrf(client.get("/review"))})
    assert logout.status_code == 303
    thief = gw.app.test_client()  # a saved copy of the cookie
    thief.set_cookie("gateway_review", sid, path="/review")
    answer = thief.get("/review")
    assert answer.status_code == 303 and answer.headers["Location"].endswith("/review/login")
    with ledger(gw):
        assert EditorSession.select().where(EditorSession.token_hash.is_null(False)).count() == 0


@pytest.mark.parametrize("clock", ["lifetime", "idle"])
def test_a_session_ends_after_its_lifetime_or_when_idle(offline_gw, clock):
    gw = offline_gw
    client = gw.app.test_client()
    _sign_in(client, gw.make_token("editor"))
    assert client.get("/review").status_code == 200
    with ledger(gw):
        past = dt.datetime.utcnow() - dt.timedelta(minutes=1)
        if clock == "lifetime":  # busy all along, but signed in longer than the lifetime
            EditorSession.update(expires_at=past).execute()
        else:
            EditorSession.update(last_seen_at=past - dt.timedelta(minutes=30)).execute()
    answer = client.get("/review")
    assert answer.status_code == 303 and answer.headers["Location"].endswith("/review/login")


def test_revoking_a_token_deletes_its_sessions(offline_gw):
    gw = offline_gw
    _sign_in(gw.app.test_client(), gw.make_token("editor", name="carol"))
    with ledger(gw):
        assert EditorSession.select().where(EditorSession.token_hash.is_null(False)).count() == 1
        assert tokens.revoke_tokens(TENANT, "carol") == 1
        assert EditorSession.select().where(EditorSession.token_hash.is_null(False)).count() == 0
        assert Token.get(Token.name == "carol").revoked_at is not None


def test_after_a_revoked_session_the_sign_in_page_works_at_once(offline_gw):
    gw = offline_gw
    client = gw.app.test_client()
    _sign_in(client, gw.make_token("editor", name="dave"))
    with ledger(gw):
        Token.update(revoked_at=dt.datetime.utcnow()).where(Token.name == "dave").execute()
    assert client.get("/review").status_code == 303  # the session ends here
    assert _sign_in(client, gw.make_token("editor", name="erin")).status_code == 303
    assert "Signed in as erin" in client.get("/review").get_data(as_text=True)


# --------------------------------------------------------------------------- 6. GET /review


@pytest.mark.wordpress
def test_the_review_page_reads_wordpress_only_for_the_drafts_it_shows(gwp, proxy, monkeypatch):
    from gateway.editorial import review_board

    monkeypatch.setattr(review_board, "CARDS_PER_PAGE", 2)
    jobs = [new_draft(gwp) for _ in range(3)]
    client = gwp.app.test_client()
    _sign_in(client, gwp.make_token("editor"))
    reads = r"^/wp-json/wp/v2/posts/\d+$"
    proxy.reset_log()
    first = client.get("/review").get_data(as_text=True)
    assert proxy.count(method="GET", path=reads) == 2
    assert "Page 1 of 2" in first and jobs[2] in first and jobs[0] not in first
    proxy.reset_log()
    second = client.get("/review?page=2").get_data(as_text=True)
    assert proxy.count(method="GET", path=reads) == 1 and jobs[0] in second


def test_the_security_migration_runs_on_the_configured_database(ledger_url, caplog):
    """The same step on SQLite or PostgreSQL (``GATEWAY_TEST_DATABASE_URL``): a ledger one
    version before it (its columns, indexes and table taken away), two tokens named alice."""
    from peewee import IntegrityError
    from playhouse.migrate import SchemaMigrator
    from playhouse.migrate import migrate as run

    from gateway.ledger import db
    from gateway.ledger import migrations
    from gateway.ledger.db import database

    db.bind(ledger_url)
    migrations.migrate()
    with database.connection_context():
        migrator = SchemaMigrator.from_database(database.obj)
        run(
            migrator.drop_index("token", "token_tenant_name"),
            migrator.drop_index("operation", "operation_remote_id"),
            migrator.drop_column("site", "install_url"),
            migrator.drop_column("site", "install_home"),
        )
        EditorSession.drop_table()
        step = next(m for m in migrations.MIGRATIONS if m.apply is migrations._security)
        version = migrations.SchemaVersion.version
        migrations.SchemaVersion.delete().where(version >= step.version).execute()
        for number, role in ((1, "workflow"), (2, "editor")):
            Token.insert(token_hash=f"{number:064x}", tenant=TENANT, role=role, name="alice",
                         created_at=dt.datetime.utcnow()).execute()  # fmt: skip
    with caplog.at_level("WARNING", logger="gateway.ledger.migrations"):
        assert migrations.migrate() == (step.version - 1, migrations.latest_version())
    assert "renamed from 'alice' to 'alice-editor-2'" in caplog.text
    with database.connection_context():
        assert sorted(t.name for t in Token.select()) == ["alice", "alice-editor-2"]
        with pytest.raises(IntegrityError), db.atomic():
            Token.insert(token_hash="f" * 64, tenant=TENANT, role="admin", name="alice").execute()
        assert EditorSession.select().count() == 0
    database.close()
