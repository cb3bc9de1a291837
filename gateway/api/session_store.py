"""Flask's session, kept on the server for the review page (:mod:`gateway.tenancy.review_sessions`).

Flask's default session is a signed cookie: whatever it holds travels with the browser and a
saved copy stays valid until it expires, logout or not. Here the cookie (``gateway_review``,
path ``/review``, HttpOnly, SameSite=Lax) carries only a random id; everything else lives in
the ledger. Only ``/review`` requests open a stored session: the JSON API under ``/v1`` reads
no cookie and never touches the table. (Flask-Session would do the same over SQLAlchemy or
Redis; the ledger is peewee, and this adapter is ~80 lines.)

Views end a session with ``session.end()`` (logout) and rotate its id with
``session.regenerate()`` (sign-in, against session fixation).
"""

from __future__ import annotations

import datetime as dt
import logging

from flask.sessions import SessionInterface
from flask.sessions import SessionMixin
from peewee import OperationalError
from werkzeug.datastructures import CallbackDict

from gateway.tenancy import review_sessions

log = logging.getLogger(__name__)
COOKIE = "gateway_review"
PATH = "/review"


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

    def open_session(self, app, request) -> LedgerSession:
        if not request.path.startswith(PATH):
            return LedgerSession()
        sid = request.cookies.get(COOKIE)
        try:
            data = review_sessions.load(sid, self.idle) if sid else None
        except OperationalError as error:  # ledger down: signed out, never a trace
            log.error("review sessions unavailable: %s", error)
            data = None
        return LedgerSession(data, sid) if data is not None else LedgerSession()

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
