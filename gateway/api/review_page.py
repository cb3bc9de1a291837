"""The editors' review page (``GET /review``): server-rendered HTML with sign-in, CSRF-protected
forms and buttons that call the same domain functions as the JSON API.

* Sign-in (``/review/login``) takes an editor or admin token, checks it with
  :func:`gateway.tenancy.tokens.authenticate` and keeps ``{tenant, role, name}`` and the token's
  SHA-256 in a server-side session (:mod:`gateway.api.session_store`: the cookie carries only a
  random id; a fixed lifetime, ``GATEWAY_SESSION_HOURS``, and an idle timeout,
  ``GATEWAY_SESSION_IDLE_MINUTES``; logout deletes it). The token itself is never stored or
  rendered. Workflow tokens are refused.
* CSRF: Flask-WTF's :class:`CSRFProtect` with ``WTF_CSRF_CHECK_DEFAULT = False``, and an
  explicit ``csrf.protect()`` for every POST of this blueprint only: the bearer-token JSON API
  under ``/v1`` reads no cookie, so it has nothing to protect and stays unchanged.
* A :class:`GatewayError` becomes a flash message (problem title and detail), never a trace.
* OAuth consent (:mod:`gateway.api.oauth_consent`): ``GET /review/oauth?request=ID`` keeps the
  pending id sealed in the session (:data:`OAUTH_REQUEST`) before any sign-in check, and the
  sign-in carries it over and lands on the consent page.
"""

from __future__ import annotations

import logging

from flask import Blueprint
from flask import Response
from flask import current_app
from flask import flash
from flask import g
from flask import make_response
from flask import redirect
from flask import render_template
from flask import request
from flask import session
from flask import url_for
from flask_wtf.csrf import CSRFError
from flask_wtf.csrf import CSRFProtect

from gateway.actions import publishing
from gateway.actions import scheduling
from gateway.api import session_store
from gateway.api.common import action_body
from gateway.api.common import job_of_path as _job
from gateway.api.common import side_effect_target
from gateway.api.http import config
from gateway.api.http import roles
from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core import validation
from gateway.core.config import Config
from gateway.core.digests import sha256_hex
from gateway.core.page_headers import SECURITY_HEADERS
from gateway.editorial import approvals
from gateway.editorial import desk_filter
from gateway.editorial import desk_words
from gateway.editorial import previews
from gateway.editorial import resolution
from gateway.editorial import review_board
from gateway.editorial import side_by_side
from gateway.jobs import budgets
from gateway.ledger import models
from gateway.oauth import consent
from gateway.operations.target import target_for
from gateway.operator import metrics
from gateway.recovery import retries
from gateway.tenancy import address_limits
from gateway.tenancy import site_slots
from gateway.tenancy import tenant_shares
from gateway.tenancy import tokens

log = logging.getLogger(__name__)
bp = Blueprint("review_page", __name__, url_prefix="/review")
csrf = CSRFProtect()
SESSION_KEY = "editor"
OAUTH_REQUEST = "oauth_request"  # the sealed pending id of an OAuth consent (never in clear)
OAUTH_ID_CHARS = 128
EDITOR_ROLES = ("editor", "admin")
# WordPress's post status after a publish -> what the page says: the phase it moved the job to
PUBLISHED_WORDS = {
    "publish": states.PUBLISHED,
    "future": states.SCHEDULED,
    "private": "published privately",
}
# the members of a 409 review-decided, in review_board.standing_words's order
DECIDED_MEMBERS = ("decision", "post_id", "resolved_by", "review_status", "resolved_at")


@bp.record_once
def _configure(state) -> None:
    app = state.app
    app.add_template_filter(previews.minute, "minute")
    # Checked per view by _before() instead of app-wide, so the JSON API is never affected.
    app.config.setdefault("WTF_CSRF_CHECK_DEFAULT", False)
    gateway_config = app.config.get("GATEWAY") or Config()  # none in gateway.api.openapi's app
    lifetime = int(gateway_config.session_hours * 3600)
    app.config.setdefault("WTF_CSRF_TIME_LIMIT", lifetime)  # a page left open
    app.session_interface = session_store.LedgerSessionInterface(gateway_config)
    csrf.init_app(app)


def _signed_in() -> tokens.Principal | None:
    data = session.get(SESSION_KEY)
    if not isinstance(data, dict) or not data.get("token_sha256"):
        return None
    # Re-checked on every request: a revoked token ends its sessions at once.
    principal = tokens.authenticate_hash(data["token_sha256"])
    if principal is None or principal.role not in EDITOR_ROLES:
        session.end()
        return None
    return principal


@bp.before_request
def _before():
    if request.method == "POST":
        csrf.protect()  # CSRFError (400) without a valid token
    if request.endpoint == "review_page.oauth_consent" and "request" in request.args:
        return _hold_oauth_request(request.args["request"])
    principal = _signed_in()
    if principal is not None:
        g.principal = principal
        tenant_shares.note_caller(principal.tenant)  # its share: at the first slow step
    elif request.endpoint != "review_page.login":
        return redirect(url_for("review_page.login"), 303)
    return None


def _hold_oauth_request(pending_id: str):
    """Keep an OAuth pending id in the session, sealed, and send the browser to the consent
    page without it in the URL (signed in or not: the sign-in carries it over)."""
    if 0 < len(pending_id) <= OAUTH_ID_CHARS:
        session[OAUTH_REQUEST] = consent.seal(config().secret_key, pending_id)
    return redirect(url_for("review_page.oauth_consent"), 303)


@bp.after_request
def _headers(response):
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


@bp.errorhandler(CSRFError)
def _csrf_error(error):
    log.warning("review page: CSRF check failed for %s %s", request.method, request.path)
    message = "The form is stale or did not come from this page: reload and try again."
    return render_template("review_error.html", title="Bad request", detail=message), 400


@bp.errorhandler(exc.GatewayError)
def _gateway_error(error: exc.GatewayError):
    # no redirect loop when the page itself cannot be built; a busy gateway says so with
    # its status and Retry-After (a redirect would send the browser to ask again at once)
    if request.method == "GET" or error.status == 429:
        page = make_response(
            render_template("review_error.html", title=error.title, detail=error.detail),
            error.status,
        )
        if error.retry_after:
            page.headers["Retry-After"] = str(error.retry_after)
        return page
    flash(f"{error.title}: {error.detail}", "error")
    return _back()


def _back():
    return redirect(url_for("review_page.index"), 303)


def _form_int(name: str) -> int:
    value = validation.parse_int(request.form.get(name), f"/{name}")
    if value is None:
        raise exc.ValidationFailed(
            f"{name} is required", errors=[{"pointer": f"/{name}", "message": "missing"}]
        )
    return value


@bp.route("/login", methods=["GET", "POST"])
def login():
    """Sign in with an editor or admin token (form field ``token``)."""
    if request.method == "GET":
        return render_template("review_login.html")
    token = request.form.get("token", "").strip()
    principal = tokens.authenticate(token) if token else None
    if principal is None:
        return _unknown_token()
    if principal.role not in EDITOR_ROLES:  # the tenant's own token: counted for it
        models.bump_counter("unauthorized_calls", tenant=principal.tenant)
        log.warning("review page: sign-in refused (%s)", principal.role)
        flash("This page is for editors: sign in with an editor or admin token.", "error")
        return render_template("review_login.html"), 403
    held = session.get(OAUTH_REQUEST)  # an OAuth consent waiting for this sign-in
    session.clear()
    session.regenerate()  # a new id at sign-in: an id planted before it opens nothing
    if held:
        session[OAUTH_REQUEST] = held
    session[SESSION_KEY] = {
        "tenant": principal.tenant,
        "role": principal.role,
        "name": principal.name,
        "token_sha256": sha256_hex(token),
    }
    log.info("review page: %s signed in (tenant %s)", principal.name, principal.tenant)
    flash(f"Signed in as {principal.name} ({principal.role}, tenant {principal.tenant}).", "info")
    if held:
        return redirect(url_for("review_page.oauth_consent"), 303)
    return _back()


def _unknown_token():
    """A sign-in with an unknown or revoked token: 401, or 429 once the client address is
    past ``GATEWAY_UNAUTHENTICATED_RATE``; counted in the metrics, nothing in the ledger."""
    limiter = current_app.extensions[address_limits.EXTENSION]
    retry = limiter.count_refusal(config(), request.remote_addr)
    metrics.count_unauthenticated("limited" if retry else "refused")
    log.warning("review page: sign-in refused (unknown token)")
    if retry:
        flash(f"Too many sign-ins with unknown tokens: try again in {retry} s.", "error")
        response = make_response(render_template("review_login.html"), 429)
        response.headers["Retry-After"] = str(retry)
        return response
    flash("Unknown or revoked token.", "error")
    return render_template("review_login.html"), 401


@bp.post("/logout")
def logout():
    """End the session: its row is deleted, so a saved cookie opens nothing."""
    session.end()
    return redirect(url_for("review_page.login"), 303)


@bp.get("")
def index():
    """Open review items, UNKNOWN/SENT operations, and one page (``?page=``) of drafts
    awaiting approval with their approvals, narrowed by ``?site=``, ``?state=`` and ``?q=``
    (:mod:`gateway.editorial.desk_filter`; a bad one: the problem's page, 422)."""
    tenant = g.principal.tenant
    sites = review_board.site_names(tenant)
    desk = desk_filter.parse(request.args, sites)  # ?site=&state=&q= (issue 56)
    total = review_board.count_awaiting(tenant, desk)
    pages = max(1, -(-total // review_board.CARDS_PER_PAGE))
    # a page past the end shows no cards and links to the last one (not the last one's cards)
    page = validation.parse_int(request.args.get("page"), "/page", default=1) or 1
    window = config().inflight_window
    return render_template(
        "review.html",
        principal=g.principal,
        items=desk_words.name_items(tenant, review_board.open_items(tenant, window)),
        pending=review_board.pending_operations(tenant),
        failed=desk_words.name_failed(tenant, review_board.failed_operations(tenant)),
        cards=review_board.awaiting_approval(
            config(), tenant, _image_url, page, review_board.CARDS_PER_PAGE, desk
        ),
        cards_total=total,
        approved_total=review_board.count_approved(tenant, desk),
        sent_back_total=review_board.count_sent_back(tenant, desk),
        desk=desk,
        desk_states=desk_filter.STATES,
        sites=sites,
        page=page,
        pages=pages,
        missed=scheduling.missed_schedules(tenant),
        over_budget=budgets.exhausted_jobs(config(), tenant),
        approval_hours=review_board.APPROVAL_HOURS,
        grants=consent.grant_list(tenant),
        unverified=consent.UNVERIFIED,
    )


def _image_url(job_id: str, media_id: int) -> str:
    return url_for("review_page.job_image", job_id=job_id, media_id=media_id)


@bp.get("/jobs/<job_id>/media/<int:media_id>")
def job_image(job_id: str, media_id: int):
    """An image this job uploaded, fetched from WordPress with the site's credentials and
    streamed (so the page's ``img-src 'self'`` policy holds). Only the signed-in editor's
    tenant's jobs, and only attachments the job's ledger holds: never an open proxy."""
    content_type, chunks = previews.job_image(config(), _job(job_id), media_id)
    response = Response(chunks, mimetype=content_type)
    response.headers["Cache-Control"] = "private, max-age=300"
    # the editor's share and the site slot are held until the last byte is sent (or the
    # editor goes away), not given back at the request's end before the stream starts
    response.call_on_close(site_slots.hand_over_held())
    return response


@bp.get("/reviews/<int:review_id>/compare")
def compare(review_id: int):
    """A suspected duplicate side by side (:mod:`gateway.editorial.side_by_side`): the draft
    beside each post WordPress holds, differences marked, and the decisions one click each
    (posted to :func:`resolve`, which brings the editor back to the desk)."""
    view = side_by_side.compare(config(), g.principal.tenant, review_id, _image_url)
    return render_template("review_compare.html", principal=g.principal, **view)


@bp.post("/reviews/<int:review_id>/resolve")
@roles("editor", "admin")
def resolve(review_id: int):
    """``decision`` = ``same_as`` (with ``post_id``), ``distinct``, or for an agent's request
    ``approve``/``deny``/``dismiss`` (with an optional ``reason``)."""
    body = {"decision": request.form.get("decision", "")}
    if body["decision"] == "same_as":
        body["post_id"] = _form_int("post_id")
    if request.form.get("reason"):
        body["reason"] = request.form["reason"]
    validation.validate("review_resolve", body)
    try:
        resolved = resolution.resolve_review(
            config(),
            g.principal.tenant,
            review_id,
            body["decision"],
            body.get("post_id"),
            g.principal.name,
            body.get("reason"),
        )
    except exc.ReviewDecided as error:  # in the page's words, not the API's
        stands = review_board.standing_words(
            *(error.extensions.get(name) for name in DECIDED_MEMBERS)
        )
        subject = desk_words.item_subject(g.principal.tenant, review_id)
        flash(f"{subject} was not changed: {stands}.", "error")
        return _back()
    flash(desk_words.decided(g.principal.tenant, resolved.body, resolved.replayed), "info")
    return _back()


@bp.post("/jobs/<job_id>/budgets/<name>")
@roles("editor", "admin")
def raise_budget(job_id: str, name: str):
    """Raise a job's exhausted budget to ``limit`` (the same call as the JSON API)."""
    job = _job(job_id)
    body = {"limit": _form_int("limit")}
    validation.validate("budget", body)
    view = budgets.raise_ceiling(
        config(), job.tenant, job.job_id, name, body["limit"], g.principal.name
    )
    flash(f"Job {job_id}: {name} budget raised to {view['limit']}.", "info")
    return _back()


@bp.post("/jobs/<job_id>/approve")
@roles("editor")
def approve(job_id: str):
    """Approve what the page showed: ``task_version``, ``content_sha256``, ``post_id``."""
    job = _job(job_id)
    body = review_board.approval_body(
        _form_int("task_version"),
        request.form.get("content_sha256", ""),
        _form_int("post_id"),
        config().approval_max_days,
    )
    validation.validate("approval", body)
    approval, _unchecked = approvals.approve(target_for(config(), job), body, g.principal.name)
    view = approvals.approval_view(approval)
    flash(
        f"Approved job {job_id} v{view['task_version']} (approval {view['approval_id']}, "
        f"post {view['post_id']}) until {previews.minute(view['expires_at'])}.",
        "info",
    )
    return _back()


@bp.post("/jobs/<job_id>/approvals/<int:approval_id>/revoke")
@roles("editor")
def revoke(job_id: str, approval_id: int):
    """Revoke an approval."""
    job = _job(job_id)
    target = target_for(config(), job)
    approval = approvals.revoke(job, approval_id, g.principal.name, target)
    flash(f"Approval {approval.id} of job {job_id} revoked.", "info")
    return _back()


@bp.post("/jobs/<job_id>/publish")
@roles("editor")
def publish(job_id: str):
    """Publish under a valid approval (the same ledger operation as the JSON API)."""
    outcome = publishing.publish(side_effect_target(_job(job_id)), g.principal.name)
    view = action_body(publishing.ACTION, outcome)
    again = " (already published: nothing sent)" if view["replayed"] else ""
    flash(
        f"Job {job_id}: post {view['post_id']} is now "
        f"{PUBLISHED_WORDS.get(view['status'], view['status'] or view['state'])}{again}.",
        "info",
    )
    return _back()


@bp.post("/jobs/<job_id>/operations/retry")
@roles("editor", "admin")
def retry_operation(job_id: str):
    """Let a FAILED operation be sent again (form fields ``operation_key``, ``reason``)."""
    body = {"operation_key": request.form.get("operation_key", ""), "reason": ""}
    body["reason"] = request.form.get("reason", "").strip()
    validation.validate("operation_retry", body)
    retries.retry_failed(_job(job_id), body["operation_key"], body["reason"], g.principal)
    flash(
        f"{body['operation_key']} will be sent again by its next identical request, after "
        "a lookup in WordPress.",
        "info",
    )
    return _back()
