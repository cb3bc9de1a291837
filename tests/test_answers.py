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


# (status of a page from in front of WordPress, the class both transports raise for it)
UPSTREAM_PAGES = [
    (403, errors.UpstreamRefused),  # a firewall's page: a person must act
    (404, errors.UpstreamRefused),
    (413, errors.UpstreamRefused),  # the web server's own limit
    (429, errors.UpstreamRefused),  # retryable: the block lifts by itself
    (503, errors.UpstreamRefused),
    (500, errors.WordPressOutcomeUnknown),  # a 5xx may follow a forwarded request
    (502, errors.WordPressOutcomeUnknown),
    (504, errors.WordPressOutcomeUnknown),
]


@pytest.mark.parametrize(("status", "error"), UPSTREAM_PAGES)
def test_a_page_from_in_front_of_wordpress_is_one_rule_for_both_transports(status, error):
    """``errors.UPSTREAM_ANSWERS`` decides for the REST client (an HTML page) and the XML-RPC
    transport (a non-200 answer) alike, and the verdict reads the same table: never definite."""
    url = "https://wp.example/xmlrpc.php"
    rest = client.error_for("POST", url, _response(status, None))
    fault = xmlrpc.client.ProtocolError(url, status, "Blocked", {"Retry-After": "7"})
    rpc = xmlrpc_errors.classify("wp.newPost", url, fault, True)
    assert type(rest) is type(rpc) is error is errors.upstream_case(status).error
    assert rest.origin == rpc.origin == "upstream"
    assert not rest.definite and not rpc.definite
    assert answers.verdict(answers.WORDPRESS, status, None) == UNKNOWN
    if error is errors.UpstreamRefused:
        assert rest.retryable is rpc.retryable is (status in (429, 503))


def test_every_row_of_the_upstream_table_is_listed_here():
    for case in errors.UPSTREAM_ANSWERS:
        assert any(status in case.statuses for status, _ in UPSTREAM_PAGES), case


# (WordPress's status and error code as a stored problem keeps them, whether they refused the
# site's credentials or the user's capability: the site must be updated before a resend)
CREDENTIALS = [
    (401, "rest_not_logged_in", True),
    (403, "rest_cannot_create", True),
    (403, None, True),
    (403, "xmlrpc_fault_403", True),  # InvalidCredentialsError
    (401, "xmlrpc_fault_401", True),  # a capability fault
    (404, "rest_post_invalid_id", False),
    (409, "gateway_duplicate_operation", False),
    (400, "rest_invalid_param", False),
    (500, "rest_upload_sideload_error", False),
    (None, "xmlrpc_unsupported", False),
    (None, None, False),
]


@pytest.mark.parametrize(("status", "code", "refused"), CREDENTIALS)
def test_wordpress_credentials_refused_is_the_tables_auth_rows(status, code, refused):
    assert answers.wordpress_credentials_refused(status, code) is refused
    if status is not None and code is not None and not code.startswith("xmlrpc_"):
        raised = client.error_for(
            "POST", "https://wp.example/wp-json/wp/v2/posts", _response(status, code)
        )
        assert isinstance(raised, errors.WordPressAuthError) is refused
