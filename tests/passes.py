"""Which tests each CI pass runs, and why (``scripts/test.sh``; docs/testing.md "The passes").

The SQLite pass runs the whole suite but the soak (which runs once, below). The two other
matrix passes run the tests whose outcome can differ on their axis:

* ``dialect`` (the PostgreSQL pass): every test **unless** its module is listed in
  :data:`NOT_DIALECT`, with the reason its outcome cannot depend on the ledger's SQL dialect;
  and, in a listed module, still every test that races writers (it uses a served gateway of
  several processes, threads or a barrier: :func:`races_writers`), checks the SQL itself, or
  migrates a schema. A new module runs in the pass until someone says why it need not.
* ``wordpress_version`` (the WordPress 6.1 pass): every test that uses the test WordPress
  **unless** its module is listed in :data:`NOT_WORDPRESS_VERSION`, with the reason its outcome
  cannot depend on WordPress's version (it reaches WordPress only through the actions and the
  client whose own tests run in that pass). A new module that uses WordPress runs there too.

The soak and the fuzzers run once per run: the soak (marker ``soak``) in the PostgreSQL pass,
whose several gateway processes on one ledger are its deployment (it makes a PostgreSQL cluster
of its own, which its nemesis kills; the SQLite pass leaves it out with ``-m "not soak"``); the
fuzzers in the SQLite pass (``sqlite_pass``, test_fuzz's docstring).

``browser`` marks every test that drives a headless Chromium (it uses a fixture of
:data:`BROWSER_FIXTURES`): ``scripts/test.sh --quick`` leaves them out, since only the whole
suite's setup installs Chromium; every CI pass that selects such a test runs it.

``tests/test_passes.py`` keeps the tables honest: every listed module exists, and every test
a listed module holds that races writers is still selected.
"""

from __future__ import annotations

import inspect
import re

# Module (file name without .py) -> why no outcome in it depends on the ledger's SQL dialect.
NOT_DIALECT = {
    "test_action_recovery": "a lookup per action against WordPress; the rows' moves are "
    "test_transitions' (both dialects)",
    "test_answers": "pure classification of upstream answers, no ledger",
    "test_api_docs": "documents against the OpenAPI document, no ledger",
    "test_api_edges": "authentication, roles and validation answered before any claim",
    "test_cli": "the operator's commands; their SQL is the ledger modules' (test_migrations, "
    "test_retention run on both)",
    "test_cli_help": "help texts, no ledger",
    "test_cli_problems": "one-line problems for bad arguments, before any SQL",
    "test_companion_plugin": "the companion plugin against WordPress, no ledger",
    "test_compose": "docker-compose.yml parsed, no ledger",
    "test_config": "settings parsed, no ledger",
    "test_doctor": "checks of the WordPress site, not of the ledger",
    "test_fault_proxy": "the fault proxy against a local upstream, no ledger",
    "test_faults": "WordPress faults through the fault proxy; one request at a time, the "
    "moves are test_transitions'",
    "test_hosts": "hosts in front of WordPress through the fault proxy; one request at a "
    "time, the moves are test_transitions' and the new column test_migrations' (both)",
    "test_input_rows": "refused before any ledger row (asserted: no row)",
    "test_layers": "imports, no ledger",
    "test_logic": "pure logic, no ledger",
    "test_media_doors": "one parser at every door, before any claim",
    "test_media_url": "downloads refused or taken before any claim",
    "test_mcp": "a door: the same HTTP routes through the MCP SDK's clients",
    "test_mcp_clients": "a door: clients' deviations undone before the same HTTP routes",
    "test_mcp_oauth_e2e": "one served gateway on its own SQLite ledger in every pass; the "
    "OAuth store's SQL and races run in test_oauth_store (both dialects)",
    "test_mcp_races": "a door: racing MCP calls waited out on the MCP side, the same HTTP routes",
    "test_mcp_schemas": "advertised schemas and third-party MCP clients, the same HTTP routes",
    "test_mcp_transports": "MCP revisions and transports over the same HTTP routes",
    "test_n8n_node": "a door: n8n calls the HTTP routes (SQLite, both n8n lines)",
    "test_n8n_real": "a door: n8n calls the HTTP routes (SQLite, both n8n lines)",
    "test_n8n_static": "workflow files and the OpenAPI document, no ledger query",
    "test_openai_answers": "one classifier's verdicts; the moves are test_transitions'",
    "test_openapi": "the document, no ledger",
    "test_origins": "who answered (the WordPress client's classification), one request at a time",
    "test_post_updates": "what WordPress stores on a version bump, one request at a time",
    "test_readme": "the README's commands as a newcomer runs them, on the default ledger",
    "test_refusals": "WordPress's 404 classified, one request",
    "test_registries": "in-memory registries, no ledger",
    "test_review_page": "the browser's path through the page; the page's queries run in "
    "test_hardening (both dialects)",
    "test_scheduling": "WordPress's cron and the post's date, one request at a time",
    "test_scripts": "shell scripts' output, no ledger",
    "test_secrets_canary": "what is logged and answered, one process",
    "test_soak_checker": "the soak's checker and schedule on made-up histories, no ledger",
    "test_state_names": "a scan of gateway/'s source for spelled states, no ledger",
    "test_tenant_shares": "the fair shares' in-memory counters, no ledger",
    "test_terms": "categories and tags in WordPress, one request at a time",
    "test_transports": "XML-RPC and REST on the wire, one request at a time",
    "test_unreadable_objects": "reconciliation's verdict on what WordPress answers, one request "
    "at a time; the moves are test_transitions'",
    "test_untrusted_input": "refused before any ledger row",
    "test_validation_differential": "two validators compared, no ledger",
    "test_walkthrough": "the walkthrough's commands on the default ledger",
    "test_wordpress_network": "the REST client's network path, no ledger",
}

# Module -> why its outcome cannot depend on WordPress's version.
NOT_WORDPRESS_VERSION = {
    "test_editors_desk": "the desk's pages; WordPress only through the actions and the "
    "client (their tests run in that pass) and test_review_page's helpers",
    "test_agent_recovery": "a door: agent sessions reach WordPress through the actions",
    "test_agent_webhooks": "a door: OpenAI webhooks; WordPress only through the actions",
    "test_agents": "a door: tool calls reach WordPress through the actions",
    "test_agent_turns": "the agent worker's order of work; WordPress only through the actions",
    "test_api_edges": "answered without WordPress",
    "test_backpressure": "budgets and slots in the gateway, before WordPress",
    "test_cli": "the operator's commands; their WordPress calls are the actions' and doctor's",
    "test_crash_walk": "crash points between ledger commits; each action's lookup runs in "
    "test_action_recovery on both lines",
    "test_fairness": "shares in the gateway, before WordPress",
    "test_fuzz": "once per run, in the SQLite pass: its answers (never a 500) are the "
    "gateway's, before or after the same actions",
    "test_input_rows": "refused before WordPress (asserted: no WordPress call)",
    "test_job_changes": "the gateway's change feed",
    "test_ledger_faults": "the ledger's faults, no WordPress call (asserted)",
    "test_lone_tenant": "once per run, in the SQLite pass: one tenant's load against the "
    "fair shares, in the gateway before WordPress",
    "test_mcp": "a door: MCP tools reach WordPress through the actions",
    "test_mcp_clients": "a door: deviating clients reach WordPress through the actions",
    "test_mcp_oauth_e2e": "a door: OAuth-signed MCP tools reach WordPress through the actions",
    "test_mcp_races": "a door: racing MCP calls reach WordPress through the actions",
    "test_mcp_schemas": "a door: strict clients reach WordPress through the actions",
    "test_mcp_transports": "a door: each MCP revision reaches WordPress through the actions",
    "test_never_sent": "the request dies before WordPress; its retry is an ordinary draft "
    "or media write, whose WordPress calls run on both lines in test_actions",
    "test_notifications": "the gateway's notifications to a local receiver",
    "test_observability": "logs and metrics of the gateway",
    "test_phase_moves": "a job's phase decided in the ledger; the draft, approval and publish "
    "calls are the actions' (test_editorial runs on both lines)",
    "test_readme": "the README's commands; their WordPress calls are the main job's",
    "test_request_keys": "clients' request keys answered by the ledger",
    "test_retention": "pruning the ledger",
    "test_review_race": "one decision claimed in the ledger; the adoption's WordPress calls "
    "run in test_ownership on both lines",
    "test_review_page": "a browser on the gateway's page; the decisions' WordPress calls run "
    "in test_editorial on both lines",
    "test_secrets_canary": "what the gateway logs and answers",
    "test_soak": "once per run, in the PostgreSQL pass",
    "test_walkthrough": "the walkthrough's commands; their WordPress calls are the main job's",
}

# The fixtures that start Chromium (``support.chromium_driver``); tests/test_passes.py finds
# every function that calls it named here.
BROWSER_FIXTURES = frozenset({"browser", "chromium"})

_RACES = re.compile(
    r"\bgateway_server\b|\bServers?\b|\bservers\.|threading|ThreadPoolExecutor|Barrier|"
    r"execute_sql|hot_sql|migrat"
)


def races_writers(function) -> bool:
    """Whether a test's own source races writers or checks SQL: a served gateway of several
    processes, threads, a barrier, raw SQL or a migration. Such a test runs in the PostgreSQL
    pass whatever its module's entry in :data:`NOT_DIALECT` says."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return True  # cannot tell: keep it in the pass
    return bool(_RACES.search(source))


def module_of(item) -> str:
    """The test module's name (``test_main_job``) of a collected item."""
    return item.path.stem


def classify(item, uses_wordpress: bool) -> list[str]:
    """The pass markers for one collected test: ``dialect``, ``wordpress_version`` and
    ``browser``."""
    module = module_of(item)
    marks = []
    fixtures = set(getattr(item, "fixturenames", ()))
    if module not in NOT_DIALECT or "gateway_server" in fixtures:
        marks.append("dialect")
    elif races_writers(getattr(item, "function", None)):
        marks.append("dialect")
    if uses_wordpress and module not in NOT_WORDPRESS_VERSION:
        marks.append("wordpress_version")
    if BROWSER_FIXTURES & fixtures:
        marks.append("browser")
    return marks
