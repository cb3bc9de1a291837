"""The ledger's tables: tokens, sites, jobs, side-effect operations, review items, counters.

One row in :class:`Operation` is one side effect, keyed by its operation key
``{tenant}/{job_id}/v{task_version}/{action}[/{slot}]``. Rows are never deleted because a call
failed. Claims rely on the unique constraint on ``operation_key`` and on conditional UPDATEs
whose row counts decide who won (never read-then-write).
"""

from __future__ import annotations

import json

from peewee import BooleanField
from peewee import DateTimeField
from peewee import IntegerField
from peewee import Model
from peewee import TextField

# The operation states are gateway.core.states's; importable from here too, where the 23
# modules that compare a row's state import them (``as`` marks the re-export).
from gateway.core import states
from gateway.core.states import CONFIRMED as CONFIRMED
from gateway.core.states import FAILED as FAILED
from gateway.core.states import PENDING
from gateway.core.states import PREPARED as PREPARED
from gateway.core.states import SENT as SENT
from gateway.core.states import STATES as STATES
from gateway.core.states import UNKNOWN as UNKNOWN
from gateway.ledger import moves
from gateway.ledger.db import database
from gateway.ledger.db import rfc3339
from gateway.ledger.db import utcnow


class JSONField(TextField):
    """JSON stored as text, identical on SQLite and PostgreSQL."""

    def db_value(self, value):
        if value is None:
            return None
        return json.dumps(value, ensure_ascii=False, sort_keys=True)

    def python_value(self, value):
        return None if value is None else json.loads(value)


class BaseModel(Model):
    class Meta:
        database = database
        legacy_table_names = False


class Token(BaseModel):
    """An API token: only its SHA-256 is stored. Roles: workflow, editor, admin. ``name`` is
    unique per tenant (revoked tokens included), so audit records name exactly one token."""

    token_hash = TextField(unique=True)
    tenant = TextField()
    role = TextField()
    name = TextField()
    created_at = DateTimeField(default=utcnow)
    revoked_at = DateTimeField(null=True)

    class Meta:
        indexes = ((("tenant", "name"), True),)


class Site(BaseModel):
    """A WordPress site of a tenant; the application password is stored encrypted."""

    tenant = TextField()
    name = TextField()
    url = TextField()
    username = TextField()
    password_encrypted = TextField()
    credential_version = IntegerField(default=1)
    transport = TextField(default="rest")
    # What WordPress reports about itself in its /wp-json/ index (``url``, ``home``): two
    # sites with the same pair are one install, whatever URLs reach it. NULL until first use.
    install_url = TextField(null=True)
    install_home = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    updated_at = DateTimeField(default=utcnow)
    # Where the site serves its REST API, as ``gateway sites add`` discovered it (schema
    # version 16): ``{url}/wp-json/`` or ``{url}/index.php?rest_route=/``; NULL: ``{url}/wp-json/``.
    rest_root = TextField(null=True)

    class Meta:
        indexes = ((("tenant", "name"), True),)


class Job(BaseModel):
    """One article job of a tenant (``job_id`` unique per tenant)."""

    tenant = TextField()
    job_id = TextField()
    site = TextField()
    task_version = IntegerField(default=1)
    session_id = TextField(null=True)
    phase = TextField(null=True)
    post_id = IntegerField(null=True)
    cancelled = BooleanField(default=False)
    cancel_reason = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    updated_at = DateTimeField(default=utcnow, index=True)
    # When a client last asked something of the job that a run asks (schema version 13): a
    # job's idle time counts from here, never from what the sweep or a recovery's lookups
    # wrote (gateway.jobs.records.idle_seconds).
    last_request_at = DateTimeField(default=utcnow, null=True)
    # An editor's decision on the current task version (schema version 17; NULL: none yet):
    # ``approved`` or ``changes_requested`` (gateway.core.states.DECISION_MOVES).
    decision = TextField(null=True)

    class Meta:
        indexes = ((("tenant", "job_id"), True),)


class Operation(BaseModel):
    """One side effect: intent, state, remote id and receipt (no secrets, ever)."""

    operation_key = TextField(unique=True)
    tenant = TextField()
    job_id = TextField()
    task_version = IntegerField()
    action = TextField()
    slot = TextField(null=True)
    request_hash = TextField()
    state = TextField(default=PREPARED, index=True)
    # who holds an object: gateway.operations.ownership
    remote_id = IntegerField(null=True, index=True)
    # the WordPress type remote_id is (post, attachment, term), as the action's registry
    # entry said at claim (schema version 8); None: it binds no WordPress object
    binds = TextField(null=True)
    intent = JSONField(null=True)  # what read-back needs to rebuild a receipt; no secrets
    receipt = JSONField(null=True)
    problem = JSONField(null=True)
    attempts = IntegerField(default=0)
    fencing_token = IntegerField(null=True)
    credential_version = IntegerField(null=True)
    created_at = DateTimeField(default=utcnow)
    updated_at = DateTimeField(default=utcnow)
    sent_at = DateTimeField(null=True)
    pruned_at = DateTimeField(null=True)  # bulky parts dropped by gateway prune

    class Meta:
        indexes = ((("tenant", "job_id"), False),)

    def as_dict(self) -> dict:
        """The row as JSON, as the API, the review page and the agents show it (receipts hold
        no secrets): ``{"operation_key", "action", "slot", "task_version", "state",
        "remote_id", "request_hash", "attempts", "receipt", "problem", "fencing_token",
        "credential_version", "created_at", "updated_at", "sent_at", "pruned_at"}``, times
        as RFC 3339 UTC strings (docs/api.md, "Ledger rows")."""
        return {
            "operation_key": self.operation_key,
            "action": self.action,
            "slot": self.slot,
            "task_version": self.task_version,
            "state": self.state,
            "remote_id": self.remote_id,
            "request_hash": self.request_hash,
            "attempts": self.attempts,
            "receipt": self.receipt,
            "problem": self.problem,
            "fencing_token": self.fencing_token,
            "credential_version": self.credential_version,
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
            "sent_at": rfc3339(self.sent_at),
            "pruned_at": rfc3339(self.pruned_at),
        }


class Review(BaseModel):
    """An item for an editor: a suspected duplicate, or one identifier on several objects."""

    tenant = TextField()
    job_id = TextField()
    operation_key = TextField(index=True)
    kind = TextField()
    detail = JSONField()
    status = TextField(default=states.REVIEW_OPEN)  # the declared initial state (REVIEW_MOVES)
    decision = TextField(null=True)
    post_id = IntegerField(null=True)
    resolved_by = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    resolved_at = DateTimeField(null=True)


class Counter(BaseModel):
    """Acceptance counters (unauthorized calls, rejected checkpoint advances, ...)."""

    name = TextField(unique=True)
    value = IntegerField(default=0)


class Checkpoint(BaseModel):
    """A client phase of one task version with its artifacts ``[{role, uri, sha256}]``."""

    tenant = TextField()
    job_id = TextField()
    task_version = IntegerField()
    phase = TextField()
    artifacts = JSONField()
    data = JSONField(null=True)  # scanned for secrets before it is stored
    created_at = DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("tenant", "job_id", "task_version", "phase"), True),)


class Lease(BaseModel):
    """A job's lease: one row per job, kept after release so that tokens only increase.
    ``owner`` is NULL once released; ``expires_at`` is judged by the database clock."""

    tenant = TextField()
    job_id = TextField()
    owner = TextField(null=True)
    fencing_token = IntegerField(default=1)
    expires_at = DateTimeField()
    updated_at = DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("tenant", "job_id"), True),)


class ApprovalRequest(BaseModel):
    """A verified job put in front of editors (one per task version; repeat-safe)."""

    tenant = TextField()
    job_id = TextField()
    task_version = IntegerField()
    post_id = IntegerField()
    content_sha256 = TextField()
    requested_by = TextField()
    created_at = DateTimeField(default=utcnow)
    updated_at = DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("tenant", "job_id", "task_version"), True),)


class Approval(BaseModel):
    """An editor's approval of exactly one task version, content digest and post."""

    tenant = TextField()
    job_id = TextField()
    task_version = IntegerField()
    post_id = IntegerField()
    content_sha256 = TextField()
    expires_at = DateTimeField()
    approved_by = TextField()  # the editor token's name
    publish_at = DateTimeField(null=True)  # scheduled publishing, naive UTC (schema version 4)
    created_at = DateTimeField(default=utcnow)
    revoked_at = DateTimeField(null=True)
    revoked_by = TextField(null=True)

    class Meta:
        indexes = ((("tenant", "job_id"), False),)


class JobEvent(BaseModel):
    """One entry of a job's timeline (schema version 17): an event or decision
    (:data:`gateway.core.states.TIMELINE_EVENTS`) with who made it (a token's name, NULL: the
    gateway itself), when, the task version and digest it concerns, and an editor's note.
    Written in the transaction of the change it records (gateway.editorial.timeline)."""

    tenant = TextField()
    job_id = TextField()
    task_version = IntegerField()
    event = TextField()
    actor = TextField(null=True)
    content_sha256 = TextField(null=True)
    note = TextField(null=True)
    created_at = DateTimeField(default=utcnow)

    class Meta:
        table_name = "job_event"
        indexes = ((("tenant", "job_id"), False),)


class OperationRetry(BaseModel):
    """An editor's or admin's decision to send a FAILED operation again: who, why, and the
    refusal it overrode (schema version 2). The row of :class:`Operation` itself moves from
    FAILED to UNKNOWN, so the next identical request reconciles first and then sends."""

    operation_key = TextField(index=True)
    tenant = TextField()
    job_id = TextField()
    requested_by = TextField()
    role = TextField()
    reason = TextField()
    previous_problem = JSONField(null=True)
    created_at = DateTimeField(default=utcnow)


class AgentSession(BaseModel):
    """An OpenAI agent session bound to one job (``session_id`` unique across the gateway,
    whatever the tenant). A job's session changes only with a task-version bump: the row of
    the old session stays (its pending actions are never answered). Counters and limits of
    the agent's work live here; ``summary`` is the last stored state rebuild."""

    session_id = TextField(unique=True)
    tenant = TextField()
    job_id = TextField()
    task_version = IntegerField()  # the job's version when this session was bound
    status = TextField(null=True)  # as last retrieved: idle, in_progress, requires_action...
    summary = JSONField(null=True)
    summary_at = DateTimeField(null=True)
    resume_attempts = IntegerField(default=0)
    tool_calls_answered = IntegerField(default=0)
    tokens_used = IntegerField(default=0)  # from the session's best-effort ``usage``
    deadline_at = DateTimeField(null=True)
    stopped_reason = TextField(null=True)  # a stop: a person decides; never retried
    stopped_credential_version = IntegerField(null=True)
    checked_at = DateTimeField(null=True)  # last retrieve by the worker
    created_at = DateTimeField(default=utcnow)
    # Schema version 10 (gateway.agents.permissions, .polling, .environments, .evidence):
    # the SHA-256 of the API token that bound the session (NULL: bound before version 10);
    bound_token_hash = TextField(null=True)
    # when the poll retrieves the session next (NULL: due now), how many retrieves in a row
    # showed nothing new, and how many failed in a row (both lengthen the interval);
    next_poll_at = DateTimeField(null=True, index=True)
    poll_streak = IntegerField(default=0)
    poll_failures = IntegerField(default=0)
    # the session's environment as last seen (retrieve, agent.environment.* events, the
    # connection hook): {"id", "type", "status", "reason", "event", "updated_at"}; no secret;
    environment_id = TextField(null=True, index=True)
    environment = JSONField(null=True)
    # what the session's saved items were read up to, and the checkpoints they claim
    evidence = JSONField(null=True)

    class Meta:
        indexes = ((("tenant", "job_id"), False),)


class WebhookEvent(BaseModel):
    """A verified webhook delivery, stored (unique ``event_id``) before it is answered 2xx.
    ``status``: pending -> processing -> done (or ignored); ``attempts`` counts claims."""

    event_id = TextField(unique=True)
    event_type = TextField()
    session_id = TextField(null=True, index=True)
    payload = JSONField()
    status = TextField(default=states.EVENT_PENDING, index=True)
    attempts = IntegerField(default=0)
    received_at = DateTimeField(default=utcnow)
    claimed_at = DateTimeField(null=True)
    processed_at = DateTimeField(null=True)
    # an event whose session could not be handled (OpenAI or the site unreachable, the job's
    # lease held) goes back to pending and is claimed again from then (schema version 10)
    next_attempt_at = DateTimeField(null=True)


class AgentWorkerState(BaseModel):
    """The agent workers' shared state (schema version 10): one row per name (``openai``).
    ``paused_reason`` is set when OpenAI refused the gateway's API key (401/403): every
    worker holding that key (``key_fingerprint``, an HMAC of it, never the key) stops calling
    OpenAI until a worker with another key clears it."""

    name = TextField(unique=True)
    paused_reason = TextField(null=True)
    paused_status = IntegerField(null=True)
    paused_at = DateTimeField(null=True)
    key_fingerprint = TextField(null=True)
    updated_at = DateTimeField(default=utcnow)


class Budget(BaseModel):
    """How much of one budget a job has used (:mod:`gateway.jobs.budgets`): ``allowed`` is NULL
    while the configured default applies, and set once an editor raised it."""

    tenant = TextField()
    job_id = TextField()
    name = TextField()
    used = IntegerField(default=0)
    allowed = IntegerField(null=True)
    raised_by = TextField(null=True)
    updated_at = DateTimeField(default=utcnow)

    class Meta:
        indexes = ((("tenant", "job_id", "name"), True),)


class RateWindow(BaseModel):
    """Requests of one API token (its hash) in one fixed time window
    (:mod:`gateway.tenancy.rate_limits`)."""

    key = TextField()
    window = IntegerField()
    count = IntegerField(default=0)

    class Meta:
        indexes = ((("key", "window"), True),)


class SiteSlot(BaseModel):
    """One held unit of a site's concurrency limit; the unique (site, slot) pair is the lock.
    ``expires_at`` frees the slot of a process that died while holding it."""

    site_id = IntegerField()
    slot = IntegerField()
    holder = TextField()
    expires_at = DateTimeField()

    class Meta:
        indexes = ((("site_id", "slot"), True),)


class EditorSession(BaseModel):
    """A review-page session, kept on the server: the browser's cookie carries only a random
    session id, of which only the SHA-256 is stored here. ``data`` is the Flask session (the
    CSRF token, flashed messages, the signed-in editor); ``token_hash`` names the editor's
    token so that revoking it ends the session at the next request. Deleted at logout; ends
    at ``expires_at`` (fixed lifetime) or after the idle timeout since ``last_seen_at``."""

    sid_hash = TextField(unique=True)
    data = JSONField(default=dict)
    token_hash = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    last_seen_at = DateTimeField(default=utcnow)
    expires_at = DateTimeField(index=True)


class NotificationTarget(BaseModel):
    """Where a tenant's editors are notified: an admin's setting (``gateway notifications
    set-url``), schema version 6."""

    tenant = TextField(unique=True)
    url = TextField()
    updated_at = DateTimeField(default=utcnow)


class Notification(BaseModel):
    """An event row (schema version 6; issue 57: every event of the vocabulary,
    :mod:`gateway.jobs.events`), decided once: ``key`` is
    ``{tenant}/{job_id}/v{task_version}/notify/{event}`` (``/{timeline entry id}`` for an event
    per entry) and is the ``Idempotency-Key`` of every delivery attempt. Since schema version 18
    each delivery is a :class:`WebhookDelivery` (its state, attempts, refusals, claim): this
    row's ``state``, ``attempts``, ``refusals``, ``claimed_until``, ``last_error`` and
    ``delivered_at`` hold what they held when migration 18 copied them into its delivery to the
    legacy endpoint, and are written no more."""

    key = TextField(unique=True)
    tenant = TextField()
    job_id = TextField()
    task_version = IntegerField()
    event = TextField()
    payload = JSONField()
    state = TextField(default=PENDING, index=True)
    attempts = IntegerField(default=0)
    refusals = IntegerField(default=0)
    claimed_until = DateTimeField(null=True)
    last_error = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    delivered_at = DateTimeField(null=True)

    class Meta:
        indexes = ((("tenant", "job_id"), False),)


class WebhookEndpoint(BaseModel):
    """Where a tenant's workflow hears its events (schema version 18, issue 57): a URL, the
    event types it subscribed to (``["*"]``: all), and its signing secret sealed with Fernet
    (:func:`gateway.core.sealing.fernet`, purpose ``webhook-secret``; never plaintext here).
    After a rotation the previous secret still signs until ``previous_secret_expires_at``.
    It receives the event rows (:class:`Notification`) whose id is above ``from_event_id``
    (the newest when it was made); ``fanned_through`` is the event id up to which its
    deliveries were made (:mod:`gateway.actions.deliveries`). ``legacy_tenant`` is set on the
    tenant's notification URL (``legacy``, ``gateway notifications set-url``: all events,
    today's flat body; unique: one per tenant). ``deleted_at`` is set once (DELETE): it gets
    nothing more."""

    public_id = TextField(unique=True)
    tenant = TextField(index=True)
    url = TextField()
    event_types = JSONField()
    description = TextField(null=True)
    secret_sealed = TextField(null=True)  # None: unsigned (a legacy endpoint never rotated)
    previous_secret_sealed = TextField(null=True)
    previous_secret_expires_at = DateTimeField(null=True)
    secret_rotated_at = DateTimeField(null=True)
    from_event_id = IntegerField(default=0)
    fanned_through = IntegerField(default=0)
    legacy = BooleanField(default=False)
    legacy_tenant = TextField(null=True, unique=True)  # the tenant, while the legacy one lives
    created_at = DateTimeField(default=utcnow)
    deleted_at = DateTimeField(null=True)


class WebhookDelivery(BaseModel):
    """One event row (``event_id``: :class:`Notification`'s id) to one endpoint
    (``endpoint_id``: :class:`WebhookEndpoint`'s id), unique together (schema version 18): made
    once, so never sent twice once DELIVERED. ``state`` is PENDING until the endpoint answered
    2xx, then DELIVERED, or REFUSED after ``GATEWAY_NOTIFICATION_MAX_REFUSALS`` definite
    refusals or when its endpoint was deleted; ``claimed_until`` lets one sender at a time
    deliver and holds a refused row back (its back-off). States move only through
    :mod:`gateway.operations.transitions`."""

    event_id = IntegerField()
    endpoint_id = IntegerField(index=True)
    tenant = TextField()
    state = TextField(default=PENDING, index=True)
    attempts = IntegerField(default=0)
    refusals = IntegerField(default=0)
    claimed_until = DateTimeField(null=True)
    last_error = TextField(null=True)
    created_at = DateTimeField(default=utcnow)
    delivered_at = DateTimeField(null=True)

    class Meta:
        indexes = ((("event_id", "endpoint_id"), True),)


class ResumePoint(BaseModel):
    """What a workflow needs to finish a job version that stopped mid-run (schema version 6):
    the article and each image's URL, or for an image sent as base64 only its digest (never
    image bytes); how many times it was resumed and when last."""

    tenant = TextField()
    job_id = TextField()
    task_version = IntegerField()
    payload = JSONField()
    attempts = IntegerField(default=0)
    last_attempt_at = DateTimeField(null=True)
    updated_at = DateTimeField(default=utcnow)
    # The gateway's refusal of this version's content (a 413, 415 or 422 answer to its media
    # or draft), kept until the resume point is saved again (schema version 13): resuming
    # cannot help, so the job goes to a person.
    refusal = JSONField(null=True)

    class Meta:
        indexes = ((("tenant", "job_id", "task_version"), True),)


class RequestKey(BaseModel):
    """A client's own request key (the ``Idempotency-Key`` header of a write request, schema
    version 9), per API token (its SHA-256, never the token): the request's fingerprint and,
    once answered with 2xx, the answer itself (status and JSON body), returned for every retry
    with the same key until ``expires_at``. ``state``: IN_PROGRESS while a request holds it
    (until ``claimed_until``), DONE with a stored answer, OPEN when the last attempt was not
    answered 2xx (the next identical request runs again). :mod:`gateway.tenancy.request_keys`.
    """

    token_hash = TextField()
    key = TextField()
    fingerprint = TextField()
    state = TextField()
    status = IntegerField(null=True)
    body = JSONField(null=True)
    claimed_until = DateTimeField(null=True)
    created_at = DateTimeField(default=utcnow)
    expires_at = DateTimeField(index=True)

    class Meta:
        indexes = ((("token_hash", "key"), True),)


TABLES = [
    Token,
    Site,
    Job,
    Operation,
    Review,
    Counter,
    Checkpoint,
    Lease,
    ApprovalRequest,
    Approval,
    OperationRetry,
    AgentSession,
    WebhookEvent,
    AgentWorkerState,
    Budget,
    RateWindow,
    SiteSlot,
    EditorSession,
    NotificationTarget,
    Notification,
    ResumePoint,
    RequestKey,
    JobEvent,
    WebhookEndpoint,
    WebhookDelivery,
]


def counter_name(name: str, tenant: str | None = None) -> str:
    """The :class:`Counter` row of ``name``: the global figure, or ``{name}/{tenant}`` for one
    tenant's share (tenants never contain ``/``: it separates an operation key's parts)."""
    return name if tenant is None else f"{name}/{tenant}"


def bump_counter(name: str, by: int = 1, tenant: str | None = None) -> None:
    """Add ``by`` to counter ``name`` atomically (insert on first use).

    With ``tenant`` (a refusal whose tenant is known: a valid token of the wrong role, or for
    another tenant's job) the tenant's own row grows too; without it (a 401 with no valid
    token) only the global figure does."""
    names = [name] if tenant is None else [name, counter_name(name, tenant)]
    for key in names:
        updated = Counter.update(value=Counter.value + by).where(Counter.name == key).execute()
        if not updated:
            Counter.insert(name=key, value=by).on_conflict(
                conflict_target=[Counter.name], update={Counter.value: Counter.value + by}
            ).execute()


def counter(name: str, tenant: str | None = None) -> int:
    """Current value of counter ``name``, global or of ``tenant`` (0 when never bumped)."""
    row = Counter.get_or_none(Counter.name == counter_name(name, tenant))
    return row.value if row else 0


# ----------------------------------------------------------------------------- state columns
# Every column holding a state the gateway owns, declared once with its moves (the tables:
# gateway.core.states); every write of one goes through gateway.ledger.moves.move.
OPERATION_STATE = moves.declare(
    Operation,
    "state",
    states.OPERATION_MOVES,
    owner="gateway.operations.transitions",
    initial=(PREPARED,),
)
NOTIFICATION_STATE = moves.declare(
    Notification,
    "state",
    states.NOTIFICATION_MOVES,
    owner="gateway.operations.transitions",
    initial=(PENDING,),
)
WEBHOOK_DELIVERY_STATE = moves.declare(
    WebhookDelivery,
    "state",
    states.DELIVERY_MOVES,
    owner="gateway.operations.transitions",
    initial=(PENDING,),
)
ENDPOINT_DELETED = moves.declare(
    WebhookEndpoint, "deleted_at", moves.SET_ONCE, owner="gateway.actions.webhook_endpoints"
)
WEBHOOK_EVENT_STATUS = moves.declare(
    WebhookEvent,
    "status",
    states.EVENT_MOVES,
    owner="gateway.agents.worker",
    initial=(states.EVENT_PENDING,),
)
REQUEST_KEY_STATE = moves.declare(
    RequestKey,
    "state",
    states.REQUEST_KEY_MOVES,
    owner="gateway.tenancy.request_keys",
    initial=(states.KEY_IN_PROGRESS,),
)
# A lease is held while ``owner`` is set (its fencing rules: gateway.jobs.leases).
LEASE_OWNER = moves.declare(
    Lease, "owner", states.LEASE_MOVES, owner="gateway.jobs.leases", initial=(states.SET,)
)
JOB_CANCELLED = moves.declare(
    Job, "cancelled", states.CANCEL_MOVES, owner="gateway.jobs.records", initial=(False,)
)
AGENT_STOP = moves.declare(
    AgentSession,
    "stopped_reason",
    states.STOP_MOVES,
    owner="gateway.agents.stops",
    initial=(None,),  # not stopped
)
APPROVAL_REVOKED = moves.declare(
    Approval, "revoked_at", moves.SET_ONCE, owner="gateway.editorial.approvals"
)
TOKEN_REVOKED = moves.declare(Token, "revoked_at", moves.SET_ONCE, owner="gateway.tenancy.tokens")
WORKER_PAUSE = moves.declare(
    AgentWorkerState,
    "paused_reason",
    states.PAUSE_MOVES,
    owner="gateway.agents.openai_key",
    initial=(states.SET,),
)
JOB_PHASE = moves.declare(
    Job,
    "phase",
    states.PHASE_MOVES,
    owner="gateway.jobs.records",
    initial=(None,),  # no phase yet
)
JOB_DECISION = moves.declare(
    Job,
    "decision",
    states.DECISION_MOVES,
    owner="gateway.editorial.decisions",
    initial=(None,),  # no decision yet
)
REVIEW_STATUS = moves.declare(
    Review,
    "status",
    states.REVIEW_MOVES,
    owner="gateway.editorial.reviews",
    initial=(states.REVIEW_OPEN,),
)
# Not state columns (never declared, written as they come): copies of another system's state
# - AgentSession.status (an OpenAI session's status as last retrieved) and the status inside
# AgentSession.environment (an OpenAI environment's, as last seen) - and ApprovalRequest,
# which holds no state (one row per task version; a repeated request refreshes its digest).
# The OAuth tables' set-once columns are declared beside them (gateway.ledger.oauth_models).
