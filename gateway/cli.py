"""The ``gateway`` command line (README, "Command line"), built on Flask's click integration.

Machine-readable results go to stdout, messages to stderr. ``gateway serve`` runs granian
(never Flask's development server) with the app loaded in each worker after the fork, so no
database connection is opened before it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import sys

import click
from flask.cli import AppGroup
from flask.cli import ScriptInfo
from flask.cli import with_appcontext
from peewee import PeeweeException as PeeweeError

from gateway.app import create_app
from gateway.core.config import DEFAULT_THREADS
from gateway.core.config import DEFAULT_WORKERS
from gateway.core.config import ConfigError
from gateway.core.config import MissingSecretKey
from gateway.core.exceptions import GatewayError
from gateway.core.exceptions import NotFound
from gateway.core.version import VERSION as __version__
from gateway.ledger import hot_sql
from gateway.ledger import migrations
from gateway.ledger.db import database
from gateway.ledger.db import rfc3339
from gateway.oauth import consent
from gateway.tenancy import grants
from gateway.tenancy import sites
from gateway.tenancy import tokens


class KnownProblem(click.ClickException):
    """A problem the user can fix (configuration, ledger, unknown names): one line on stderr,
    exit status 2, never a traceback."""

    exit_code = 2


def _app_factory():
    command = getattr(click.get_current_context(silent=True), "command", None)
    try:  # init-db must reach a missing ledger
        return create_app(
            check_ledger=False, needs_secret_key=getattr(command, "needs_secret_key", True)
        )
    except ConfigError as error:
        raise KnownProblem(_config_problem(error)) from None


def _config_problem(error: ConfigError) -> str:
    """The one line for a configuration problem. A missing ``GATEWAY_SECRET_KEY`` with a
    ledger already there names the key file beside it (the README's ``$GW_DIR/secret-key``)
    instead of advising a new key, which could not decrypt the stored passwords."""
    if not isinstance(error, MissingSecretKey):
        return str(error)
    generate = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
    ledger = migrations.ledger_file(error.database_url)
    if ledger is None and not error.url_given:
        return (
            f"{error}, and GATEWAY_DATABASE_URL is not set (no ledger at "
            f"{migrations.describe(error.database_url)}). In a new terminal, paste the "
            "README's settings and ledger blocks again; for a new ledger, generate a key with "
            f"{generate}"
        )
    if ledger is None and error.database_url.startswith("sqlite"):
        return f"{error}. No ledger yet: generate a key with {generate}"
    if ledger is None:
        return (
            f"{error}. A ledger that already holds sites needs the key they were added with (a "
            f"new key cannot decrypt their passwords); for a new ledger: {generate}"
        )
    key_file = os.path.join(os.path.dirname(os.path.abspath(ledger)), "secret-key")
    if os.path.exists(key_file):
        use = f'export GATEWAY_SECRET_KEY="$(cat {shlex.quote(key_file)})"'
    else:
        use = "use the key its sites were added with (the README keeps it in $GW_DIR/secret-key)"
    return (
        f"{error}. The ledger {os.path.abspath(ledger)} exists: {use}; a new key cannot decrypt "
        "its stored passwords"
    )


def _needs_no_secret_key(command: click.Command) -> click.Command:
    """Mark a command that encrypts and decrypts nothing: it runs without
    ``GATEWAY_SECRET_KEY`` (read by :func:`_app_factory`)."""
    command.needs_secret_key = False
    return command


@contextlib.contextmanager
def _known_problems(where: str):
    """Turn the problems a user can fix into :class:`KnownProblem` (one line, exit 2): a
    ledger that is missing, outdated or unreachable (``where`` names it), an unknown site or
    job (any :class:`GatewayError`), a ``GATEWAY_SECRET_KEY`` other than the one the sites
    were added with."""
    try:
        yield
    except (migrations.LedgerError, GatewayError) as error:
        raise KnownProblem(str(error)) from None
    except PeeweeError as error:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise KnownProblem(f"cannot use the ledger at {where}: {first}") from None


def needs_ledger(command):
    """``with_appcontext`` plus a ledger at the current schema version (else exit 2); the
    command's known problems become one line on stderr and exit status 2."""

    @functools.wraps(command)
    @with_appcontext
    def wrapper(*args, **kwargs):
        url = _config().database_url
        with _known_problems(migrations.describe(url)):
            migrations.check(url)
            return command(*args, **kwargs)

    return wrapper


def known_tenant(tenant: str) -> None:
    """Refuse a tenant that has neither a token nor a site in the ledger (a typo, or the
    wrong ledger): one line that says where it looked and what creates a tenant.

    Raises:
        KnownProblem: the tenant is unknown.
    """
    from gateway.ledger.models import Site
    from gateway.ledger.models import Token

    with database.connection_context():
        found = (
            Token.select().where(Token.tenant == tenant).exists()
            or Site.select().where(Site.tenant == tenant).exists()
        )
    if not found:
        where = migrations.describe(_config().database_url)
        raise KnownProblem(
            f"unknown tenant {tenant!r}: the ledger at {where} has no token and no site for "
            "it ('gateway sites add' or 'gateway tokens create' make one)"
        )


# Help that is read, not guessed: whole one-line summaries, every default shown.
HELP_SETTINGS = {"show_default": True, "max_content_width": 110, "terminal_width": 110}


class Duration(click.ParamType):
    """A duration on the command line: a number with its unit - ``s``, ``m``, ``h`` or ``d``
    (``90s``, ``12h``, ``7d``) - or a bare number in the option's own unit (its help says
    which). Converted to ``result_unit`` (a float)."""

    name = "duration"
    UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

    def __init__(self, bare_unit: str, result_unit: str):
        self.bare_unit = bare_unit
        self.result_unit = result_unit

    def convert(self, value, param, ctx):
        if isinstance(value, int | float):
            number, unit = float(value), self.bare_unit
        else:
            match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value))
            if match is None:
                self.fail(
                    f"{value!r} is not a duration: a number with s, m, h or d (90s, 12h, 7d), "
                    f"or a bare number of {self.bare_unit}",
                    param,
                    ctx,
                )
            number, unit = float(match[1]), match[2] or self.bare_unit
        return number * self.UNITS[unit] / self.UNITS[self.result_unit]


@click.group(cls=AppGroup, context_settings=HELP_SETTINGS)
@click.version_option(__version__, prog_name="gateway")
def cli():
    """Publishing Gateway: idempotent, reconciling writes from automations to WordPress."""


def _config():
    from flask import current_app

    return current_app.config["GATEWAY"]


@cli.command("init-db")
@with_appcontext
def init_db():
    """Create or migrate the ledger at GATEWAY_DATABASE_URL."""
    where = migrations.describe(_config().database_url)
    with _known_problems(where):
        before, after = migrations.migrate()
    if before is None:
        click.echo(f"ledger created at {where} (schema version {after})", err=True)
    elif before == after:
        click.echo(f"ledger at {where} is up to date (schema version {after})", err=True)
    else:
        click.echo(f"ledger at {where} migrated from schema version {before} to {after}", err=True)


@cli.group("sites")
def sites_group():
    """WordPress sites and their credentials."""


@sites_group.command("add")
@click.option("--tenant", required=True, help="The tenant the site belongs to.")
@click.option("--name", required=True, help="The site name jobs refer to.")
@click.option(
    "--url",
    required=True,
    help="The site URL; its REST API is found as WordPress advertises it (/wp-json/ or "
    "/index.php?rest_route=/).",
)
@click.option("--username", required=True, help="The WordPress user the gateway writes as.")
@click.option(
    "--app-password-env",
    required=True,
    metavar="VAR",
    help="Environment variable holding the application password.",
)
@click.option(
    "--transport",
    type=click.Choice(["rest", "xmlrpc"]),
    default="rest",
    help="rest (with the companion plugin: guard, lookup) or xmlrpc (no plugin needed).",
)
@click.option(
    "--no-check",
    is_flag=True,
    help="Store the site without signing in to it first (WordPress not reachable yet); "
    "run 'gateway doctor' once it is.",
)
@needs_ledger
def sites_add(tenant, name, url, username, app_password_env, transport, no_check):
    """Add or update a site; an update bumps its credential_version.

    The site is signed in to first: a refused password, a stripped Authorization header or
    a site that does not answer is refused (nothing stored) unless --no-check; a missing
    companion plugin or an editor account is a warning. Switching the transport is refused
    while the site has SENT or UNKNOWN operations."""
    from gateway.operator import site_check

    if not ENV_NAME.fullmatch(app_password_env):  # perhaps the password itself: never echoed
        raise KnownProblem(
            "--app-password-env takes the NAME of an environment variable holding the "
            "application password (e.g. WP_APP_PASSWORD), not the password itself"
        )
    password = os.environ.get(app_password_env)
    if not password:
        raise KnownProblem(
            f"environment variable {app_password_env} is empty or unset: export the site's "
            "application password in it first"
        )
    with database.connection_context():
        before = hot_sql.site_by_name(tenant, name)  # the site a re-add changes, if any
    checked = site_check.Checked(None)
    if not no_check:
        try:
            sites.check_site_url(url)
            checked = site_check.check_new_site(
                url, username, password, transport, _config().wp_timeout
            )
        except (ValueError, site_check.SiteRefused) as error:
            raise KnownProblem(str(error) + _replaced(before, url)) from None
    for warning in checked.warnings:
        click.echo(f"warning: {warning}", err=True)
    with database.connection_context():
        try:
            site = sites.add_site(
                _config().secret_key,
                tenant,
                name,
                url,
                username,
                password,
                transport,
                checked.rest_root,
            )
        except GatewayError as error:
            raise KnownProblem(error.detail) from None
        except ValueError as error:
            raise KnownProblem(str(error)) from None
    changed = _changes(before, site)
    if changed:  # re-adding a name is how a password is renewed: never a silent change
        said = "; ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changed.items())
        click.echo(f"site {tenant}/{name} updated: {said}", err=True)
    click.echo(
        json.dumps(
            {
                "tenant": tenant,
                "name": name,
                "url": site.url,
                "rest_root": sites.rest_root_of(site),
                "username": username,
                "transport": site.transport,
                "credential_version": site.credential_version,
                "changed": changed,
            }
        )
    )


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _replaced(site, url: str) -> str:
    """A warning for a refused ``sites add`` whose name is taken by ``site`` at another URL:
    ``--no-check`` (which the refusal may suggest) would replace that site's URL and
    password."""
    if site is None or site.url == url.rstrip("/"):
        return ""
    return (
        f" (careful: site {site.tenant}/{site.name} already exists at {site.url}; adding it "
        "again, even with --no-check, replaces that site's URL and password)"
    )


def _changes(before, after) -> dict:
    """``{field: [before, after]}`` for the URL, user and transport of a re-added site (the
    password is always renewed: ``credential_version`` says so); ``{}`` for a new site."""
    if before is None:
        return {}
    return {
        field: [getattr(before, field), getattr(after, field)]
        for field in ("url", "username", "transport")
        if getattr(before, field) != getattr(after, field)
    }


@_needs_no_secret_key
@sites_group.command("remove")
@click.option("--tenant", required=True, help="The site's tenant.")
@click.option("--name", required=True, help="The site's name.")
@click.option(
    "--force",
    is_flag=True,
    help="Remove it even though some of its jobs are unfinished (their next write is refused).",
)
@needs_ledger
def sites_remove(tenant, name, force):
    """Remove a site and its stored password; refused while it has unfinished jobs.

    A job is unfinished unless published, cancelled or failed; --force removes the site anyway
    (those jobs' next write is refused until the name is added again). The jobs' history
    stays."""
    from gateway.operator import site_removal

    known_tenant(tenant)
    with database.connection_context():
        try:
            removed = site_removal.remove_site(tenant, name, force)
        except GatewayError as error:
            raise KnownProblem(error.detail) from None
        except site_removal.SiteInUse as error:
            raise KnownProblem(str(error)) from None
    click.echo(json.dumps(removed))


@_needs_no_secret_key
@sites_group.command("list")
@click.option("--tenant", default=None, help="One tenant (default: every tenant).")
@needs_ledger
def sites_list(tenant):
    """The sites as JSON: tenant, name, URL, REST root, user, transport, dates; never a
    password."""
    if tenant:
        known_tenant(tenant)
    with database.connection_context():
        rows = sites.list_sites(tenant)
        listed = [
            {
                "tenant": s.tenant,
                "name": s.name,
                "url": s.url,
                "rest_root": sites.rest_root_of(s),
                "username": s.username,
                "transport": s.transport,
                "credential_version": s.credential_version,
                "created_at": rfc3339(s.created_at),
                "updated_at": rfc3339(s.updated_at),
            }
            for s in rows
        ]
    click.echo(json.dumps(listed, indent=2, ensure_ascii=False))


@cli.group("tokens")
def tokens_group():
    """API tokens (stored as SHA-256 only)."""


@_needs_no_secret_key
@tokens_group.command("create")
@click.option("--tenant", required=True, help="The tenant the token acts for.")
@click.option(
    "--role",
    type=click.Choice(tokens.ROLES),
    required=True,
    help="workflow (n8n, agents), editor (approves, publishes) or admin.",
)
@click.option("--name", required=True, help="Who holds it (shown in audit records).")
@needs_ledger
def tokens_create(tenant, role, name):
    """Create a token and print it alone on the last line of stdout, once."""
    with database.connection_context():
        try:
            token = tokens.create_token(tenant, role, name)
        except ValueError as error:
            raise KnownProblem(str(error)) from None
    click.echo(f"token for {tenant}/{name} ({role}); it is shown only once:", err=True)
    click.echo(token)


@_needs_no_secret_key
@tokens_group.command("revoke")
@click.option("--tenant", required=True, help="The token's or grant's tenant.")
@click.option("--name", default=None, help="The token's name (as given to tokens create).")
@click.option(
    "--grant",
    "grant_id",
    type=click.IntRange(1, 2147483647),
    default=None,
    help="An OAuth grant's id (gateway tokens list): the app's next call is refused.",
)
@needs_ledger
def tokens_revoke(tenant, name, grant_id):
    """Revoke a token (--name) or an OAuth grant (--grant) of TENANT.

    A token's API calls and editor sessions end, and the OAuth grants it approved as an editor
    are revoked (``grants``: their ids, ``revoked_why`` "approver-revoked"); every token a
    grant issued is refused from its next call on."""
    if (name is None) == (grant_id is None):
        raise click.UsageError("give exactly one of --name (a token) or --grant (an OAuth grant)")
    known_tenant(tenant)
    if grant_id is not None:
        with database.connection_context():
            revoked = grants.revoke_for_tenant(tenant, grant_id)
            ids = [g.id for g in grants.list_grants(tenant)]
        if not revoked and grant_id not in ids:
            raise KnownProblem(
                f"tenant {tenant!r} has no OAuth grant {grant_id}; its grants: "
                f"{', '.join(map(str, ids)) or 'none'} (gateway tokens list)"
            )
        click.echo(json.dumps({"tenant": tenant, "grant": grant_id, "revoked": int(revoked)}))
        return
    with database.connection_context():
        count = tokens.revoke_tokens(tenant, name)
        names = sorted({t.name for t in tokens.list_tokens(tenant)})
        ended = [
            g.id
            for g in grants.list_grants(tenant)
            if g.approved_by == name and g.revoked_why == "approver-revoked"
        ]
    if not count and name not in names:
        raise KnownProblem(
            f"tenant {tenant!r} has no token named {name!r}; its tokens: {', '.join(names)} "
            "(gateway tokens list)"
        )
    click.echo(json.dumps({"tenant": tenant, "name": name, "revoked": count, "grants": ended}))


@_needs_no_secret_key
@tokens_group.command("list")
@click.option("--tenant", default=None, help="One tenant (default: every tenant).")
@needs_ledger
def tokens_list(tenant):
    """The tokens and the OAuth grants as JSON, never a secret.

    A token: ``kind`` "token",
    tenant, name, role, created, revoked. A grant an editor gave an MCP client: ``kind``
    "grant", ``grant_id``, tenant, the client's id, name and verified host (null: registered
    dynamically, unverified), sites, approved by, created, last use (written at most once a
    minute), revoked and why.

    Neither a token nor its hash is shown, and nothing is written per request to keep a
    token's "last used" date."""
    if tenant:
        known_tenant(tenant)
    with database.connection_context():
        listed = [
            {
                "kind": "token",
                "tenant": t.tenant,
                "name": t.name,
                "role": t.role,
                "created_at": rfc3339(t.created_at),
                "revoked_at": rfc3339(t.revoked_at),
            }
            for t in tokens.list_tokens(tenant)
        ]
        listed += [
            {
                "kind": "grant",
                **row,
                "created_at": rfc3339(row["created_at"]),
                "last_used_at": rfc3339(row["last_used_at"]),
                "revoked_at": rfc3339(row["revoked_at"]),
            }
            for row in consent.grant_list(tenant)
        ]
    click.echo(json.dumps(listed, indent=2, ensure_ascii=False))


@cli.group("notifications")
def notifications_group():
    """Where a tenant's editors are notified (an admin's setting)."""


@notifications_group.command("set-url")
@click.option("--tenant", required=True, help="The tenant whose editors are notified.")
@click.option("--url", required=True, help="Takes a JSON POST with an Idempotency-Key header.")
@needs_ledger
def notifications_set_url(tenant, url):
    """Set the tenant's notification URL (its legacy webhook endpoint: every event, the flat
    JSON body).

    A tenant that never had any webhook endpoint gets its events not delivered yet there
    next; otherwise (a workflow's endpoint, an earlier URL) only the events decided from now
    on. Changing the URL keeps the endpoint and what it still owes. Prints ``tenant``, ``url``,
    ``endpoint_id`` and ``signed`` (whether its deliveries carry a signature: not until
    ``gateway webhooks rotate-secret``, which stderr then names)."""
    from gateway.actions import webhook_endpoints

    known_tenant(tenant)
    with database.connection_context():
        row = webhook_endpoints.set_legacy_url(_config(), tenant, url)  # 2: refused URL
    signed = row.secret_sealed is not None
    click.echo(
        json.dumps(
            {"tenant": row.tenant, "url": row.url, "endpoint_id": row.public_id, "signed": signed}
        )
    )
    if not signed:
        click.echo(
            "deliveries to this URL are unsigned until a secret is rotated in: gateway webhooks "
            f"rotate-secret --tenant {tenant} (printed once; Standard Webhooks signatures)",
            err=True,
        )


@cli.group("webhooks")
def webhooks_group():
    """A tenant's webhook endpoints (made by its workflows: POST /v1/webhook-endpoints)."""


@webhooks_group.command("list")
@click.option("--tenant", required=True, help="The tenant whose endpoints are listed.")
@needs_ledger
def webhooks_list(tenant):
    """List the tenant's live webhook endpoints as JSON (never a secret)."""
    from gateway.actions import webhook_endpoints

    known_tenant(tenant)
    with database.connection_context():
        listed = [webhook_endpoints.view(row) for row in webhook_endpoints.live(tenant)]
    click.echo(json.dumps({"endpoints": listed}, indent=2, ensure_ascii=False))


@webhooks_group.command(
    "rotate-secret", short_help="A new signing secret for an endpoint, printed once."
)
@click.option("--tenant", required=True, help="The tenant whose endpoint it is.")
@click.option(
    "--endpoint",
    "endpoint_id",
    default=None,
    help="The endpoint's id (ep_...; gateway webhooks list). Default: the tenant's notification "
    "URL (its legacy endpoint, unsigned until its first rotation).",
)
@needs_ledger
def webhooks_rotate_secret(tenant, endpoint_id):
    """Give an endpoint a new signing secret, printed once as JSON (``endpoint_id``,
    ``secret``: ``whsec_`` + base64, ``previous_secret_expires_at``). The previous secret
    still signs for 24 hours (two ``webhook-signature`` values), so the receiver can switch
    without missing a delivery. The legacy endpoint's first rotation makes its deliveries
    signed from then on (Standard Webhooks 1.0; docs/api.md, "POST /v1/webhook-endpoints/
    {endpoint_id}/secret"). Exit 2 when the tenant has no such endpoint."""
    from gateway.actions import webhook_endpoints

    known_tenant(tenant)
    with database.connection_context():
        if endpoint_id is None:
            legacy = webhook_endpoints.legacy_of(tenant)
            if legacy is None or legacy.deleted_at is not None:
                raise KnownProblem(
                    f"tenant {tenant} has no notification URL: gateway notifications set-url "
                    "makes one, or name an endpoint with --endpoint (gateway webhooks list)"
                )
            endpoint_id = legacy.public_id
        try:
            row, secret = webhook_endpoints.rotate(_config(), tenant, endpoint_id)
        except NotFound:
            raise KnownProblem(
                f"tenant {tenant} has no live webhook endpoint {endpoint_id[:40]!r}: "
                f"gateway webhooks list --tenant {tenant} lists its endpoints"
            ) from None
    answer = {
        "endpoint_id": row.public_id,
        "secret": secret,
        "previous_secret_expires_at": rfc3339(row.previous_secret_expires_at),
    }
    click.echo(json.dumps(answer))


@cli.command(
    "reconcile",
    short_help="One sweep over stale SENT/UNKNOWN rows, pending notifications and idle jobs.",
)
@click.option(
    "--older-than",
    type=Duration("s", "s"),
    default=None,
    help="How long since a row's last update for it to count as stale (90s, 5m; a bare "
    "number is seconds). Default: the in-flight window (GATEWAY_INFLIGHT_WINDOW).",
    show_default=False,
)
@needs_ledger
def reconcile(older_than):
    """One sweep over stale SENT/UNKNOWN rows of every job, pending notifications and idle
    jobs; prints counts as JSON."""
    from gateway.recovery import reconciliation

    config = _config()
    with database.connection_context():
        # Every registered action's sweep_pass runs within: notifications resent and idle
        # jobs told about, scheduled posts read back, unschedules finished.
        counts = reconciliation.sweep(config, older_than)
    click.echo(json.dumps(counts))


@cli.command("worker")
@click.option("--once", is_flag=True, help="One pass, print counts as JSON, exit.")
@click.option(
    "--interval",
    type=Duration("s", "s"),
    default=None,
    help="Time between passes (30s, 2m; a bare number is seconds). Default: "
    "GATEWAY_AGENT_POLL_INTERVAL.",
    show_default=False,
)
@needs_ledger
def worker_command(once, interval):
    """The agent worker: stored webhook events, stale sessions, unsettled session inputs."""
    import threading

    from gateway.agents import worker

    config = _config()
    if not config.openai_api_key:
        raise KnownProblem("GATEWAY_OPENAI_API_KEY is not set: the agent worker has nothing to do")
    if once:
        with database.connection_context():
            click.echo(json.dumps(worker.run_once(config)))
        return
    stop = threading.Event()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        worker.run_forever(config, interval or config.agent_poll_interval, stop)
    except KeyboardInterrupt:
        pass


@cli.group("jobs")
def jobs_group():
    """Jobs, as an operator or an editor acts on them."""


@jobs_group.command(
    "continue", short_help="Continue the job's agent session after checking, with verified facts."
)
@click.option("--tenant", required=True, help="The job's tenant.")
@click.option("--job-id", "job_id", required=True, help="The job whose agent session goes on.")
@click.option(
    "--editor",
    "editor_name",
    default=None,
    metavar="NAME",
    help="Decide as the tenant's editor token NAME (may continue a stopped session).",
)
@click.option("--reason", default=None, help="Why (required to lift a stop).")
@needs_ledger
def jobs_continue(tenant, job_id, editor_name, reason):
    """Continue the job's agent session after checking, with a summary of verified facts
    (POST /v1/jobs/{job_id}/agent/continue): an idle session, or as --editor a stopped one.
    Prints the answer as JSON; a refusal is one line naming what blocks it (exit 2)."""
    from gateway.agents import follow_ups
    from gateway.jobs import records
    from gateway.ledger.models import Token
    from gateway.tenancy import site_slots

    known_tenant(tenant)
    with database.connection_context():
        if editor_name is not None:
            editor = Token.get_or_none(
                Token.tenant == tenant,
                Token.name == editor_name,
                Token.role == "editor",
                Token.revoked_at.is_null(),
            )
            if editor is None:
                raise KnownProblem(f"tenant {tenant!r} has no live editor token {editor_name!r}")
        actor = f"editor:{editor_name}" if editor_name else "operator:cli"
        with site_slots.scope():
            answer, _sent_now = follow_ups.continue_session(
                _config(),
                records.get_job(tenant, job_id),
                actor,
                editor=editor_name is not None,
                reason=reason,
            )
    click.echo(json.dumps(answer, ensure_ascii=False))


@cli.command("prune", short_help="Retention: drop the bulky parts of finished jobs' operations.")
@click.option(
    "--older-than",
    "older_than",
    type=Duration("d", "d"),
    required=True,
    help="Prune final operations of finished jobs last updated longer ago than this (30d, "
    "12h; a bare number is days).",
)
@needs_ledger
def prune_command(older_than):
    """Retention: drop the bulky parts of finished jobs' operations (intents, copies of
    WordPress bodies); key, state, remote id and digest are kept forever. Prints counts."""
    from gateway.operator import retention

    with database.connection_context():
        counts = retention.prune(older_than)
    click.echo(json.dumps(counts))


@cli.command("doctor", short_help="Preflight of a tenant's sites: every check, with its fix.")
@click.option("--tenant", required=True, help="The tenant whose sites are checked.")
@click.option("--site", "site_name", default=None, help="One site (default: every site).")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the whole report as JSON (one site: an object; every site: a list).",
)
@needs_ledger
def doctor_command(tenant, site_name, as_json):
    """Preflight of a tenant's sites: every registered check for the site's transport, with
    the fix for each failure, then what the site guarantees. Exit 1 when a check failed;
    --json prints the whole report (one site: an object; every site: a list)."""
    from gateway.operator import doctor

    known_tenant(tenant)
    with database.connection_context():
        configured = sorted(s.name for s in sites.list_sites(tenant))
        if site_name is not None and site_name not in configured:
            raise KnownProblem(
                f"unknown site {site_name!r} for tenant {tenant!r}; its sites: "
                f"{', '.join(configured) or 'none'} ('gateway sites add' adds one)"
            )
        names = [site_name] if site_name else configured
        results = [doctor.doctor(_config(), tenant, name) for name in names]
    for result in results:  # short by default; beside --json, on stderr
        click.echo(
            f"site {result['site']} ({result['transport']}, WordPress "
            f"{result['wordpress_version']}):",
            err=as_json,
        )
        for check in result["checks"]:
            mark = {True: "ok  ", False: "FAIL", None: "warn"}[check["ok"]]
            click.echo(f"{mark} {check['check']}: {check['detail']}", err=as_json)
            if check.get("fix") and check["ok"] is False:
                click.echo(f"     fix: {check['fix']}", err=as_json)
        known = {k: v for k, v in result["guarantees"].items() if v is not None}
        said = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in known.items())
        click.echo(f"guarantees: {said or 'unknown (the login check did not pass)'}", err=as_json)
    if as_json:
        click.echo(json.dumps(results[0] if site_name else results, ensure_ascii=False))
    sys.exit(0 if all(r["ok"] for r in results) else 1)


@cli.command("report", short_help="The acceptance counters of GET /v1/report, as JSON.")
@click.option("--tenant", default=None, help="One tenant (default: every tenant).")
@needs_ledger
def report_command(tenant):
    """The acceptance counters of GET /v1/report as JSON: ``{"tenants": {T: {...}}}``, and
    without --tenant also ``"global"``: the refusal counters summed over every tenant (a
    call without a valid token has no tenant: it counts only in ``/metrics``)."""
    from gateway.ledger.models import Job
    from gateway.ledger.models import Site
    from gateway.ledger.models import Token
    from gateway.operator import report

    if tenant:
        known_tenant(tenant)
    with database.connection_context():
        tenants = (
            [tenant]
            if tenant
            else sorted(
                {s.tenant for s in Site.select(Site.tenant)}
                | {j.tenant for j in Job.select(Job.tenant)}
                | {t.tenant for t in Token.select(Token.tenant)}
            )
        )
        result = {"tenants": {t: report.report(_config(), t) for t in tenants}}
        if not tenant:
            result["global"] = report.global_counters()
    click.echo(json.dumps(result, indent=2, ensure_ascii=False))


@cli.command(
    "serve",
    with_appcontext=False,
    short_help="Serve the gateway: granian workers, the sweep, the agent and MCP listener.",
)
@click.option("--host", default="127.0.0.1", help="The address to listen on (loopback by default).")
@click.option("--port", default=8000, type=int, help="The TCP port to listen on.")
@click.option(
    "--workers",
    default=DEFAULT_WORKERS,
    type=click.IntRange(1, 64),
    show_default=True,
    help="granian worker processes (each with --threads).",
)
@click.option(
    "--threads",
    default=DEFAULT_THREADS,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Threads per worker; workers x threads requests are served at once.",
)
@click.option(
    "--sweep-interval",
    default="60s",
    type=Duration("s", "s"),
    help="Time between background reconciliation sweeps (60s, 5m; a bare number is "
    "seconds; 0 = off).",
)
@click.option(
    "--agent-worker/--no-agent-worker",
    default=True,
    help="Run one agent worker for the server (only when GATEWAY_OPENAI_API_KEY is set).",
)
@click.option(
    "--log-format",
    type=click.Choice(["json", "text"]),
    default="json",
    show_default=True,
    help="One JSON object per line (for log collectors), or text for a terminal.",
)
@click.option(
    "--share-port",
    is_flag=True,
    help="Listen beside another server already on the port (SO_REUSEPORT: the kernel "
    "spreads connections over both); without it a busy port exits 2.",
)
def serve(host, port, workers, threads, sweep_interval, agent_worker, log_format, share_port):
    """Serve the gateway with granian (several workers, one background sweep, one agent
    worker) and start the remote MCP listener beside it: the MCP tools at
    http://GATEWAY_MCP_LISTEN/mcp (default 127.0.0.1:8001, left off with one line when
    another server holds it; empty = none), an OAuth resource server whose issuer is
    GATEWAY_PUBLIC_URL, restarted if it dies (docs/mcp.md)."""
    from gateway.core.listening import PortInUse
    from gateway.server import run

    try:
        run(host, port, workers, sweep_interval, agent_worker, log_format, threads, share_port)
    except ConfigError as error:
        raise KnownProblem(_config_problem(error)) from None
    except (migrations.LedgerError, PortInUse) as error:
        raise KnownProblem(str(error)) from None


@cli.command("openapi", with_appcontext=False)
def openapi_command():
    """Print the OpenAPI 3.1 document (the same as GET /openapi.json); needs no ledger."""
    from gateway.api import openapi
    from gateway.api import routes

    click.echo(json.dumps(openapi.build(routes.bare_app()), indent=2, ensure_ascii=False))


@cli.command(
    "mcp",
    with_appcontext=False,
    short_help="The gateway's tools over MCP (stdio or streamable HTTP) for any agent.",
)
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default="stdio",
    show_default=True,
    help="stdio for local clients (one token from GATEWAY_TOKEN); http (streamable HTTP, "
    "stateless) for remote ones (each request's own bearer token).",
)
@click.option(
    "--gateway-url",
    envvar="GATEWAY_URL",
    default="http://127.0.0.1:8000",
    show_default=True,
    help="The gateway's HTTP API (env GATEWAY_URL).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="http: the bind address.")
@click.option("--port", default=8765, type=int, show_default=True, help="http: the port.")
@click.option("--path", "mcp_path", default="/mcp", show_default=True, help="http: the endpoint.")
@click.option(
    "--allow-host",
    multiple=True,
    help="http: a Host header clients may send (repeatable; the loopback names are allowed "
    "when bound to loopback; required otherwise).",
)
@click.option(
    "--allow-origin",
    multiple=True,
    help="http: a browser Origin allowed besides the loopback ones (repeatable).",
)
@click.option(
    "--media-root",
    multiple=True,
    envvar="GATEWAY_MCP_MEDIA_ROOTS",
    help="stdio: a folder upload_media may read local files from (repeatable; env "
    "GATEWAY_MCP_MEDIA_ROOTS, separated by the path separator). None: no local files.",
)
def mcp_command(transport, gateway_url, host, port, mcp_path, allow_host, allow_origin,
                media_root):  # fmt: skip
    """The gateway's tools over the Model Context Protocol (docs/mcp.md): a client of the
    gateway's HTTP API at GATEWAY_URL; it holds no WordPress credential."""
    from gateway.core.listening import PortInUse
    from gateway.mcp import server
    from gateway.mcp import tools

    if transport == "http":
        if media_root:
            raise KnownProblem("--media-root is for stdio only: over HTTP send a URL or base64")
        try:
            server.serve_http(
                gateway_url, host, port, path=mcp_path, allow_hosts=allow_host,
                allow_origins=allow_origin,
            )  # fmt: skip
        except (ValueError, PortInUse) as error:
            raise KnownProblem(str(error)) from None
        return
    token = os.environ.get("GATEWAY_TOKEN", "").strip()
    if not token:
        raise KnownProblem(
            "GATEWAY_TOKEN is required over stdio: a workflow token from 'gateway tokens create'"
        )
    try:
        roots = tools.media_roots(os.pathsep.join(media_root))
    except ValueError as error:
        raise KnownProblem(str(error)) from None
    server.serve_stdio(gateway_url, token, roots)


@cli.command("demo", with_appcontext=False)
@click.option(
    "--site-json",
    default=None,
    help="The test site's site.json (default: wp_test_site/.runtime/site.json).",
    show_default=False,
)
@click.option("--keep", is_flag=True, help="Keep the demo's ledger directory afterwards.")
@click.option(
    "--agent",
    is_flag=True,
    help="Drive the main job by a scripted agent session (a local OpenAI stand-in).",
)
@click.option(
    "--mcp",
    "over_mcp",
    is_flag=True,
    help="Drive the main job over MCP (gateway mcp, stdio) with the official SDK's client.",
)
def demo(site_json, keep, agent, over_mcp):
    """The main job end to end against the test site, with a lost response recovered."""
    from gateway_tools.demo import DemoUnavailable
    from gateway_tools.demo import run_demo

    if agent:
        from gateway_tools.agent_demo import run_agent_demo as run_demo
    if over_mcp:
        from gateway_tools.mcp_demo import run_mcp_demo as run_demo
    try:
        status = run_demo(site_json, keep=keep)
    except DemoUnavailable as error:
        raise KnownProblem(str(error)) from None
    sys.exit(status)


def main() -> None:
    """Console-script entry point."""
    # Flask's ScriptInfo loads the app only for commands that need it, so --help and the
    # commands that configure themselves (serve, demo) work without GATEWAY_SECRET_KEY.
    cli(prog_name="gateway", obj=ScriptInfo(create_app=_app_factory, set_debug_flag=False))


if __name__ == "__main__":
    main()
