"""Inbound OpenAI webhooks (``POST /v1/webhooks/openai``): verify, store, then answer.

The signature is verified on the raw body by the SDK (``client.webhooks.unwrap``: Standard
Webhooks headers ``webhook-id``/``webhook-timestamp``/``webhook-signature``, HMAC-SHA256, a
timestamp more than 300 s old or ahead refused). A missing header raises ``ValueError`` in the
SDK and a bad signature ``InvalidWebhookSignatureError``: both are 400 here, with nothing
stored. A verified event is inserted under the unique ``event_id`` and committed *before* the
view answers 2xx; a duplicate id is 2xx and is not processed again. The event's content is only
a hint: the worker retrieves the current session before it acts.
"""

from __future__ import annotations

import logging

from gateway.agents import sessions
from gateway.agents.openai_sdk import openai
from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.ledger import unique
from gateway.ledger.models import WebhookEvent
from gateway.operations import perform

log = logging.getLogger(__name__)


def _verifier(config: Config) -> openai.OpenAI:
    if not config.openai_webhook_secret:
        raise exc.AgentNotConfigured("set GATEWAY_OPENAI_WEBHOOK_SECRET to accept webhooks")
    if config.openai_api_key:
        return sessions.client(config)
    # Verification makes no API call; a client without the project key can verify.
    return sessions.client_for("webhook-verification-only", config.openai_base_url)


def receive(config: Config, raw: bytes, headers: dict) -> dict:
    """Verify and store one delivery.

    Returns ``{"event_id", "type", "duplicate"}``.

    Raises:
        WebhookSignatureInvalid (400): bad, missing or stale signature (nothing stored).
        AgentNotConfigured (503): no webhook secret configured.
    """
    verifier = _verifier(config)
    try:
        event = verifier.webhooks.unwrap(raw, headers, secret=config.openai_webhook_secret)
    except (openai.InvalidWebhookSignatureError, ValueError) as error:
        log.warning("webhook refused: %s", error)
        raise exc.WebhookSignatureInvalid(str(error)) from None
    event_type = getattr(event, "type", None) or "unknown"
    data = getattr(event, "data", None)
    session_id = getattr(data, "id", None) if event_type.startswith("agent.session.") else None
    _row, stored = unique.insert_or_get(
        lambda: WebhookEvent.create(
            event_id=event.id,
            event_type=event_type,
            session_id=session_id,
            payload=event.model_dump(mode="json"),
        )
    )
    duplicate = not stored
    perform.crash_point(config, "after_webhook_stored")
    log.info("webhook %s %s session=%s duplicate=%s", event.id, event_type, session_id, duplicate)
    return {"event_id": event.id, "type": event_type, "duplicate": duplicate}
