"""Shared fixtures: the real test WordPress, a fresh ledger per test, the Flask app, the
gateway client (:class:`support.Gateway`), a fault proxy in front of WordPress, and a real
multi-process ``gateway serve`` for concurrency tests. Helpers live in ``tests/support.py``.

Every test uses its own job id (a uuid), so tests never see each other's objects in the one
shared WordPress, which several pytest processes use at once (pytest-xdist workers, and the
SQLite and PostgreSQL passes side by side). A test that changes the whole site (the companion
plugin switched off, the site's timezone, a column's charset) is marked ``site_exclusive`` (or
uses ``no_companion``): it runs on a second site of the same line (``exclusive_wp_site``),
holds that site's lock alone and must leave it as it found it (:func:`_site_access`), so no
ordinary test ever waits for it.

Hooks: under ``CI=true`` a skipped test is a failure (:func:`pytest_runtest_makereport`); tests
for one ledger only are deselected in the other pass by marker (``sqlite_pass``,
``postgresql_pass``), never skipped; every test that uses the test WordPress is marked
``wordpress`` (the WordPress-version matrix selects them with ``-m wordpress``).
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import time
import uuid
from urllib.parse import urlsplit
from urllib.parse import urlunsplit

import passes
import pytest
import requests
from support import AUTHOR_PASSWORD_ENV
from support import EXCLUSIVE
from support import OFFLINE_SITE
from support import ROOT
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from support import UP_SH
from support import Gateway
from support import GatewayServer
from support import _read_site
from support import free_port
from support import gateway_cli_ok
from support import gateway_command
from support import site_runtime
from support import site_state
from support import switch_companion

import gateway
from gateway import composition  # noqa: F401 - every registry complete, as in every process
from gateway.ledger.db import database
from gateway_tools.fault_proxy import FaultProxy

# Every ``gateway serve`` a test starts runs without the remote MCP listener (whose default
# port, 8001, parallel servers would share) unless the test sets GATEWAY_MCP_LISTEN itself
# (tests/test_remote_mcp.py gives its server a free port).
os.environ["GATEWAY_MCP_LISTEN"] = ""

pytest_plugins = ["timings"]  # per-test wall and CPU time for the CI's report (tests/timings.py)

# --------------------------------------------------------------------------- hooks


def _postgres_pass() -> bool:
    return bool(os.environ.get("GATEWAY_TEST_DATABASE_URL"))


def pytest_collection_modifyitems(config, items):
    """Mark every test that uses the test WordPress ``wordpress``, and each test with the
    matrix passes it belongs to (``dialect``, ``wordpress_version``:
    ``tests/passes.py``); deselect the tests of the other ledger's pass (``sqlite_pass`` /
    ``postgresql_pass``)."""
    other = "sqlite_pass" if _postgres_pass() else "postgresql_pass"
    kept, deselected = [], []
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        uses_wordpress = "wp_site" in fixtures or "shared_wp_site" in fixtures
        if uses_wordpress:
            item.add_marker(pytest.mark.wordpress)
        for mark in passes.classify(item, uses_wordpress):
            item.add_marker(mark)
        (deselected if item.get_closest_marker(other) else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_terminal_summary(terminalreporter):
    """Print what tests recorded for the run's reader with ``record_property``: the points the
    crash walk walked per write path (``"crash walk"``, ``tests/test_crash_walk.py``) and the
    soak's summary line with its seed (``"soak"``, ``tests/test_soak.py``); pytest-xdist
    carries a report's properties back to the controller, prints would be lost."""
    lines = {"crash walk": [], "soak": []}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if getattr(report, "when", None) != "call":
                continue
            for name, value in getattr(report, "user_properties", ()):
                if name in lines:
                    lines[name].append(value)
    if lines["crash walk"]:
        terminalreporter.write_sep("-", f"crash walk: {len(lines['crash walk'])} paths")
        for line in sorted(lines["crash walk"]):
            terminalreporter.write_line(f"crash walk: {line}")
    for line in lines["soak"]:  # begins with "soak: "
        terminalreporter.write_line(line)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under ``CI=true`` a skipped test fails: a real part (WordPress, n8n, Chromium, a
    ledger, a tool) that CI cannot reach is a broken CI, not a pass."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, which counts as a failure: {reason}"


# --------------------------------------------------------------------------- WordPress


def changes_the_whole_site(item) -> bool:
    """Whether a test changes the whole test site (the companion plugin switched off, the
    site's timezone, a column's charset): marked ``site_exclusive`` or using
    ``no_companion``. Such a test runs on a site of its own (:func:`wp_site`)."""
    return item.get_closest_marker("site_exclusive") is not None or "no_companion" in getattr(
        item, "fixturenames", ()
    )


def _site(instance: str) -> dict:
    """The running test site ``instance`` of ``WP_TEST_SITE_WORDPRESS``'s line, started on
    demand (``wp_test_site/up.sh``: one start at a time per site, the others wait for it);
    under ``CI=true`` a site that cannot start fails the test, otherwise it skips it."""
    site = _read_site(instance)
    detail = ""
    if site is None:
        try:
            done = subprocess.run(
                ["bash", str(UP_SH)],
                cwd=ROOT,
                env={**os.environ, "WP_TEST_SITE_INSTANCE": instance},
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            detail = f" (up.sh exit {done.returncode}: {done.stderr[-2000:]})"
        except (OSError, subprocess.TimeoutExpired) as error:
            detail = f" ({error})"
        site = _read_site(instance)
    if site is None:
        message = "no WordPress test site available: bash wp_test_site/up.sh failed" + detail
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return site


@pytest.fixture(scope="session")
def shared_wp_site() -> dict:
    """The test WordPress every ordinary test shares (:data:`support.SITE_JSON`): several
    pytest processes use it at once, each test with its own job ids."""
    return _site("")


@pytest.fixture(scope="session")
def exclusive_wp_site() -> dict:
    """A second test WordPress of the same line (``WP_TEST_SITE_INSTANCE=exclusive``) for the
    tests that change the whole site, so that no ordinary test waits for them."""
    return _site(EXCLUSIVE)


@pytest.fixture
def wp_site(request) -> dict:
    """The test WordPress for this test: :func:`exclusive_wp_site` for a test that changes the
    whole site (:func:`changes_the_whole_site`), else :func:`shared_wp_site`."""
    if changes_the_whole_site(request.node):
        return request.getfixturevalue("exclusive_wp_site")
    return request.getfixturevalue("shared_wp_site")


@pytest.fixture(autouse=True)
def _site_access(request):
    """A test that changes the whole site holds its site's lock alone (``flock`` on a file in
    the site's runtime folder: the passes side by side share the site) and must leave the
    companion plugin, the timezone and the posts' title charset as it found them. Ordinary
    tests take no lock: nothing they share changes under them."""
    if "wp_site" not in request.fixturenames or not changes_the_whole_site(request.node):
        yield
        return
    site = request.getfixturevalue("wp_site")
    runtime = site_runtime(site["instance"])
    runtime.mkdir(parents=True, exist_ok=True)
    with open(runtime / "tests.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            before = site_state(site)
            yield
            after = site_state(site)
            assert after == before, f"the test left its site changed: {before} -> {after}"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- ledger and app


@pytest.fixture
def ledger_url(tmp_path):
    """A fresh ledger per test: SQLite in tmp_path, or a fresh PostgreSQL database when
    ``GATEWAY_TEST_DATABASE_URL`` names a server."""
    base = os.environ.get("GATEWAY_TEST_DATABASE_URL")
    if not base:
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
        return
    import psycopg2
    from psycopg2 import sql

    name = f"gw_test_{uuid.uuid4().hex}"
    admin = psycopg2.connect(base)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield urlunsplit(urlsplit(base)._replace(path="/" + name))
        if database.obj is not None and not database.is_closed():  # unbound: no app fixture
            database.close()
        with admin.cursor() as cur:
            cur.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
    finally:
        admin.close()


@pytest.fixture
def app(ledger_url):
    application = gateway.create_app(
        {
            "database_url": ledger_url,
            "secret_key": SECRET_KEY,
            "wp_timeout": 20.0,
            "inflight_window": 2.0,
        }
    )
    yield application
    if not database.is_closed():
        database.close()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def transport(request) -> str:
    """The site's WordPress transport: ``rest`` unless a test is parametrised with
    :data:`both_transports`."""
    return getattr(request, "param", "rest")


@pytest.fixture
def gw(app, client, wp_site, transport) -> Gateway:
    """The gateway, with the tenant's site pointing straight at the test WordPress."""
    return Gateway(app, client, wp_site, transport=transport)


@pytest.fixture
def no_companion(wp_site):
    """The companion plugin deactivated for one test (reactivated afterwards, also on
    failure), so the no-plugin case runs against the real WordPress."""
    assert switch_companion("off", wp_site) == "inactive"
    try:
        yield
    finally:
        assert switch_companion("on", wp_site) == "active"


@pytest.fixture
def offline_gw(app, client) -> Gateway:
    """The gateway for tests that never reach WordPress (validation, auth, job rows)."""
    return Gateway(app, client, OFFLINE_SITE)


@pytest.fixture
def proxy(wp_site):
    """A :class:`FaultProxy` in front of the test WordPress."""
    with FaultProxy(upstream=wp_site["url"], timeout=30) as fault_proxy:
        yield fault_proxy


@pytest.fixture
def gwp(app, client, wp_site, proxy, transport) -> Gateway:
    """The gateway with the tenant's site registered at the fault proxy's URL."""
    return Gateway(app, client, wp_site, url=proxy.url, transport=transport)


# --------------------------------------------------------------------------- real server


@pytest.fixture
def gateway_server(wp_site, ledger_url, tmp_path, transport, request):
    """``gateway serve --workers 2`` (two processes: the fewest that race each other) on a
    free port, site (over ``transport``) and token registered by the command line, run
    in-process (:func:`support.gateway_cli`). Indirect parametrization adds environment
    variables (``{"GATEWAY_TOKEN_RATE": ...}``)."""
    env = {
        **os.environ,
        "GATEWAY_DATABASE_URL": ledger_url,
        "GATEWAY_SECRET_KEY": SECRET_KEY,
        "GATEWAY_WP_TIMEOUT": "10",
        AUTHOR_PASSWORD_ENV: wp_site["users"]["author"]["app_password"],
        **getattr(request, "param", {}),
    }
    command = gateway_command()
    gateway_cli_ok(["init-db"], env)
    gateway_cli_ok(
        [
            "sites", "add", "--tenant", TENANT, "--name", SITE_NAME, "--url", wp_site["url"],
            "--username", wp_site["users"]["author"]["username"],
            "--app-password-env", AUTHOR_PASSWORD_ENV, "--transport", transport,
        ],
        env,
    )  # fmt: skip
    token = gateway_cli_ok(
        ["tokens", "create", "--tenant", TENANT, "--role", "workflow", "--name", "n8n"], env
    )
    token = token.strip().splitlines()[-1]
    port = free_port()
    log_path = tmp_path / "gateway-serve.log"
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen(
            [*command, "serve", "--port", str(port), "--workers", "2", "--sweep-interval", "0"],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = GatewayServer(f"http://127.0.0.1:{port}", token, process, log_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                pytest.fail(f"gateway serve exited with {process.returncode}:\n{server.log()}")
            try:
                if requests.get(server.url + "/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"gateway serve did not answer /healthz:\n{server.log()}")
            time.sleep(0.2)
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)  # its own session: master and workers
                process.wait(timeout=10)
