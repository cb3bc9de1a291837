"""Ledger schema versions and the migrations between them (peewee's ``playhouse.migrate``).

The ledger of release 0.1.0 had no version table: its tables are schema version 1
(:data:`BASELINE`). Every later change to the tables is one :class:`Migration` in
:data:`MIGRATIONS`, applied in order inside one transaction each, and recorded as a row of
``schema_version``. A new, empty database gets the current tables directly and every version
recorded at once.

Only ``gateway init-db`` (and the test fixtures) call :func:`migrate`; every other command and
``gateway serve`` call :func:`check`, which refuses a missing or outdated ledger with one line
saying what to run. Adding a migration: append a ``Migration`` with the next version whose
``apply`` changes an existing ledger exactly as the models in :mod:`gateway.ledger.models` now
describe it (add the column to the model too), and give the change a test that migrates the
previous release's ledger fixture.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from peewee import DateTimeField
from peewee import IntegerField
from peewee import TextField
from peewee import fn
from playhouse.migrate import SchemaMigrator
from playhouse.migrate import migrate as run_migrations

from gateway.ledger import db
from gateway.ledger import models
from gateway.ledger import oauth_models
from gateway.ledger.db import database
from gateway.ledger.db import utcnow

BASELINE = 1
log = logging.getLogger(__name__)


class LedgerError(Exception):
    """The ledger cannot be used as it is; the message is one line that says what to do."""


class SchemaVersion(models.BaseModel):
    """One applied schema version (a row per version: the ledger's migration history)."""

    version = IntegerField(unique=True)
    description = TextField()
    applied_at = DateTimeField(default=utcnow)


@dataclass(frozen=True)
class Migration:
    """One step from ``version - 1`` to ``version``.

    ``apply(migrator)`` receives a :class:`playhouse.migrate.SchemaMigrator` for the bound
    database and runs inside the step's transaction; new tables are created with
    ``Model.create_table(safe=True)``.
    """

    version: int
    description: str
    apply: Callable[[SchemaMigrator], None]


def _agent_tables(_migrator: SchemaMigrator) -> None:
    models.AgentSession.create_table(safe=True)
    models.WebhookEvent.create_table(safe=True)


def _operator_tables(migrator: SchemaMigrator) -> None:
    """Version 7 (operating it, issue 17): per-job budgets, token rate windows, site
    concurrency slots; ``operation.pruned_at`` for retention."""
    from playhouse.migrate import migrate as run

    for model in (models.Budget, models.RateWindow, models.SiteSlot):
        model.create_table(safe=True)
    columns = {c.name for c in database.get_columns(models.Operation._meta.table_name)}
    if "pruned_at" not in columns:  # idempotent, as every step: a rerun finds it there
        run(migrator.add_column("operation", "pruned_at", DateTimeField(null=True)))


def _security(migrator: SchemaMigrator) -> None:
    """Version 5 (security, issue 10): sites learn their install identity; token names become
    unique per tenant (duplicates renamed, and said so); operations are found by the object
    they hold (index on ``remote_id``); review-page sessions on the server."""
    from playhouse.migrate import migrate as run

    columns = {c.name for c in database.get_columns(models.Site._meta.table_name)}
    for name in ("install_url", "install_home"):
        if name not in columns:
            run(migrator.add_column(models.Site._meta.table_name, name, TextField(null=True)))
    for note in rename_duplicate_token_names():
        log.warning("migration 5: %s", note)
    run(migrator.add_index(models.Token._meta.table_name, ("tenant", "name"), True))
    run(migrator.add_index(models.Operation._meta.table_name, ("remote_id",), False))
    models.EditorSession.create_table(safe=True)


def rename_duplicate_token_names() -> list[str]:
    """Give every token but the oldest of each ``(tenant, name)`` a new name
    ``{name}-{role}-{id}`` (unique), so that audit records and ``tokens revoke --name`` name
    one token. Returns one line per renamed token (what the migration says)."""
    Token = models.Token
    taken = {(t.tenant, t.name) for t in Token.select(Token.tenant, Token.name)}
    seen: set[tuple[str, str]] = set()
    notes = []
    for token in Token.select().order_by(Token.id):
        if (token.tenant, token.name) not in seen:
            seen.add((token.tenant, token.name))
            continue
        new = f"{token.name}-{token.role}-{token.id}"
        while (token.tenant, new) in taken:
            new += "-x"
        taken.add((token.tenant, new))
        Token.update(name=new).where(Token.id == token.id).execute()
        notes.append(
            f"tenant {token.tenant}: token {token.id} ({token.role}) renamed from "
            f"{token.name!r} to {new!r}: token names are now unique per tenant; records "
            f"naming {token.name!r} mean its oldest token"
        )
    return notes


# What each action's operations bound when schema version 8 was written (the registry's
# ``Action.binds`` then): a migration is frozen, so it never asks today's registry. An action
# not named here binds ``post`` (refusing to adopt is safe; adopting is not).
BINDS_AT_VERSION_8 = {
    "draft": "post",
    "block": "post",
    "repair": "post",
    "publish": "post",
    "unschedule": "post",
    "media": "attachment",
    "attach": "attachment",
    "media_meta": "attachment",
    "term": "term",
    "notify": None,
    "tool_result": None,
    "mcp_approval_result": None,
    "computer_use_approval_result": None,
    "session_cancel": None,
}


def _operation_binds(migrator: SchemaMigrator) -> None:
    """Version 8 (the layers, issue 24): ``operation.binds``, the WordPress type an
    operation's ``remote_id`` is, stored at claim so that ownership reads it from the row
    instead of asking the action registry; existing rows are backfilled by action name."""
    from playhouse.migrate import migrate as run

    columns = {c.name for c in database.get_columns(models.Operation._meta.table_name)}
    if "binds" not in columns:
        run(migrator.add_column("operation", "binds", TextField(null=True)))
    Operation = models.Operation
    kinds: dict[str | None, list[str]] = {}
    for action, kind in BINDS_AT_VERSION_8.items():
        kinds.setdefault(kind, []).append(action)
    for kind, names in kinds.items():
        if kind is not None:
            Operation.update(binds=kind).where(Operation.action.in_(names)).execute()
    known = list(BINDS_AT_VERSION_8)
    Operation.update(binds="post").where(
        Operation.action.not_in(known), Operation.binds.is_null()
    ).execute()


def _request_keys(_migrator: SchemaMigrator) -> None:
    """Version 9 (MCP, issue 26): ``request_key``, clients' own request keys
    (``Idempotency-Key``) per token with the answer stored for their retries."""
    models.RequestKey.create_table(safe=True)


# The columns schema version 10 adds, as that version wrote them (a migration is frozen).
AGENT_SESSION_COLUMNS_AT_VERSION_10 = {
    "bound_token_hash": lambda: TextField(null=True),
    "next_poll_at": lambda: DateTimeField(null=True),
    "poll_streak": lambda: IntegerField(default=0),
    "poll_failures": lambda: IntegerField(default=0),
    "environment_id": lambda: TextField(null=True),
    "environment": lambda: TextField(null=True),
    "evidence": lambda: TextField(null=True),
}


def _agent_permissions(migrator: SchemaMigrator) -> None:
    """Version 10 (agent sessions that never stall and never outlive their permission, issue
    27): the token that bound a session, its poll schedule, its environment and evidence;
    webhook events retried after an outage; the agent workers' shared pause.

    Sessions bound before this version keep ``bound_token_hash`` NULL: the worker treats
    them as bound by their tenant's workflow role (they go on while the tenant has a live
    workflow token), and a ``PUT /v1/jobs/{id}`` repeating the session by a workflow token
    records that token (:mod:`gateway.agents.permissions`). Idempotent, as every step: the
    agent tables of version 3 are made from today's models, so a column may be there."""
    from playhouse.migrate import migrate as run

    table = models.AgentSession._meta.table_name
    columns = {c.name for c in database.get_columns(table)}
    for name, make in AGENT_SESSION_COLUMNS_AT_VERSION_10.items():
        if name not in columns:
            run(migrator.add_column(table, name, make()))
    indexes = {i.name for i in database.get_indexes(table)}
    for name in ("next_poll_at", "environment_id"):
        if f"{table}_{name}" not in indexes:
            run(migrator.add_index(table, (name,), False))
    events = models.WebhookEvent._meta.table_name
    if "next_attempt_at" not in {c.name for c in database.get_columns(events)}:
        run(migrator.add_column(events, "next_attempt_at", DateTimeField(null=True)))
    models.AgentWorkerState.create_table(safe=True)


def _run_activity(migrator: SchemaMigrator) -> None:
    """Version 13 (no n8n job left stuck, issue 30): ``job.last_request_at``, when a client
    last asked something of the job (existing jobs start from their ``updated_at``), and
    ``resume_point.refusal``, the gateway's refusal of a version's content. Self-contained:
    it reads and writes only these two columns, whatever versions 9-12 did."""
    from playhouse.migrate import migrate as run

    columns = {c.name for c in database.get_columns(models.Job._meta.table_name)}
    if "last_request_at" not in columns:  # idempotent, as every step
        run(migrator.add_column("job", "last_request_at", DateTimeField(null=True)))
    Job = models.Job
    Job.update(last_request_at=Job.updated_at).where(Job.last_request_at.is_null()).execute()
    columns = {c.name for c in database.get_columns(models.ResumePoint._meta.table_name)}
    if "refusal" not in columns:
        run(migrator.add_column("resume_point", "refusal", TextField(null=True)))


def _notification_refusals(migrator: SchemaMigrator) -> None:
    """Version 14 (issue 37): ``notification.refusals``, the definite refusals a notification
    met (its receiver's 4xx): it backs off after each and stops (REFUSED) after
    ``GATEWAY_NOTIFICATION_MAX_REFUSALS``. Existing rows start at 0. Idempotent."""
    from playhouse.migrate import migrate as run

    table = models.Notification._meta.table_name
    if "refusals" not in {c.name for c in database.get_columns(table)}:
        run(migrator.add_column(table, "refusals", IntegerField(default=0)))


def _rest_root(migrator: SchemaMigrator) -> None:
    """Version 16 (issue 55): ``site.rest_root``, where the site serves its REST API as
    ``gateway sites add`` discovered it; existing sites keep NULL (``/wp-json/``, as before)
    until they are added again. Idempotent."""
    from playhouse.migrate import migrate as run

    table = models.Site._meta.table_name
    if "rest_root" not in {c.name for c in database.get_columns(table)}:
        run(migrator.add_column(table, "rest_root", TextField(null=True)))


def _desk(migrator: SchemaMigrator) -> None:
    """Version 17 (the editors' desk, issue 56): ``job.decision``, an editor's decision on the
    job's current task version (NULL: none; existing jobs start with none, an approval given
    before stays valid and is found by its own row), and ``job_event``, each job's timeline
    from now on. Idempotent."""
    from playhouse.migrate import migrate as run

    if "decision" not in {c.name for c in database.get_columns(models.Job._meta.table_name)}:
        run(migrator.add_column("job", "decision", TextField(null=True)))
    models.JobEvent.create_table(safe=True)


def _webhook_endpoints(_migrator: SchemaMigrator) -> None:
    """Version 18 (issue 57): ``webhook_endpoint`` and ``webhook_delivery``. Each tenant's
    notification URL (``notification_target``) becomes its legacy endpoint (every event,
    today's body, no secret until one is rotated in), and each notification row to a tenant
    with a URL becomes that endpoint's delivery with its state, attempts, refusals, claim,
    last error and delivery time: nothing is resent, nothing pending is lost. A tenant without
    a URL keeps its notifications undelivered until ``gateway notifications set-url``, as
    before. Idempotent: a tenant that has its legacy endpoint already is left as it is."""
    import secrets

    database.create_tables([models.WebhookEndpoint, models.WebhookDelivery], safe=True)
    Endpoint, Notification = models.WebhookEndpoint, models.Notification
    newest = Notification.select(fn.MAX(Notification.id)).scalar() or 0
    for target in models.NotificationTarget.select().order_by(models.NotificationTarget.id):
        if Endpoint.get_or_none(Endpoint.legacy_tenant == target.tenant) is not None:
            continue
        Endpoint.insert(
            public_id=f"ep_{secrets.token_hex(12)}",
            tenant=target.tenant,
            url=target.url,
            event_types=["*"],
            description="notification URL (gateway notifications set-url)",
            secret_sealed=None,
            from_event_id=0,
            fanned_through=newest,
            legacy=True,
            legacy_tenant=target.tenant,
        ).execute()
    # One statement: every notification row of a tenant with a legacy endpoint, its delivery
    # state as it stood (an INSERT of states that are not initial: a migration copies them).
    columns = "state, attempts, refusals, claimed_until, last_error, created_at, delivered_at"
    database.execute_sql(
        "INSERT INTO webhook_delivery (event_id, endpoint_id, tenant, " + columns + ") "
        "SELECT n.id, e.id, n.tenant, n.state, n.attempts, n.refusals, n.claimed_until, "
        "n.last_error, n.created_at, n.delivered_at FROM notification n "
        "JOIN webhook_endpoint e ON e.legacy_tenant = n.tenant "
        "WHERE NOT EXISTS (SELECT 1 FROM webhook_delivery d "
        "WHERE d.event_id = n.id AND d.endpoint_id = e.id)"
    )


MIGRATIONS: list[Migration] = [
    Migration(
        2,
        "operation_retry: who turned a FAILED operation back to be sent again, and why",
        lambda _migrator: models.OperationRetry.create_table(safe=True),
    ),
    Migration(3, "agent sessions bound to jobs, stored webhook events", _agent_tables),
    Migration(
        4,
        "approval.publish_at: an approval may schedule publishing",
        lambda migrator: run_migrations(
            migrator.add_column("approval", "publish_at", DateTimeField(null=True))
        ),
    ),
    Migration(
        5,
        "sites' install identity, unique token names per tenant, operations indexed by the "
        "object they hold, server-side editor sessions",
        _security,
    ),
    Migration(
        6,
        "notification_target, notification, resume_point: editors notified once per job "
        "version and event; what a stopped job needs to be resumed",
        lambda _migrator: database.create_tables(
            [models.NotificationTarget, models.Notification, models.ResumePoint], safe=True
        ),
    ),
    Migration(
        7,
        "budgets, rate windows, site concurrency slots; operation.pruned_at",
        _operator_tables,
    ),
    Migration(
        8,
        "operation.binds: the WordPress type an operation holds, stored on its row",
        _operation_binds,
    ),
    Migration(
        9,
        "request_key: a client's own request keys (Idempotency-Key) per token, with the "
        "answer stored for their retries",
        _request_keys,
    ),
    Migration(
        10,
        "agent sessions: the token that bound each, its poll schedule, environment and "
        "evidence; webhook events retried after an outage; the agent workers' shared pause",
        _agent_permissions,
    ),
    Migration(
        13,
        "job.last_request_at: idle time counts from a client's last request; "
        "resume_point.refusal: a version refused for its content goes to a person",
        _run_activity,
    ),
    Migration(
        14,
        "notification.refusals: a notification backs off after each definite refusal and "
        "stops after a bounded number",
        _notification_refusals,
    ),
    Migration(
        15,
        "oauth_client, oauth_pending, oauth_grant, oauth_code, oauth_token: the MCP "
        "authorization server's clients, editors' grants and their hashed codes and tokens",
        lambda _migrator: database.create_tables(oauth_models.TABLES, safe=True),
    ),
    Migration(
        16,
        "site.rest_root: where each site serves its REST API (/wp-json/ or ?rest_route=)",
        _rest_root,
    ),
    Migration(
        17,
        "job.decision and job_event: an editor's decision on a job's version (approved, "
        "changes requested) and each job's timeline of who decided what, when",
        _desk,
    ),
    Migration(
        18,
        "webhook_endpoint and webhook_delivery: endpoints a workflow subscribes (signed "
        "deliveries, one per event and endpoint); each notification URL becomes its tenant's "
        "legacy endpoint and each notification its delivery",
        _webhook_endpoints,
    ),
]


def latest_version() -> int:
    """The schema version the code in this checkout reads and writes."""
    return max([BASELINE, *(m.version for m in MIGRATIONS)])


def current_version() -> int | None:
    """The version of the bound ledger: None when it holds no ledger tables at all,
    :data:`BASELINE` for a ledger of release 0.1.0 (tables but no ``schema_version``).
    Needs an open connection."""
    tables = set(database.get_tables())
    if SchemaVersion._meta.table_name in tables:
        newest = SchemaVersion.select(SchemaVersion.version).order_by(SchemaVersion.version.desc())
        row = newest.first()
        return row.version if row else BASELINE
    if models.Operation._meta.table_name in tables:
        return BASELINE
    return None


def migrate() -> tuple[int | None, int]:
    """Create the ledger, or bring an existing one to :func:`latest_version`.

    Returns ``(version before, version after)``; ``before`` is None for a new ledger.

    Raises:
        LedgerError: the ledger was written by a newer gateway than this one.
    """
    with database.connection_context():
        before = current_version()
        target = latest_version()
        if before is None:
            with db.atomic():
                database.create_tables(
                    [*models.TABLES, *oauth_models.TABLES, SchemaVersion], safe=True
                )
                _record(BASELINE, "release 0.1.0 tables")
                for step in MIGRATIONS:
                    _record(step.version, step.description)
            return None, target
        if before > target:
            raise LedgerError(
                f"the ledger is at schema version {before}, newer than this gateway's "
                f"{target}: upgrade the gateway"
            )
        if before == BASELINE:
            with db.atomic():
                SchemaVersion.create_table(safe=True)
                _record(BASELINE, "release 0.1.0 tables")
        migrator = SchemaMigrator.from_database(database.obj)
        for step in MIGRATIONS:
            if step.version > before:
                with db.atomic():
                    step.apply(migrator)
                    _record(step.version, step.description)
        return before, target


def _record(version: int, description: str) -> None:
    SchemaVersion.insert(version=version, description=description).on_conflict_ignore().execute()


def check(database_url: str) -> None:
    """Refuse a ledger that :func:`migrate` has not brought to the current version.

    Needs the database bound (:func:`gateway.ledger.db.bind`); opens and closes a connection.

    Raises:
        LedgerError: no ledger at ``database_url``, an outdated or newer one, or the database
            cannot be reached. The message names the URL without its password.
    """
    where = describe(database_url)
    if sqlite_file_missing(database_url):
        raise _no_ledger(where)
    try:
        with database.connection_context():
            version = current_version()
    except Exception as error:  # any driver's connection error: one line, never a traceback
        raise LedgerError(f"cannot open the ledger at {where}: {_first_line(error)}") from None
    if version is None:
        raise _no_ledger(where)
    if version < latest_version():
        raise LedgerError(
            f"the ledger at {where} is at schema version {version}, this gateway needs "
            f"{latest_version()}: run 'gateway init-db' to migrate it"
        )
    if version > latest_version():
        raise LedgerError(
            f"the ledger at {where} is at schema version {version}, newer than this "
            f"gateway's {latest_version()}: upgrade the gateway"
        )


def _no_ledger(where: str) -> LedgerError:
    from gateway.core.config import DEFAULT_DATABASE_URL

    unset = (
        " (it is not set, so the default, a file in the current directory, was used)"
        if where.startswith(DEFAULT_DATABASE_URL + " ")
        else ""
    )
    return LedgerError(
        f"no ledger at {where}: run 'gateway init-db' to create it, or set "
        f"GATEWAY_DATABASE_URL to the ledger you meant{unset}"
    )


def describe(database_url: str) -> str:
    """``database_url`` fit for a message: a password in it is replaced by ``***``, and a
    relative SQLite path is followed by the absolute file it names here."""
    import os
    from urllib.parse import urlsplit
    from urllib.parse import urlunsplit

    path = _sqlite_path(database_url)
    if path and not os.path.isabs(path) and path != ":memory:":
        return f"{database_url} (file {os.path.abspath(path)})"
    parts = urlsplit(database_url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
        return urlunsplit(parts._replace(netloc=netloc))
    return database_url


def sqlite_file_missing(database_url: str) -> bool:
    """True for a ``sqlite:///`` URL whose file does not exist (opening it would create an
    empty ledger somewhere nobody meant)."""
    import os

    path = _sqlite_path(database_url)
    return path not in (None, "", ":memory:") and not os.path.exists(path)


def ledger_file(database_url: str) -> str | None:
    """The file of a ``sqlite:///`` ledger URL when it exists (path as written), else None
    (another database, an in-memory one, or no file yet)."""
    import os

    path = _sqlite_path(database_url)
    return path if path not in (None, "", ":memory:") and os.path.exists(path) else None


def _sqlite_path(database_url: str) -> str | None:
    if not database_url.startswith("sqlite:///"):
        return None
    return database_url[len("sqlite:///") :].split("?", 1)[0]


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
