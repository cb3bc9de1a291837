"""The editor's consent page for MCP clients signing in with OAuth (issue 43), on the review
site: same blueprint, cookie path (``/review``), session, sign-in and CSRF rules as the rest
of :mod:`gateway.api.review_page`.

* ``GET /review/oauth?request=ID`` (where ``/authorize`` sends the browser): the review page's
  ``_before`` keeps ``ID`` sealed in the server-side session (:func:`gateway.oauth.consent.seal`;
  never a ``next=`` URL, never a hidden field) and answers 303 to ``/review/oauth``, so the id
  leaves the address bar and the history. Not signed in, the sign-in comes next and then
  lands back here (the login handler looks at the session).
* ``GET /review/oauth``: the first editor who opens the request claims it
  (:func:`gateway.tenancy.grants.claim`); no other editor, of this tenant or another, can
  decide it after, and workflow tokens cannot sign in at all. The page shows what
  :mod:`gateway.oauth.consent` describes, and the tenant's sites as checkboxes.
* Both decisions carry ``request_ref``, the page's name for the request it showed
  (:func:`gateway.oauth.consent.reference`); one that names another request than the session
  holds is refused (409, nothing decided, the held request dropped): a navigation to
  ``/review/oauth?request=<another>`` in the editor's browser (the session cookie is
  ``SameSite=Lax``) while the page is open cannot have the editor approve what they did not
  see.
* ``POST /review/oauth/approve`` (``sites``: at least one, only the tenant's own): a grant and a
  code (``GATEWAY_OAUTH_CODE_SECONDS``), then 303 to the client's redirect URI with ``code``,
  ``state`` and ``iss`` (RFC 6749 §4.1.2, RFC 9207). ``POST /review/oauth/deny``: 303 with
  ``error=access_denied`` (RFC 6749 §4.1.2.1). Their responses, and the page's, allow the
  redirect's origin in the CSP ``form-action`` (Chromium checks it on the redirect after a
  POST).
* A request that is unknown, expired, decided, or another editor's: a plain error page, never a
  redirect to the client (an open redirector otherwise).
* ``POST /review/oauth/grants/<id>/revoke``: an editor or admin revokes one of the tenant's
  grants; its next call is refused (the grant is read on every call).

Neither the pending id nor a code is ever logged or rendered; the code appears only in the
approve response's ``Location``, which is the point of it.
"""

from __future__ import annotations

import datetime as dt
import logging

from flask import flash
from flask import g
from flask import make_response
from flask import redirect
from flask import render_template
from flask import request
from flask import session
from flask import url_for

from gateway.api.http import config
from gateway.api.http import roles
from gateway.api.review_page import OAUTH_REQUEST
from gateway.api.review_page import bp
from gateway.core import mcp_listen
from gateway.core.page_headers import SECURITY_HEADERS
from gateway.ledger.oauth_models import OAuthClient
from gateway.oauth import consent
from gateway.oauth import redirects
from gateway.tenancy import grants
from gateway.tenancy import oauth_clients
from gateway.tenancy import sites as tenant_sites

log = logging.getLogger(__name__)
GONE = (
    "This sign-in request is unknown, has expired, was already decided, or was opened by "
    "another editor. Nothing was granted: ask the app to connect again."
)


def issuer() -> str:
    """The authorization server's issuer identifier for ``iss`` (RFC 9207 §2), exactly as
    the MCP listener's metadata names it (:func:`gateway.core.mcp_listen.of`:
    ``GATEWAY_PUBLIC_URL``, else the listener's loopback address); with no listener
    configured, this request's scheme and host. No trailing slash."""
    where = mcp_listen.of(config())
    return where.issuer if where is not None else request.host_url.rstrip("/")


def _held_id() -> str | None:
    """The pending id the session holds, unsealed, or None."""
    max_age = int(config().oauth_pending_minutes * 60) + 60
    return consent.unseal(config().secret_key, session.get(OAUTH_REQUEST), max_age)


SWAPPED = (
    "The sign-in request changed after this page was shown (another link was opened in this "
    "browser). Nothing was granted or denied: ask the app to connect again."
)
REF_FIELD = "request_ref"


def _not_the_one_shown(pending_id: str):
    """An error page (409) when the posted form names another request than
    ``pending_id``, the one the session holds (or names none), else None. The held request
    is dropped: whoever swapped it in is not the editor."""
    if consent.is_reference(config().secret_key, pending_id, request.form.get(REF_FIELD)):
        return None
    log.warning("review page: an OAuth decision for another request than shown was refused")
    session.pop(OAUTH_REQUEST, None)
    page = render_template("review_error.html", title="Sign-in request changed", detail=SWAPPED)
    return make_response(page, 409)


def _gone(title: str = "No such sign-in request", status: int = 404):
    session.pop(OAUTH_REQUEST, None)
    page = render_template("review_error.html", title=title, detail=GONE)
    return make_response(page, status)


def _with_form_action(response, view: consent.ClientView):
    """The review page's CSP with the redirect's origin added to ``form-action``."""
    policy = SECURITY_HEADERS["Content-Security-Policy"]
    if view.redirect_origin:
        policy = policy.replace("form-action 'self'", f"form-action 'self' {view.redirect_origin}")
    response.headers["Content-Security-Policy"] = policy
    return response


def _request_and_view():
    """``(pending id, request, view)``: the request the session holds, claimed by this
    editor, and what the page shows of it; the request and view are None when there is
    none to decide (no id held, unknown, expired, decided, another editor's, client gone)."""
    pending_id = _held_id()
    if pending_id is None:
        return None, None, None
    pending = grants.claim(pending_id, g.principal.token_hash)
    if pending is None:
        return pending_id, None, None
    client = OAuthClient.get_or_none(OAuthClient.client_id == pending.client_id)
    if client is None:
        return pending_id, None, None
    view = consent.describe(client.client_id, client.metadata, pending.redirect_uri)
    return pending_id, pending, view


@bp.get("/oauth", endpoint="oauth_consent")
@roles("editor")
def consent_page():
    """The consent page for the request the session holds (claimed by this editor)."""
    pending_id, pending, view = _request_and_view()
    if pending is None:
        return _gone()
    page = render_template(
        "review_oauth.html",
        principal=g.principal,
        view=view,
        scopes=pending.scopes,
        sites=tenant_sites.list_sites(g.principal.tenant),
        can=consent.CAN,
        cannot=consent.CANNOT,
        unverified=consent.UNVERIFIED,
        expires_at=pending.expires_at,
        request_ref=consent.reference(config().secret_key, pending_id),
    )
    return _with_form_action(make_response(page), view)


@bp.post("/oauth/approve")
@roles("editor")
def oauth_approve():
    """Approve the held request for the ticked ``sites``: 303 to the client with a code."""
    pending_id, pending, view = _request_and_view()
    if pending is None:
        return _gone()
    refused = _not_the_one_shown(pending_id)
    if refused is not None:
        return refused
    chosen = sorted(set(request.form.getlist("sites")))
    own = {s.name for s in tenant_sites.list_sites(g.principal.tenant)}
    if not chosen or not set(chosen) <= own:
        flash("Tick at least one of this tenant's sites: the app may use only those.", "error")
        return redirect(url_for("review_page.oauth_consent"), 303)
    lifetime = dt.timedelta(seconds=config().oauth_code_seconds)
    decision = grants.approve(
        pending_id,
        g.principal.token_hash,
        g.principal.tenant,
        chosen,
        g.principal.name,
        view.name,
        lifetime,
    )
    if decision is None:
        return _gone()
    oauth_clients.note_approved(pending.client_id)
    session.pop(OAUTH_REQUEST, None)
    log.info(
        "review page: %s approved an OAuth client (%s) for tenant %s, sites %s",
        g.principal.name,
        view.host_words,
        g.principal.tenant,
        ", ".join(chosen),
    )
    location = redirects.client_redirect(decision, issuer())
    return _with_form_action(redirect(location, 303), view)


@bp.post("/oauth/deny")
@roles("editor")
def oauth_deny():
    """Deny the held request: 303 to the client with ``error=access_denied``."""
    pending_id, pending, view = _request_and_view()
    if pending is None:
        return _gone()
    refused = _not_the_one_shown(pending_id)
    if refused is not None:
        return refused
    decision = grants.deny(pending_id, g.principal.token_hash)
    if decision is None:
        return _gone()
    session.pop(OAUTH_REQUEST, None)
    log.info("review page: %s denied an OAuth client (%s)", g.principal.name, view.host_words)
    location = redirects.client_redirect(decision, issuer())
    return _with_form_action(redirect(location, 303), view)


@bp.post("/oauth/grants/<int:grant_id>/revoke")
@roles("editor", "admin")
def oauth_revoke(grant_id: int):
    """Revoke one of the tenant's grants: every token it issued is refused from its next call."""
    if grants.revoke_for_tenant(g.principal.tenant, grant_id):
        log.info("review page: %s revoked OAuth grant %s", g.principal.name, grant_id)
        flash(f"Grant {grant_id} revoked: the app's next call is refused.", "info")
    else:
        flash(f"Grant {grant_id}: no live grant of this tenant has that number.", "error")
    return redirect(url_for("review_page.index"), 303)
