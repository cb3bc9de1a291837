"""The names of the gateway's states, in one place: an operation's ledger state, a job's status
and phases, a notification's state, a review item's status, a webhook event's status, a
request key's state.

Everything that stores, derives, shows or documents one of them imports it from here: the
ledger's models (:mod:`gateway.ledger.models` re-exports the operation states for its callers),
the job records (:mod:`gateway.jobs.records` derives a status), the HTTP API's response
schemas (:mod:`gateway.api.response_schemas`) and the MCP server's tool descriptions
(:mod:`gateway.mcp.tools`, which may import only ``gateway.core``). Which move between states
is legal is not decided here. Source: docs/api.md, "The ledger" and "Job status and phases".
"""

from __future__ import annotations

# --------------------------------------------------------------------------- operations
# An operation (one side effect, a ledger row) is PREPARED (intent stored) before the remote
# call, SENT just before it, then CONFIRMED on read-back evidence, FAILED on a definite
# refusal, or UNKNOWN (anything else after SENT) until reconciliation proves what happened.
# FAILED always means that nothing was created: a definite refusal, or a row never sent
# (NEVER_SENT below).
PREPARED = "PREPARED"
SENT = "SENT"
CONFIRMED = "CONFIRMED"
FAILED = "FAILED"
UNKNOWN = "UNKNOWN"
STATES = (PREPARED, SENT, CONFIRMED, FAILED, UNKNOWN)
# ``problem.reason`` of a FAILED row that was never sent: the request that stored its intent
# died before sending, and the sweep settled it once the in-flight window had passed
# (gateway.recovery.never_sent). The same request sends it (gateway.operations.perform).
NEVER_SENT = "never-sent"

# --------------------------------------------------------------------------- jobs
# A job's status is derived from its ledger rows, never stored; by precedence
# (gateway.jobs.records.status_of): cancelled > needs_review > unknown > failed > completed >
# in_progress.
IN_PROGRESS = "in_progress"
COMPLETED = "completed"
JOB_FAILED = "failed"
JOB_UNKNOWN = "unknown"
NEEDS_REVIEW = "needs_review"
CANCELLED = "cancelled"
STATUSES = (IN_PROGRESS, COMPLETED, JOB_FAILED, JOB_UNKNOWN, NEEDS_REVIEW, CANCELLED)

# A job's phases, in order: the first four posted by clients as checkpoints, the others set
# only by the gateway on its own evidence. A phase moves backwards only by a declared move
# (PHASE_MOVES, below).
SOURCES_COLLECTED = "sources_collected"
BODY_GENERATED = "body_generated"
STRUCTURE_CHECKED = "structure_checked"
IMAGES_PREPARED = "images_prepared"
DRAFT_CONFIRMED = "draft_confirmed"  # the draft is in WordPress, read back
VERIFIED = "verified"  # the draft passed read-back verification
APPROVAL_PENDING = "approval_pending"  # in front of editors (/review)
SCHEDULED = "scheduled"  # WordPress publishes it at its date (post status "future")
PUBLISHED = "published"  # post status "publish"
CLIENT_PHASES = (SOURCES_COLLECTED, BODY_GENERATED, STRUCTURE_CHECKED, IMAGES_PREPARED)
PHASES = (*CLIENT_PHASES, DRAFT_CONFIRMED, VERIFIED, APPROVAL_PENDING, SCHEDULED, PUBLISHED)
GATEWAY_PHASES = frozenset(PHASES) - frozenset(CLIENT_PHASES)
# Phase sets, each written once. Three are "done" in a different sense, and differ on purpose:
# the draft passed read-back verification: the job is completed, its agent's business succeeded
COMPLETED_PHASES = frozenset((VERIFIED, APPROVAL_PENDING, SCHEDULED, PUBLISHED))
# past the run: editors and the clock act, not a client's run (it never stalls, has nothing
# to resume); VERIFIED is not, a run that stopped before the approval request is unfinished
RUN_DONE_PHASES = frozenset((APPROVAL_PENDING, SCHEDULED, PUBLISHED))
# out of the editors' hands, published or scheduled to be: nothing left for an agent either;
# APPROVAL_PENDING is not, an agent may still ask for something while editors decide
RELEASED_PHASES = frozenset((SCHEDULED, PUBLISHED))
# a draft an editor can approve, or asked to: what the review board (/review) lists
AWAITING_APPROVAL_PHASES = frozenset((VERIFIED, APPROVAL_PENDING))
DRAFTING = "drafting"  # the stage of a job before its draft is confirmed (no phase)

# What a poller (GET /v1/job-changes, gateway.api.job_views), a notification receiver and a
# subscription (gateway.actions.notifications) are told about a job: needs_attention (no phase:
# a status that needs a person, or a stalled run) and the events below.
NEEDS_ATTENTION = "needs_attention"
# An editor's decision on a job's task version (issue 56): not a phase (phases never move
# backwards); a new task version clears it. Announced by the feed and the notifications too.
APPROVED = "approved"
CHANGES_REQUESTED = "changes_requested"
DECISIONS = (APPROVED, CHANGES_REQUESTED)
COMMENTED = "commented"  # an editor's comment (a timeline entry too)
REVOKED = "revoked"  # an approval was revoked (a timeline entry too)

# The event vocabulary (issue 57): every event a workflow may wait on, defined once and served
# the same way by GET /v1/event-types, GET /v1/job-changes, the event rows (``notification``)
# and their deliveries, the n8n triggers and the MCP tools. Each is decided by the gateway at
# the change, once per job version (approved, commented, scheduled and revoked: once per
# timeline entry, PER_ENTRY_EVENTS).
WORKFLOW_EVENTS = (
    APPROVAL_PENDING,
    APPROVED,
    CHANGES_REQUESTED,
    COMMENTED,
    SCHEDULED,
    PUBLISHED,
    NEEDS_ATTENTION,
    REVOKED,
    CANCELLED,
)
WORKFLOW_EVENT_DESCRIPTIONS = {
    APPROVAL_PENDING: "the draft is verified and waits for an editor (phase approval_pending)",
    APPROVED: "an editor approved the version",
    CHANGES_REQUESTED: "an editor requested changes (reason: the note)",
    COMMENTED: "an editor commented (reason: the comment)",
    SCHEDULED: "approved and scheduled: WordPress publishes the post at its date",
    PUBLISHED: "WordPress holds the post published (read back)",
    NEEDS_ATTENTION: "the job needs a person (failed, unknown, under review, stalled)",
    REVOKED: "an approval was revoked",
    CANCELLED: "the job was cancelled",
}
# Events decided once per timeline entry (their key ends in the entry's id), not per version:
# a comment, a revocation, an approval that moves the version's decision from none to approved
# (a second editor approving an approved version decides nothing new; a re-approval after a
# revocation does), a move to phase scheduled (again after an unschedule).
PER_ENTRY_EVENTS = (APPROVED, COMMENTED, SCHEDULED, REVOKED)
# The name POST /v1/jobs/{id}/notifications accepted before the vocabulary: an alias of
# approval_pending that keeps its key (``.../notify/ready_for_approval``), so a workflow posting
# either and the gateway's own decision are one event row; old rows stored it as their event.
READY_FOR_APPROVAL = "ready_for_approval"
EVENT_ALIASES = {READY_FOR_APPROVAL: APPROVAL_PENDING}
# The events a client may post itself (the others are the editors' and the gateway's to decide).
CLIENT_EVENTS = (APPROVAL_PENDING, READY_FOR_APPROVAL, PUBLISHED, NEEDS_ATTENTION)
# The feed's events (GET /v1/job-changes): the whole vocabulary.
CHANGE_EVENTS = WORKFLOW_EVENTS

# A job's timeline (``job_event`` rows, gateway.editorial.timeline): every decision and event
# with who, when, version and digest, written in the transaction of the change it records.
DRAFT_WRITTEN = "draft_written"  # the job reached DRAFT_CONFIRMED
APPROVAL_REQUESTED = "approval_requested"
RECONCILED = "reconciled"
REPAIRED = "repaired"
DUPLICATE_DECIDED = "duplicate_decided"  # an editor's same_as / distinct on a suspected duplicate
TIMELINE_EVENTS = (
    DRAFT_WRITTEN,
    VERIFIED,
    APPROVAL_REQUESTED,
    APPROVED,
    REVOKED,
    CHANGES_REQUESTED,
    COMMENTED,
    SCHEDULED,
    PUBLISHED,
    RECONCILED,
    REPAIRED,
    DUPLICATE_DECIDED,
    CANCELLED,
)

# A webhook endpoint's ``event_types`` (gateway.actions.webhook_endpoints) hold names of
# WORKFLOW_EVENTS, or ANY_EVENT alone for all of them.
ANY_EVENT = "*"

# --------------------------------------------------------------------------- notifications
# A notification is PENDING until the tenant's receiver answered 2xx, then DELIVERED, or
# REFUSED after GATEWAY_NOTIFICATION_MAX_REFUSALS definite refusals
# (gateway.actions.notifications; the moves: gateway.operations.transitions). Since schema
# version 18 the same states and moves are a webhook delivery's (one event row to one
# endpoint, gateway.actions.deliveries); a notification row keeps the state it had then.
PENDING = "PENDING"
DELIVERED = "DELIVERED"
REFUSED = "REFUSED"
NOTIFICATION_STATES = (PENDING, DELIVERED, REFUSED)
# What an event row's view says when it has no delivery and none is to come: no live endpoint
# of its tenant subscribes to its type, or each one that does was made after it (an endpoint
# gets only later events), or every endpoint the tenant had was deleted
# (gateway.actions.delivery_views.summary; ``last_error`` says which). Never stored: it is derived
# at every read, from the endpoints as they stand, and no move leads out of it, since no
# endpoint made later receives the event. A tenant that never had an endpoint keeps its events
# PENDING: its first notification URL (gateway notifications set-url) receives them.
UNSUBSCRIBED = "UNSUBSCRIBED"
NOTIFICATION_VIEW_STATES = (*NOTIFICATION_STATES, UNSUBSCRIBED)

# --------------------------------------------------------------------------- webhook events
# A stored webhook event (gateway.agents.worker) is pending until a worker claims it
# (processing), then done (its session was handled) or ignored (nothing of ours); one that
# could not be handled yet goes back to pending.
EVENT_PENDING = "pending"
EVENT_PROCESSING = "processing"
EVENT_DONE = "done"
EVENT_IGNORED = "ignored"
EVENT_STATUSES = (EVENT_PENDING, EVENT_PROCESSING, EVENT_DONE, EVENT_IGNORED)

# --------------------------------------------------------------------------- request keys
# A client's Idempotency-Key (gateway.tenancy.request_keys): held by a request, answered 2xx
# (its answer stored), or open again. Spelled in capitals as stored since schema version 9
# (not a job's status ``in_progress``: another column, another meaning).
KEY_IN_PROGRESS = "IN_PROGRESS"
KEY_DONE = "DONE"
KEY_OPEN = "OPEN"
KEY_STATES = (KEY_IN_PROGRESS, KEY_DONE, KEY_OPEN)

# Any value but NULL, in a move table whose column holds a value the gateway does not name: a
# lease's owner (held), a stop's reason, a set-once timestamp (gateway.ledger.moves.SET_ONCE).
SET = "<set>"


# --------------------------------------------------------------------------- review items
# A review item (what the gateway could not decide alone) is OPEN until an editor decides it.
# The decision is claimed first (DECIDING, one conditional UPDATE: of two editors deciding at
# once one wins, before any WordPress write the decision causes), then RESOLVED once applied;
# a claim whose write failed goes back to OPEN (gateway.editorial.reviews).
REVIEW_OPEN = "open"
REVIEW_DECIDING = "deciding"
REVIEW_RESOLVED = "resolved"
REVIEW_STATUSES = (REVIEW_OPEN, REVIEW_DECIDING, REVIEW_RESOLVED)
REVIEW_UNRESOLVED = (REVIEW_OPEN, REVIEW_DECIDING)  # still holds its operation back


# --------------------------------------------------------------------------- moves
# Which move between states is legal, as data: each table is declared once against its column
# (gateway.ledger.moves.declare, beside the models in gateway.ledger.models) and every write of
# the column goes through gateway.ledger.moves.move. From-state -> the states it may move to.

# Every state an operation may still leave for CONFIRMED (a confirmation's ``expect``).
NOT_CONFIRMED = (PREPARED, SENT, UNKNOWN, FAILED)

# from-state -> the states an operation may move to, and who makes each move:
OPERATION_MOVES: dict[str, frozenset[str]] = {
    PREPARED: frozenset(
        {
            SENT,  # perform's send claim; an agent input's send
            CONFIRMED,  # unchanged media bytes reused; a cancel no session needed
            FAILED,  # the sweep: its request died before sending (NEVER_SENT; not agent inputs)
            UNKNOWN,  # the same, for an action no client repeats (resend_if_absent): the
            # sweep's next pass looks it up and sends it (gateway.recovery.never_sent)
        }
    ),
    SENT: frozenset(
        {
            CONFIRMED,  # read back after the write, or found by lookup
            FAILED,  # a definite refusal
            UNKNOWN,  # no proof either way; absent at reconciliation; a page in front of WP
            PREPARED,  # the call never left the gateway (perform._not_sent: back to before)
            SENT,  # a resend after the in-flight window; _not_sent restoring a SENT row
        }
    ),
    UNKNOWN: frozenset(
        {
            SENT,  # resent after reconciliation proved it absent
            CONFIRMED,  # found by lookup
            UNKNOWN,  # reconciliation found it absent again (its clock restarts)
        }
    ),
    FAILED: frozenset(
        {
            SENT,  # resent after the site's credentials were renewed (a 401/403 refusal);
            # the first send of a NEVER_SENT row (perform, the same request again)
            UNKNOWN,  # an editor's retry (recovery.retries.retry_failed)
            CONFIRMED,  # found by lookup / adopted by an editor; a cancel not needed
        }
    ),
    CONFIRMED: frozenset(
        {
            UNKNOWN,  # an adopted object another job bound at the same moment (ownership)
        }
    ),
}

NOTIFICATION_MOVES: dict[str, frozenset[str]] = {
    PENDING: frozenset({DELIVERED, REFUSED}),
    DELIVERED: frozenset(),
    REFUSED: frozenset(),
}

# A webhook delivery (one event row to one endpoint, gateway.actions.deliveries, schema
# version 18) moves as a notification, and back from REFUSED to PENDING when a workflow asks
# for it again (POST /v1/webhook-endpoints/{id}/deliveries/{event_id}/redeliver).
DELIVERY_MOVES: dict[str, frozenset[str]] = {
    PENDING: frozenset({DELIVERED, REFUSED}),
    DELIVERED: frozenset(),
    REFUSED: frozenset({PENDING}),
}

# A stored webhook event's status (gateway.agents.worker; every finish is conditional on the
# claim it holds: the event's ``attempts`` as claimed).
EVENT_MOVES: dict[str, frozenset[str]] = {
    EVENT_PENDING: frozenset({EVENT_PROCESSING}),  # a worker's claim
    EVENT_PROCESSING: frozenset(
        {
            EVENT_DONE,  # its session was handled
            EVENT_IGNORED,  # nothing of ours
            EVENT_PENDING,  # not handled yet: claimed again after a backoff
            EVENT_PROCESSING,  # a claim left by a crashed worker, taken over
        }
    ),
    EVENT_DONE: frozenset(),
    EVENT_IGNORED: frozenset(),
}

# A request key's state (gateway.tenancy.request_keys; every move is conditional on the row
# as read: its state, retention and claim).
REQUEST_KEY_MOVES: dict[str, frozenset[str]] = {
    KEY_IN_PROGRESS: frozenset(
        {
            KEY_DONE,  # answered 2xx: the answer stored
            KEY_OPEN,  # answered otherwise: the next identical request runs again
            KEY_IN_PROGRESS,  # a claim whose holder died (past claimed_until) taken over
        }
    ),
    KEY_OPEN: frozenset({KEY_IN_PROGRESS}),  # claimed again
    KEY_DONE: frozenset({KEY_IN_PROGRESS}),  # past its retention: a new key
}

# A job lease's ``owner`` (gateway.jobs.leases): NULL once released, else held. The fencing
# rules (same owner renews; an expired lease goes to the next owner with token + 1; a release
# names its owner and token) stay in leases.py and are the move's conditions.
LEASE_MOVES: dict[str | None, frozenset] = {
    None: frozenset({SET}),  # granted to an owner
    SET: frozenset({SET, None}),  # renewed, or granted to the next owner once expired; released
}

# A job's ``cancelled`` (gateway.jobs.records.cancel_job): once, never lifted.
CANCEL_MOVES: dict[bool, frozenset[bool]] = {False: frozenset({True}), True: frozenset()}

# An agent session's ``stopped_reason`` (gateway.agents.stops): stopped with a reason (the
# first reason is kept), lifted by an editor's follow-up or new site credentials.
STOP_MOVES: dict[str | None, frozenset] = {None: frozenset({SET}), SET: frozenset({None})}

# The agent workers' pause (``agent_worker_state.paused_reason``, gateway.agents.openai_key):
# paused when OpenAI refused the key (a later refusal's reason replaces an earlier one's),
# cleared by a worker holding another key.
PAUSE_MOVES: dict[str | None, frozenset] = {None: frozenset({SET}), SET: frozenset({SET, None})}

# A job's phase (None: no phase yet) moves forward: None and each phase to any LATER phase of
# PHASES (a client's checkpoint, the gateway's own evidence: gateway.jobs.records.advance_phase).
# Backwards only by the moves added to each below, with who makes it.
PHASE_MOVES: dict[str | None, frozenset[str | None]] = {
    before: frozenset(PHASES[PHASES.index(before) + 1 :] if before else PHASES)
    | {None}  # a new task version resets the phase, from any (gateway.jobs.records.put_job)
    for before in (None, *PHASES)
}
PHASE_MOVES[SCHEDULED] |= {
    APPROVAL_PENDING,  # a CONFIRMED unschedule ends the publish round, by cancel or by
    # revoking the approval (gateway.actions.scheduling.settle -> records.end_schedule)
}
# The phases a job may move forward to ``phase`` from (a forward move's ``expect``).
BEFORE_PHASE: dict[str, tuple[str | None, ...]] = {
    phase: (None, *PHASES[:index]) for index, phase in enumerate(PHASES)
}

# open -> deciding (an editor claims the decision) -> resolved (applied); deciding -> open (the
# decision's write failed: released); deciding -> deciding (a claim older than the in-flight
# window, left by a process that died, is taken over by the next decider: database clock).
REVIEW_MOVES: dict[str, frozenset[str]] = {
    REVIEW_OPEN: frozenset({REVIEW_DECIDING}),
    REVIEW_DECIDING: frozenset({REVIEW_RESOLVED, REVIEW_OPEN, REVIEW_DECIDING}),
    REVIEW_RESOLVED: frozenset(),
}

# A job's ``decision`` on its current task version (gateway.editorial.decisions): NULL (none
# yet) -> approved | changes_requested, each conditional on the version as read, so of two
# editors deciding at once one wins and the other is told what stands. approved -> approved
# (another editor approves too); approved -> NULL once its last approval is revoked; any ->
# NULL by a new task version (gateway.jobs.records.put_job). Changes requested is final for
# its version: an approval of it is impossible.
DECISION_MOVES: dict[str | None, frozenset[str | None]] = {
    None: frozenset({APPROVED, CHANGES_REQUESTED}),
    APPROVED: frozenset({APPROVED, None}),
    CHANGES_REQUESTED: frozenset({None}),
}
