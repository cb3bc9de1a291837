"""Logs, metrics and TLS as an operator sees them: a real ``gateway serve`` with 2 workers
writes one JSON line per request and per WordPress call (request id echoed, never a secret),
its ``/metrics`` counts every worker's requests whichever worker answers, ``/metrics`` can
require a bearer token, the token rate limit holds across workers, and behind a TLS proxy the
review cookie is ``Secure`` and forwarded client addresses are trusted only for N hops."""

from __future__ import annotations

import json
import logging
import re

import pytest
import requests
from support import TENANT
from support import both_transports
from support import draft_body
from support import new_job_id
from support import op_key

from gateway.operator import metrics

METRICS_TOKEN = "metrics-secret-for-tests"


def _sample(text: str, name: str, **labels) -> float:
    """The value of one sample in the Prometheus text format (0 when absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name) : line.rindex("}") + 1]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _scrape(server) -> str:
    answer = requests.get(
        server.url + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30
    )
    assert answer.status_code == 200, answer.text
    return answer.text


@pytest.mark.wordpress
@pytest.mark.parametrize(
    "gateway_server",
    [{"GATEWAY_METRICS_TOKEN": METRICS_TOKEN, "GATEWAY_TOKEN_RATE": "6/3600"}],
    indirect=True,
)
@both_transports
def test_served_gateway_logs_json_counts_every_worker_and_limits_a_token(
    gateway_server, wp_site, transport
):
    """Over either transport: an XML-RPC call is logged and counted as a REST one, its
    method name (``wp.newPost``) standing for the HTTP method and ``/xmlrpc.php`` for the
    route."""
    server = gateway_server
    create = ("wp.newPost", "/xmlrpc.php") if transport == "xmlrpc" else ("POST", "/wp/v2/posts")
    job_id = new_job_id()
    auth = server.headers()
    created = requests.put(
        f"{server.url}/v1/jobs/{job_id}",
        json={"site": "blog", "task_version": 1},
        headers={**auth, "X-Request-Id": "req-from-n8n-1"},
        timeout=60,
    )
    assert created.status_code == 201 and created.headers["X-Request-Id"] == "req-from-n8n-1"
    draft = requests.put(f"{server.url}/v1/jobs/{job_id}/draft", json=draft_body(), headers=auth)
    assert draft.status_code == 201, draft.text
    made_id = draft.headers["X-Request-Id"]
    assert re.fullmatch(r"[0-9a-f]{32}", made_id)

    # /metrics: closed without the token; the same figures whichever worker answers
    assert requests.get(server.url + "/metrics", timeout=30).status_code == 401
    before = _scrape(server)
    for _ in range(12):  # a new connection each: spread over the workers
        assert requests.get(server.url + "/healthz", timeout=30).status_code == 200
    after = _scrape(server)
    labels = dict(route="/healthz", method="GET", status="200")
    total = "gateway_http_requests_total"
    assert _sample(after, total, **labels) - _sample(before, total, **labels) == 12
    assert _sample(after, "gateway_http_request_duration_seconds_count", **labels) >= 12
    draft_labels = dict(route="/v1/jobs/<job_id>/draft", method="PUT", status="201")
    assert _sample(after, total, **draft_labels) == 1
    assert _sample(after, "gateway_wordpress_calls_total", method=create[0], outcome="ok") >= 1
    assert _sample(after, "gateway_wordpress_call_duration_seconds_count", outcome="ok") >= 2
    assert _sample(after, "gateway_operations", state="CONFIRMED", action="draft") == 1

    # 6 requests per hour for this token, counted in the ledger across the workers
    statuses = [
        requests.get(f"{server.url}/v1/jobs/{job_id}", headers=auth, timeout=30).status_code
        for _ in range(5)
    ]
    assert statuses == [200, 200, 200, 200, 429]

    lines = [line for line in server.log_path.read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is one JSON document
    mine = [r for r in records if r.get("request_id") == "req-from-n8n-1"]
    assert [r["message"] for r in mine] == ["request"]
    # one line per request: no second (access-log) line for it, with or without a request id
    about_it = [line for line in lines if re.search(f"PUT.*/v1/jobs/{job_id}(?![/\\w])", line)]
    assert len(about_it) == 1, about_it
    assert (
        mine[0]
        | {
            "tenant": TENANT,
            "job_id": job_id,
            "route": "/v1/jobs/<job_id>",
            "path": f"/v1/jobs/{job_id}",
            "status": 201,
        }
        == mine[0]
    )
    drafted = [r for r in records if r.get("request_id") == made_id]
    calls = [r for r in drafted if r["message"] == "wordpress call"]
    assert {" ".join(create)} <= {f"{c['wp_method']} {c['wp_route']}" for c in calls}
    assert all(c["operation_key"] == op_key(job_id, "draft") for c in calls)
    line = next(r for r in drafted if r["message"] == "request")
    assert line["operation_key"] == op_key(job_id, "draft")
    assert line["status"] == 201 and line["wordpress_status"] == 200  # the read-back
    assert isinstance(line["duration_ms"], float) and "time" in line
    text = "\n".join(lines)
    for secret in (server.token, wp_site["users"]["author"]["app_password"], METRICS_TOKEN):
        assert secret not in text
    assert "Gateway test post" not in text  # no body


def test_metrics_in_one_process_and_the_request_id_rules(offline_gw):
    answer = offline_gw.client.get("/healthz", headers={"X-Request-Id": "bad id with spaces"})
    assert re.fullmatch(r"[0-9a-f]{32}", answer.headers["X-Request-Id"])
    scraped = offline_gw.client.get("/metrics").get_data(as_text=True)
    assert _sample(scraped, "gateway_http_requests_total", route="/healthz") >= 1
    assert metrics.MULTIPROCESS_DIR == "PROMETHEUS_MULTIPROC_DIR"


def _sign_in(client, token: str):
    page = client.get("/review/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    return client.post("/review/login", data={"token": token, "csrf_token": csrf})


@pytest.mark.parametrize("public_url, secure", [("https://gw.example", True), ("", False)])
def test_review_cookie_is_secure_behind_https(ledger_url, public_url, secure):
    from support import OFFLINE_SITE
    from support import Gateway

    import gateway

    app = gateway.create_app({"database_url": ledger_url, "public_url": public_url})
    gw = Gateway(app, app.test_client(), OFFLINE_SITE)
    answer = _sign_in(gw.client, gw.make_token("editor"))
    assert answer.status_code == 303
    assert ("; Secure" in answer.headers["Set-Cookie"]) is secure


@pytest.mark.parametrize("hops, client", [(1, "203.0.113.9"), (0, "127.0.0.1")])
def test_proxy_hops_decide_whose_forwarded_address_is_logged(ledger_url, caplog, hops, client):
    import gateway

    app = gateway.create_app({"database_url": ledger_url, "proxy_hops": hops})
    with caplog.at_level(logging.INFO, logger="gateway.http"):
        answer = app.test_client().get(
            "/healthz", headers={"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"}
        )
    assert answer.status_code == 200
    line = next(r for r in caplog.records if r.getMessage() == "request")
    assert line.client == client
