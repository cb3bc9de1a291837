"""The ledger's tables of the MCP authorization server (OAuth 2.1, issue 43): clients, pending
authorisations, grants, authorization codes and tokens.

Every secret - a pending authorisation's id, a code, an access or refresh token - is stored only
as its SHA-256, never in clear, and never in the ``/v1`` :class:`gateway.ledger.models.Token`
table: a ``/v1`` route can never accept an OAuth token. Single use is a conditional UPDATE of
``used_at`` whose row count decides who won (docs/architecture.md), never read-then-write.

Sources: OAuth 2.1 (draft-ietf-oauth-v2-1) §4.1 and §4.3; RFC 6819 §5.2.2.3 (refresh rotation);
RFC 7009 (revocation); RFC 7591 (dynamic registration); OAuth Client ID Metadata Documents
(draft-ietf-oauth-client-id-metadata-document).
"""

from __future__ import annotations

from peewee import AutoField
from peewee import BooleanField
from peewee import DateTimeField
from peewee import IntegerField
from peewee import TextField

from gateway.ledger import moves
from gateway.ledger.db import utcnow
from gateway.ledger.models import BaseModel
from gateway.ledger.models import JSONField


class OAuthClient(BaseModel):
    """A client the authorization server knows. ``kind``: ``cimd`` (``client_id`` is the URL
    of its metadata document, fetched and cached until ``expires_at``) or ``dcr`` (registered
    dynamically, RFC 7591: a random ``client_id``, a public client; unused registrations
    expire at ``expires_at``). ``metadata`` is the client's metadata as accepted (RFC 7591
    §2: ``redirect_uris``, ``client_name``, ``grant_types``, ...)."""

    client_id = TextField(unique=True)
    kind = TextField()
    metadata = JSONField()
    created_at = DateTimeField(default=utcnow)
    expires_at = DateTimeField(index=True)
    last_used_at = DateTimeField(null=True)

    class Meta:
        table_name = "oauth_client"


class OAuthPending(BaseModel):
    """An authorisation request waiting for an editor's decision (``GET /authorize`` made
    it; the consent page decides it): single use (``used_at``), short-lived. Only the
    SHA-256 of its id is stored; the id travels in the consent page's URL and the editor's
    server-side session, never in a ``next=`` URL or a hidden field. The first editor who
    opens it claims it (``claimed_by``, the SHA-256 of their token): no other editor, of this
    tenant or another, can decide it after."""

    id_hash = TextField(unique=True)
    client_id = TextField()
    redirect_uri = TextField()
    redirect_uri_explicit = BooleanField()
    code_challenge = TextField()
    resource = TextField()
    scopes = JSONField()
    state = TextField(null=True)
    claimed_by = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    expires_at = DateTimeField(index=True)
    used_at = DateTimeField(null=True)

    class Meta:
        table_name = "oauth_pending"


class OAuthGrant(BaseModel):
    """What an editor approved for one client: a tenant, a set of its sites and the tool
    routes (``scopes``). Its codes and tokens form one family: revoking the grant (an editor,
    ``gateway tokens revoke``, RFC 7009, or a reused code or refresh token) ends them all.
    ``principal_hash`` is the grant's stable caller key (rate limits, request keys), a random
    identifier, not a secret. ``last_used_at`` is written at most once a minute."""

    id = AutoField()
    tenant = TextField(index=True)
    sites = JSONField()
    scopes = JSONField()
    client_id = TextField()
    client_name = TextField()
    resource = TextField()
    approved_by = TextField()
    principal_hash = TextField(unique=True)
    created_at = DateTimeField(default=utcnow)
    last_used_at = DateTimeField(null=True)
    revoked_at = DateTimeField(null=True)
    revoked_why = TextField(null=True)

    class Meta:
        table_name = "oauth_grant"


class OAuthCode(BaseModel):
    """An authorization code (OAuth 2.1 §4.1.2): single use, expires in minutes, bound to its
    client, redirect URI, PKCE challenge (S256) and resource."""

    code_hash = TextField(unique=True)
    grant_id = IntegerField(index=True)
    client_id = TextField()
    redirect_uri = TextField()
    redirect_uri_explicit = BooleanField()
    code_challenge = TextField()
    expires_at = DateTimeField()
    used_at = DateTimeField(null=True)

    class Meta:
        table_name = "oauth_code"


class OAuthToken(BaseModel):
    """An access or refresh token (``kind``) of a grant. A refresh token is rotated at each
    use (``used_at``); presenting a used one again revokes its grant (reuse detection, OAuth
    2.1 §4.3.1, RFC 6819 §5.2.2.3)."""

    token_hash = TextField(unique=True)
    kind = TextField()
    grant_id = IntegerField(index=True)
    expires_at = DateTimeField()
    created_at = DateTimeField(default=utcnow)
    used_at = DateTimeField(null=True)

    class Meta:
        table_name = "oauth_token"


TABLES = [OAuthClient, OAuthPending, OAuthGrant, OAuthCode, OAuthToken]


# ----------------------------------------------------------------------------- state columns
# Set once, NULL -> a value, never back (gateway.ledger.moves.SET_ONCE); every write goes
# through gateway.ledger.moves.move with the owner's own rules as conditions (expiry, the
# claiming editor, the token's kind). Not a state column: OAuthPending.state, the client's
# own ``state`` parameter, returned to it unchanged (OAuth 2.1 §4.1.1).
PENDING_CLAIMED = moves.declare(
    OAuthPending, "claimed_by", moves.SET_ONCE, owner="gateway.tenancy.grants"
)
PENDING_USED = moves.declare(
    OAuthPending, "used_at", moves.SET_ONCE, owner="gateway.tenancy.grants"
)
GRANT_REVOKED = moves.declare(
    OAuthGrant, "revoked_at", moves.SET_ONCE, owner="gateway.tenancy.grants"
)
CODE_USED = moves.declare(
    OAuthCode, "used_at", moves.SET_ONCE, owner="gateway.tenancy.oauth_tokens"
)
TOKEN_USED = moves.declare(
    OAuthToken, "used_at", moves.SET_ONCE, owner="gateway.tenancy.oauth_tokens"
)
