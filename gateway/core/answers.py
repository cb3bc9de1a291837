"""Is an upstream's answer definite? One verdict for every upstream the gateway writes to.

A **definite refusal** proves that the upstream did not act and will refuse the same request
again: the ledger row may be FAILED, nothing is to be reconciled, resending changes nothing
until a person changes something. Anything else that is not a success - a timeout, no answer,
a 5xx, a request to back off - leaves the outcome unknown: reconcile, or send again with the
same idempotency key. One table per upstream:

* ``wordpress``: the tables of :mod:`gateway.wordpress.errors` (``REST_ANSWERS``,
  ``FAULT_ANSWERS``, and ``UPSTREAM_ANSWERS`` for a page from in front of WordPress), which
  the transports also build their errors from. They live there because the WordPress package
  imports nothing of the gateway and must choose the error class (the class's ``definite`` is
  the verdict); this module reads them, so the verdict has one source. Only WordPress's own
  answer (a REST error body with a ``code``, an XML-RPC fault) can be definite; a page from in
  front of it never is (``code`` None: no row of ``UPSTREAM_ANSWERS`` is). WordPress's
  definite 500 (``rest_upload_sideload_error``) is a row of that table, and so is its 401/403:
  the site's credentials or capability (:func:`wordpress_credentials_refused`).
* ``openai``: the Agents API (``POST /v1/agents/sessions/{id}/events`` and the other calls of
  :mod:`gateway.agents`). 401/403 refuse the gateway's one key, not the request: the verdict
  :data:`KEY_REFUSED` pauses the workers (:mod:`gateway.agents.openai_key`) and the row stays
  UNKNOWN; 408 and 429 are passing; any other 4xx is definite. Source: OpenAI API reference,
  "Error codes".
* ``receiver``: a tenant's notification URL (:mod:`gateway.actions.notifications`), a JSON
  POST with ``Idempotency-Key``. 2xx delivered; 408, 425 and 429 are passing, and so is 409,
  which the IETF draft "The Idempotency-Key HTTP Header Field" (section 2.7) has a receiver
  answer while the first request with that key is still being processed; any other 4xx is
  definite, and so is a 3xx (the gateway never follows a receiver's redirect: the address it
  checked is the one it talks to, so the same POST gets the same answer until the URL is
  changed).
"""

from __future__ import annotations

from gateway.wordpress import errors as wordpress_errors

WORDPRESS = "wordpress"
OPENAI = "openai"
RECEIVER = "receiver"
UPSTREAMS = (WORDPRESS, OPENAI, RECEIVER)

ACCEPTED = "accepted"  # 2xx: the upstream acted
REFUSED = "refused"  # a definite refusal: it did not act, and will not for the same request
UNKNOWN = "unknown"  # it may have acted, or asks to be asked again: reconcile or resend
KEY_REFUSED = "key_refused"  # the gateway's own credential was refused, not this request

OPENAI_PASSING = frozenset({408, 429})
OPENAI_KEY = frozenset({401, 403})
RECEIVER_PASSING = frozenset({408, 409, 425, 429})


def verdict(upstream: str, status: int | None, code: str | None = None) -> str:
    """What an answer proves: :data:`ACCEPTED`, :data:`REFUSED`, :data:`UNKNOWN` or
    :data:`KEY_REFUSED`.

    Args:
        upstream: :data:`WORDPRESS`, :data:`OPENAI` or :data:`RECEIVER`.
        status: the HTTP status of the answer, None when no answer came (always UNKNOWN).
            For an XML-RPC fault: its fault code when it is an integer (else None) with
            ``code`` ``xmlrpc_fault_{n}``.
        code: WordPress's error code (``rest_upload_sideload_error``), None when the answer
            carried none (then it did not come from WordPress); unused for other upstreams.

    Raises:
        ValueError: an upstream this module does not know.
    """
    if upstream not in UPSTREAMS:
        raise ValueError(f"unknown upstream {upstream!r}: one of {', '.join(UPSTREAMS)}")
    if status is not None and 200 <= status < 300 and not _is_fault(code):
        return ACCEPTED
    if upstream == WORDPRESS:
        return _wordpress(status, code)
    if status is None:
        return UNKNOWN
    if upstream == OPENAI:
        if status in OPENAI_KEY:
            return KEY_REFUSED
        return REFUSED if 400 <= status < 500 and status not in OPENAI_PASSING else UNKNOWN
    if 300 <= status < 400 or (400 <= status < 500 and status not in RECEIVER_PASSING):
        return REFUSED
    return UNKNOWN


def is_definite(upstream: str, status: int | None, code: str | None = None) -> bool:
    """Whether the answer is a definite refusal (:func:`verdict` is :data:`REFUSED`): the
    upstream did not act, and sending the same request again will be refused again. A
    success (2xx) is not a refusal: False. Arguments and errors as :func:`verdict`."""
    return verdict(upstream, status, code) == REFUSED


def _is_fault(code: str | None) -> bool:
    return code is not None and code.startswith("xmlrpc_fault_")


def wordpress_credentials_refused(status: int | None, code: str | None = None) -> bool:
    """Whether WordPress's own refusal refused the site's credentials or the user's capability
    (the rows of its tables whose class is ``WordPressAuthError``: 401, 403): the same request
    is refused until the site's credentials are renewed (``gateway sites add``).

    Args:
        status, code: as :func:`verdict`; a stored problem's ``wordpress_status`` and
            ``wordpress_code``.
    """
    error = wordpress_errors.answer_error(status, code, fault=_is_fault(code))
    return issubclass(error, wordpress_errors.WordPressAuthError)


def _wordpress(status: int | None, code: str | None) -> str:
    if code is None:  # no WordPress error body: a page from in front of it, or no answer
        if status is None:
            return UNKNOWN
        return REFUSED if wordpress_errors.upstream_case(status).error.definite else UNKNOWN
    fault = _is_fault(code)
    if status is None and not fault:
        return UNKNOWN
    error = wordpress_errors.answer_error(status, code, fault=fault)
    return REFUSED if error.definite else UNKNOWN
