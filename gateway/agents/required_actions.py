"""Required actions of an agent session, answered exactly once through the ledger.

``AgentSession.required_actions`` (``openai.types.beta.agent_session``), by ``type``:

* ``function_call`` naming a gateway tool: run through the tool's domain function under the
  job's lease (:func:`gateway.agents.tools.execute`), then submit the result as the ledger
  operation ``.../tool_result/{call_id}`` (:mod:`gateway.agents.submissions`). A call id that
  already has a result row is never executed again: its stored event is resent with the same
  idempotency key.
  Before it runs, the content the call would write is checked against the job's checkpointed
  digests (:func:`gateway.agents.evidence.content_mismatch`): a mismatch stops the session and
  opens a review item, and the call is never run.
* ``environment_connection``: answered through the operator's hook
  (:mod:`gateway.agents.environments`: connected, and the environment holds the checkpointed
  artifacts), or refused with a reason shown on the job and a review item (``dismiss``).
* ``mcp_approval_request``, ``computer_use_approval_request``, a ``function_call`` naming an
  unknown tool: never answered automatically. Each becomes a review item (kind
  ``agent_action``) that an editor resolves with :func:`resolve`: ``approve`` / ``deny`` (the
  matching ``*_result`` event, or for an unknown tool ``success: false`` with the editor's
  reason).

Outcomes of :func:`handle`: ``answered``, ``resent``, ``review``, ``connected``, ``refused``
(an environment connection refused with a reason), ``later`` (retryable: the next pass tries
again), ``stopped`` (a stop is never retried).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

from gateway.agents import environments
from gateway.agents import evidence
from gateway.agents import sessions
from gateway.agents import stops
from gateway.agents import submissions
from gateway.agents import tools
from gateway.agents.openai_sdk import openai
from gateway.core import answers
from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.editorial import resolution
from gateway.editorial import reviews
from gateway.jobs import records
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import AgentSession
from gateway.ledger.models import Job
from gateway.ledger.models import Review
from gateway.operations import perform
from gateway.operations import review_items
from gateway.operations.target import Target

log = logging.getLogger(__name__)
KIND = "agent_action"
_LATER = (exc.NeedsReview, exc.StaleFencingToken, exc.LeaseRequired)
# The ledger action of the result each person-decided request type gets.
RESULT_ACTION = {
    "mcp_approval_request": "mcp_approval_result",
    "computer_use_approval_request": "computer_use_approval_result",
    "function_call": "tool_result",
    "environment_connection": "environment_connection",
}
DECISIONS = {
    "mcp_approval_request": ("approve", "deny"),
    "computer_use_approval_request": ("approve", "deny"),
    "function_call": ("deny",),
    "environment_connection": ("dismiss",),
}


@dataclass
class Context:
    """What one worker pass over a session holds: the job (under the lease), its target
    with the lease's fencing token, the session row, the OpenAI client and the session as
    retrieved in this pass (``remote``, the SDK's ``AgentSession``)."""

    config: Config
    oai: openai.OpenAI
    job: Job
    target: Target
    session: AgentSession
    remote: object = None


def _slot(action) -> str:
    return (
        getattr(action, "call_id", None)
        or getattr(action, "request_id", None)
        or (action.environment_id)
    )


def handle(ctx: Context, action) -> str:
    """Handle one required action (see the module docstring for the outcomes)."""
    if action.type == "function_call" and action.name in tools.all_tools():
        return _function_call(ctx, action)
    if action.type == "environment_connection":
        return _environment_connection(ctx, action)
    existing = submissions.find(ctx.job, RESULT_ACTION[action.type], _slot(action))
    if existing is not None:
        return "resent" if _resend(ctx, existing) else "answered"
    _open_review(ctx, action)
    return "review"


def _resend(ctx: Context, row) -> bool:
    if row.state == CONFIRMED:
        return False
    submissions.send(ctx.config, ctx.oai, row)
    return True


def _environment_connection(ctx: Context, action) -> str:
    """Connect the environment through the hook, or refuse with a reason (see
    :mod:`gateway.agents.environments`)."""
    state = AgentSession.get_by_id(ctx.session.id).environment or {}
    if state.get("id") == action.environment_id and state.get("event") == environments.HOOK:
        # decided by the hook for this request; an agent.environment.* event reopens it
        return state["status"] if state.get("status") == environments.CONNECTED else "refused"
    if not ctx.config.agent_environment_hook:
        reason = "no environment hook is configured (GATEWAY_AGENT_ENVIRONMENT_HOOK)"
        return _refuse_environment(ctx, action, reason, environments.NO_HOOK)
    payload = environments.hook_input(ctx.job, ctx.session, ctx.remote, action.environment_id)
    try:
        output = environments.run_hook(ctx.config, payload)
    except environments.HookFailed as error:
        log.warning("job_id=%s environment hook: %s", ctx.job.job_id, error)
        return "later"
    if not output["connected"]:
        reason = f"the environment hook refused: {output['reason'] or 'no reason given'}"
        return _refuse_environment(ctx, action, reason, environments.HOOK)
    unproven = environments.unproven(payload["artifacts"], output["artifacts"])
    if unproven:
        note = "connected, but its files are not as checkpointed"
        environments.record(
            ctx.session, environments.CONNECTED, note, environments.HOOK, action.environment_id
        )
        evidence.stop_on_mismatch(ctx.session, ctx.job, "environment against checkpoints", unproven)
        return "stopped"
    environments.record(
        ctx.session, environments.CONNECTED, None, environments.HOOK, action.environment_id
    )
    log.info("job_id=%s environment %s connected", ctx.job.job_id, action.environment_id)
    return environments.CONNECTED


def _refuse_environment(ctx: Context, action, reason: str, decided_by: str) -> str:
    environments.record(
        ctx.session, environments.REFUSED, reason, decided_by, action.environment_id
    )
    _open_review(ctx, action, reason)
    return "refused"


def _function_call(ctx: Context, action) -> str:
    existing = submissions.find(ctx.job, "tool_result", action.call_id)
    if existing is not None:  # executed before: never again; resend the stored result
        return "resent" if _resend(ctx, existing) else "answered"
    mismatch = evidence.content_mismatch(ctx.job, action.name, action.arguments)
    if mismatch is not None:  # never written from content the checkpoints do not prove
        found = [{"call_id": action.call_id, "tool": action.name, **mismatch}]
        _refuse_mismatch(ctx, action, found)
        return "stopped"
    actor = f"agent:{ctx.session.session_id}"
    try:
        output = tools.execute(ctx.target, action.name, action.arguments, actor)
        result = {"success": True, "output": json.dumps(output, ensure_ascii=False)}
    except exc.JobCancelled:
        return "stopped"
    except exc.WordPressRefused as refusal:
        facts = refusal.extensions
        if not answers.wordpress_credentials_refused(
            facts.get("wordpress_status"), facts.get("wordpress_code")
        ):
            result = _failure(refusal)
        else:
            stops.stop(ctx.session, "WordPress refused the site's credentials", ctx.target)
            return "stopped"
    except _LATER:
        return "later"
    except exc.GatewayError as error:
        if error.retryable:
            return "later"
        result = _failure(error)
    ctx.job = ctx.target.job  # a version bump replaced it
    perform.crash_point(ctx.config, "before_tool_result")
    return _submit_tool_result(ctx, action, result)


def _refuse_mismatch(ctx: Context, action, found: list[dict]) -> None:
    """A call refused for an artifact digest mismatch: claim its tool result (the refusal, a
    409 ``artifact-digest-mismatch`` problem), stop the session and open the review item,
    then send the result, so that the call does not stay open at OpenAI: the turn ends and
    an editor's checked follow-up can lift the stop (:mod:`gateway.agents.follow_ups`)."""
    refusal = exc.ArtifactDigestMismatch(
        f"{action.name} would write content ({found[0]['role']}) other than the job's "
        "checkpointed digest; nothing was written and the session is stopped until an editor "
        "continues it",
        expected_sha256=found[0]["expected_sha256"],
        actual_sha256=found[0]["actual_sha256"],
    )
    event = {
        "type": "agent.session.input.tool_result",
        "call_id": action.call_id,
        "turn_id": action.turn_id,
        **_failure(refusal),
    }
    session_id = ctx.session.session_id
    row = submissions.claim(ctx.job, "tool_result", action.call_id, session_id, event)
    evidence.stop_on_mismatch(ctx.session, ctx.job, "content against checkpoints", found)
    submissions.send(ctx.config, ctx.oai, row)


def _failure(error: exc.GatewayError) -> dict:
    problem = error.problem()
    if error.slug == "operation-key-reused":
        problem["hint"] = (
            f"this operation was done with other arguments under this task version; call "
            f"{tools.BUMP_TOOL} with a higher task_version to change it"
        )
        problem["next_tool"] = tools.BUMP_TOOL
    return {"success": False, "error": json.dumps(problem, ensure_ascii=False)}


def _submit_tool_result(ctx: Context, action, result: dict) -> str:
    event = {
        "type": "agent.session.input.tool_result",
        "call_id": action.call_id,
        "turn_id": action.turn_id,
        **result,
    }
    row = submissions.submit(
        ctx.config, ctx.oai, ctx.job, "tool_result", action.call_id, ctx.session.session_id, event
    )
    if row.state == CONFIRMED:
        stops.count_answer(ctx.session)
    log.info(
        "job_id=%s tool %s call %s -> %s (%s)",
        ctx.job.job_id,
        action.name,
        action.call_id,
        "ok" if result["success"] else "refused",
        row.state,
    )
    return "answered"


def _open_review(ctx: Context, action, reason: str | None = None) -> Review | None:
    result_action = RESULT_ACTION[action.type]
    key = perform.operation_key(ctx.job, result_action, _slot(action))
    earlier = Review.select().where(
        Review.tenant == ctx.job.tenant,
        Review.job_id == ctx.job.job_id,
        Review.kind == KIND,
        Review.operation_key.endswith(f"/{result_action}/{_slot(action)}"),  # any version
    )
    if earlier.exists():
        return None  # open, or already decided (a dismissed reconnection stays dismissed)
    detail = {
        "session_id": ctx.session.session_id,
        "action": action.model_dump(mode="json"),
        "decisions": list(DECISIONS[action.type]),
    }
    if action.type == "function_call":
        detail["unknown_tool"] = action.name
    if reason:
        detail["refused"] = reason
    return review_items.open_item(ctx.job.tenant, ctx.job.job_id, key, KIND, detail)


def _result_event(action: dict, decision: str, reason: str | None) -> dict:
    """The ``*_result`` event for an editor's decision (OpenAI Agents API input types).

    Raises:
        ValidationFailed (422): the decision does not fit this request.
    """
    kind = action["type"]
    if decision not in DECISIONS[kind]:
        raise exc.ValidationFailed(
            f"a {kind} takes one of: {', '.join(DECISIONS[kind])}",
            errors=[{"pointer": "/decision", "message": f"not allowed for {kind}"}],
        )
    if kind == "function_call":
        error = f"an editor denied this call: {reason or 'no reason given'}"
        return {
            "type": "agent.session.input.tool_result",
            "call_id": action["call_id"],
            "turn_id": action["turn_id"],
            "success": False,
            "error": error,
        }
    if kind == "mcp_approval_request":
        response = {"type": "mcp_tool_call", "decision": decision}
        return {
            "type": "agent.session.input.mcp_approval_request_result",
            "request_id": action["request_id"],
            "response": response,
        }
    request = action["request"]
    if request["type"] == "browser_origin_access":
        response = {"type": "browser_origin_access", "decision": decision}
    elif decision == "deny":
        response = {"type": "browser_authentication", "action": "cancel"}
    else:  # signing in means handing credentials to the agent: never through the gateway
        raise exc.ValidationFailed(
            "a browser sign-in cannot be approved through the gateway; deny it",
            errors=[{"pointer": "/decision", "message": "only deny"}],
        )
    return {
        "type": "agent.session.input.computer_use_approval_request_result",
        "request_id": action["request_id"],
        "response": response,
    }


def resolve(config: Config, review: Review, decision: str, reason: str | None, editor: str) -> dict:
    """Apply an editor's decision on an ``agent_action`` review item, claimed for it already
    (:func:`gateway.editorial.resolution.resolve_review`: of two editors deciding at once,
    only the claim's holder gets here, so the ``*_result`` is submitted once).

    The ``*_result`` event is submitted once as a ledger operation; if OpenAI cannot be
    reached the row stays UNKNOWN and the worker resends it with the same key.

    Raises:
        ValidationFailed (422): the decision does not fit the request.
        JobCancelled (409): the job was cancelled (its pending actions are never answered).
        SessionBound (409): the job's session was replaced since.
    """
    job = records.get_job(review.tenant, review.job_id)
    records.ensure_active(job)
    detail = review.detail
    action = detail["action"]
    row = None
    if action["type"] != "environment_connection":
        event = _result_event(action, decision, reason)
        if job.session_id != detail["session_id"]:
            raise exc.SessionBound("the job's agent session was replaced; nothing to answer")
        result_action = RESULT_ACTION[action["type"]]
        slot = review.operation_key.rsplit("/", 1)[1]
        row = submissions.submit(
            config, sessions.client(config), job, result_action, slot, detail["session_id"], event
        )
    elif decision not in DECISIONS["environment_connection"]:
        _result_event(action, decision, reason)  # raises the 422
    closed = reviews.close(review, detail={**detail, "reason": reason})
    return {
        "review": reviews.review_view(closed),
        "operation": row.as_dict() if row is not None else None,
    }


resolution.register_decider(
    "agent_action", resolution.Decider(decisions=("approve", "deny", "dismiss"), decide=resolve)
)
