"""The MCP authorization server's clients, as the ledger keeps them (issue 43).

* **Client ID Metadata Documents** (``kind`` ``cimd``): the client id is the HTTPS URL of the
  client's metadata document. What was fetched is cached here until ``expires_at``
  (``GATEWAY_OAUTH_CIMD_CACHE_SECONDS``); fetching it is the authorization server's
  (through the egress guard), not this module's.
* **Dynamic Client Registration** (``kind`` ``dcr``, RFC 7591): a random client id for a
  public client (``token_endpoint_auth_method: none``, no secret). A registration no editor
  has approved is forgotten after ``GATEWAY_OAUTH_DCR_UNUSED_HOURS``; an approved one stays.

``now`` is naive UTC (:func:`gateway.ledger.db.utcnow` when None).
"""

from __future__ import annotations

import datetime as dt
import secrets

from gateway.ledger import db
from gateway.ledger.oauth_models import OAuthClient

CIMD = "cimd"
DCR = "dcr"
KEPT = dt.timedelta(days=3650)  # an approved registration: kept while the ledger is


def _now(now: dt.datetime | None) -> dt.datetime:
    return now if now is not None else db.utcnow()


def known(client_id: str, now: dt.datetime | None = None) -> OAuthClient | None:
    """The client ``client_id`` while its row is current (a cached document not yet due for
    a fetch, a registration not expired), or None."""
    return OAuthClient.get_or_none(
        OAuthClient.client_id == client_id, OAuthClient.expires_at > _now(now)
    )


def remember_document(
    client_id: str, metadata: dict, cache_for: dt.timedelta, now: dt.datetime | None = None
) -> None:
    """Cache the metadata document fetched from ``client_id`` (its URL) for ``cache_for``,
    replacing what an earlier fetch cached."""
    now = _now(now)
    OAuthClient.insert(
        client_id=client_id,
        kind=CIMD,
        metadata=metadata,
        created_at=now,
        expires_at=now + cache_for,
    ).on_conflict(
        conflict_target=[OAuthClient.client_id],
        update={OAuthClient.metadata: metadata, OAuthClient.expires_at: now + cache_for},
    ).execute()


def register(
    metadata: dict,
    unused_for: dt.timedelta,
    now: dt.datetime | None = None,
    client_id: str | None = None,
) -> str:
    """Register a public client (RFC 7591 §3.2.1) with ``metadata`` as accepted; returns its
    client id (``client_id`` when the registration endpoint minted one, e.g. the ``mcp``
    SDK's random UUID, else ``dcr-`` and 22 random characters), forgotten after
    ``unused_for`` unless an editor approves it (:func:`note_approved`)."""
    client_id = client_id or "dcr-" + secrets.token_urlsafe(16)
    now = _now(now)
    OAuthClient.create(
        client_id=client_id,
        kind=DCR,
        metadata={**metadata, "client_id": client_id},
        created_at=now,
        expires_at=now + unused_for,
    )
    return client_id


def note_approved(client_id: str, now: dt.datetime | None = None) -> None:
    """An editor approved the client: note it, and keep a dynamic registration from expiring."""
    now = _now(now)
    OAuthClient.update(last_used_at=now).where(OAuthClient.client_id == client_id).execute()
    OAuthClient.update(expires_at=now + KEPT).where(
        OAuthClient.client_id == client_id, OAuthClient.kind == DCR
    ).execute()


def forget_expired(now: dt.datetime | None = None) -> int:
    """Delete expired registrations and stale cached documents; returns how many went."""
    return OAuthClient.delete().where(OAuthClient.expires_at <= _now(now)).execute()
