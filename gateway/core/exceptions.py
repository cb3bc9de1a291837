"""The gateway's exception tree. Each class knows its HTTP status and RFC 9457 problem slug;
only ``gateway.api`` turns them into ``application/problem+json`` responses."""

from __future__ import annotations

PROBLEM_BASE = "https://publishing-gateway.dev/problems/"


class GatewayError(Exception):
    """Base class: ``status`` (HTTP), ``slug`` (problem type), ``title``, extensions.

    Args:
        detail: human-readable explanation of this occurrence.
        retry_after: seconds, sent as ``Retry-After`` for retryable refusals.
        **extensions: extra problem members (``operation_key``, ``ledger_state``, ``errors``...).
    """

    status = 500
    slug = "internal-error"
    title = "Internal error"
    retryable = False

    def __init__(self, detail: str = "", retry_after: int | None = None, **extensions):
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.retry_after = retry_after
        self.extensions = extensions

    def problem(self, instance: str | None = None) -> dict:
        """The RFC 9457 body of this error."""
        body = {
            "type": PROBLEM_BASE + self.slug,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "retryable": self.retryable,
        }
        if instance:
            body["instance"] = instance
        body.update(self.extensions)
        return body


def framework_error(status: int, name: str, detail: str = "") -> GatewayError:
    """The problem for an HTTP error the web framework raises itself: no such route (404
    ``not-found``), a method the route does not take (405 ``method-not-allowed``), an unhandled
    exception (500 ``internal-server-error``). Slug and title come from the status's reason
    phrase (RFC 9110), e.g. ``Method Not Allowed`` -> ``method-not-allowed``."""
    error = GatewayError(detail or name)
    error.status, error.title = status, name
    error.slug = name.lower().replace(" ", "-")
    return error


def _problem(name: str, status: int, slug: str, title: str, retryable: bool = False):
    return type(
        name,
        (GatewayError,),
        {"status": status, "slug": slug, "title": title, "retryable": retryable, "__doc__": title},
    )


InvalidJSON = _problem("InvalidJSON", 400, "invalid-json", "The body is not valid JSON")
Unauthenticated = _problem("Unauthenticated", 401, "unauthenticated", "Missing or unknown token")
Forbidden = _problem("Forbidden", 403, "forbidden", "Not allowed for this token")
PhaseOwnedByGateway = _problem(
    "PhaseOwnedByGateway", 403, "phase-owned-by-gateway", "Only the gateway sets this phase"
)
ApprovalRequired = _problem("ApprovalRequired", 403, "approval-required", "Approval required")
ApprovalExpired = _problem("ApprovalExpired", 403, "approval-expired", "Approval expired")
ApprovalRevoked = _problem("ApprovalRevoked", 403, "approval-revoked", "Approval revoked")
JobNotFound = _problem("JobNotFound", 404, "job-not-found", "No such job")
NotFound = _problem("NotFound", 404, "not-found", "Not found")
SiteNotFound = _problem("SiteNotFound", 422, "site-not-found", "No such site for this tenant")
OperationInProgress = _problem(
    "OperationInProgress", 409, "operation-in-progress", "The operation is in flight", True
)
NeedsReview = _problem(
    "NeedsReview", 409, "needs-review", "An editor must decide before any further write"
)
ReviewDecided = _problem(
    "ReviewDecided", 409, "review-decided", "Another decision on this review item stands"
)
StaleTaskVersion = _problem(
    "StaleTaskVersion", 409, "stale-task-version", "The job already has a higher task version"
)
MediaNotReady = _problem("MediaNotReady", 409, "media-not-ready", "A media slot is not CONFIRMED")
JobCancelled = _problem("JobCancelled", 409, "job-cancelled", "The job was cancelled")
CheckpointConflict = _problem(
    "CheckpointConflict", 409, "checkpoint-conflict", "The phase was reached with other artifacts"
)
ArtifactDigestMismatch = _problem(
    "ArtifactDigestMismatch",
    409,
    "artifact-digest-mismatch",
    "The content does not match the checkpointed body artifact",
)
LeaseHeld = _problem("LeaseHeld", 409, "lease-held", "Another owner holds the lease", True)
LeaseRequired = _problem("LeaseRequired", 409, "lease-required", "X-Fencing-Token is required")
StaleFencingToken = _problem(
    "StaleFencingToken", 409, "stale-fencing-token", "A newer lease was granted"
)
ForeignObject = _problem(
    "ForeignObject",
    409,
    "foreign-object",
    "The WordPress object is not provably this operation's",
)
DecisionStands = _problem(
    "DecisionStands", 409, "decision-stands", "Another decision on this task version stands"
)
ApprovalStale = _problem("ApprovalStale", 409, "approval-stale", "The approval no longer matches")
PostTrashed = _problem(
    "PostTrashed", 409, "post-trashed", "The job's post is in the WordPress trash"
)
RepairIncomplete = _problem(
    "RepairIncomplete", 409, "repair-incomplete", "Repair cannot restore every failed field"
)
VerificationFailed = _problem(
    "VerificationFailed", 409, "verification-failed", "The post does not verify; repair it first"
)
SessionBound = _problem(
    "SessionBound", 409, "session-bound", "The agent session belongs to another job"
)
SessionChangeNeedsBump = _problem(
    "SessionChangeNeedsBump",
    409,
    "session-change-needs-version-bump",
    "A job's agent session changes only with a higher task_version",
)
AgentNotConfigured = _problem(
    "AgentNotConfigured", 503, "agent-not-configured", "The OpenAI connection is not configured"
)
AgentUnavailable = _problem(
    "AgentUnavailable", 503, "agent-unavailable", "The OpenAI Agents API cannot be reached", True
)
AgentKeyRefused = _problem(
    "AgentKeyRefused",
    503,
    "agent-key-refused",
    "OpenAI refused the gateway's API key; agent work is paused until the key changes",
)
AgentSessionGone = _problem(
    "AgentSessionGone", 409, "agent-session-gone", "The agent session no longer exists at OpenAI"
)
FollowUpRefused = _problem(
    "FollowUpRefused",
    409,
    "follow-up-refused",
    "The agent session cannot be continued before what blocks it is settled",
)
WebhookSignatureInvalid = _problem(
    "WebhookSignatureInvalid", 400, "webhook-signature-invalid", "The webhook signature is invalid"
)
PayloadTooLarge = _problem("PayloadTooLarge", 413, "payload-too-large", "The body is too large")
UnsupportedMediaType = _problem(
    "UnsupportedMediaType", 415, "unsupported-media-type", "WordPress would refuse this file type"
)
ValidationFailed = _problem("ValidationFailed", 422, "validation-failed", "Validation failed")
TemplateLeftover = _problem(
    "TemplateLeftover", 422, "template-leftover", "Unevaluated template text in the request"
)
ImageUnreadable = _problem(
    "ImageUnreadable", 422, "image-unreadable", "The image cannot be decoded"
)
ImageTooLarge = _problem(
    "ImageTooLarge", 422, "image-too-large", "The image has more pixels than allowed"
)
MediaUrlRefused = _problem(
    "MediaUrlRefused", 422, "media-url-refused", "The image URL is not allowed"
)
MediaSourceUnavailable = _problem(
    "MediaSourceUnavailable",
    503,
    "media-source-unavailable",
    "The image's host name cannot be resolved now",
    True,
)
MediaDownloadFailed = _problem(
    "MediaDownloadFailed", 502, "media-download-failed", "The image could not be downloaded", True
)
RequestKeyReused = _problem(
    "RequestKeyReused",
    422,
    "request-key-reused",
    "This request key (Idempotency-Key) was used with a different request",
)
RequestKeyInProgress = _problem(
    "RequestKeyInProgress",
    409,
    "request-key-in-progress",
    "A request with this request key (Idempotency-Key) is still being answered",
    True,
)
OperationKeyReused = _problem(
    "OperationKeyReused",
    422,
    "operation-key-reused",
    "This operation key was used with a different request",
)
TransportLimit = _problem(
    "TransportLimit", 422, "transport-limit", "The site's transport cannot do this"
)
TransportSwitchRefused = _problem(
    "TransportSwitchRefused",
    409,
    "transport-switch-refused",
    "Operations sent over the current transport are not reconciled yet",
)
SecretInCheckpoint = _problem(
    "SecretInCheckpoint", 422, "secret-in-checkpoint", "Checkpoint data looks like a secret"
)
WordPressRefused = _problem(
    "WordPressRefused", 502, "wordpress-refused", "WordPress refused the request"
)
UpstreamRefused = _problem(
    "UpstreamRefused",
    502,
    "upstream-refused",
    "Something in front of WordPress refused the request",
)
NotificationNotDue = _problem(
    "NotificationNotDue", 409, "notification-not-due", "The job has not reached that event"
)
WebhookEndpointLimit = _problem(
    "WebhookEndpointLimit",
    409,
    "webhook-endpoint-limit",
    "The tenant has as many webhook endpoints as it may have",
)
OperationNotFailed = _problem(
    "OperationNotFailed", 409, "operation-not-failed", "Only a FAILED operation can be retried"
)
OutcomeUnknown = _problem(
    "OutcomeUnknown",
    503,
    "outcome-unknown",
    "The outcome of the WordPress call is not proven",
    True,
)
WordPressUnavailable = _problem(
    "WordPressUnavailable", 503, "wordpress-unavailable", "WordPress is not reachable", True
)
LedgerUnavailable = _problem(
    "LedgerUnavailable", 503, "ledger-unavailable", "The ledger is not reachable", True
)
SecretKeyMismatch = _problem(
    "SecretKeyMismatch",
    500,
    "secret-key-mismatch",
    "The stored site credentials cannot be decrypted with this GATEWAY_SECRET_KEY",
)
BudgetExhausted = _problem(
    "BudgetExhausted", 429, "budget-exhausted", "The job has used up one of its budgets"
)
SiteBusy = _problem(
    "SiteBusy", 429, "site-busy", "The site has as many WordPress calls in flight as allowed", True
)
TenantBusy = type(
    "TenantBusy",
    (SiteBusy,),  # the agent worker and the sweep back off from it as from a busy site
    {
        "slug": "tenant-busy",
        "title": "The tenant has as many requests or WordPress callers in flight as its share",
        "__doc__": "The tenant is over its share of a worker (gateway.tenancy.tenant_shares).",
    },
)
BodyTooSlow = _problem(
    "BodyTooSlow", 408, "body-too-slow", "The request's body did not arrive in time", True
)
UnauthenticatedRateLimited = _problem(
    "UnauthenticatedRateLimited",
    429,
    "unauthenticated-rate-limited",
    "Too many calls without a valid token from this address",
    True,
)
RateLimited = _problem(
    "RateLimited", 429, "rate-limited", "Too many requests from this token", True
)
ReceiptPruned = _problem(
    "ReceiptPruned",
    409,
    "receipt-pruned",
    "The stored receipt this needs was pruned by the retention policy",
)
