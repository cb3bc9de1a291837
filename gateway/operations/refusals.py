"""Refusals from in front of WordPress, as the ledger records them and the caller hears them.

An :class:`~gateway.wordpress.errors.UpstreamRefused` (a firewall, CDN, proxy or web-server
page; a 2xx HTML page where JSON was expected) proves nothing about WordPress: the operation
becomes UNKNOWN with ``problem.reason = "upstream-refused"`` and the caller gets 502
``upstream-refused`` with the facts a person needs to lift the block. Transport-neutral: the
REST and XML-RPC transports raise the same error class.

The problems for WordPress errors met outside a ledger operation live here too: a read that
failed (:func:`cannot_read`), WordPress out of reach (:func:`unreachable`), and an error no
domain function turned into a problem (:func:`unmapped`, the API's last resort: never a 500).
"""

from __future__ import annotations

import logging

from gateway.core import exceptions as exc
from gateway.ledger.models import SENT
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Operation
from gateway.operations import transitions
from gateway.wordpress.errors import CachedAnswer
from gateway.wordpress.errors import UpstreamRefused
from gateway.wordpress.errors import WordPressAuthError
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressNotFound
from gateway.wordpress.errors import WordPressRefused
from gateway.wordpress.errors import shortened

log = logging.getLogger(__name__)


def record_upstream(row: Operation, refusal: UpstreamRefused) -> None:
    """Move ``row`` from SENT to UNKNOWN, reason ``upstream-refused``, with the facts of the
    page (:func:`upstream_facts`): the next identical request reconciles first. No lookup
    now: the same block would most likely answer it."""
    transitions.move(
        row,
        UNKNOWN,
        SENT,
        problem={
            "detail": refusal.message,
            "reason": "upstream-refused",
            **upstream_facts(refusal),
        },
    )
    log.warning("upstream refused %s job_id=%s: %s", row.operation_key, row.job_id, refusal)


def upstream_facts(refusal: UpstreamRefused) -> dict:
    """What a person needs to lift a block in front of WordPress (no credentials); a redirect
    adds ``location`` and ``suggested_url``, a cache ``cache`` (the evidence)."""
    upstream = {
        "status": refusal.status,
        "content_type": refusal.content_type,
        "title": refusal.title,
        "method": refusal.method,
        "url": refusal.url,
    }
    if refusal.location:
        upstream |= {"location": refusal.location, "suggested_url": refusal.suggested_url}
    if isinstance(refusal, CachedAnswer):
        upstream["cache"] = refusal.evidence
    return {"origin": "upstream", "upstream": upstream}


def _advice(refusal: UpstreamRefused) -> str:
    """What a person does about ``refusal``: wait, follow a redirect, exclude REST from a
    cache, or let the gateway through a firewall."""
    if refusal.retryable:
        return "it asks to come back later"
    if isinstance(refusal, CachedAnswer):
        return "nothing was confirmed or repaired on a cached copy (WordPress was not heard)"
    if refusal.location:
        return (
            "the gateway follows no redirect with credentials: update the site's URL with "
            f"'gateway sites add ... --url {refusal.suggested_url}'"
        )
    return (
        "ask whoever runs the site's firewall, CDN or web server to let the gateway "
        "through (WordPress itself did not answer)"
    )


def upstream_problem(refusal: UpstreamRefused, **extensions) -> exc.GatewayError:
    """502 ``upstream-refused``: retryable with ``Retry-After`` for 429/503, else a person
    must act (no retry storm against a firewall); a redirect names where it points and the
    URL to use, a cache how to exclude REST from it (docs/hosts.md)."""
    advice = _advice(refusal)
    error = exc.UpstreamRefused(
        f"{refusal.message}; {advice}. Nothing proves a write: the next identical request "
        "looks the operation up in WordPress before sending",
        retry_after=(refusal.retry_after or 5) if refusal.retryable else None,
        **upstream_facts(refusal),
        **extensions,
    )
    error.retryable = refusal.retryable
    return error


def cannot_read(error: WordPressError) -> exc.GatewayError:
    """The problem for a read-back that failed: 502 ``upstream-refused`` when a page from in
    front of WordPress answered, else 503 ``wordpress-unavailable`` (retry shortly)."""
    if isinstance(error, UpstreamRefused):
        return upstream_problem(error)
    return exc.WordPressUnavailable(f"cannot read the post back: {error.message}", retry_after=2)


def unreachable(error: WordPressError) -> exc.GatewayError:
    """The problem when WordPress cannot be asked at all (its companion plugin's detection
    found no connection, a timeout or a 5xx): 503 ``wordpress-unavailable`` saying so, or
    502 ``upstream-refused`` for a page from in front of WordPress. Whatever the request
    was about to do waits: the next identical request looks up what was sent before
    sending anything again."""
    if isinstance(error, UpstreamRefused):
        return upstream_problem(error)
    return exc.WordPressUnavailable(
        f"WordPress cannot be reached now ({error.message}); nothing more was looked up or "
        "sent: retry shortly (the next identical request looks up what was sent before "
        "sending anything again)",
        retry_after=error.retry_after or 5,
    )


def unmapped(error: WordPressError) -> exc.GatewayError:
    """The problem for a WordPress error that reached the top of a request without a domain
    function turning it into one (a gap in that path: the caller logs it as a bug), so that
    it is never answered as a 500.

    A definite refusal is 502 ``wordpress-refused`` with ``wordpress_status`` and
    ``wordpress_code`` (a 404: the object was deleted in WordPress, or never existed); any
    other error is what :func:`unreachable` says (503 ``wordpress-unavailable``, or 502
    ``upstream-refused`` for a page from in front of WordPress).
    """
    if not isinstance(error, WordPressRefused):
        return unreachable(error)
    if isinstance(error, WordPressNotFound):
        why = "the object is not in WordPress (deleted there, e.g. by an editor, or never made)"
    elif isinstance(error, WordPressAuthError):
        why = "credentials or capability; update the site with 'gateway sites add'"
    else:
        why = "WordPress refused it"
    return exc.WordPressRefused(
        f"WordPress answered {error.status} to {error.method} {error.url}: "
        f"{shortened(error.message)} ({why}); asking again will not change that. For a job, "
        "its verification (GET /v1/jobs/{job_id}/verification) shows what its post is "
        "missing, and a new task_version writes it again",
        wordpress_status=error.status,
        wordpress_code=error.code,
    )
