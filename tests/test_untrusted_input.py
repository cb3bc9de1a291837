"""What a stranger or a broken client can send (issue 29): a lone surrogate in any text field,
a flood of calls without a valid token, a path that would forge a log line, and an open
``/metrics``. Nothing here reaches WordPress; the ledger is a real one per test."""

from __future__ import annotations

import io
import json
import logging
import uuid

import pytest
from support import DriverStatements
from support import metric_value
from support import new_job_id
from support import problem_slug

from gateway.api import contract
from gateway.core import logs
from gateway.core import validation
from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import EditorSession

SURROGATE = "x\ud800y"  # JSON "x\ud800y": a lone high surrogate, not a Unicode scalar value


def _string_paths(schema: dict, path: list) -> list[list]:
    """Every place in ``schema`` (properties, array items, free objects) a string can go."""
    if "$ref" in schema and schema["$ref"].endswith("/text.json"):
        return [path]
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    found = [path] if "string" in kinds or "enum" in schema or "pattern" in schema else []
    for name, member in (schema.get("properties") or {}).items():
        found += _string_paths(member, [*path, name])
    if isinstance(schema.get("items"), dict):
        found += _string_paths(schema["items"], [*path, 0])
    if "object" in kinds and not schema.get("properties"):
        found.append([*path, "free"])  # a value of a free-form object (checkpoint data)
    return found


def _body_at(path: list, value):
    if not path:
        return value
    head, rest = path[0], path[1:]
    return [_body_at(rest, value)] if head == 0 else {head: _body_at(rest, value)}


def _text_fields() -> list[tuple[str, str, list]]:
    cases = []
    for route, promise in contract.OPERATIONS.items():
        if not promise.body or promise.body == "empty" or not route.startswith(("PUT", "POST")):
            continue
        for path in _string_paths(validation.schema(promise.body), []):
            cases.append((route, promise.body, path))
    return cases


TEXT_FIELDS = _text_fields()


def test_the_cases_cover_the_fields_the_probe_named():
    named = {(body, "/".join(map(str, path))) for _, body, path in TEXT_FIELDS}
    for expected in (
        ("cancel", "reason"),
        ("lease", "owner"),
        ("job", "site"),
        ("job", "session_id"),
        ("checkpoint", "artifacts/0/uri"),
        ("checkpoint", "data/free"),
        ("draft", "title"),
        ("notification", "reason"),
    ):
        assert expected in named, expected


@pytest.mark.parametrize(
    ("route", "body", "path"),
    TEXT_FIELDS,
    ids=[f"{b}:/{'/'.join(map(str, p))}" for _, b, p in TEXT_FIELDS],
)
def test_a_lone_surrogate_in_any_text_field_is_422_with_its_pointer(offline_gw, route, body, path):
    """Issue 29, row 6: ``{"reason": "x\\ud800y"}`` was a 500 (SQLite's UnicodeEncodeError)."""
    gw = offline_gw
    job_id = new_job_id()
    assert gw.put_job(job_id).status_code == 201
    method, template = route.split(" ", 1)
    url = template.replace("{job_id}", job_id).replace("{slot}", "hero").replace("{name}", "b")
    url = url.replace("{review_id}", "1").replace("{approval_id}", "1")
    raw = json.dumps(_body_at(path, SURROGATE))  # ensure_ascii: the \ud800 escape itself
    pointer = validation._pointer(path)
    answers = []
    for role in ("workflow", "editor", "admin"):
        token = gw.token if role == "workflow" else gw.make_token(role)
        answer = gw.client.open(
            url, method=method, data=raw, content_type="application/json",
            headers=gw.headers(token),
        )  # fmt: skip
        answers.append(answer.status_code)
        if answer.status_code != 403:
            break
    assert answer.status_code == 422, (answers, answer.get_json())
    problem = answer.get_json()
    assert problem_slug(answer) == "validation-failed"
    assert problem["errors"] == [
        {
            "pointer": pointer,
            "message": "a lone UTF-16 surrogate (U+D800-U+DFFF) is not text and cannot be stored",
        }
    ]


def test_a_lone_surrogate_in_a_member_name_is_refused_too(offline_gw):
    gw, job_id = offline_gw, new_job_id()
    assert gw.put_job(job_id).status_code == 201
    raw = '{"phase": "sources_collected", "artifacts": [], "data": {"k\\udc00": 1}}'
    answer = gw.client.post(
        f"/v1/jobs/{job_id}/checkpoints", data=raw, content_type="application/json",
        headers=gw.headers(),
    )  # fmt: skip
    assert answer.status_code == 422
    assert answer.get_json()["errors"][0]["pointer"] == "/data/k\ufffd"  # UTF-8 can't say it


# --------------------------------------------------------------------------- no token


def _writes(statements: list[str]) -> list[str]:
    return [s for s in statements if s.lstrip().split(" ", 1)[0].upper() in WRITES]


WRITES = {"INSERT", "UPDATE", "DELETE", "REPLACE", "UPSERT"}


def test_200_calls_without_a_valid_token_write_nothing_and_are_limited_per_address(
    offline_gw, ledger_url
):
    """Issue 29, row 7: 50 cookie-less sign-in pages, 50 sign-ins with an unknown token, 60
    API calls with a bad token (the token rate limit on) and 40 without one, all from one
    address: not one ledger write (no ``editor_session`` row, no counter); past
    GATEWAY_UNAUTHENTICATED_RATE (30 a minute) they are 429 with Retry-After; all counted in
    the metrics. A sign-in that succeeds then makes exactly one session row."""
    gw = offline_gw
    gw.app.config["GATEWAY"] = gw.app.config["GATEWAY"].with_overrides(token_rate=(1000, 60))
    address = f"2001:db8::{uuid.uuid4().hex[:4]}"  # this test's own client address
    environ = {"REMOTE_ADDR": address}
    scrape = gw.client.get("/metrics").get_data(as_text=True)
    before = {a: metric_value(scrape, "gateway_unauthenticated_calls_total", answer=a)
              for a in ("refused", "limited")}  # fmt: skip
    driver = DriverStatements()  # every statement, counted at the database driver
    db.bind(ledger_url, **driver.options(ledger_url))  # the same ledger
    statuses = []
    for _ in range(50):
        page = gw.app.test_client().get("/review/login", environ_base=environ)
        statuses.append(page.status_code)
    browser = gw.app.test_client()
    form_page = browser.get("/review/login", environ_base=environ).get_data(as_text=True)
    csrf = form_page.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    for _ in range(50):
        answer = browser.post(
            "/review/login", data={"token": "nope", "csrf_token": csrf}, environ_base=environ
        )
        statuses.append(answer.status_code)
    for index in range(100):
        headers = {"Authorization": "Bearer wrong"} if index < 60 else {}
        answer = gw.client.get("/v1/jobs", headers=headers, environ_base=environ)
        statuses.append(answer.status_code)
        if answer.status_code == 429:
            assert problem_slug(answer) == "unauthenticated-rate-limited"
            assert 1 <= int(answer.headers["Retry-After"]) <= 60
    seen = list(driver.log)
    assert seen and _writes(seen) == []
    assert statuses[:50] == [200] * 50
    assert statuses[50:].count(401) == 30 and statuses[50:].count(429) == 120, statuses
    with gw.app.app_context(), database.connection_context():
        assert EditorSession.select().count() == 0
    scrape = gw.client.get("/metrics").get_data(as_text=True)
    after = {a: metric_value(scrape, "gateway_unauthenticated_calls_total", answer=a)
             for a in ("refused", "limited")}  # fmt: skip
    assert after["refused"] - before["refused"] == 30
    assert after["limited"] - before["limited"] == 120

    # a valid token from the same address is never limited, and signing in stores one row
    assert gw.client.get("/v1/jobs", headers=gw.headers(), environ_base=environ).status_code == 200
    editor = gw.make_token("editor")
    other = {"REMOTE_ADDR": "192.0.2.1"}
    browser = gw.app.test_client()
    form_page = browser.get("/review/login", environ_base=other).get_data(as_text=True)
    csrf = form_page.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
    signed = browser.post(
        "/review/login", data={"token": editor, "csrf_token": csrf}, environ_base=other
    )
    assert signed.status_code == 303
    with gw.app.app_context(), database.connection_context():
        assert EditorSession.select().count() == 1
    assert browser.get("/review", environ_base=other).status_code == 200


# --------------------------------------------------------------------------- logs, metrics


@pytest.fixture
def text_log():
    """The root logger writing text lines to a buffer (restored afterwards)."""
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    buffer = io.StringIO()
    logs.configure("text", buffer)
    yield buffer
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved:
        root.addHandler(handler)
    root.setLevel(level)


def test_a_path_cannot_forge_a_text_log_line(offline_gw, text_log):
    """Issue 29, row 8: ``--log-format text`` escapes control characters in every field."""
    forged = "[2026-12-01 00:00:00 +0000] [1] [INFO] gateway.http: request status=200"
    path = "/v1/jobs/x%0A" + forged.replace(" ", "%20") + "%0D%1B[31m"
    assert offline_gw.client.get(path, headers=offline_gw.headers()).status_code in (404, 422)
    lines = text_log.getvalue().splitlines()
    assert lines, "nothing was logged"
    assert not [line for line in lines if line.startswith("[2026-12-01 00:00:00 +0000]")]
    request_line = next(line for line in lines if "gateway.http: request" in line)
    assert "path=/v1/jobs/x\\n[2026-12-01" in request_line
    assert "\\r\\x1b[31m" in request_line and "\x1b" not in text_log.getvalue()


def test_an_open_metrics_endpoint_names_no_tenant(offline_gw):
    """Design gap of issue 29: without GATEWAY_METRICS_TOKEN, ``/metrics`` lists every
    tenant's name. Now the tenant label is summed away unless the token is required."""
    gw, job_id = offline_gw, new_job_id()
    assert gw.put_job(job_id).status_code == 201
    stranger = gw.make_token("workflow", tenant="rival-corp")
    assert gw.client.get(f"/v1/jobs/{job_id}", headers=gw.headers(stranger)).status_code == 404
    open_text = gw.client.get("/metrics").get_data(as_text=True)
    assert "acme" not in open_text and "rival-corp" not in open_text
    assert metric_value(open_text, "gateway_tenant_unauthorized_calls_total") == 1
    assert metric_value(open_text, "gateway_operations", action="draft", state="x") == 0
    gw.app.config["GATEWAY"] = gw.app.config["GATEWAY"].with_overrides(metrics_token="m-token")
    assert gw.client.get("/metrics").status_code == 401
    closed = gw.client.get("/metrics", headers={"Authorization": "Bearer m-token"})
    text = closed.get_data(as_text=True)
    assert metric_value(text, "gateway_tenant_unauthorized_calls_total", tenant="rival-corp") == 1
