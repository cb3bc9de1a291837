"""JSON Schemas (draft 2020-12) of the success bodies the views return, for the OpenAPI
document's ``components.schemas``. They name what a client may rely on (``required``) and
allow extra members (the contract lets responses grow). ``tests/test_openapi.py`` checks real
responses against them, so a view that changes its shape fails there.
"""

from __future__ import annotations

from gateway.core import states

STR = {"type": "string"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
NSTR = {"type": ["string", "null"]}
NINT = {"type": ["integer", "null"]}
TIME = {"type": ["string", "null"], "format": "date-time"}
STATE = {"enum": list(states.STATES)}  # an operation's ledger state
STATUS = {"enum": list(states.STATUSES)}  # a job's status


def obj(required: tuple[str, ...], **properties) -> dict:
    """An object schema whose ``required`` members are listed first in ``properties``."""
    return {"type": "object", "required": list(required), "properties": properties}


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def arr(items: dict) -> dict:
    return {"type": "array", "items": items}


OUTCOME = {
    "operation_key": STR,
    "state": STATE,
    "replayed": BOOL,
    "reconciled": BOOL,
}
# Present (true) on a replay of an operation whose receipt retention pruned (gateway prune).
PRUNED = {"pruned": {"enum": [True]}}
BUDGET = obj(
    ("name", "used", "limit", "exhausted", "raised_by"),
    name=STR,
    used=INT,
    limit=NINT,
    exhausted=BOOL,
    raised_by=NSTR,
)
ENDPOINT = {  # a webhook endpoint's members (gateway.actions.webhook_endpoints.view)
    "id": {"type": "string", "pattern": r"^ep_[0-9a-f]{24}(?![\s\S])"},
    "url": STR,
    "event_types": arr({"enum": [*states.WORKFLOW_EVENTS, states.ANY_EVENT]}),
    "description": NSTR,
    "legacy": BOOL,
    "created_at": TIME,
    "secret_rotated_at": TIME,
}
FIELD = obj(("expected", "actual", "ok"), expected={}, actual={}, ok={"type": ["boolean", "null"]})
JOB = {
    "job_id": STR,
    "site": STR,
    "task_version": INT,
    "session_id": NSTR,
    "phase": NSTR,
    "post_id": NINT,
    "status": STATUS,
    "cancelled": BOOL,
    "cancel_reason": NSTR,
    "decision": {"anyOf": [{"$ref": "#/components/schemas/Decision"}, {"type": "null"}]},
    "created_at": TIME,
    "updated_at": TIME,
}
# A job's timeline entry and its editors' decision on its version (issue 56).
TIMELINE_ENTRY = obj(
    ("id", "event", "actor", "task_version", "content_sha256", "note", "at"),
    id=INT,
    event={"enum": list(states.TIMELINE_EVENTS)},
    actor=NSTR,
    task_version=INT,
    content_sha256=NSTR,
    note=NSTR,
    at=TIME,
)
DECISION = obj(
    ("decision", "task_version", "decided_by", "content_sha256", "note", "at"),
    decision={"enum": list(states.DECISIONS)},
    task_version=INT,
    decided_by=NSTR,
    content_sha256=NSTR,
    note=NSTR,
    at=TIME,
)
OPERATION_ROW = obj(
    ("operation_key", "action", "state", "request_hash", "attempts"),
    operation_key=STR,
    action=STR,
    slot=NSTR,
    task_version=INT,
    state=STATE,
    remote_id=NINT,
    request_hash=STR,
    attempts=INT,
    receipt={"type": ["object", "null"]},
    problem={"type": ["object", "null"]},
    fencing_token=NINT,
    credential_version=NINT,
    created_at=TIME,
    updated_at=TIME,
    sent_at=TIME,
    pruned_at=TIME,
)
REVIEW = obj(
    ("review_id", "job_id", "operation_key", "kind", "status"),
    review_id=INT,
    job_id=STR,
    operation_key=STR,
    kind=STR,
    detail={},
    status={"enum": list(states.REVIEW_STATUSES)},
    decision=NSTR,
    post_id=NINT,
    resolved_by=NSTR,
    created_at=TIME,
    resolved_at=TIME,
)
APPROVAL = obj(
    ("approval_id", "job_id", "task_version", "post_id", "content_sha256", "expires_at"),
    approval_id=INT,
    job_id=STR,
    task_version=INT,
    post_id=INT,
    content_sha256=STR,
    expires_at=TIME,
    approved_by=NSTR,
    created_at=TIME,
    revoked_at=TIME,
    revoked_by=NSTR,
    unchecked_fields=arr(STR),
)
LEASE = obj(("owner", "fencing_token", "expires_at"), owner=STR, fencing_token=INT, expires_at=TIME)
ARTIFACT = obj(("role", "uri", "sha256"), role=STR, uri=STR, sha256=STR)


def entry(**extra) -> dict:
    """One ledger row in the recover report."""
    return obj(("operation_key", "action"), operation_key=STR, action=STR, **extra)


def nullable(name: str) -> dict:
    return {"anyOf": [ref(name), {"type": "null"}]}


CALL = obj(("call_id", "tool", "turn_id"), call_id=STR, tool=STR, turn_id=STR)
AGENT_SUMMARY = obj(
    ("session_id", "status", "items_read", "pages", "tool_calls", "business_success"),
    session_id=STR,
    status=STR,
    error=NSTR,
    items_read=INT,
    pages=INT,
    tool_calls=obj(
        ("completed", "failed", "unknown", "needs_a_person"),
        completed=arr(CALL),
        failed=arr(CALL),
        unknown=arr(CALL),
        needs_a_person=arr(obj((), review_id=INT, action=NSTR)),
    ),
    last_turn={"type": ["object", "null"]},
    pending_actions=arr(STR),
    stopped_reason=NSTR,
    business_success=BOOL,
    note=STR,
    summary={"type": ["object", "null"]},
    rebuild_error=STR,
)
AGENT = obj(
    ("session_id", "status", "stopped_reason", "counters", "summary"),
    session_id=STR,
    status=NSTR,
    stopped_reason=NSTR,
    counters=obj(
        ("resume_attempts", "tool_calls_answered", "tokens_used"),
        resume_attempts=INT,
        tool_calls_answered=INT,
        tokens_used=INT,
    ),
    binding=obj(
        ("kind", "token_name", "valid"),
        kind={"enum": ["token", "legacy"]},
        token_name=NSTR,
        valid=BOOL,
    ),
    environment={
        "type": ["object", "null"],
        "properties": {
            "id": NSTR,
            "type": NSTR,
            "status": NSTR,
            "reason": NSTR,
            "event": NSTR,
            "updated_at": NSTR,
        },
    },
    next_poll_at=TIME,
    worker=obj(
        ("paused", "reason", "status", "since"),
        paused=BOOL,
        reason=NSTR,
        status=NINT,
        since=TIME,
    ),
    deadline_at=TIME,
    checked_at=TIME,
    summary=nullable("AgentSummary"),
    summary_at=TIME,
)
FOLLOW_UP = obj(
    ("job_id", "session_id", "operation", "sent", "replayed", "facts", "message"),
    job_id=STR,
    session_id=STR,
    operation=ref("OperationRow"),
    sent=BOOL,
    replayed=BOOL,
    facts={"type": ["object", "null"]},
    message=NSTR,
    lifted_stop={
        "type": ["object", "null"],
        "properties": {"stopped_reason": STR, "by": STR, "reason": NSTR},
    },
)

VERIFICATION = obj(
    ("job_id", "post_id", "ok", "content_sha256", "fields", "normalized"),
    job_id=STR,
    post_id=NINT,
    ok={"type": ["boolean", "null"]},
    content_sha256=STR,
    fields={"type": "object", "additionalProperties": FIELD},
    normalized={"type": "object"},
)

SCHEMAS: dict[str, dict] = {
    "Index": obj(
        ("name", "version", "links"),
        name=STR,
        version=STR,
        links=obj(
            ("review", "openapi", "health", "docs"), review=STR, openapi=STR, health=STR, docs=STR
        ),
    ),
    "Health": obj(("status", "ledger", "version"), status=STR, ledger=STR, version=STR),
    "OpenAPI": obj(("openapi", "info", "paths"), openapi=STR, info={"type": "object"}, paths={}),
    "Job": obj(tuple(JOB), **JOB),
    "JobDetail": {
        "allOf": [
            ref("Job"),
            obj(
                ("operations", "reviews", "approvals", "checkpoints", "notes", "lease", "budgets"),
                operations=arr(ref("OperationRow")),
                reviews=arr(
                    obj(
                        ("review_id", "operation_key", "kind", "detail"),
                        review_id=INT,
                        operation_key=STR,
                        kind=STR,
                        detail={},
                    )
                ),
                approvals=arr(ref("Approval")),
                checkpoints=arr(obj(("phase", "artifacts"), phase=STR, artifacts=arr(ARTIFACT))),
                notes=arr(ref("TimelineEntry")),
                lease={"anyOf": [ref("Lease"), {"type": "null"}]},
                retries=arr(ref("Retry")),
                agent=nullable("Agent"),
                budgets=arr(ref("Budget")),
            ),
        ]
    },
    "OperationRow": OPERATION_ROW,
    "Decision": DECISION,
    "TimelineEntry": TIMELINE_ENTRY,
    "Timeline": obj(
        ("job_id", "entries", "next_after"),
        job_id=STR,
        entries=arr(ref("TimelineEntry")),
        next_after=NINT,
    ),
    "Budget": BUDGET,
    "BudgetList": obj(("budgets",), budgets=arr(ref("Budget"))),
    "Review": REVIEW,
    "JobList": obj(
        ("jobs", "next_after"),
        jobs=arr(
            obj(
                ("job_id", "status", "phase", "task_version", "post_id", "updated_at"),
                **{k: JOB[k] for k in ("job_id", "status", "phase", "task_version", "post_id")},
                updated_at=TIME,
            )
        ),
        next_after=NINT,
    ),
    "JobChanges": obj(
        ("changes", "next_cursor"),
        changes=arr(
            obj(
                ("job_id", "status", "phase", "task_version", "post_id", "changed_at", "events"),
                **{k: JOB[k] for k in ("job_id", "status", "phase", "task_version", "post_id")},
                decision=JOB["decision"],
                changed_at=TIME,
                events=arr({"enum": list(states.CHANGE_EVENTS)}),
            )
        ),
        next_cursor=NSTR,
    ),
    "Media": obj(
        (*OUTCOME, "media_id", "source_url", "mime_type", "requested_url", "downloaded_from"),
        **OUTCOME,
        media_id=NINT,
        source_url=NSTR,
        mime_type=NSTR,
        requested_url=NSTR,
        downloaded_from=NSTR,
        **PRUNED,
    ),
    "Draft": obj(
        (*OUTCOME, "post_id", "link", "verification"),
        **OUTCOME,
        post_id=NINT,
        link=NSTR,
        verification={"type": ["object", "null"]},
        **PRUNED,
    ),
    "Block": obj(
        (*OUTCOME, "post_id", "name", "digest"),
        **OUTCOME,
        post_id=NINT,
        name=STR,
        digest=STR,
        **PRUNED,
    ),
    "Publish": obj(
        (*OUTCOME, "post_id", "status", "approval_id"),
        **OUTCOME,
        post_id=NINT,
        status=NSTR,
        link=NSTR,
        slug=NSTR,
        approval_id=NINT,
        **PRUNED,
    ),
    "Repair": obj(
        ("job_id", "post_id", "fixes", "operation_key", "replayed", "verification"),
        job_id=STR,
        post_id=INT,
        fixes={"type": "object"},
        operation_key=NSTR,
        state=STATE,
        replayed=BOOL,
        verification={"type": ["object", "null"]},
    ),
    "Verification": VERIFICATION,
    "OperationRetry": obj(
        ("operation_key", "state", "retry"), operation_key=STR, state=STATE, retry=ref("Retry")
    ),
    "Retry": obj(
        ("requested_by", "role", "reason", "created_at"),
        operation_key=STR,
        requested_by=STR,
        role=STR,
        reason=STR,
        previous_problem={"type": ["object", "null"]},
        created_at=TIME,
    ),
    "Notification": obj(
        ("idempotency_key", "event_id", "job_id", "task_version", "event", "state", "attempts"),
        idempotency_key=STR,
        event_id={"type": "string", "pattern": r"^evt_[0-9a-f]{32}(?![\s\S])"},
        job_id=STR,
        task_version=INT,
        event={"enum": list(states.WORKFLOW_EVENTS)},
        reason=NSTR,
        text=NSTR,
        state={"enum": list(states.NOTIFICATION_VIEW_STATES)},  # UNSUBSCRIBED: nothing to come
        attempts=INT,
        last_error=NSTR,
        decided_at=TIME,
        delivered_at=TIME,
        decided_now=BOOL,
        deliveries=arr(
            obj(
                ("endpoint_id", "state", "attempts"),
                endpoint_id=STR,
                state={"enum": list(states.NOTIFICATION_STATES)},
                attempts=INT,
                last_error=NSTR,
                delivered_at=TIME,
            )
        ),
    ),
    "NotificationList": obj(("notifications",), notifications=arr(ref("Notification"))),
    "WebhookEndpoint": obj(
        ("id", "url", "event_types", "description", "created_at", "secret_rotated_at"),
        **ENDPOINT,
    ),
    "WebhookEndpointCreated": obj(
        ("id", "url", "event_types", "description", "created_at", "secret"),
        **ENDPOINT,
        secret={"type": ["string", "null"], "pattern": r"^whsec_[A-Za-z0-9+/]{43}=(?![\s\S])"},
        secret_detail=STR,
    ),
    "WebhookEndpointList": obj(("endpoints",), endpoints=arr(ref("WebhookEndpoint"))),
    "WebhookDelivery": obj(
        ("event_id", "type", "job_id", "task_version", "state", "attempts"),
        event_id={"type": "string", "pattern": r"^evt_[0-9a-f]{32}(?![\s\S])"},
        type={"enum": list(states.WORKFLOW_EVENTS)},
        job_id=STR,
        task_version=INT,
        state={"enum": list(states.NOTIFICATION_STATES)},
        attempts=INT,
        last_error=NSTR,
        created_at=TIME,
        delivered_at=TIME,
    ),
    "WebhookDeliveryList": obj(("deliveries",), deliveries=arr(ref("WebhookDelivery"))),
    "EventTypes": obj(
        ("event_types",),
        event_types=arr(
            obj(
                ("type", "description"),
                type={"enum": list(states.WORKFLOW_EVENTS)},
                description=STR,
            )
        ),
    ),
    "ResumePoint": obj(("job_id", "task_version"), job_id=STR, task_version=INT),
    "TermList": obj(
        ("site", "taxonomy", "terms", "truncated"),
        site=STR,
        taxonomy={"enum": ["categories", "tags"]},
        terms=arr(obj(("id", "name", "parent"), id=INT, name=STR, parent=INT)),
        truncated=BOOL,
    ),
    "ArticleValidation": obj(
        ("ok", "site", "draft", "media"),
        ok={"enum": [True]},
        site=NSTR,
        draft=obj(
            ("featured_slot", "body_media", "placeholders"),
            featured_slot=NSTR,
            body_media=arr(STR),
            placeholders=arr(STR),
        ),
        media=arr(
            obj(
                ("slot", "source"),
                slot=STR,
                source={"enum": ["content_base64", "source_url", "url", "none"]},
                mime_type=STR,
                bytes=INT,
                sha256=STR,
                downloaded_from=STR,
            )
        ),
    ),
    "Resume": obj(
        ("job_id", "task_version", "action", "reason", "attempts", "budget"),
        job_id=STR,
        task_version=INT,
        action={"enum": ["resume", "wait", "none", "needs_person"]},
        reason=STR,
        attempts=INT,
        budget=INT,
        retry_after=INT,
        input={"type": "object"},
        notification=ref("Notification"),
    ),
    "Recover": obj(
        ("job_id", "status", "completed", "failed", "unknown", "needs_review"),
        job_id=STR,
        status=STATUS,
        completed=arr(entry(remote_id=INT, reconciled=BOOL)),
        failed=arr(entry(problem=STR)),
        unknown=arr(entry(reason=STR, absent=BOOL)),
        needs_review=arr(entry(review_id=INT)),
        next_allowed_actions=arr(STR),
        agent=ref("AgentSummary"),
    ),
    "Checkpoint": obj(
        ("job_id", "task_version", "phase", "artifacts", "job_phase"),
        job_id=STR,
        task_version=INT,
        phase=STR,
        artifacts=arr(ARTIFACT),
        job_phase=NSTR,
        created_at=TIME,
    ),
    "Lease": LEASE,
    "LeaseRelease": obj(
        ("owner", "fencing_token", "released"), owner=STR, fencing_token=INT, released=BOOL
    ),
    "ApprovalRequest": obj(
        ("job_id", "task_version", "post_id", "content_sha256", "phase"),
        job_id=STR,
        task_version=INT,
        post_id=INT,
        content_sha256=STR,
        phase=STR,
        unchecked_fields=arr(STR),
        verification=ref("Verification"),
    ),
    "Approval": APPROVAL,
    "Report": obj(
        (
            "duplicate_posts",
            "duplicate_media",
            "unauthorized_calls",
            "rejected_checkpoint_advances",
            "unknown_operations",
            "jobs_by_status",
        ),
        duplicate_posts=INT,
        duplicate_media=INT,
        sites_unreachable=arr(STR),
        unauthorized_calls=INT,
        rejected_checkpoint_advances=INT,
        unknown_operations=INT,
        jobs_by_status={"type": "object", "additionalProperties": INT},
    ),
    "ReviewList": obj(("reviews",), reviews=arr(ref("Review"))),
    "ReviewResolution": obj(
        ("review", "operation"), review=ref("Review"), operation=nullable("OperationRow")
    ),
    "Agent": AGENT,
    "FollowUp": FOLLOW_UP,
    "AgentSummary": AGENT_SUMMARY,
    "AgentTools": obj(
        ("tools",),
        tools=arr(
            obj(
                ("type", "name", "description", "parameters"),
                type={"const": "function"},
                name=STR,
                description=STR,
                parameters={"type": "object"},
            )
        ),
    ),
    "WebhookReceipt": obj(
        ("event_id", "type", "duplicate"), event_id=STR, type=STR, duplicate=BOOL
    ),
}
