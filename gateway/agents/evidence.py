"""Artifacts checked, not trusted (seed, sections 7 and 9: "文件存在还不够，应检查摘要和来源").

An agent checkpoints its work with the ``checkpoint`` tool (the same domain function and rules as
``POST /v1/jobs/{id}/checkpoints``): each artifact names its ``sha256``, the SHA-256 of its
content. On every resume - before the worker answers a required action - the session's word is
checked against the job's ledger, and nothing goes on from content nobody can prove:

1. **Saved items against checkpoints.** The session's saved items are read incrementally
   (``GET /v1/agents/sessions/{id}/items?order=asc&after=<last read>``; the cursor and what was
   found are kept on the session row, ``agent_session.evidence``). Every ``checkpoint`` call the
   session was told succeeded (its ``function_call_output`` is ``completed`` and names a
   ``task_version``) is a *claim*: its artifacts must be exactly the ledger's checkpoint of that
   task version and phase (compared as a set). A claim the ledger does not hold - a session
   restored from elsewhere, an environment replaced under a reused id - is a mismatch.
2. **Content against checkpoints.** The content a pending call would write must match the
   current version's checkpointed digest: ``put_draft``'s ``content`` against the ``body``
   artifact of ``body_generated``, ``upload_media``'s decoded ``content_base64`` against an
   artifact of role ``media:{slot}`` (any phase).
3. **The environment against checkpoints** (:mod:`gateway.agents.environments`): after a
   reconnection the hook lists what the environment holds; every checkpointed artifact must
   be there with its digest.

A mismatch stops the session (``stopped_reason`` names it) and opens an ``artifact_mismatch``
review item with what was claimed and what the ledger holds; no tool runs. A call refused
for its content (check 2) is answered with the refusal, a tool result carrying the 409
``artifact-digest-mismatch`` problem (:mod:`gateway.agents.required_actions`), so the turn
ends; the other checks send nothing. An editor dismisses the item once the work was redone
(a new task version) or proven; the stop is lifted only by an editor's checked follow-up
(:mod:`gateway.agents.follow_ups`).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging

from gateway.agents import sessions
from gateway.agents import stops
from gateway.agents.openai_sdk import openai
from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core.config import Config
from gateway.core.digests import canonical_json
from gateway.core.digests import sha256_hex
from gateway.editorial import resolution
from gateway.editorial import reviews
from gateway.ledger.models import AgentSession
from gateway.ledger.models import Checkpoint
from gateway.ledger.models import Job
from gateway.operations import perform
from gateway.operations import review_items

log = logging.getLogger(__name__)
KIND = "artifact_mismatch"
CHECKPOINT_TOOL = "checkpoint"
PAGE = 100


def _artifacts_key(artifacts: list[dict]) -> str:
    """Artifacts compare as a set (order does not matter), as checkpoints do."""
    return canonical_json(sorted(canonical_json(a) for a in artifacts))


def _arguments(value) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value or "{}")
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def read_items(oai: openai.OpenAI, row: AgentSession) -> dict:
    """Read the session's saved items after the stored cursor and keep the checkpoint claims
    they show; store and return ``{"after", "calls", "claims"}`` (``calls``: checkpoint calls
    still without an output, by call id; ``claims``: ``{call_id: {"phase", "task_version",
    "artifacts"}}``).

    Raises:
        AgentKeyRefused, AgentSessionGone, AgentUnavailable: the items cannot be read now.
    """
    found = dict(row.evidence or {})
    after, calls, claims = found.get("after"), found.get("calls", {}), found.get("claims", {})
    try:
        while True:
            kwargs = {"order": "asc", "limit": PAGE, **({"after": after} if after else {})}
            page = oai.beta.agents.sessions.items.list(row.session_id, **kwargs)
            for item in page.data:
                after = item.id
                _note(item, calls, claims)
            if not page.data or not page.has_more:
                break
    except openai.APIError as error:
        raise sessions.openai_error(error, "cannot read the session's saved items") from None
    evidence = {"after": after, "calls": calls, "claims": claims}
    AgentSession.update(evidence=evidence).where(AgentSession.id == row.id).execute()
    return evidence


def _note(item, calls: dict, claims: dict) -> None:
    if item.type == "function_call" and item.name == CHECKPOINT_TOOL:
        calls[item.call_id] = _arguments(item.arguments)
    elif item.type == "function_call_output" and item.call_id in calls:
        arguments = calls.pop(item.call_id)
        output = _arguments(getattr(item, "output", None))
        if item.status == "completed" and "task_version" in output:
            claims[item.call_id] = {
                "phase": arguments.get("phase", output.get("phase")),
                "task_version": output["task_version"],
                "artifacts": arguments.get("artifacts", []),
            }


def claim_mismatches(job: Job, evidence: dict) -> list[dict]:
    """The claims of the saved items that the ledger's checkpoints do not hold:
    ``[{"call_id", "phase", "task_version", "claimed", "recorded"}]`` (``recorded`` None: no
    checkpoint of that version and phase)."""
    found = []
    for call_id, claim in sorted(evidence.get("claims", {}).items()):
        recorded = Checkpoint.get_or_none(
            Checkpoint.tenant == job.tenant,
            Checkpoint.job_id == job.job_id,
            Checkpoint.task_version == claim["task_version"],
            Checkpoint.phase == claim["phase"],
        )
        held = recorded.artifacts if recorded is not None else None
        if held is None or _artifacts_key(held) != _artifacts_key(claim["artifacts"]):
            found.append(
                {
                    "call_id": call_id,
                    "phase": claim["phase"],
                    "task_version": claim["task_version"],
                    "claimed": claim["artifacts"],
                    "recorded": held,
                }
            )
    return found


def _checkpointed(job: Job, role: str, phase: str | None = None) -> str | None:
    query = Checkpoint.select().where(
        Checkpoint.tenant == job.tenant,
        Checkpoint.job_id == job.job_id,
        Checkpoint.task_version == job.task_version,
    )
    for checkpoint in query:
        if phase is None or checkpoint.phase == phase:
            for artifact in checkpoint.artifacts:
                if artifact["role"] == role:
                    return artifact["sha256"].lower()
    return None


def content_mismatch(job: Job, name: str, arguments) -> dict | None:
    """Whether a pending call of tool ``name`` would write content other than the job's
    checkpointed digest: ``{"role", "expected_sha256", "actual_sha256"}`` or None (no
    checkpointed digest for it, or it matches)."""
    args = _arguments(arguments)
    if name == "put_draft" and isinstance(args.get("content"), str):
        role, expected = "body", _checkpointed(job, "body", states.BODY_GENERATED)
        content = args["content"].encode("utf-8")
    elif name == "upload_media" and isinstance(args.get("content_base64"), str):
        role = f"media:{args.get('slot')}"
        expected = _checkpointed(job, role)
        try:
            content = base64.b64decode(args["content_base64"], validate=True)
        except (binascii.Error, ValueError):
            return None  # the tool refuses it itself (422)
    else:
        return None
    actual = sha256_hex(content)
    if expected is None or expected == actual:
        return None
    return {"role": role, "expected_sha256": expected, "actual_sha256": actual}


def stop_on_mismatch(row: AgentSession, job: Job, what: str, found: list[dict]) -> None:
    """Stop the session and open the ``artifact_mismatch`` review item (one per session and
    kind of finding while open): ``what`` says which check found ``found``."""
    stops.stop(
        row,
        f"artifact digest mismatch ({what}): the session cannot go on from content the "
        "ledger does not prove",
    )
    key = perform.operation_key(job, KIND, row.session_id)
    detail = {
        "session_id": row.session_id,
        "check": what,
        "mismatches": found,
        "decisions": ["dismiss"],
    }
    review_items.open_item(job.tenant, job.job_id, key, KIND, detail)
    log.warning("job_id=%s: artifact mismatch (%s): %s", job.job_id, what, found)


def check_resume(config: Config, oai: openai.OpenAI, job: Job, row: AgentSession) -> bool:
    """Check 1 (saved items against checkpoints) before a resume; False when it stopped the
    session."""
    mismatches = claim_mismatches(job, read_items(oai, row))
    if mismatches:
        stop_on_mismatch(row, job, "saved items against checkpoints", mismatches)
        return False
    return True


def _dismiss(config: Config, review, decision: str, reason: str | None, editor: str) -> dict:
    """An editor's ``dismiss`` of an ``artifact_mismatch`` item: closed with the reason; the
    session stays stopped until an editor's checked follow-up."""
    if decision != "dismiss":
        raise exc.ValidationFailed(
            "an artifact_mismatch item takes: dismiss",
            errors=[{"pointer": "/decision", "message": "only dismiss"}],
        )
    closed = reviews.close(review, detail={**review.detail, "reason": reason})
    return {"review": reviews.review_view(closed), "operation": None}


resolution.register_decider(KIND, resolution.Decider(decisions=("dismiss",), decide=_dismiss))
