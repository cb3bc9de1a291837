"""Flask's session, kept on the server for the review page (:mod:`gateway.tenancy.review_sessions`).

Flask's default session is a signed cookie: whatever it holds travels with the browser and a
saved copy stays valid until it expires, logout or not. Here the cookie (``gateway_review``,
path ``/review``, HttpOnly, SameSite=Lax) carries only a random id; everything else lives in
the ledger. Only ``/review`` requests open a stored session: the JSON API under ``/v1`` reads
no cookie and never touches the table. (Flask-Session would do the same over SQLAlchemy or
Redis; the ledger is peewee, and this adapter is ~80 lines.)

Views end a session with ``session.end()`` (logout) and rotate its id with
``session.regenerate()`` (sign-in, against session fixation).

A ledger row exists only for a signed-in editor: until a sign-in succeeds, what the page keeps
(the sign-in form's CSRF token, a flashed "unknown token") travels in a second cookie,
``gateway_review_login``, signed with the secret key by Flask's own signed-cookie session
(:class:`~flask.sessions.SecureCookieSessionInterface`, its own salt) and accepted for
``GATEWAY_SESSION_HOURS``. Anyone can open the sign-in page as often as they like without
writing to the ledger.
"""

from __future__ import annotations

import datetime as dt
import logging

from flask.sessions import SecureCookieSessionInterface
from flask.sessions import SessionInterface
from flask.sessions import SessionMixin
from itsdangerous import BadSignature
from werkzeug.datastructures import CallbackDict

from gateway.ledger import db
from gateway.tenancy import review_sessions

log = logging.getLogger(__name__)
COOKIE = "gateway_review"
SIGN_IN_COOKIE = "gateway_review_login"
PATH = "/review"


class _SignedCookie(SecureCookieSessionInterface):
    salt = "gateway-review-sign-in"  # never valid as any other signed value of the app


class LedgerSession(CallbackDict, SessionMixin):
    """A session dict that knows its id and whether it must be stored, ended or rotated."""

    def __init__(self, initial: dict | None = None, sid: str | None = None):
        def changed(_self):
            self.modified = True

        super().__init__(initial or {}, changed)
        self.sid = sid
        self.modified = False
        self.ended = False
        self.old_sid: str | None = None

    def end(self) -> None:
        """Delete this session on the server and the cookie in the browser (what the rest of
        the request stores, e.g. a sign-in page's CSRF token, starts a new session)."""
        self.clear()
        self.ended = True

    def regenerate(self) -> None:
        """Keep the data under a new id; the old id opens nothing from now on."""
        self.old_sid, self.sid = self.sid, None
        self.modified = True


class LedgerSessionInterface(SessionInterface):
    """Flask's :class:`SessionInterface` over :mod:`gateway.tenancy.review_sessions`."""

    def __init__(self, config):
        self.lifetime = dt.timedelta(hours=config.session_hours)
        self.idle = dt.timedelta(minutes=config.session_idle_minutes)
        self.signed = _SignedCookie()

    def open_session(self, app, request) -> LedgerSession:
        if not request.path.startswith(PATH):
            return LedgerSession()
        sid = request.cookies.get(COOKIE)
        try:
            data = review_sessions.load(sid, self.idle) if sid else None
        except db.LEDGER_ERRORS as error:  # ledger down: signed out, never a trace
            if not db.is_unavailable(error):
                raise
            log.error("review sessions unavailable: %s", error)
            db.discard_connection()  # the request's own statements get a live one, if any
            data = None
        if data is not None:
            return LedgerSession(data, sid)
        return LedgerSession(self._sign_in_data(app, request.cookies.get(SIGN_IN_COOKIE)))

    def _sign_in_data(self, app, value: str | None) -> dict | None:
        """What the signed sign-in cookie holds, or None (absent, forged, expired)."""
        serializer = self.signed.get_signing_serializer(app)
        if not value or serializer is None:
            return None
        try:
            data = serializer.loads(value, max_age=int(self.lifetime.total_seconds()))
        except BadSignature:
            return None
        return data if isinstance(data, dict) else None

    def _save_sign_in(self, app, session: LedgerSession, request, response, secure) -> None:
        if request.cookies.get(COOKIE):  # an ended or unknown stored session
            response.delete_cookie(COOKIE, path=PATH, secure=secure, httponly=True)
        if not session.modified:
            return
        if not session:
            response.delete_cookie(SIGN_IN_COOKIE, path=PATH, secure=secure, httponly=True)
            return
        value = self.signed.get_signing_serializer(app).dumps(dict(session))
        response.set_cookie(
            SIGN_IN_COOKIE, value, path=PATH, secure=secure, httponly=True, samesite="Lax"
        )

    def save_session(self, app, session: LedgerSession, response) -> None:
        from flask import request

        if not request.path.startswith(PATH):
            return
        secure = app.config.get("SESSION_COOKIE_SECURE", False)
        if session.ended:
            review_sessions.end(session.sid)
            session.sid = None
            if not session:  # nothing written since: the browser forgets the cookie
                response.delete_cookie(COOKIE, path=PATH, secure=secure, httponly=True)
                return
        if session.old_sid:
            review_sessions.end(session.old_sid)
        if not isinstance(session.get("editor"), dict):  # not signed in: no ledger row
            self._save_sign_in(app, session, request, response, secure)
            return
        if not session.modified or (not session and session.sid is None):
            return
        session.sid = session.sid or review_sessions.new_sid()
        editor = session.get("editor") if isinstance(session.get("editor"), dict) else {}
        expires = review_sessions.save(
            session.sid, dict(session), self.lifetime, self.idle, editor.get("token_sha256")
        )
        response.set_cookie(
            COOKIE,
            session.sid,
            expires=expires.replace(tzinfo=dt.UTC),
            path=PATH,
            secure=secure,
            httponly=True,
            samesite="Lax",
        )
        if request.cookies.get(SIGN_IN_COOKIE):  # signed in: the sign-in cookie is done
            response.delete_cookie(SIGN_IN_COOKIE, path=PATH, secure=secure, httponly=True)
