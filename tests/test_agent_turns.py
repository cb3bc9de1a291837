"""The agent worker's turns between tenants (issue 40, item 5): the poll's batch is shared
round robin between tenants, so one tenant's backlog of due sessions never keeps another
tenant's session out of a pass."""

from __future__ import annotations

import agent_support
from agent_support import bind
from agent_support import run_worker
from support import SECRET_KEY
from support import SITE_NAME
from support import new_job_id

from gateway.agents import tools
from gateway.ledger.db import database
from gateway.tenancy import sites

# The agent tests' fixtures (agent_support.py): the OpenAI stand-in and the app bound to it.
standin = agent_support.standin
app = agent_support.app

RIVAL = "rival"


def _configure(gw, **overrides) -> None:
    gw.app.config["GATEWAY"] = gw.app.config["GATEWAY"].with_overrides(**overrides)


def _retrieved(standin, sids, before: int | None = None) -> set[str]:
    """The sessions of ``sids`` the worker retrieved (among the stand-in's first ``before``
    requests)."""
    log = standin.log[:before]
    return {s for s in sids for r in log if r["method"] == "GET" and r["path"].endswith(s)}


def test_the_poll_batch_is_shared_round_robin_between_tenants(offline_gw, standin):
    """With GATEWAY_AGENT_POLL_BATCH=2, rival's three sessions bound first and acme's one
    after: the pass retrieves rival's oldest and acme's (before: rival's two oldest, acme's
    waiting for rival's backlog), and the next pass rival's other two."""
    gw = offline_gw
    _configure(gw, agent_poll_batch=2, agent_stale_after=3600.0)  # retrieved: not due again
    rival_token = gw.make_token("workflow", tenant=RIVAL)
    with gw.app.app_context(), database.connection_context():
        sites.add_site(SECRET_KEY, RIVAL, SITE_NAME, gw.wp_url, "author", "a b c d e f")

    def bound(token=None) -> str:
        sid = standin.create_session(tools=tools.definitions())
        assert bind(gw, new_job_id(), sid, token=token).status_code == 201
        return sid

    rival = [bound(rival_token) for _ in range(3)]
    acme = bound()
    counts = run_worker(gw.app)
    assert counts["sessions"] == 2
    assert _retrieved(standin, [*rival, acme]) == {rival[0], acme}
    run_worker(gw.app)
    assert _retrieved(standin, [*rival, acme]) == {*rival, acme}
