"""Shared helpers of the agent-session tests: an app wired to the OpenAI stand-in, binding a
session to a job, running the worker in-process or as a ``gateway worker`` process."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
from support import SECRET_KEY
from support import SITE_NAME
from support import gateway_command

import gateway
from gateway.agents import worker
from gateway.ledger.db import database
from gateway_tools.openai_standin import OpenAIStandIn


def agent_app(ledger_url: str, standin, **overrides):
    """The app of the tests, connected to ``standin`` (key, base URL, webhook secret)."""
    return gateway.create_app(
        {
            "database_url": ledger_url,
            "secret_key": SECRET_KEY,
            "wp_timeout": 20.0,
            "inflight_window": 2.0,
            "openai_api_key": standin.api_key,
            "openai_base_url": standin.base_url,
            "openai_webhook_secret": standin.webhook_secret,
            "agent_stale_after": 0.0,
            "agent_retry_after": 0.0,
            **overrides,
        }
    )


def bind(gw, job_id: str, session_id: str, task_version: int = 1, token=None):
    """``PUT /v1/jobs/{job_id}`` with the session."""
    return gw.client.put(
        f"/v1/jobs/{job_id}",
        json={"site": SITE_NAME, "task_version": task_version, "session_id": session_id},
        headers=gw.headers(token),
    )


def run_worker(app) -> dict:
    """One in-process worker pass."""
    with app.app_context(), database.connection_context():
        return worker.run_once(app.config["GATEWAY"])


def worker_process(ledger_url: str, standin, crash_point: str = "") -> subprocess.CompletedProcess:
    """``gateway worker --once`` as its own process (SIGKILLs itself at ``crash_point``)."""
    env = {
        **os.environ,
        "GATEWAY_DATABASE_URL": ledger_url,
        "GATEWAY_SECRET_KEY": SECRET_KEY,
        "GATEWAY_WP_TIMEOUT": "10",
        "GATEWAY_OPENAI_API_KEY": standin.api_key,
        "GATEWAY_OPENAI_BASE_URL": standin.base_url,
        "GATEWAY_AGENT_STALE_AFTER": "0.001",
        "GATEWAY_AGENT_RETRY_AFTER": "0.001",
        "GATEWAY_AGENT_LEASE_SECONDS": "2",
        "GATEWAY_CRASH_POINTS": crash_point,
    }
    return subprocess.run(
        [*gateway_command(), "worker", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def worker_until(ledger_url: str, standin, done, tries: int = 10) -> dict:
    """Run ``gateway worker --once`` until ``done()`` (a crashed worker's lease has to expire
    first: ``GATEWAY_AGENT_LEASE_SECONDS=2``). Returns the last pass's counts."""
    for _ in range(tries):
        finished = worker_process(ledger_url, standin)
        assert finished.returncode == 0, finished.stderr[-2000:]
        counts = json.loads(finished.stdout.strip().splitlines()[-1])
        if done():
            return counts
        time.sleep(1)
    raise AssertionError(f"not done after {tries} worker passes: {counts}")


def tool_output(standin, session_id: str, call_id: str) -> dict:
    """The one tool_result event accepted for ``call_id``."""
    found = [e for e in standin.events(session_id, "agent.session.input.tool_result")]
    found = [e for e in found if e["call_id"] == call_id]
    assert len(found) == 1, found
    return found[0]


# Fixtures of the agent tests (imported by their modules, which pytest then offers them in):
# the OpenAI stand-in, and the app bound to it on the test's own ledger.
@pytest.fixture
def standin():
    """A running OpenAI Agents-API stand-in (:mod:`gateway_tools.openai_standin`)."""
    with OpenAIStandIn() as service:
        yield service


@pytest.fixture
def app(ledger_url, standin):
    """The gateway app on the test's ledger, its OpenAI client pointed at :func:`standin`."""
    application = agent_app(ledger_url, standin)
    yield application
    if not database.is_closed():
        database.close()
