"""The HTTP API's wiring: every blueprint, authentication, request hooks, connection handling
and error handlers, registered on an app by :func:`init_app` (called by the app factory,
:func:`gateway.app.create_app`, and by :func:`bare_app` for the OpenAPI document)."""

from __future__ import annotations

import logging
import time

from flask import Flask
from flask import current_app
from flask import g
from flask import request
from peewee import DatabaseError
from peewee import InterfaceError
from werkzeug.exceptions import HTTPException
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.routing import IntegerConverter

from gateway.api import agents
from gateway.api import articles
from gateway.api import budgets
from gateway.api import editorial
from gateway.api import follow_up
from gateway.api import grant_limits
from gateway.api import health
from gateway.api import jobs
from gateway.api import oauth_consent  # noqa: F401 - its routes join review_page's blueprint
from gateway.api import report
from gateway.api import request_keys
from gateway.api import review_desk  # noqa: F401 - its routes join review_page's blueprint
from gateway.api import review_page
from gateway.api import reviews
from gateway.api import run_activity
from gateway.api import spec
from gateway.api import webhook_endpoints
from gateway.api.http import REQUEST_ID
from gateway.api.http import config
from gateway.api.http import problem_response
from gateway.core import exceptions as exc
from gateway.core import logs
from gateway.core.callers import PRINCIPAL_ENVIRON
from gateway.ledger import db
from gateway.ledger.db import database
from gateway.operations import refusals
from gateway.operator import metrics
from gateway.tenancy import address_limits
from gateway.tenancy import rate_limits
from gateway.tenancy import site_slots
from gateway.tenancy import tenant_shares
from gateway.tenancy import tokenless
from gateway.tenancy import tokens
from gateway.wordpress import client as wordpress_client
from gateway.wordpress.errors import WordPressError

log = logging.getLogger(__name__)
ADDRESS_LIMITS = address_limits.EXTENSION
request_log = logging.getLogger("gateway.http")


def _authenticate():
    """The caller of a ``/v1`` request (webhooks aside): the principal an in-process caller put
    in the environ (:data:`gateway.core.callers.PRINCIPAL_ENVIRON`; a remote client cannot
    set it), else the one of the bearer token. From here on one path for both: the rate key
    is the principal's ``token_hash``, and its limits are checked
    (:mod:`gateway.api.grant_limits`)."""
    if not request.path.startswith("/v1/") or request.path.startswith("/v1/webhooks/"):
        return None
    principal = request.environ.get(PRINCIPAL_ENVIRON)
    if not isinstance(principal, tokens.Principal):
        header = request.headers.get("Authorization", "")
        secret = header[7:].strip() if header.startswith("Bearer ") else ""
        principal = tokens.authenticate(secret) if secret else None
    if principal is None:
        return problem_response(refuse_unauthenticated())
    g.principal = principal
    g.token_hash = principal.token_hash  # the token's SHA-256 (a grant's own), never a token
    logs.bind(tenant=principal.tenant)
    rate_limits.count_request(config(), principal.token_hash)
    tenant_shares.note_caller(principal.tenant)  # its share: at the first slow step
    grant_limits.check(principal)
    return None


def refuse_unauthenticated() -> exc.GatewayError:
    """The answer to a call without a valid token: 401, or 429 once its client address is
    past ``GATEWAY_UNAUTHENTICATED_RATE``. Counted in the metrics, never in the ledger."""
    retry = current_app.extensions[ADDRESS_LIMITS].count_refusal(config(), request.remote_addr)
    metrics.count_unauthenticated("limited" if retry else "refused")
    log.warning("unauthenticated call %s %s", request.method, request.path)
    if retry:
        return exc.UnauthenticatedRateLimited(
            f"too many calls without a valid token from this address "
            f"(GATEWAY_UNAUTHENTICATED_RATE); retry in {retry} s",
            retry_after=retry,
        )
    return exc.Unauthenticated(
        "send 'Authorization: Bearer <token>' with a token from 'gateway tokens create'"
    )


def _no_job_route() -> exc.GatewayError:
    """A path under ``/v1/jobs/`` that no route takes: most often a job id holding ``/``
    (or ``%2F``), which the job-id rule forbids."""
    from gateway.core import validation

    rule = validation.JOB_ID.pattern
    return exc.NotFound(
        f"no endpoint at {request.method} {request.path[:120]}; a job id must match {rule} "
        "(letters, digits and . _ : - only, never '/')",
        errors=[{"pointer": "/job_id", "message": f"job_id must match {rule}"}],
    )


def _start_request():
    g.started = time.perf_counter()
    sent = request.headers.get("X-Request-Id", "")
    g.request_id = logs.start(sent if REQUEST_ID.fullmatch(sent) else None)
    if request.view_args and request.view_args.get("job_id"):
        logs.bind(job_id=request.view_args["job_id"])
    site_slots.start_scope()


def _finish_request(response):
    """Echo the request id (first: whatever fails after, the answer carries it), note what the
    answer says about its job's run (:mod:`gateway.api.run_activity`), count the request and
    write its one log line."""
    response.headers["X-Request-Id"] = g.get("request_id") or logs.start()
    run_activity.note(response)
    route = request.url_rule.rule if request.url_rule is not None else "unmatched"
    seconds = time.perf_counter() - g.get("started", time.perf_counter())
    metrics.observe_request(route, request.method, response.status_code, seconds)
    request_log.info(
        "request",
        extra={
            "method": request.method,
            "route": route,
            "path": request.path,  # never the query string, which may carry titles
            "status": response.status_code,
            "duration_ms": round(seconds * 1000, 1),
            "client": request.remote_addr,
        },
    )
    return response


class LedgerIdConverter(IntegerConverter):
    """Replaces Werkzeug's ``int`` converter: ``<int:name>`` matches a positive integer the
    ledger can hold; a larger one matches no route (404), instead of overflowing the
    database column."""

    def __init__(self, url_map, *args, **kwargs):
        from gateway.core.validation import MAX_DB_INT

        super().__init__(url_map, min=1, max=MAX_DB_INT)


def init_app(app: Flask) -> None:
    """Register blueprints, authentication, connection handling and error handlers."""
    app.url_map.converters["int"] = LedgerIdConverter
    app.extensions[ADDRESS_LIMITS] = address_limits.AddressLimiter()

    app.register_blueprint(health.bp)
    app.register_blueprint(jobs.bp)
    app.register_blueprint(editorial.bp)
    app.register_blueprint(follow_up.bp)
    app.register_blueprint(webhook_endpoints.bp)
    app.register_blueprint(reviews.bp)
    app.register_blueprint(report.bp)
    app.register_blueprint(review_page.bp)
    app.register_blueprint(spec.bp)
    app.register_blueprint(agents.bp)
    app.register_blueprint(budgets.bp)
    app.register_blueprint(articles.bp)
    wordpress_client.add_observer(metrics.observe_wordpress)
    wordpress_client.add_observer(logs.log_wordpress_call)

    def _read_body():
        # Once the caller is known (after _authenticate: a body dripped by a caller without
        # a token is never read), a tenant's body is read here, whole, within its share of
        # bodies being read (tenant_shares.reading_body), before any route parses it.
        # Werkzeug stops reading a body without Content-Length (Transfer-Encoding: chunked)
        # at MAX_CONTENT_LENGTH and hands on the truncated bytes: refused as too large.
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        principal = g.get("principal")
        if principal is None or not (request.content_length or chunked):
            return None
        with tenant_shares.reading_body(config(), principal.tenant):
            data = request.get_data(cache=True)
        if request.content_length is None and len(data) >= app.config["MAX_CONTENT_LENGTH"]:
            raise RequestEntityTooLarge()
        return None

    @app.before_request
    def _connect():
        _start_request()
        if tokenless.applies(request.method, request.path):  # before any byte of its body
            try:
                tokenless.enter(config(), request.remote_addr)
            except exc.UnauthenticatedRateLimited:  # 429 past its cap: no token known yet
                metrics.count_unauthenticated("limited")
                raise
        database.connect(reuse_if_open=True)
        return _authenticate() or _read_body() or request_keys.start()

    app.after_request(_finish_request)
    app.after_request(request_keys.finish)  # runs before _finish_request (reverse order)

    @app.teardown_request
    def _close(_error=None):
        tenant_shares.leave_request()
        tokenless.leave()
        try:
            site_slots.release_held()
        except db.LEDGER_ERRORS as error:  # the slot expires by itself (site_slots.slot_ttl)
            log.error("could not release a site concurrency slot: %s", error)
        finally:
            # the pool keeps a connection only if it is idle and alive (playhouse.pool)
            if not database.is_closed():
                database.close()
            logs.clear()

    @app.errorhandler(exc.GatewayError)
    def _gateway_error(error):
        if isinstance(error, exc.TenantBusy) and g.get("principal") is not None:
            metrics.count_tenant_busy(g.principal.tenant, error.extensions.get("share", ""))
        return problem_response(error)

    @app.errorhandler(WordPressError)
    def _wordpress_error(error):
        # A domain function should have turned it into a GatewayError: log it as the bug it
        # is, and answer the problem it stands for (never a 500), through the handler of that
        # problem (a review page renders its own).
        log.error("unmapped WordPress error in %s %s", request.method, request.path, exc_info=error)
        return current_app.handle_user_exception(refusals.unmapped(error))

    @app.errorhandler(RequestEntityTooLarge)
    def _too_large(_error):
        return problem_response(
            exc.PayloadTooLarge(f"the body exceeds {app.config['MAX_CONTENT_LENGTH']} bytes")
        )

    @app.errorhandler(OverflowError)
    def _beyond_the_ledger(_error):
        # a path id (``<int:...>``) larger than any database integer: no such object
        return problem_response(exc.NotFound("no object has this id"))

    @app.errorhandler(DatabaseError)
    @app.errorhandler(InterfaceError)  # a lost connection's (db.LEDGER_ERRORS): one handler
    def _ledger_error(error):
        if not db.is_unavailable(error):
            log.exception("ledger error %s %s", request.method, request.path)
            return problem_response(
                exc.framework_error(500, "Internal Server Error", "an internal error occurred")
            )
        log.error("ledger unavailable %s %s: %s", request.method, request.path, error)
        db.discard_connection()
        return problem_response(
            exc.LedgerUnavailable(
                "the ledger cannot serve this request now (connection, lock, timeout, "
                "read-only database or I/O error); send the same request again later: the "
                "gateway writes to WordPress only after recording its intent",
                retry_after=2,
            )
        )

    @app.errorhandler(HTTPException)
    def _http_error(error):
        generic = exc.framework_error(error.code, error.name, error.description)
        if error.code == 404 and request.path.startswith("/v1/jobs/"):
            generic = _no_job_route()
        response = problem_response(generic)
        allow = dict(error.get_headers()).get("Allow")
        if allow:  # 405: RFC 9110 section 15.5.6 asks for the methods the route allows
            response.headers["Allow"] = allow
        return response


def bare_app() -> Flask:
    """An app with every route and no configuration, ledger or secret: enough to describe
    the API (``gateway openapi``). Routes come from the same :func:`init_app`."""
    app = Flask("gateway")
    init_app(app)
    return app
