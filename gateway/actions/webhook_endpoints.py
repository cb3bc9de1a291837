"""Webhook endpoints (issue 57): where a tenant's workflows hear its events, each with the
event types it chose and a signing secret of its own (Standard Webhooks 1.0, "Signature
scheme": ``whsec_`` + base64 of 32 random bytes, HMAC-SHA256).

* **made by a workflow** (``POST /v1/webhook-endpoints``, the workflow or admin role, the
  token's tenant): the URL passes the notification URL's egress guard
  (:func:`gateway.actions.notifications.check_url`), the event types are names of
  :data:`gateway.core.states.WORKFLOW_EVENTS` or ``["*"]``, at most
  ``GATEWAY_WEBHOOK_ENDPOINTS_PER_TENANT`` live endpoints per tenant. The secret is shown once,
  in that answer (and in a rotation's): the ledger keeps it sealed with Fernet
  (:func:`gateway.core.sealing.fernet`, purpose :data:`PURPOSE`), never in plaintext.
* **only later events**: an endpoint gets the event rows decided after it was made
  (``from_event_id``: the newest event row's id then).
* **rotated** (``POST .../secret``): a new secret; the previous one still signs, as a second
  signature, for :data:`OVERLAP` (24 h), so receivers can switch without losing a delivery.
* **deleted** (``DELETE``): set once (``deleted_at``); its pending deliveries stop (REFUSED,
  :func:`gateway.operations.transitions.stop_deliveries`).
* **the notification URL** (``gateway notifications set-url``) is the tenant's *legacy*
  endpoint: every event, today's flat JSON body, unsigned until a secret is rotated in.

Another tenant's endpoint is a 404, as if absent. Source: docs/api.md, "Webhook endpoints".
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import secrets

from gateway.actions import notifications
from gateway.core import exceptions as exc
from gateway.core import sealing
from gateway.core.config import Config
from gateway.core.states import ANY_EVENT
from gateway.core.states import EVENT_ALIASES
from gateway.core.states import WORKFLOW_EVENTS
from gateway.ledger import db
from gateway.ledger import moves
from gateway.ledger.models import ENDPOINT_DELETED
from gateway.ledger.models import Notification
from gateway.ledger.models import WebhookEndpoint
from gateway.operations import transitions

log = logging.getLogger(__name__)

PURPOSE = b"webhook-secret"  # the Fernet key's HKDF info: secrets sealed for nothing else
SECRET_PREFIX = "whsec_"
OVERLAP = dt.timedelta(hours=24)  # a rotated secret still signs this long
PUBLIC_ID_PREFIX = "ep_"
MAX_DESCRIPTION = 200
LEGACY_DESCRIPTION = "notification URL (gateway notifications set-url)"


def new_secret() -> str:
    """``whsec_`` + base64 of 32 random bytes (Standard Webhooks 1.0: a secret of 24 to 64
    bytes, base64 after the ``whsec_`` prefix)."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _fernet(config: Config):
    if not config.secret_key:
        raise exc.GatewayError("GATEWAY_SECRET_KEY is required to seal a webhook secret")
    return sealing.fernet(config.secret_key, PURPOSE)


def _seal(config: Config, secret: str) -> str:
    return _fernet(config).encrypt(secret.encode("ascii")).decode("ascii")


def signing_secrets(config: Config, row: WebhookEndpoint, now: dt.datetime) -> list[str]:
    """The secrets that sign a delivery to ``row`` at ``now`` (UTC, naive): the current one,
    then the previous one while its overlap lasts; empty for an endpoint without a secret (a
    legacy endpoint never rotated: unsigned, as before schema version 18)."""
    sealed = [row.secret_sealed]
    expires = row.previous_secret_expires_at
    if row.previous_secret_sealed and expires is not None and expires > now:
        sealed.append(row.previous_secret_sealed)
    fernet = _fernet(config) if any(sealed) else None
    return [fernet.decrypt(s.encode("ascii")).decode("ascii") for s in sealed if s]


def check_event_types(event_types) -> list[str]:
    """``event_types`` as stored: a non-empty list of names of
    :data:`gateway.core.states.WORKFLOW_EVENTS` (an alias such as ``ready_for_approval`` is
    stored as the name it stands for), duplicates dropped, or ``["*"]`` alone.

    Raises:
        ValidationFailed (422, pointer ``/event_types/{i}``): an unknown name, ``*`` beside
            other names, or an empty list.
    """
    if not isinstance(event_types, list) or not event_types:
        raise _bad_types("/event_types", 'a non-empty list of event types, or ["*"]')
    if ANY_EVENT in event_types:
        if len(event_types) != 1:
            raise _bad_types("/event_types", '"*" (every event) stands alone')
        return [ANY_EVENT]
    chosen: list[str] = []
    for index, name in enumerate(event_types):
        name = EVENT_ALIASES.get(name, name) if isinstance(name, str) else name
        if name not in WORKFLOW_EVENTS:
            allowed = ", ".join(WORKFLOW_EVENTS)
            raise _bad_types(f"/event_types/{index}", f"{name!r} is not one of: {allowed}, *")
        if name not in chosen:
            chosen.append(name)
    return chosen


def _bad_types(pointer: str, why: str) -> exc.GatewayError:
    return exc.ValidationFailed(
        f"event_types: {why} (GET /v1/event-types lists them)",
        errors=[{"pointer": pointer, "message": why}],
    )


def _newest_event_id() -> int:
    newest = Notification.select(Notification.id).order_by(Notification.id.desc()).first()
    return newest.id if newest else 0


def live(tenant: str):
    """The tenant's endpoints not deleted, oldest first (a peewee query)."""
    return (
        WebhookEndpoint.select()
        .where(WebhookEndpoint.tenant == tenant, WebhookEndpoint.deleted_at.is_null())
        .order_by(WebhookEndpoint.id)
    )


def _check_cap(config: Config, tenant: str) -> None:
    cap = config.webhook_endpoints_per_tenant
    if cap and live(tenant).count() >= cap:
        raise exc.WebhookEndpointLimit(
            f"tenant {tenant} has {cap} webhook endpoints, the most it may have "
            "(GATEWAY_WEBHOOK_ENDPOINTS_PER_TENANT): delete one first"
        )


def create(
    config: Config, tenant: str, url: str, event_types, description: str | None = None
) -> tuple[WebhookEndpoint, str]:
    """Make an endpoint of ``tenant`` for ``url`` subscribed to ``event_types``.

    Returns ``(row, secret)``: ``secret`` in plaintext, for the one answer that shows it.

    Raises:
        ValidationFailed (422): a refused URL (:func:`notifications.check_url`, pointer
            ``/url``), bad event types (:func:`check_event_types`), a description over 200
            characters (``/description``).
        WebhookEndpointLimit (409): the tenant has ``webhook_endpoints_per_tenant`` already.
    """
    chosen = check_event_types(event_types)
    if description is not None and len(description) > MAX_DESCRIPTION:
        raise exc.ValidationFailed(
            f"description: at most {MAX_DESCRIPTION} characters",
            errors=[{"pointer": "/description", "message": f"at most {MAX_DESCRIPTION}"}],
        )
    notifications.check_url(config, url, "webhook URL")
    secret = new_secret()
    sealed = _seal(config, secret)
    with db.atomic():
        _check_cap(config, tenant)
        row = WebhookEndpoint.create(
            public_id=PUBLIC_ID_PREFIX + secrets.token_hex(12),
            tenant=tenant,
            url=url,
            event_types=chosen,
            description=description,
            secret_sealed=sealed,
            from_event_id=_newest_event_id(),
        )
    log.info("tenant=%s: webhook endpoint %s created", tenant, row.public_id)
    return row, secret


def get(tenant: str, public_id: str) -> WebhookEndpoint:
    """The tenant's live endpoint ``public_id``.

    Raises:
        NotFound (404): no such endpoint of this tenant (another tenant's, a deleted one).
    """
    row = WebhookEndpoint.get_or_none(
        WebhookEndpoint.public_id == public_id,
        WebhookEndpoint.tenant == tenant,
        WebhookEndpoint.deleted_at.is_null(),
    )
    if row is None:
        raise exc.NotFound(f"no webhook endpoint {public_id[:40]!r} for this tenant")
    return row


def delete(tenant: str, public_id: str) -> WebhookEndpoint:
    """Delete the tenant's endpoint (set once: of two deletes one wins, the other is a 404)
    and stop its pending deliveries (REFUSED). Returns the row as deleted.

    Raises:
        NotFound (404): as :func:`get`.
    """
    row = get(tenant, public_id)
    with db.atomic():
        moved = moves.move(
            ENDPOINT_DELETED, {"id": row.id}, db.utcnow(), (None,), legacy_tenant=None
        )
        if moved != 1:
            raise exc.NotFound(f"no webhook endpoint {public_id[:40]!r} for this tenant")
        stopped = transitions.stop_deliveries(row.id, "its webhook endpoint was deleted")
    log.info(
        "tenant=%s: webhook endpoint %s deleted (%d deliveries stopped)", tenant, public_id, stopped
    )
    return row


def rotate(config: Config, tenant: str, public_id: str) -> tuple[WebhookEndpoint, str]:
    """A new secret for the tenant's endpoint; the current one becomes the previous, which
    still signs for :data:`OVERLAP`. Returns ``(row, new secret)``.

    Raises:
        NotFound (404): as :func:`get`.
    """
    secret = new_secret()
    sealed = _seal(config, secret)
    while True:  # conditional on the secret as read: of two rotations at once, both count
        row = get(tenant, public_id)
        now = db.utcnow()
        current = WebhookEndpoint.secret_sealed
        rotated = (
            WebhookEndpoint.update(
                secret_sealed=sealed,
                previous_secret_sealed=row.secret_sealed,
                previous_secret_expires_at=now + OVERLAP if row.secret_sealed else None,
                secret_rotated_at=now,
            )
            .where(
                WebhookEndpoint.id == row.id,
                current.is_null() if row.secret_sealed is None else current == row.secret_sealed,
            )
            .execute()
        )
        if rotated:
            break
    log.info("tenant=%s: webhook endpoint %s secret rotated", tenant, public_id)
    return WebhookEndpoint.get_by_id(row.id), secret


def legacy_of(tenant: str) -> WebhookEndpoint | None:
    """The tenant's legacy endpoint (its notification URL), or None."""
    return WebhookEndpoint.get_or_none(WebhookEndpoint.legacy_tenant == tenant)


def set_legacy_url(config: Config, tenant: str, url: str) -> WebhookEndpoint:
    """``gateway notifications set-url``: the tenant's legacy endpoint gets ``url`` (made if
    absent: every event, today's body, no secret). A legacy endpoint made while the tenant
    has, or ever had, any endpoint (a workflow's, or a deleted legacy one) gets only the
    events decided after it, as every endpoint does; only a tenant's very first endpoint
    gets its events not delivered anywhere yet, as the notification URL always did.

    Raises:
        ValidationFailed: the URL is refused (:func:`notifications.check_url`).
    """
    notifications.check_url(config, url)
    with db.atomic():
        row = legacy_of(tenant)
        if row is not None:
            WebhookEndpoint.update(url=url).where(WebhookEndpoint.id == row.id).execute()
            return WebhookEndpoint.get_by_id(row.id)
        had_one = WebhookEndpoint.select().where(WebhookEndpoint.tenant == tenant).exists()
        return WebhookEndpoint.create(
            public_id=PUBLIC_ID_PREFIX + secrets.token_hex(12),
            tenant=tenant,
            url=url,
            event_types=[ANY_EVENT],
            description=LEGACY_DESCRIPTION,
            secret_sealed=None,
            from_event_id=_newest_event_id() if had_one else 0,
            legacy=True,
            legacy_tenant=tenant,
        )


def view(row: WebhookEndpoint, secret: str | None = None, shown: bool = False) -> dict:
    """The API's shape of an endpoint (docs/api.md, "Webhook endpoints"); ``secret`` only in
    the answer that made it or rotated it (``shown``: the member is present, maybe null)."""
    body = {
        "id": row.public_id,
        "url": row.url,
        "event_types": list(row.event_types),
        "description": row.description,
        "legacy": row.legacy,
        "created_at": db.rfc3339(row.created_at),
        "secret_rotated_at": db.rfc3339(row.secret_rotated_at),
    }
    if shown:
        body["secret"] = secret
    return body
