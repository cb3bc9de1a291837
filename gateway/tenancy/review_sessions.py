"""Review-page sessions, kept in the ledger (table ``editor_session``).

The browser's cookie carries only a random session id (32 bytes, URL-safe); the ledger keeps
its SHA-256, the session's data (the signed-in editor, the CSRF token, flashed messages) and
its clock: a session ends at ``expires_at`` (a fixed lifetime from sign-in, however busy it
is), after ``idle`` without a request, at logout (the row is deleted, so a saved cookie opens
nothing), and when its editor's token is revoked (rows deleted at revocation; the page also
re-checks the token on every request).

No Flask here: :mod:`gateway.api.session_store` adapts this to Flask's session interface.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets

from gateway.core.digests import sha256_hex
from gateway.ledger import db
from gateway.ledger import unique
from gateway.ledger.models import EditorSession

log = logging.getLogger(__name__)


def new_sid() -> str:
    """A fresh random session id (256 bits)."""
    return secrets.token_urlsafe(32)


def load(sid: str, idle: dt.timedelta) -> dict | None:
    """The data of live session ``sid`` (and its last use recorded as now), or None when it
    does not exist, passed its fixed lifetime, or sat idle longer than ``idle`` (such a row
    is deleted)."""
    if not sid or len(sid) > 100:
        return None
    row = EditorSession.get_or_none(EditorSession.sid_hash == sha256_hex(sid))
    if row is None:
        return None
    now = db.utcnow()
    if row.expires_at <= now or row.last_seen_at + idle <= now:
        EditorSession.delete().where(EditorSession.id == row.id).execute()
        log.info(
            "review session %s ended: %s", row.id, "lifetime" if row.expires_at <= now else "idle"
        )
        return None
    EditorSession.update(last_seen_at=now).where(EditorSession.id == row.id).execute()
    return dict(row.data or {})


def save(
    sid: str, data: dict, lifetime: dt.timedelta, idle: dt.timedelta, token_hash: str | None
) -> dt.datetime:
    """Store ``data`` under ``sid``: a new session starts its fixed lifetime now, an existing
    one keeps its own. Starting one first deletes the sessions that ended (lifetime or
    ``idle``), so sign-in pages opened and left do not pile up. Returns the session's
    ``expires_at`` (naive UTC)."""
    sid_hash, now = sha256_hex(sid), db.utcnow()
    updated = (
        EditorSession.update(data=data, token_hash=token_hash, last_seen_at=now)
        .where(EditorSession.sid_hash == sid_hash)
        .execute()
    )
    if not updated:
        purge(now, idle)
        unique.insert_or_get(  # the same new id saved twice at once: the first is kept
            lambda: EditorSession.create(
                sid_hash=sid_hash,
                data=data,
                token_hash=token_hash,
                created_at=now,
                last_seen_at=now,
                expires_at=now + lifetime,
            )
        )
    return EditorSession.get(EditorSession.sid_hash == sid_hash).expires_at


def end(sid: str | None) -> None:
    """Delete session ``sid`` (logout, or a new id at sign-in)."""
    if sid:
        EditorSession.delete().where(EditorSession.sid_hash == sha256_hex(sid)).execute()


def end_for_token(token_hash: str) -> int:
    """Delete every session signed in with the token whose SHA-256 is ``token_hash``;
    returns how many."""
    return EditorSession.delete().where(EditorSession.token_hash == token_hash).execute()


def purge(now: dt.datetime, idle: dt.timedelta) -> int:
    """Delete sessions past their fixed lifetime or idle since ``now - idle``; returns how
    many."""
    return (
        EditorSession.delete()
        .where((EditorSession.expires_at <= now) | (EditorSession.last_seen_at <= now - idle))
        .execute()
    )
