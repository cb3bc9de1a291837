"""Is an upstream's answer definite? ``gateway/core/answers.py`` gives one verdict for
WordPress (its own REST error bodies and XML-RPC faults, from the tables in
``gateway/wordpress/errors.py``), OpenAI's Agents API and a tenant's notification receiver.
Every case of each table is listed here; the WordPress transports build their errors from the
same table, so the class a transport raises and the verdict agree."""

from __future__ import annotations

import json
import xmlrpc.client

import pytest
import requests

from gateway.core import answers
from gateway.core.answers import ACCEPTED
from gateway.core.answers import KEY_REFUSED
from gateway.core.answers import REFUSED
from gateway.core.answers import UNKNOWN
from gateway.wordpress import client
from gateway.wordpress import errors
from gateway.wordpress import xmlrpc_errors

# (status, WordPress's error code or None: no WordPress error body, verdict, the class the
# REST client raises; None: the answer is not an error)
WORDPRESS_REST = [
    (200, None, ACCEPTED, None),
    (201, None, ACCEPTED, None),
    (401, "rest_not_logged_in", REFUSED, errors.WordPressAuthError),
    (403, "rest_cannot_create", REFUSED, errors.WordPressAuthError),
    (409, "gateway_duplicate_operation", REFUSED, errors.WordPressDuplicate),
    (409, "rest_conflict", REFUSED, errors.WordPressRefused),
    (404, "rest_post_invalid_id", REFUSED, errors.WordPressNotFound),
    (429, "rest_too_many_requests", UNKNOWN, errors.WordPressUnavailable),
    (503, "rest_maintenance", UNKNOWN, errors.WordPressUnavailable),
    (400, "rest_invalid_param", REFUSED, errors.WordPressRefused),
    (413, "rest_upload_file_too_big", REFUSED, errors.WordPressRefused),
    (412, "rest_upload_hash_mismatch", REFUSED, errors.WordPressRefused),
    (500, "rest_upload_sideload_error", REFUSED, errors.WordPressRefused),
    (500, "db_insert_error", UNKNOWN, errors.WordPressOutcomeUnknown),
    (502, "rest_upload_sideload_error", UNKNOWN, errors.WordPressOutcomeUnknown),
    (504, "internal_server_error", UNKNOWN, errors.WordPressOutcomeUnknown),
    # no WordPress error body: a page from in front of WordPress proves nothing
    (403, None, UNKNOWN, errors.UpstreamRefused),
    (404, None, UNKNOWN, errors.UpstreamRefused),
    (429, None, UNKNOWN, errors.UpstreamRefused),
    (500, None, UNKNOWN, errors.WordPressOutcomeUnknown),
    (None, None, UNKNOWN, None),  # no answer at all
]


def _response(status: int, code: str | None) -> requests.Response:
    """A response as WordPress (a REST error body) or a proxy (an HTML page) sends it."""
    response = requests.Response()
    response.status_code = status
    response.url = "https://wp.example/wp-json/wp/v2/media"
    if code is None:
        response._content = b"<html><title>Blocked</title></html>"
        response.headers["Content-Type"] = "text/html"
    else:
        body = {"code": code, "message": "WordPress says no", "data": {"status": status}}
        response._content = json.dumps(body).encode()
        response.headers["Content-Type"] = "application/json; charset=UTF-8"
    response.encoding = "utf-8"
    return response


@pytest.mark.parametrize(("status", "code", "verdict", "error"), WORDPRESS_REST)
def test_wordpress_rest_answers(status, code, verdict, error):
    assert answers.verdict(answers.WORDPRESS, status, code) == verdict
    assert answers.is_definite(answers.WORDPRESS, status, code) is (verdict == REFUSED)
    if error is not None:
        raised = client.error_for(
            "POST", "https://wp.example/wp-json/wp/v2/media", _response(status, code)
        )
        assert type(raised) is error
        assert raised.definite is (verdict == REFUSED)


# (fault code, verdict, the class the XML-RPC transport raises)
WORDPRESS_FAULTS = [
    (401, REFUSED, errors.WordPressAuthError),
    (403, REFUSED, errors.WordPressAuthError),
    (404, REFUSED, errors.WordPressNotFound),
    (500, REFUSED, errors.WordPressRefused),  # "Could not write file": WordPress's own answer
    (-32601, REFUSED, errors.WordPressRefused),  # the server's "method not found"
    ("parse", REFUSED, errors.WordPressRefused),  # a fault code that is not a number
]


@pytest.mark.parametrize(("fault_code", "verdict", "error"), WORDPRESS_FAULTS)
def test_wordpress_xmlrpc_faults(fault_code, verdict, error):
    raised = xmlrpc_errors.classify(
        "wp.uploadFile",
        "https://wp.example/xmlrpc.php",
        xmlrpc.client.Fault(fault_code, "no"),
        True,
    )
    assert type(raised) is error
    assert answers.verdict(answers.WORDPRESS, raised.status, raised.code) == verdict
    assert raised.definite is answers.is_definite(answers.WORDPRESS, raised.status, raised.code)


# (status, verdict) of OpenAI's Agents API
OPENAI = [
    (200, ACCEPTED),
    (202, ACCEPTED),
    (401, KEY_REFUSED),  # the gateway's key: the workers pause, the row stays UNKNOWN
    (403, KEY_REFUSED),
    (400, REFUSED),
    (404, REFUSED),
    (409, REFUSED),
    (422, REFUSED),
    (408, UNKNOWN),
    (429, UNKNOWN),
    (500, UNKNOWN),
    (502, UNKNOWN),
    (503, UNKNOWN),
    (None, UNKNOWN),  # a connection error or a timeout
]


@pytest.mark.parametrize(("status", "verdict"), OPENAI)
def test_openai_answers(status, verdict):
    assert answers.verdict(answers.OPENAI, status) == verdict
    assert answers.is_definite(answers.OPENAI, status) is (verdict == REFUSED)


# (status, verdict) of a tenant's notification receiver
RECEIVER = [
    (200, ACCEPTED),
    (202, ACCEPTED),
    (204, ACCEPTED),
    (301, REFUSED),  # never followed: the same POST gets the same redirect
    (302, REFUSED),
    (308, REFUSED),
    (400, REFUSED),
    (401, REFUSED),
    (403, REFUSED),
    (404, REFUSED),
    (410, REFUSED),
    (413, REFUSED),
    (422, REFUSED),  # the key was used with another payload (Idempotency-Key draft)
    (408, UNKNOWN),
    (409, UNKNOWN),  # the first request with this key is still being processed
    (425, UNKNOWN),
    (429, UNKNOWN),
    (500, UNKNOWN),
    (502, UNKNOWN),
    (503, UNKNOWN),
    (504, UNKNOWN),
    (None, UNKNOWN),  # no answer within the deadline, or the connection was lost
]


@pytest.mark.parametrize(("status", "verdict"), RECEIVER)
def test_receiver_answers(status, verdict):
    assert answers.verdict(answers.RECEIVER, status) == verdict
    assert answers.is_definite(answers.RECEIVER, status) is (verdict == REFUSED)


def test_every_row_of_the_wordpress_tables_is_listed_here():
    listed = {(s, c) for s, c, _, _ in WORDPRESS_REST}
    for case in errors.REST_ANSWERS:
        assert any(s in case.statuses and case.code in (None, c) for s, c in listed), case
    faults = {f for f, _, _ in WORDPRESS_FAULTS}
    for case in errors.FAULT_ANSWERS:
        assert any(f in case.statuses for f in faults), case


def test_an_unknown_upstream_is_refused():
    with pytest.raises(ValueError, match="unknown upstream 'smtp'"):
        answers.verdict("smtp", 550)
