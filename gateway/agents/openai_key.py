"""The gateway's one OpenAI key, refused: the agent workers pause instead of looping.

The gateway holds one OpenAI project key (``GATEWAY_OPENAI_API_KEY``). When OpenAI answers
401 or 403 to it, no session of any tenant can be read or answered with it, and none of them
did anything wrong: stopping them one by one would end every tenant's work for good. Instead
the refusal is recorded once in the ledger (:class:`gateway.ledger.models.AgentWorkerState`,
row ``openai``) with the HTTP status, a reason and the key's *fingerprint* - an HMAC-SHA256 of
the key under ``GATEWAY_SECRET_KEY``, never the key - and every worker whose key has that
fingerprint skips its passes (no OpenAI call at all) until the key changes. A worker started
with another key clears the pause at its first pass and works again; so does a pass after the
operator restarts the workers with the new key. The pause is shown by ``gateway doctor``
(check ``agent_worker``), ``GET /metrics`` (``gateway_agent_worker_paused``) and every job's
``agent.worker`` (docs/api.md, "Agent").

Source: OpenAI API reference, "Error codes" (401 invalid or revoked key, 403 no access).
"""

from __future__ import annotations

import hashlib
import hmac
import logging

from gateway.core.config import Config
from gateway.core.states import SET
from gateway.ledger import db
from gateway.ledger import moves
from gateway.ledger import unique
from gateway.ledger.models import WORKER_PAUSE
from gateway.ledger.models import AgentWorkerState

log = logging.getLogger(__name__)
NAME = "openai"
# Which answers refuse the key (401, 403): gateway.core.answers, verdict KEY_REFUSED.


def fingerprint(config: Config) -> str:
    """HMAC-SHA256 (hex) of the configured key under the secret key: tells two keys apart
    without storing either."""
    return hmac.new(
        config.secret_key.encode(), config.openai_api_key.encode(), hashlib.sha256
    ).hexdigest()


def refused(config: Config, status: int, detail: str) -> None:
    """Record that OpenAI refused this process's key (``status`` 401 or 403): every worker
    holding the same key pauses. ``detail`` is OpenAI's message (it never contains the key:
    OpenAI shows at most its last four characters)."""
    reason = f"OpenAI refused the gateway's API key ({status}): {detail[:300]}"
    now = db.utcnow()
    values = {
        "paused_status": status,
        "paused_at": now,
        "key_fingerprint": fingerprint(config),
        "updated_at": now,
    }

    def pause() -> int:  # paused or not, the row pauses now (gateway.core.states.PAUSE_MOVES)
        return moves.move(WORKER_PAUSE, {"name": NAME}, reason, (None, SET), **values)

    def first() -> AgentWorkerState:
        return AgentWorkerState.create(name=NAME, paused_reason=reason, **values)

    if not pause() and not unique.insert_or_get(first)[1]:
        pause()  # another worker's refusal made the row first
    log.error("agent workers paused: %s", reason)


def paused(config: Config) -> AgentWorkerState | None:
    """The pause that holds for this process's key, or None. A pause recorded for another
    key is cleared here: the key was changed, so work goes on."""
    row = AgentWorkerState.get_or_none(AgentWorkerState.name == NAME)
    if row is None or row.paused_reason is None:
        return None
    if hmac.compare_digest(row.key_fingerprint or "", fingerprint(config)):
        return row
    same_key = (AgentWorkerState.key_fingerprint == row.key_fingerprint,)  # as read
    cleared = moves.move(
        WORKER_PAUSE,
        {"id": row.id},
        None,
        SET,
        when=same_key,
        paused_status=None,
        updated_at=db.utcnow(),
    )
    if cleared:
        log.warning("agent workers resumed: the OpenAI key changed since %s", row.paused_at)
    return None


def view() -> dict:
    """``{"paused", "reason", "status", "since"}`` as stored now (the job views, doctor and
    metrics show the same row)."""
    row = AgentWorkerState.get_or_none(AgentWorkerState.name == NAME)
    if row is None or row.paused_reason is None:
        return {"paused": False, "reason": None, "status": None, "since": None}
    return {
        "paused": True,
        "reason": row.paused_reason,
        "status": row.paused_status,
        "since": db.rfc3339(row.paused_at),
    }
