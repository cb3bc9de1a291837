"""What each route promises beyond what the URL map knows: its request body (a schema file in
``gateway/schemas``), success statuses and body, the problem types particular to it, and its
headers. :mod:`gateway.api.openapi` joins this with the URL map into the OpenAPI document; a route
missing here, or an entry whose route is gone, fails the tests (``tests/test_openapi.py``).

Problems every route of a kind can answer are added by the builder, not listed here: all routes
``ledger-unavailable``; ``/v1`` routes ``unauthenticated``, ``unauthenticated-rate-limited``,
``forbidden``, ``rate-limited`` and ``tenant-busy``; a JSON body
``invalid-json``, ``payload-too-large`` and ``validation-failed``; a ``{job_id}`` route
``job-not-found``; fenced writes (:data:`FENCED`) and ledger operations (:data:`LEDGER`) theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.core.states import CHANGES_REQUESTED

# Checked by gateway.jobs.guards.check_writable (first thing in every action's domain
# function) before any ledger claim or WordPress call; the header is parsed by the view.
FENCED = ("job-cancelled", "lease-required", "stale-fencing-token", "validation-failed")
# What gateway.operations.perform.perform answers besides the stored receipt.
LEDGER = (
    "foreign-object",
    "operation-key-reused",
    "operation-in-progress",
    "needs-review",
    "wordpress-refused",
    "upstream-refused",
    "outcome-unknown",
    "wordpress-unavailable",
    "budget-exhausted",
    "site-busy",
    "stale-task-version",  # the job was bumped while the request waited to send
)

# Extension members some problems carry (gateway.core.exceptions.GatewayError(**extensions)).
EXTENSIONS = (
    "operation_key",
    "ledger_state",
    "wordpress_status",
    "wordpress_code",
    "review_id",
    "task_version",
    "post_id",
    "content_sha256",
    "approval_id",
    "expires_at",
    "fencing_token",
    "cancel_reason",
    "phase",
    "slots",
    "failed_fields",
    "unchecked_fields",
    "object_id",
    "expected_sha256",
    "actual_sha256",
    "origin",
    "upstream",
    "session_id",
    "budget",
    "feature",
    "transport",
    "unfixable",
    "fixes",
    "request_key",
    "blocking",
    "openai_status",
    "share",
    "decision",
    "resolved_by",
    "review_status",
    "resolved_at",
)

HEADERS = {
    "Idempotent-Replayed": {
        "description": "true: the answer is the stored receipt of an earlier identical "
        "request; nothing was sent to WordPress",
        "schema": {"enum": ["true"]},
    },
    "Retry-After": {
        "description": "seconds to wait before retrying (retryable problems)",
        "schema": {"type": "integer", "minimum": 0},
    },
    "X-Request-Id": {
        "description": "the request's id: the client's X-Request-Id when it matches "
        "[A-Za-z0-9._:-]{1,128}, otherwise one the gateway made",
        "schema": {"type": "string"},
    },
    "WWW-Authenticate": {
        "description": 'Bearer realm="publishing-gateway" (RFC 6750)',
        "schema": {"type": "string"},
    },
}


@dataclass(frozen=True)
class Contract:
    """One operation's promises.

    Attributes:
        body: request schema name (``gateway/schemas/{body}.json``); ``empty`` means an empty
            body or ``{}``.
        ok: success statuses (201 = first execution, 200 = existing or replay).
        returns: the component schema of the success body (``None``: see ``media_type``).
        problems: problem slugs particular to this operation.
        fenced: a side-effect call (X-Fencing-Token, cancellation, ``FENCED`` problems).
        replays: a ledger operation (``Idempotent-Replayed`` on 200, ``LEDGER`` problems).
        replay_header: ``Idempotent-Replayed`` on a 200 that repeats a stored outcome, without
            being a ledger operation (a review's decision sent again).
        query: query parameters ``{name: JSON Schema}``.
        form: review page form fields (``application/x-www-form-urlencoded`` + CSRF token).
        media_type: the success body's media type.
        pages: error statuses a review page answers with HTML (400: a stale CSRF token).
        token: authenticated by a Bearer token (False: by the sender's signature, webhooks).
    """

    body: str | None = None
    ok: tuple[int, ...] = (200,)
    returns: str | None = None
    problems: tuple[str, ...] = ()
    fenced: bool = False
    replays: bool = False
    replay_header: bool = False
    query: dict | None = None
    form: tuple[str, ...] | None = None
    media_type: str = "application/json"
    pages: tuple[int, ...] = ()
    token: bool = True


PAGE = "text/html"
JOB_QUERY = {
    "status": {
        "type": "string",
        "description": "comma-separated statuses: in_progress, completed, failed, unknown, "
        "needs_review, cancelled",
    },
    "phase": {"type": "string", "description": "one phase, e.g. approval_pending"},
    "unfinished": {
        "type": "string",
        "enum": ["true", "false"],
        "default": "false",
        "description": "true: only jobs a run still has work on (in_progress or unknown, "
        "or completed in phase verified without an approval request)",
    },
    "limit": {"type": "integer", "minimum": 1, "maximum": 500, "default": 50},
    "after": {
        "type": "integer",
        "minimum": 0,
        "maximum": 2147483647,
        "description": "the previous page's next_after",
    },
}
CHANGES_QUERY = {
    "cursor": {
        "type": "string",
        "description": "the previous answer's next_cursor (absent: from the first job; "
        "'now': an empty page whose next_cursor is now)",
    },
    "limit": {"type": "integer", "minimum": 1, "maximum": 500, "default": 100},
}
TERMS_QUERY = {
    "search": {
        "type": "string",
        "maxLength": 200,
        "description": "only terms whose name or slug holds it (WordPress's search); absent: all",
    },
}
# A read of the job's post or images: wordpress-refused when WordPress definitely refuses it
# (a 404: the object was deleted there), the answer to any WordPress error a path leaves
# unmapped too (gateway.operations.refusals.unmapped), never a 500.
READ_BACK = (
    "not-found",
    "foreign-object",
    "wordpress-refused",
    "wordpress-unavailable",
    "upstream-refused",
    "site-busy",
)
PRUNED = ("receipt-pruned",)  # retention dropped the draft receipt these need

OPERATIONS: dict[str, Contract] = {
    "GET /": Contract(returns="Index"),
    "GET /healthz": Contract(returns="Health"),
    "GET /metrics": Contract(media_type="text/plain", problems=("unauthenticated",)),
    "GET /openapi.json": Contract(returns="OpenAPI"),
    "GET /v1/jobs": Contract(returns="JobList", query=JOB_QUERY, problems=("validation-failed",)),
    "GET /v1/job-changes": Contract(
        returns="JobChanges", query=CHANGES_QUERY, problems=("validation-failed",)
    ),
    "PUT /v1/jobs/{job_id}": Contract(
        body="job",
        ok=(200, 201),
        returns="Job",
        problems=(
            "site-not-found",
            "stale-task-version",
            "session-bound",
            "session-change-needs-version-bump",
        ),
    ),
    "GET /v1/jobs/{job_id}": Contract(returns="JobDetail"),
    "PUT /v1/jobs/{job_id}/media/{slot}": Contract(
        body="media",
        ok=(200, 201),
        returns="Media",
        problems=(
            "unsupported-media-type",
            "image-unreadable",
            "image-too-large",
            "media-url-refused",
            "media-download-failed",
            "transport-limit",
        ),
        fenced=True,
        replays=True,
    ),
    "PUT /v1/jobs/{job_id}/draft": Contract(
        body="draft",
        ok=(200, 201),
        returns="Draft",
        problems=(
            "media-not-ready",
            "artifact-digest-mismatch",
            "template-leftover",
            "transport-limit",
        ),
        fenced=True,
        replays=True,
    ),
    "GET /v1/jobs/{job_id}/verification": Contract(
        returns="Verification", problems=(*READ_BACK, *PRUNED)
    ),
    "POST /v1/jobs/{job_id}/recover": Contract(
        body="empty", returns="Recover", problems=("site-busy",)
    ),
    "GET /v1/jobs/{job_id}/budgets": Contract(returns="BudgetList"),
    "PUT /v1/jobs/{job_id}/budgets/{name}": Contract(
        body="budget", returns="Budget", problems=("not-found",)
    ),
    "POST /v1/jobs/{job_id}/operations/retry": Contract(
        body="operation_retry",
        returns="OperationRetry",
        problems=("not-found", "operation-not-failed"),
    ),
    "POST /v1/jobs/{job_id}/checkpoints": Contract(
        body="checkpoint",
        ok=(200, 201),
        returns="Checkpoint",
        problems=("phase-owned-by-gateway", "checkpoint-conflict", "secret-in-checkpoint"),
        fenced=True,
    ),
    "POST /v1/jobs/{job_id}/lease": Contract(
        body="lease", returns="Lease", problems=("lease-held",)
    ),
    "DELETE /v1/jobs/{job_id}/lease": Contract(
        body="lease_release", returns="LeaseRelease", problems=("stale-fencing-token",)
    ),
    "POST /v1/jobs/{job_id}/cancel": Contract(body="cancel", returns="Job"),
    "POST /v1/jobs/{job_id}/repair": Contract(
        body="empty",
        ok=(200, 201),
        returns="Repair",
        problems=(*READ_BACK, *PRUNED, "post-trashed", "repair-incomplete"),
        fenced=True,
        replays=True,
    ),
    "PUT /v1/jobs/{job_id}/blocks/{name}": Contract(
        body="block",
        ok=(200, 201),
        returns="Block",
        problems=("not-found",),
        fenced=True,
        replays=True,
    ),
    "POST /v1/jobs/{job_id}/approval-requests": Contract(
        body="empty",
        ok=(200, 201),
        returns="ApprovalRequest",
        problems=("verification-failed", *READ_BACK),
        fenced=True,
    ),
    "POST /v1/jobs/{job_id}/approvals": Contract(
        body="approval",
        ok=(201,),
        returns="Approval",
        problems=(
            "job-cancelled",
            "approval-required",
            "approval-stale",
            "decision-stands",
            "wordpress-refused",
            "verification-failed",
            "foreign-object",
            "wordpress-unavailable",
            "upstream-refused",
            "site-busy",
        ),
    ),
    "POST /v1/jobs/{job_id}/changes-requests": Contract(
        body="changes_request",
        ok=(201,),
        returns="Decision",
        problems=("job-cancelled", "approval-stale", "decision-stands"),
    ),
    "POST /v1/jobs/{job_id}/comments": Contract(body="comment", ok=(201,), returns="TimelineEntry"),
    "GET /v1/jobs/{job_id}/timeline": Contract(
        returns="Timeline",
        query={
            "after": {"type": "integer", "minimum": 0, "maximum": 2147483647, "default": 0},
        },
    ),
    "DELETE /v1/jobs/{job_id}/approvals/{approval_id}": Contract(
        returns="Approval", problems=("not-found",)
    ),
    "POST /v1/jobs/{job_id}/publish": Contract(
        body="empty",
        ok=(200, 201),
        returns="Publish",
        problems=(
            "approval-required",
            "approval-expired",
            "approval-revoked",
            "approval-stale",
            "foreign-object",
            "wordpress-unavailable",
            "upstream-refused",
        ),
        fenced=True,
        replays=True,
    ),
    "POST /v1/jobs/{job_id}/notifications": Contract(
        body="notification",
        ok=(200, 201),
        returns="Notification",
        problems=("notification-not-due",),
    ),
    "GET /v1/jobs/{job_id}/notifications": Contract(returns="NotificationList"),
    "POST /v1/webhook-endpoints": Contract(
        body="webhook_endpoint",
        ok=(201,),
        returns="WebhookEndpointCreated",
        problems=("webhook-endpoint-limit",),
        replay_header=True,
    ),
    "GET /v1/webhook-endpoints": Contract(returns="WebhookEndpointList"),
    "GET /v1/webhook-endpoints/{endpoint_id}": Contract(
        returns="WebhookEndpoint", problems=("not-found",)
    ),
    "DELETE /v1/webhook-endpoints/{endpoint_id}": Contract(ok=(204,), problems=("not-found",)),
    "POST /v1/webhook-endpoints/{endpoint_id}/secret": Contract(
        body="empty",
        returns="WebhookEndpointCreated",
        problems=("not-found",),
        replay_header=True,
    ),
    "GET /v1/webhook-endpoints/{endpoint_id}/deliveries": Contract(
        returns="WebhookDeliveryList", problems=("not-found",)
    ),
    "POST /v1/webhook-endpoints/{endpoint_id}/deliveries/{event_id}/redeliver": Contract(
        body="empty", returns="WebhookDelivery", problems=("not-found", "delivery-not-refused")
    ),
    "GET /v1/event-types": Contract(returns="EventTypes"),
    "PUT /v1/jobs/{job_id}/resume-point": Contract(
        body="resume_point", ok=(200, 201), returns="ResumePoint"
    ),
    "POST /v1/jobs/{job_id}/resume": Contract(body="empty", returns="Resume"),
    "POST /v1/articles/validate": Contract(
        body="article_validation",
        returns="ArticleValidation",
        # category and tag names are looked up in the site (gateway.actions.article_lookups)
        problems=("wordpress-unavailable", "upstream-refused", "wordpress-refused", "site-busy"),
    ),
    "GET /v1/sites/{site}/terms/{taxonomy}": Contract(
        returns="TermList",
        query=TERMS_QUERY,
        # read-only term searches in the site (gateway.actions.article_lookups.list_terms)
        problems=(
            "not-found",
            "site-not-found",
            "wordpress-unavailable",
            "upstream-refused",
            "wordpress-refused",
            "site-busy",
        ),
    ),
    "GET /v1/report": Contract(returns="Report"),
    "GET /v1/reviews": Contract(returns="ReviewList"),
    "POST /v1/reviews/{review_id}/resolve": Contract(
        body="review_resolve",
        returns="ReviewResolution",
        replay_header=True,
        problems=(
            "not-found",
            "review-decided",
            "job-not-found",
            "foreign-object",
            "wordpress-refused",
            "wordpress-unavailable",
            "site-busy",
            "job-cancelled",
            "session-bound",
            "operation-key-reused",
            "agent-not-configured",
        ),
    ),
    "GET /v1/agent-tools": Contract(returns="AgentTools"),
    "POST /v1/jobs/{job_id}/agent/continue": Contract(
        body="agent_continue",
        ok=(200, 201),
        returns="FollowUp",
        problems=(
            "follow-up-refused",
            "job-cancelled",
            "lease-held",
            "agent-not-configured",
            "agent-key-refused",
            "agent-session-gone",
            "agent-unavailable",
            "wordpress-unavailable",
            "site-busy",
        ),
    ),
    "POST /v1/webhooks/openai": Contract(
        returns="WebhookReceipt",
        problems=("webhook-signature-invalid", "payload-too-large", "agent-not-configured"),
        token=False,
    ),
    "GET /review": Contract(
        media_type=PAGE,
        ok=(200, 303),
        query={
            "page": {"type": "integer", "minimum": 1, "maximum": 2147483647, "default": 1},
            "site": {"type": "string"},
            "state": {"type": "string", "enum": ["waiting", CHANGES_REQUESTED, "approved"]},
            "q": {"type": "string", "maxLength": 200},
        },
        pages=(422,),
    ),
    "GET /review/reviews/{review_id}/compare": Contract(
        media_type=PAGE, ok=(200, 303), pages=(404,)
    ),
    "GET /review/login": Contract(media_type=PAGE),
    "GET /review/jobs/{job_id}/media/{media_id}": Contract(
        media_type="image/*", ok=(200, 303), pages=(404,)
    ),
    "POST /review/login": Contract(
        media_type=PAGE, ok=(303,), form=("token",), pages=(400, 401, 403, 429)
    ),
    "POST /review/logout": Contract(media_type=PAGE, ok=(303,), form=(), pages=(400,)),
    "POST /review/reviews/{review_id}/resolve": Contract(
        media_type=PAGE, ok=(303,), form=("decision", "post_id", "reason"), pages=(400,)
    ),
    "POST /review/jobs/{job_id}/approve": Contract(
        media_type=PAGE, ok=(303,), form=("task_version", "content_sha256", "post_id"), pages=(400,)
    ),
    "POST /review/jobs/{job_id}/changes": Contract(
        media_type=PAGE, ok=(303,), form=("task_version", "note"), pages=(400,)
    ),
    "POST /review/jobs/{job_id}/comments": Contract(
        media_type=PAGE, ok=(303,), form=("note",), pages=(400,)
    ),
    "GET /review/jobs/{job_id}/timeline": Contract(
        media_type=PAGE,
        ok=(200, 303),
        query={
            "after": {"type": "integer", "minimum": 0, "maximum": 2147483647},
            "before": {"type": "integer", "minimum": 0, "maximum": 2147483647},
        },
        pages=(404, 422),
    ),
    "GET /review/timeline": Contract(
        media_type=PAGE,
        ok=(200, 303),
        query={"job_id": {"type": "string", "maxLength": 128}},
        pages=(422,),
    ),
    "POST /review/jobs/{job_id}/approvals/{approval_id}/revoke": Contract(
        media_type=PAGE, ok=(303,), form=(), pages=(400,)
    ),
    "POST /review/jobs/{job_id}/budgets/{name}": Contract(
        media_type=PAGE, ok=(303,), form=("limit",), pages=(400,)
    ),
    "POST /review/jobs/{job_id}/publish": Contract(
        media_type=PAGE, ok=(303,), form=(), pages=(400,)
    ),
    "POST /review/jobs/{job_id}/operations/retry": Contract(
        media_type=PAGE, ok=(303,), form=("operation_key", "reason"), pages=(400,)
    ),
    "GET /review/oauth": Contract(
        media_type=PAGE,
        ok=(200, 303),
        query={"request": {"type": "string", "minLength": 1, "maxLength": 128}},
        pages=(403, 404),
    ),
    "POST /review/oauth/approve": Contract(
        media_type=PAGE, ok=(303,), form=("sites",), pages=(400, 403, 404)
    ),
    "POST /review/oauth/deny": Contract(media_type=PAGE, ok=(303,), form=(), pages=(400, 403, 404)),
    "POST /review/oauth/grants/{grant_id}/revoke": Contract(
        media_type=PAGE, ok=(303,), form=(), pages=(400,)
    ),
}
