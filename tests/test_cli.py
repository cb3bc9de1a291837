"""The ``gateway`` command line as an operator uses it (real processes, real WordPress)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import SECRET_KEY
from support import free_port
from support import gateway_cli_process
from support import gateway_command
from support import hide_companion

PASSWORD_ENV = "GW_TEST_APP_PASSWORD"


@pytest.fixture
def run(ledger_url):
    env = {**os.environ, "GATEWAY_DATABASE_URL": ledger_url, "GATEWAY_SECRET_KEY": SECRET_KEY}

    def cli(*args: str, password: str | None = None) -> subprocess.CompletedProcess:
        extra = {PASSWORD_ENV: password} if password else {}
        return subprocess.run(
            [*gateway_command(), *args],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    created = cli("init-db")
    assert created.returncode == 0, created.stderr
    cli.env = env
    return cli


def add_site(
    run, url: str, user: dict, name: str = "blog", transport: str = "rest", check: bool = True
) -> subprocess.CompletedProcess:
    return run(
        "sites",
        "add",
        "--tenant",
        "acme",
        "--name",
        name,
        "--url",
        url,
        "--username",
        user["username"],
        "--app-password-env",
        PASSWORD_ENV,
        "--transport",
        transport,
        *(() if check else ("--no-check",)),
        password=user["app_password"],
    )


def test_tokens_create_prints_the_token_alone_on_the_last_line(run):
    assert run("init-db").returncode == 0
    done = run("tokens", "create", "--tenant", "acme", "--role", "editor", "--name", "ed")
    assert done.returncode == 0
    token = done.stdout.strip().splitlines()[-1]
    assert len(token) >= 43 and " " not in token
    refused = run("tokens", "create", "--tenant", "acme", "--role", "root", "--name", "x")
    assert refused.returncode != 0


def test_sites_add_upserts_and_never_prints_the_password(run, wp_site):
    author = wp_site["users"]["author"]
    first = add_site(run, wp_site["url"], author)
    second = add_site(run, wp_site["url"], author)
    assert first.returncode == 0 and second.returncode == 0
    assert json.loads(second.stdout)["credential_version"] == 2
    for text in (first.stdout, first.stderr, second.stdout, second.stderr):
        assert author["app_password"] not in text
    missing = run(
        "sites",
        "add",
        "--tenant",
        "acme",
        "--name",
        "x",
        "--url",
        "http://x",
        "--username",
        "u",
        "--app-password-env",
        "NOT_SET_ANYWHERE",
    )
    assert missing.returncode != 0 and "NOT_SET_ANYWHERE" in missing.stderr
    xmlrpc = run(
        "sites",
        "add",
        "--tenant",
        "acme",
        "--name",
        "x",
        "--url",
        "http://x",
        "--username",
        "u",
        "--app-password-env",
        PASSWORD_ENV,
        "--transport",
        "xmlrpc",
        "--no-check",  # nothing at http://x: stored unchecked
        password="p",
    )
    assert xmlrpc.returncode == 0, xmlrpc.stderr
    assert json.loads(xmlrpc.stdout)["transport"] == "xmlrpc"


@pytest.mark.wordpress
def test_sites_add_signs_in_first_and_stores_nothing_it_refuses(ledger_url, wp_site, proxy):
    """Issue 44 (and n8n-io/n8n#18687: made-up credentials that pass, then fail at the first
    post): a wrong password or an address where no WordPress answers is refused with exit 2
    and nothing stored; a site without the plugin, or an editor account, is stored with a
    warning that names what it will not guarantee; --no-check stores without asking. In
    process (click's runner): the process boundary is test_cli_problems'."""
    env = {"GATEWAY_DATABASE_URL": ledger_url, "GATEWAY_SECRET_KEY": SECRET_KEY}

    def run(*args: str, password: str | None = None):
        return gateway_cli_process(list(args), {**env, PASSWORD_ENV: password or ""})

    assert run("init-db").returncode == 0
    wrong = dict(wp_site["users"]["author"], app_password="aaaa bbbb cccc dddd eeee ffff")
    refused = add_site(run, wp_site["url"], wrong, name="wrong")
    assert refused.returncode == 2, refused.stderr
    assert "refused the application password" in refused.stderr
    assert "Authorization header" not in refused.stderr and "nothing was stored" in refused.stderr
    nowhere = add_site(run, f"http://127.0.0.1:{free_port()}", wp_site["users"]["author"], "off")
    assert nowhere.returncode == 2 and "--no-check" in nowhere.stderr, nowhere.stderr
    hide_companion(proxy)
    bare = add_site(run, proxy.url, wp_site["users"]["editor"], name="bare")
    assert bare.returncode == 0, bare.stderr
    assert "companion plugin is not active" in bare.stderr and "--transport xmlrpc" in bare.stderr
    assert "editor is an editor" in bare.stderr or "is an editor" in bare.stderr
    # the refusal's --no-check advice would replace an existing site: it says so
    moved = add_site(run, f"http://127.0.0.1:{free_port()}", wp_site["users"]["author"], "bare")
    assert moved.returncode == 2 and f"already exists at {proxy.url}" in moved.stderr
    later = add_site(run, f"http://127.0.0.1:{free_port()}", wrong, name="later", check=False)
    assert later.returncode == 0, later.stderr
    listed = json.loads(run("sites", "list").stdout)
    assert sorted(s["name"] for s in listed) == ["bare", "later"]


@pytest.mark.wordpress
def test_doctor_reports_the_guarantees_of_the_site(run, wp_site, proxy):
    add_site(run, wp_site["url"], wp_site["users"]["author"])
    good = run("doctor", "--tenant", "acme", "--site", "blog", "--json")
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["guarantees"] == {
        "lookup_by_operation_key": True,
        "guard": True,
        "seo_meta": True,
        "alt_text": True,
        "new_terms": True,
    }
    add_site(run, proxy.url, wp_site["users"]["editor"], name="bare")
    hide_companion(proxy)
    bare = run("doctor", "--tenant", "acme", "--site", "bare", "--json")
    result = json.loads(bare.stdout)
    # issue 44: a REST site without the plugin fails doctor (exit 1) with the fix, and says
    # which guarantees are gone
    assert bare.returncode == 1 and result["guarantees"]["guard"] is False
    plugin = next(c for c in result["checks"] if c["check"] == "companion_plugin")
    assert plugin["ok"] is False and "--transport xmlrpc" in plugin["fix"]
    assert "no uniqueness guard" in plugin["detail"]
    warnings = {c["check"] for c in result["checks"] if c["ok"] is None}
    assert {"role", "uniqueness_guard", "seo_meta"} <= warnings
    install = next(c for c in result["checks"] if c["check"] == "install")
    assert install["ok"] and "also reached as acme/blog" in install["detail"]  # another URL
    wrong = dict(wp_site["users"]["author"], app_password="aaaa bbbb cccc dddd eeee ffff")
    add_site(run, wp_site["url"], wrong, name="revoked", check=False)  # doctor finds it
    refused = run("doctor", "--tenant", "acme", "--site", "revoked", "--json")
    assert refused.returncode == 1
    checks = {c["check"]: c for c in json.loads(refused.stdout)["checks"]}
    # WordPress 6.1 answers a wrong password with the same rest_not_logged_in as a stripped
    # header; the same password over XML-RPC tells them apart: the login fails, the header
    # is not blamed (issue 44)
    assert [name for name, c in checks.items() if c["ok"] is False] == ["login"], checks
    assert checks["authorization_header"]["ok"] is True
    assert "application password" in refused.stderr.split("fix:", 1)[1]
    add_site(run, wp_site["url"], wp_site["users"]["author"], name="plain", transport="xmlrpc")
    every = run("doctor", "--tenant", "acme", "--json")
    listed = {r["site"]: r["transport"] for r in json.loads(every.stdout)}
    assert listed == {"blog": "rest", "bare": "rest", "revoked": "rest", "plain": "xmlrpc"}
    assert every.returncode == 1  # the revoked site fails


@pytest.mark.wordpress
def test_reconcile_and_report_print_json(run, wp_site):
    add_site(run, wp_site["url"], wp_site["users"]["author"])
    counts = json.loads(run("reconcile").stdout)
    assert counts == {
        "never_sent": 0,
        "examined": 0,
        "confirmed": 0,
        "absent": 0,
        "needs_review": 0,
        "unreachable": 0,
        "refused": 0,
        "site_busy": 0,
        "unscheduled": 0,
        "published": 0,
        "missed": 0,
        "notifications": {"delivered": 0, "pending": 0, "attention_decided": 0},
    }
    report = json.loads(run("report", "--tenant", "acme").stdout)["tenants"]["acme"]
    assert report["duplicate_posts"] == 0 and report["unknown_operations"] == 0
    every = json.loads(run("report").stdout)
    assert set(every["tenants"]) == {"acme"}
    assert every["global"] == {"unauthorized_calls": 0, "rejected_checkpoint_advances": 0}


# A fresh `gateway reconcile` process, then the names its action registry holds: the registry
# is filled by the composition root's explicit imports, never on first use.
RECONCILE_THEN_REGISTRY = """
import json, sys
from gateway import cli
sys.argv = ["gateway", "reconcile"]
try:
    cli.main()
except SystemExit as stop:
    assert not stop.code, stop.code
from gateway.operations import registry
print(json.dumps(sorted(a.name for a in registry.all_actions())))
"""


def test_a_fresh_reconcile_process_knows_every_action(run):
    """Every action and the agents' review decider are registered in a ``gateway reconcile``
    process that imported nothing else first."""
    from gateway import composition  # noqa: F401 - this process's registry, complete
    from gateway.editorial import resolution
    from gateway.operations import registry

    expected = sorted(a.name for a in registry.all_actions())
    assert {"media", "draft", "block", "repair", "publish", "notify"} <= set(expected)
    assert "agent_action" in resolution._deciders
    out = subprocess.run(
        [sys.executable, "-c", RECONCILE_THEN_REGISTRY],
        env=run.env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    counts_line, registered_line = out.stdout.strip().splitlines()[-2:]
    assert "examined" in json.loads(counts_line)
    assert json.loads(registered_line) == expected
