"""Fuzzing with schemathesis: every operation of the served ``/openapi.json``, against a real
``gateway serve`` (2 workers) and the real test WordPress, with generated valid and invalid
requests. Asserted for every response: no 500, only statuses the document lists for the
operation, content types and bodies as documented, every error ``application/problem+json``
(the review page's documented HTML pages aside), and no ledger row for a request refused before
its operation is claimed.

Bounded for CI (SQLite pass only; the PostgreSQL pass runs the same code paths elsewhere):
``GATEWAY_FUZZ_EXAMPLES`` examples per operation, 25 by default, within
``GATEWAY_FUZZ_SECONDS`` (180 by default, shared by the two modes): once a mode's half is spent,
each remaining operation gets one example, so a slow machine still reaches every operation
and CI stays near 3 minutes. A longer run: ``GATEWAY_FUZZ_EXAMPLES=500
GATEWAY_FUZZ_SECONDS=3600 .venv/bin/python -m pytest -q -s tests/test_fuzz.py``. Half of the
generated job ids are replaced by a job that exists (with a confirmed draft), so the fuzzer
reaches past ``job-not-found`` into the ledger and WordPress.
"""

from __future__ import annotations

import os
import time

import pytest
import schemathesis
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import content_type_conformance
from schemathesis.specs.openapi.checks import response_headers_conformance
from schemathesis.specs.openapi.checks import response_schema_conformance
from schemathesis.specs.openapi.checks import status_code_conformance
from servers import Server
from support import SECRET_KEY
from support import draft_body

import gateway
from gateway.ledger.db import database
from gateway.ledger.models import Operation

EXAMPLES = int(os.environ.get("GATEWAY_FUZZ_EXAMPLES", "25"))
SECONDS = float(os.environ.get("GATEWAY_FUZZ_SECONDS", "180"))
KNOWN_JOB = "fuzz-known-job"
# Refused before any ledger claim: such an answer must leave the ledger as it was.
BEFORE_CLAIM = {
    "invalid-json",
    "validation-failed",
    "unauthenticated",
    "forbidden",
    "job-not-found",
    "not-found",
    "method-not-allowed",
    "payload-too-large",
    "unsupported-media-type",
    "site-not-found",
    "lease-required",
    "stale-fencing-token",
    "job-cancelled",
    "rate-limited",
    "media-not-ready",
    "artifact-digest-mismatch",
}
# Fuzzing runs in the SQLite pass only (deselected in the PostgreSQL pass; module docstring).
pytestmark = [pytest.mark.wordpress, pytest.mark.sqlite_pass]


@pytest.fixture(scope="module")
def fuzz_server(shared_wp_site, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("fuzz")
    ledger_url = f"sqlite:///{workdir / 'ledger.db'}"
    server = Server(shared_wp_site, ledger_url, workdir)
    server.start(workers=2)
    try:
        job = {"site": "blog", "task_version": 1}
        assert server.call("PUT", f"/v1/jobs/{KNOWN_JOB}", json=job).status_code == 201
        assert server.call("PUT", f"/v1/jobs/{KNOWN_JOB}/draft", json=draft_body()).ok
        gateway.create_app({"database_url": ledger_url, "secret_key": SECRET_KEY})  # binds it
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def api_schema(fuzz_server):
    return schemathesis.openapi.from_url(fuzz_server.url + "/openapi.json")


def _operations() -> int:
    with database.connection_context():
        return Operation.select().count()


def errors_are_problem_json(response, case) -> None:
    """Every error is RFC 9457 problem+json whose ``status`` is the HTTP status (the review
    page's HTML answers are documented as pages and checked by content_type_conformance)."""
    if response.status_code < 400 or case.path.startswith("/review"):
        return
    found = {k.lower(): v for k, v in response.headers.items()}.get("content-type", "")
    media = found[0] if isinstance(found, list) else found
    assert media.startswith("application/problem+json"), f"{response.status_code} as {media}"
    body = response.json()
    assert body["status"] == response.status_code and body["type"] and body["title"], body


# Headers that frame the message (RFC 9112 §6): a malformed one is refused by the HTTP server
# (granian: 400, empty body) before the app sees the request, which no operation documents
# (CI: Transfer-Encoding 'i+`5z9fVU20Y?F;' on GET /).
FRAMING = {"transfer-encoding", "content-length", "connection", "host", "te", "upgrade"}

CHECKS = [
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def _exercise(case, server, counts: dict) -> None:
    if case.path_parameters and len(str(case.path_parameters.get("job_id", ""))) % 2 == 0:
        case.path_parameters["job_id"] = KNOWN_JOB
    if case.headers:  # message framing is the HTTP server's, answered before the app
        case.headers = {k: v for k, v in case.headers.items() if k.lower() not in FRAMING}
    before = _operations()
    response = case.call(headers=server.headers)
    counts[response.status_code] = counts.get(response.status_code, 0) + 1
    # no 500 (a bug); a documented 502/503 (WordPress down, agents not configured) is an answer
    assert response.status_code != 500, f"{case.method} {case.path}: {response.text[:300]}"
    case.validate_response(response, checks=CHECKS)
    errors_are_problem_json(response, case)
    if response.status_code >= 400 and not case.path.startswith("/review"):
        slug = response.json()["type"].rsplit("/", 1)[-1]
        if slug in BEFORE_CLAIM:
            assert _operations() == before, f"{case.method} {case.path}: {slug} left a ledger row"


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_fuzz_every_operation(api_schema, fuzz_server, mode):
    counts: dict[int, int] = {}
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 30
    deadline = time.monotonic() + SECONDS / 2
    for operation in operations:
        examples = EXAMPLES if time.monotonic() < deadline else 1

        @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy(generation_mode=mode))
        def run(case):
            _exercise(case, fuzz_server, counts)

        run()
    print(
        f"fuzz {mode.value}: {len(operations)} operations, {sum(counts.values())} requests,"
        f" statuses {dict(sorted(counts.items()))}"
    )
    assert sum(counts.values()) >= len(operations)
