"""Ledger schema versions: ``gateway init-db`` migrates a ledger made by the previous release,
whose operations then replay with 0 WordPress writes; every other command refuses a missing or
outdated ledger with one line."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from peewee import TextField
from support import SECRET_KEY
from support import gateway_command

import gateway
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger import migrations
from gateway.ledger.db import database
from gateway.ledger.models import Job
from gateway.ledger.models import Notification
from gateway.ledger.models import Operation
from gateway.ledger.models import Site
from gateway.operations import ownership
from gateway.tenancy import sites
from gateway.tenancy import tokens

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def cli(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GATEWAY_DATABASE_URL": url, "GATEWAY_SECRET_KEY": SECRET_KEY}
    return subprocess.run(
        [*gateway_command(), *args], env=env, capture_output=True, text=True, timeout=120
    )


def one_line_refusal(done: subprocess.CompletedProcess, says: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert says in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.fixture
def release_0_1_0_ledger(tmp_path) -> str:
    """The SQLite ledger that release 0.1.0 left after one job (``make_ledger_0_1_0.py``)."""
    path = tmp_path / "ledger-0.1.0.db"
    with sqlite3.connect(path) as connection:
        connection.executescript((FIXTURES / "ledger-0.1.0.sql").read_text())
    return f"sqlite:///{path}"


@pytest.mark.wordpress
def test_a_release_0_1_0_ledger_migrates_and_replays_with_no_wordpress_write(
    release_0_1_0_ledger, proxy
):
    migrated = cli(release_0_1_0_ledger, "init-db")
    assert migrated.returncode == 0, migrated.stderr
    latest = migrations.latest_version()
    assert f"schema version {migrations.BASELINE} to {latest}" in migrated.stderr
    assert cli(release_0_1_0_ledger, "init-db").stderr.count("up to date") == 1

    app = gateway.create_app({"database_url": release_0_1_0_ledger, "secret_key": SECRET_KEY})
    with app.app_context(), database.connection_context():
        assert migrations.current_version() == migrations.latest_version()
        # Every request of the job now goes through a proxy that counts what reaches WordPress.
        Site.update(url=proxy.url).execute()
        token = tokens.create_token("acme", "workflow", "after-migration")
        states = {row.operation_key: row.state for row in Operation.select()}
    assert sorted(states.values()) == ["CONFIRMED", "CONFIRMED"], states

    client = app.test_client()
    calls = json.loads((FIXTURES / "ledger-0.1.0-requests.json").read_text())
    for call in calls["calls"]:
        answer = client.open(
            call["path"],
            method=call["method"],
            json=call["json"],
            headers={"Authorization": f"Bearer {token}"},
        )
        assert answer.status_code == 200, (call["path"], answer.get_json())
        if "/media/" in call["path"] or call["path"].endswith("/draft"):
            assert answer.headers.get("Idempotent-Replayed") == "true", call["path"]
    assert proxy.count() == 0
    job = client.get(
        f"/v1/jobs/{calls['job_id']}", headers={"Authorization": f"Bearer {token}"}
    ).get_json()
    assert job["post_id"] and {op["state"] for op in job["operations"]} == {"CONFIRMED"}
    if not database.is_closed():
        database.close()


def test_only_init_db_creates_a_ledger(tmp_path):
    url = f"sqlite:///{tmp_path / 'nothing-here.db'}"
    for args in (
        ("report",),
        ("tokens", "create", "--tenant", "acme", "--role", "editor", "--name", "ed"),
        ("reconcile",),
        ("serve", "--port", "9"),
    ):
        one_line_refusal(cli(url, *args), "run 'gateway init-db'")
    assert not (tmp_path / "nothing-here.db").exists()
    assert cli(url, "init-db").returncode == 0
    assert cli(url, "report").returncode == 0


def test_an_outdated_ledger_is_refused_until_init_db_migrates_it(ledger_url, monkeypatch):
    """A ledger one migration behind: refused (in process and by the CLI), then migrated."""
    db.bind(ledger_url)
    before, after = migrations.migrate()
    assert before is None and after == migrations.latest_version()

    def add_note_column(migrator):
        from playhouse.migrate import migrate as run

        run(migrator.add_column("job", "migration_test_note", TextField(null=True)))

    step = migrations.Migration(after + 1, "a test column", add_note_column)
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, step])
    with pytest.raises(migrations.LedgerError, match="run 'gateway init-db' to migrate it"):
        migrations.check(ledger_url)
    assert migrations.migrate() == (after, after + 1)
    migrations.check(ledger_url)
    with database.connection_context():
        columns = {column.name for column in database.get_columns("job")}
        assert "migration_test_note" in columns
        assert Job.select().count() == 0  # the table kept working through the change
    # The CLI (the previous code, without the test step) now meets a newer ledger.
    one_line_refusal(cli(ledger_url, "report"), "upgrade the gateway")
    database.close()


def test_migration_7_adds_budgets_rate_windows_site_slots_and_pruned_at(release_0_1_0_ledger):
    assert cli(release_0_1_0_ledger, "init-db").returncode == 0
    app = gateway.create_app({"database_url": release_0_1_0_ledger, "secret_key": SECRET_KEY})
    with app.app_context(), database.connection_context():
        assert {"budget", "rate_window", "site_slot"} <= set(database.get_tables())
        assert "pruned_at" in {c.name for c in database.get_columns("operation")}
        assert Operation.select().where(Operation.pruned_at.is_null()).count() == 2
    recent = cli(release_0_1_0_ledger, "prune", "--older-than", "36500")
    assert recent.returncode == 0 and json.loads(recent.stdout)["operations"] == 0
    everything = cli(release_0_1_0_ledger, "prune", "--older-than", "0")
    assert json.loads(everything.stdout)["operations"] == 2  # untouched for 0 days: finished


def test_migration_8_stores_what_each_operation_binds(release_0_1_0_ledger):
    """Rows written before version 8 get ``binds`` from their action's name, and ownership
    reads it from the row: the 0.1.0 ledger's draft binds a post, its upload an attachment."""
    with sqlite3.connect(release_0_1_0_ledger[len("sqlite:///") :]) as connection:
        before = dict(connection.execute("SELECT action, count(*) FROM operation GROUP BY action"))
    assert before == {"draft": 1, "media": 1}
    assert cli(release_0_1_0_ledger, "init-db").returncode == 0
    app = gateway.create_app({"database_url": release_0_1_0_ledger, "secret_key": SECRET_KEY})
    with app.app_context(), database.connection_context():
        binds = {row.action: row.binds for row in Operation.select()}
        assert binds == {"draft": "post", "media": "attachment"}
        assert {ownership.object_type(row) for row in Operation.select()} == {"post", "attachment"}
    again = cli(release_0_1_0_ledger, "init-db")  # a rerun finds the column and changes nothing
    assert again.returncode == 0 and again.stderr.count("up to date") == 1


def test_migration_4_adds_approval_publish_at_to_an_existing_ledger(release_0_1_0_ledger):
    assert cli(release_0_1_0_ledger, "init-db").returncode == 0
    path = release_0_1_0_ledger[len("sqlite:///") :]
    with sqlite3.connect(path) as connection:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(approval)")]
        versions = [row[0] for row in connection.execute("SELECT version FROM schema_version")]
    assert "publish_at" in columns
    assert 4 in versions


def test_migration_10_adds_the_binding_token_poll_schedule_and_the_workers_pause(
    release_0_1_0_ledger,
):
    """Version 10 on the previous release's ledger: the agent tables gain the token that bound
    each session, its poll schedule, environment and evidence; events their next attempt; the
    workers' shared pause table. The rule for sessions bound before it (no binding token: the
    tenant's workflow role stands for it) is tested in ``test_agent_recovery.py`` on a ledger
    that version 8 left."""
    migrated = cli(release_0_1_0_ledger, "init-db")
    assert migrated.returncode == 0, migrated.stderr
    path = release_0_1_0_ledger[len("sqlite:///") :]
    with sqlite3.connect(path) as connection:
        sessions = {row[1] for row in connection.execute("PRAGMA table_info(agent_session)")}
        events = {row[1] for row in connection.execute("PRAGMA table_info(webhook_event)")}
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
        versions = [row[0] for row in connection.execute("SELECT version FROM schema_version")]
    assert {"bound_token_hash", "next_poll_at", "poll_streak", "poll_failures"} <= sessions
    assert {"environment_id", "environment", "evidence"} <= sessions
    assert "next_attempt_at" in events and "agent_worker_state" in tables and 10 in versions


def test_migration_13_adds_the_last_request_time_and_the_content_refusal(release_0_1_0_ledger):
    """Version 13 stands alone (9-12 belong to other changes): a 0.1.0 ledger's job gets
    ``last_request_at`` from its ``updated_at`` (its idle time does not restart at the
    upgrade), resume points a ``refusal`` column; a rerun changes nothing."""
    path = release_0_1_0_ledger[len("sqlite:///") :]
    with sqlite3.connect(path) as connection:
        (updated,) = connection.execute("SELECT updated_at FROM job").fetchone()
    assert cli(release_0_1_0_ledger, "init-db").returncode == 0
    with sqlite3.connect(path) as connection:
        (last_request,) = connection.execute("SELECT last_request_at FROM job").fetchone()
        columns = [row[1] for row in connection.execute("PRAGMA table_info(resume_point)")]
        versions = [row[0] for row in connection.execute("SELECT version FROM schema_version")]
    assert last_request == updated
    assert "refusal" in columns
    assert 13 in versions and migrations.latest_version() >= 13
    app = gateway.create_app({"database_url": release_0_1_0_ledger, "secret_key": SECRET_KEY})
    with app.app_context(), database.connection_context():
        job = Job.get()
        since_update = (db.utcnow() - job.updated_at).total_seconds()
        assert records.idle_seconds(job) == pytest.approx(since_update, abs=5)
    again = cli(release_0_1_0_ledger, "init-db")
    assert again.returncode == 0 and again.stderr.count("up to date") == 1


def test_migration_14_counts_a_notifications_definite_refusals(ledger_url):
    """Version 14 (issue 37): ``notification.refusals`` added to a ledger that version 13
    left (its notification table without the column, a notification in it), existing rows
    at 0; a rerun changes nothing."""
    db.bind(ledger_url)
    assert migrations.migrate()[1] == migrations.latest_version()
    with database.connection_context():  # back to version 13, as the previous code left it
        database.execute_sql("ALTER TABLE notification DROP COLUMN refusals")
        database.execute_sql("DELETE FROM schema_version WHERE version >= 14")
        database.execute_sql(
            "INSERT INTO notification (key, tenant, job_id, task_version, event, payload, "
            "state, attempts, created_at) VALUES ('acme/j/v1/notify/published', 'acme', 'j', 1, "
            "'published', '{}', 'PENDING', 2, '2026-01-01 00:00:00')"
        )
    with pytest.raises(migrations.LedgerError, match="init-db"):
        migrations.check(ledger_url)
    assert migrations.migrate() == (13, migrations.latest_version())
    assert migrations.migrate() == (migrations.latest_version(),) * 2  # a rerun: nothing
    with database.connection_context():
        assert "refusals" in {c.name for c in database.get_columns("notification")}
        [row] = Notification.select()
        assert (row.state, row.attempts, row.refusals) == ("PENDING", 2, 0)
    database.close()


def test_migration_16_stores_where_each_site_serves_its_rest_api(ledger_url):
    """Version 16 (issue 55): ``site.rest_root`` added to a ledger that version 15 left (its
    site table without the column, a site in it); the existing site keeps NULL, so its REST
    root stays ``/wp-json/`` until ``gateway sites add`` discovers it; a rerun changes
    nothing."""
    db.bind(ledger_url)
    assert migrations.migrate()[1] == migrations.latest_version()
    with database.connection_context():  # back to version 15, as the previous code left it
        database.execute_sql("ALTER TABLE site DROP COLUMN rest_root")
        database.execute_sql("DELETE FROM schema_version WHERE version >= 16")
        database.execute_sql(
            "INSERT INTO site (tenant, name, url, username, password_encrypted, "
            "credential_version, transport, created_at, updated_at) VALUES ('acme', 'blog', "
            "'https://x.example', 'author', 'token', 1, 'rest', '2026-01-01 00:00:00', "
            "'2026-01-01 00:00:00')"
        )
    with pytest.raises(migrations.LedgerError, match="init-db"):
        migrations.check(ledger_url)
    assert migrations.migrate() == (15, migrations.latest_version())
    assert migrations.migrate() == (migrations.latest_version(),) * 2  # a rerun: nothing
    with database.connection_context():
        [site] = Site.select()
        assert site.rest_root is None
        assert sites.rest_root_of(site) == "https://x.example/wp-json/"
    database.close()


def test_migration_17_adds_the_decision_and_the_timeline(ledger_url):
    """Version 17 (issue 56): ``job.decision`` and ``job_event`` added to a ledger that version
    16 left (a job in it); the existing job has no decision and an empty timeline, and a
    decision then moves and enters the timeline; a rerun changes nothing."""
    from gateway.core import states
    from gateway.jobs import timeline
    from gateway.ledger import moves
    from gateway.ledger.models import JOB_DECISION

    db.bind(ledger_url)
    assert migrations.migrate()[1] == migrations.latest_version()
    with database.connection_context():  # back to version 16, as the previous code left it
        database.execute_sql("ALTER TABLE job DROP COLUMN decision")
        database.execute_sql("DROP TABLE job_event")
        database.execute_sql("DELETE FROM schema_version WHERE version >= 17")
        database.execute_sql(
            "INSERT INTO job (tenant, job_id, site, task_version, phase, cancelled, "
            "created_at, updated_at) VALUES ('acme', 'j', 'blog', 1, 'approval_pending', "
            "false, '2026-01-01 00:00:00', '2026-01-01 00:00:00')"
        )
    with pytest.raises(migrations.LedgerError, match="init-db"):
        migrations.check(ledger_url)
    assert migrations.migrate() == (16, migrations.latest_version())
    assert migrations.migrate() == (migrations.latest_version(),) * 2  # a rerun: nothing
    with database.connection_context():
        [job] = Job.select()
        assert job.decision is None and timeline.entries(job) == []
        with db.atomic():
            where = {"id": job.id, "task_version": 1}
            assert moves.move(JOB_DECISION, where, states.CHANGES_REQUESTED, None) == 1
            timeline.record(job, states.CHANGES_REQUESTED, "ed", None, "fix the title")
        assert Job.get_by_id(job.id).decision == states.CHANGES_REQUESTED
        [entry] = timeline.entries(job)
        assert (entry["event"], entry["actor"], entry["note"]) == (
            "changes_requested",
            "ed",
            "fix the title",
        )
    database.close()


def test_migration_18_makes_each_notification_url_an_endpoint_and_each_notification_its_delivery(
    ledger_url,
):
    """Version 18 (issue 57): ``webhook_endpoint`` and ``webhook_delivery`` added to a ledger
    that version 17 left, holding acme's notification URL, one DELIVERED and one PENDING
    notification of acme (refused once, backing off) and one of beta, which has no URL. acme's
    URL becomes its legacy endpoint (every event, no secret) and each of its notifications a
    delivery in the state it had, so a pass neither resends the delivered one nor loses the
    pending one; beta's waits for its URL as before. A rerun changes nothing."""
    from gateway.actions import deliveries
    from gateway.ledger.models import WebhookDelivery
    from gateway.ledger.models import WebhookEndpoint
    from gateway.operations import transitions

    db.bind(ledger_url)
    assert migrations.migrate()[1] == migrations.latest_version()
    with database.connection_context():  # back to version 17, as the previous code left it
        database.execute_sql("DROP TABLE webhook_delivery")
        database.execute_sql("DROP TABLE webhook_endpoint")
        database.execute_sql("DELETE FROM schema_version WHERE version >= 18")
        database.execute_sql(
            "INSERT INTO notification_target (tenant, url, updated_at) VALUES "
            "('acme', 'https://hooks.example/acme', '2026-01-01 00:00:00')"
        )
        columns = (
            "key, tenant, job_id, task_version, event, payload, state, attempts, refusals, "
            "claimed_until, last_error, created_at, delivered_at"
        )
        for values in (
            "'acme/j1/v1/notify/published', 'acme', 'j1', 1, 'published', '{}', 'DELIVERED', "
            "1, 0, NULL, NULL, '2026-01-01 00:00:00', '2026-01-01 00:00:01'",
            "'acme/j2/v1/notify/needs_attention', 'acme', 'j2', 1, 'needs_attention', '{}', "
            "'PENDING', 2, 1, '2026-01-01 00:10:00', 'answered HTTP 404', "
            "'2026-01-01 00:00:00', NULL",
            "'beta/j3/v1/notify/published', 'beta', 'j3', 1, 'published', '{}', 'PENDING', "
            "1, 0, NULL, 'no notification URL', '2026-01-01 00:00:00', NULL",
        ):
            database.execute_sql(f"INSERT INTO notification ({columns}) VALUES ({values})")
    with pytest.raises(migrations.LedgerError, match="init-db"):
        migrations.check(ledger_url)
    assert migrations.migrate() == (17, migrations.latest_version())
    assert migrations.migrate() == (migrations.latest_version(),) * 2  # a rerun: nothing
    with database.connection_context():
        [endpoint] = WebhookEndpoint.select()
        assert (endpoint.tenant, endpoint.url, endpoint.event_types) == (
            "acme",
            "https://hooks.example/acme",
            ["*"],
        )
        assert endpoint.legacy and endpoint.legacy_tenant == "acme"
        assert endpoint.public_id.startswith("ep_") and endpoint.secret_sealed is None
        rows = WebhookDelivery.select().order_by(WebhookDelivery.event_id)
        moved = [
            (Notification.get_by_id(r.event_id).job_id, r.state, r.attempts, r.refusals)
            for r in rows
        ]
        assert moved == [("j1", "DELIVERED", 1, 0), ("j2", "PENDING", 2, 1)]
        delivered, pending = rows
        assert delivered.delivered_at is not None and pending.last_error == "answered HTTP 404"
        assert pending.claimed_until is not None  # its back-off kept
        assert deliveries.fan_out_all() == 0  # nothing made twice
        assert transitions.claim_delivery(pending, 60)  # the back-off passed: sent next
        assert not transitions.claim_delivery(delivered, 60)  # never resent
    database.close()
