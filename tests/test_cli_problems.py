"""Every ``gateway`` command answers a problem the user can fix with one line on stderr and
exit status 2, never a traceback; only ``init-db`` creates a ledger.

The matrix runs the commands in-process with click's ``CliRunner`` (a real process each would
cost a second per cell); an exception escaping a command shows up there as
``result.exception``, which a real process would print as a traceback. The headline case of
the issue also runs as a real process.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest
from support import SECRET_KEY
from support import free_port
from support import gateway_cli
from support import gateway_command
from support import sqlite_path

from gateway.ledger import db
from gateway.ledger import migrations

PASSWORD_ENV = "GW_TEST_PROBLEM_PASSWORD"
UNREACHABLE = "postgresql://gateway@127.0.0.1:1/nowhere"  # nothing listens on port 1

COMMANDS = {
    "init-db": ["init-db"],
    "sites add": [
        "sites",
        "add",
        "--tenant",
        "acme",
        "--name",
        "blog",
        "--url",
        "http://127.0.0.1:9",
        "--username",
        "author",
        "--app-password-env",
        PASSWORD_ENV,
        "--no-check",  # nothing listens at port 9: the problems here come first
    ],
    "tokens create": ["tokens", "create", "--tenant", "acme", "--role", "editor", "--name", "e"],
    "tokens revoke": ["tokens", "revoke", "--tenant", "acme", "--name", "e"],
    "reconcile": ["reconcile"],
    "notifications set-url": [
        "notifications",
        "set-url",
        "--tenant",
        "acme",
        "--url",
        "http://127.0.0.1:9/n",
    ],
    "doctor": ["doctor", "--tenant", "acme", "--site", "blog"],
    "report": ["report"],
    "report --tenant": ["report", "--tenant", "acme"],
    "serve": ["serve", "--port", "9"],
}
LEDGER_COMMANDS = [name for name in COMMANDS if name != "init-db"]
# commands that encrypt and decrypt nothing run without GATEWAY_SECRET_KEY (issue 44)
KEYLESS = {"tokens create", "tokens revoke"}


def invoke(args: list[str], env: dict):
    """Run ``gateway ARGS`` in-process with ``env`` replacing every ``GATEWAY_*`` variable."""
    return gateway_cli(args, {PASSWORD_ENV: "pass word", **env}, restore_binding=False)


def assert_one_line(result, status: int = 2, *words: str) -> str:
    """No traceback (no exception escaped), the exit status, one line on stderr."""
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"{type(result.exception).__name__}: {result.exception}"
    )
    assert result.exit_code == status, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def env(ledger_url):
    return {"GATEWAY_DATABASE_URL": ledger_url, "GATEWAY_SECRET_KEY": SECRET_KEY}


@pytest.fixture
def ready(env):
    """A current ledger with tenant acme, its site ``blog`` and an editor token."""
    assert invoke(["init-db"], env).exit_code == 0
    assert invoke(COMMANDS["sites add"], env).exit_code == 0
    assert invoke(COMMANDS["tokens create"], env).exit_code == 0
    return env


def _no_tables(ledger_url: str) -> bool:
    path = sqlite_path(ledger_url)
    if path is not None:
        return not path.exists()
    db.bind(ledger_url)
    with db.database.connection_context():
        return migrations.current_version() is None


@pytest.mark.parametrize("name", sorted(set(COMMANDS) - KEYLESS))
def test_no_secret_key(name, ledger_url):
    result = invoke(COMMANDS[name], {"GATEWAY_DATABASE_URL": ledger_url})
    assert_one_line(result, 2, "GATEWAY_SECRET_KEY is required")


def test_commands_that_decrypt_nothing_need_no_secret_key(ready, ledger_url):
    """A new terminal without the key lists sites and manages tokens; adding a site still
    needs the key (it encrypts the password)."""
    keyless = {"GATEWAY_DATABASE_URL": ledger_url}
    listed = invoke(["sites", "list"], keyless)
    assert listed.exit_code == 0, listed.output
    assert [s["name"] for s in json.loads(listed.stdout)] == ["blog"]
    assert invoke(["tokens", "list"], keyless).exit_code == 0
    assert invoke(COMMANDS["tokens revoke"], keyless).exit_code == 0
    assert_one_line(invoke(COMMANDS["sites add"], keyless), 2, "GATEWAY_SECRET_KEY is required")


def test_missing_key_with_a_ledger_names_its_key_file(tmp_path):
    """Advice to generate a key is given only when no ledger exists: with one, a new key could
    not decrypt its passwords, so the line names the key file beside it."""
    ledger = tmp_path / "gateway.ledger.db"
    env = {"GATEWAY_DATABASE_URL": f"sqlite:///{ledger}"}
    fresh = assert_one_line(invoke(COMMANDS["report"], env), 2, "No ledger yet", "secrets")
    assert "secret-key" not in fresh
    # a new terminal: neither the key nor the ledger's URL set (the default names no ledger)
    unset = assert_one_line(invoke(COMMANDS["report"], {}), 2, "GATEWAY_DATABASE_URL is not set")
    assert "paste the README's settings and ledger blocks again" in unset
    assert invoke(["init-db"], {**env, "GATEWAY_SECRET_KEY": SECRET_KEY}).exit_code == 0
    no_file = assert_one_line(invoke(COMMANDS["report"], env), 2, str(ledger), "$GW_DIR/secret-key")
    assert "token_urlsafe" not in no_file
    (tmp_path / "secret-key").write_text(SECRET_KEY + "\n", encoding="utf-8")
    named = assert_one_line(invoke(COMMANDS["doctor"], env), 2, "a new key cannot decrypt")
    assert f'export GATEWAY_SECRET_KEY="$(cat {tmp_path / "secret-key"})"' in named
    assert "token_urlsafe" not in named


def test_fixable_problems_exit_2(ready):
    """The README's "2: a problem you can fix": an unset password variable, an unknown token."""
    args = [a if a != PASSWORD_ENV else "GW_TEST_NOPE_VAR" for a in COMMANDS["sites add"]]
    assert_one_line(invoke(args, ready), 2, "GW_TEST_NOPE_VAR is empty or unset")
    # the password itself given as the variable's name: refused without echoing it
    pasted = "abcd EFGH ijkl MNOP qrst UVWX"
    args = [a if a != PASSWORD_ENV else pasted for a in COMMANDS["sites add"]]
    line = assert_one_line(invoke(args, ready), 2, "takes the NAME of an environment variable")
    assert pasted not in line
    unknown = ["tokens", "revoke", "--tenant", "acme", "--name", "nosuch"]
    assert_one_line(invoke(unknown, ready), 2, "no token named 'nosuch'", "its tokens: e")
    assert invoke(COMMANDS["tokens revoke"], ready).exit_code == 0
    again = invoke(COMMANDS["tokens revoke"], ready)  # revoked already: nothing to fix
    assert again.exit_code == 0 and json.loads(again.stdout)["revoked"] == 0


@pytest.mark.parametrize("name", list(COMMANDS))
def test_ledger_unreachable(name):
    env = {"GATEWAY_DATABASE_URL": UNREACHABLE, "GATEWAY_SECRET_KEY": SECRET_KEY}
    assert_one_line(invoke(COMMANDS[name], env), 2, "ledger at postgresql://", "refused")


@pytest.mark.parametrize("name", LEDGER_COMMANDS)
def test_missing_ledger_is_refused_and_not_created(name, env, ledger_url):
    line = assert_one_line(invoke(COMMANDS[name], env), 2, "no ledger at", "gateway init-db")
    assert "GATEWAY_DATABASE_URL" in line
    assert _no_tables(ledger_url)


def test_outdated_ledger_is_refused_until_init_db_migrates_it(ready, monkeypatch):
    step = migrations.Migration(migrations.latest_version() + 1, "test step", lambda m: None)
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, step])
    for name in LEDGER_COMMANDS:
        assert_one_line(invoke(COMMANDS[name], ready), 2, "run 'gateway init-db' to migrate")
    migrated = invoke(["init-db"], ready)
    assert migrated.exit_code == 0 and "migrated" in migrated.stderr
    assert invoke(COMMANDS["report"], ready).exit_code == 0


def test_newer_ledger_is_refused_by_every_command(ready):
    with db.database.connection_context():
        migrations.SchemaVersion.create(version=99, description="from the future")
    for name in COMMANDS:
        assert_one_line(invoke(COMMANDS[name], ready), 2, "upgrade the gateway")


@pytest.mark.parametrize("name", ["tokens revoke", "doctor", "report --tenant"])
def test_unknown_tenant(name, ready):
    args = ["nobody" if a == "acme" else a for a in COMMANDS[name]]
    assert_one_line(invoke(args, ready), 2, "unknown tenant 'nobody'", "gateway sites add")


def test_unknown_site_and_another_secret_key(ready):
    args = ["nosuch" if a == "blog" else a for a in COMMANDS["doctor"]]
    assert_one_line(invoke(args, ready), 2, "unknown site 'nosuch'", "its sites: blog")
    other_key = {**ready, "GATEWAY_SECRET_KEY": "another key"}
    assert_one_line(invoke(COMMANDS["doctor"], other_key), 2, "GATEWAY_SECRET_KEY differs")


def test_doctor_failing_its_checks_exits_1_and_success_exits_0(ready):
    unreachable_site = invoke(COMMANDS["doctor"], ready)  # http://127.0.0.1:9: nothing there
    assert unreachable_site.exit_code == 1 and unreachable_site.exception.code == 1
    assert "FAIL rest_api" in unreachable_site.stdout  # short text by default, --json for JSON
    # nothing ran that learns a guarantee: none is claimed
    assert "guarantees: unknown" in unreachable_site.stdout
    assert not unreachable_site.stdout.lstrip().startswith("{")
    assert invoke(COMMANDS["report --tenant"], ready).exit_code == 0
    assert invoke(COMMANDS["tokens revoke"], ready).exit_code == 0


def test_demo_without_a_test_site(tmp_path, monkeypatch):
    missing = tmp_path / "site.json"
    assert_one_line(invoke(["demo", "--site-json", str(missing)], {}), 2, "wp_test_site/up.sh")
    monkeypatch.chdir(tmp_path)  # outside the clone (issue 44): the directory is named
    line = assert_one_line(invoke(["demo"], {}), 2, "from the root of the gateway's clone")
    assert str(tmp_path) in line and "up.sh" not in line


@pytest.mark.parametrize("name", ["report", "sites add", "tokens create"])
def test_from_another_directory_no_second_ledger(name, tmp_path, monkeypatch):
    """Without GATEWAY_DATABASE_URL the default is ./gateway.ledger.db: the command says where it
    looked and how to point it at a ledger, and leaves no empty ledger behind."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    line = assert_one_line(invoke(COMMANDS[name], {"GATEWAY_SECRET_KEY": SECRET_KEY}), 2)
    assert str(elsewhere / "gateway.ledger.db") in line
    assert "set GATEWAY_DATABASE_URL" in line and "gateway init-db" in line
    assert list(elsewhere.iterdir()) == []


def test_create_app_never_creates_a_ledger(tmp_path, monkeypatch):
    import gateway

    target = tmp_path / "ledger.db"
    monkeypatch.setenv("GATEWAY_DATABASE_URL", f"sqlite:///{target}")
    monkeypatch.setenv("GATEWAY_SECRET_KEY", SECRET_KEY)
    with pytest.raises(migrations.LedgerError, match="gateway init-db"):
        gateway.create_app()
    assert not target.exists()


def test_doctor_for_an_unknown_site_as_a_real_process(env):
    """The issue's own case: ``gateway doctor --tenant acme --site nosuch``."""
    run_env = {**os.environ, **env, PASSWORD_ENV: "pass word"}

    def run(*args):
        return subprocess.run(
            [*gateway_command(), *args],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    assert run("init-db").returncode == 0
    assert run(*COMMANDS["sites add"]).returncode == 0
    done = run("doctor", "--tenant", "acme", "--site", "nosuch")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == (
        "Error: unknown site 'nosuch' for tenant 'acme'; its sites: blog "
        "('gateway sites add' adds one)"
    )


@pytest.mark.parametrize(
    "url", ["<https://your-site.example>", "your-site.example", "ftp://x", "https://"]
)
def test_a_site_url_that_is_not_one_is_refused_and_no_site_is_registered(ready, url):
    args = list(COMMANDS["sites add"])
    args[args.index("--url") + 1] = url
    assert_one_line(invoke(args, ready), 2, "site URL")
    listed = invoke(["sites", "list", "--tenant", "acme"], ready)
    assert listed.exit_code in (0, 2)  # an unknown tenant (no site) is refused too
    assert "your-site" not in listed.stdout and "ftp://" not in listed.stdout


def test_a_chosen_listener_port_that_is_busy_stops_serve_as_a_real_process(ready):
    """Issue 58: only the listener's default port gives way (tests/test_readme.py runs two
    gateways on it); a ``GATEWAY_MCP_LISTEN`` set to a busy address exits 2 with one line,
    before any worker starts, like a busy ``--port``."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        done = subprocess.run(
            [*gateway_command(), "serve", "--port", str(free_port())],
            env={**os.environ, **ready, "GATEWAY_MCP_LISTEN": f"127.0.0.1:{busy}"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"Error: the remote MCP listener (GATEWAY_MCP_LISTEN, empty = none): port {busy} on "
        "127.0.0.1 is already in use; stop what listens there or choose another"
    )
