"""The gateway's function tools for agents: their definitions and ONE dispatch table.

``GET /v1/agent-tools`` returns :func:`definitions` (the OpenAI Agents API's function tool shape,
``{"type": "function", "name", "description", "parameters"}``). Each tool's parameters are
generated from the JSON Schema file the HTTP API validates the same call with
(``gateway/schemas/*.json``: one source, not a copy), plus the path parameter the URL carries
(``slot``, ``name``) with the pattern :mod:`gateway.core.validation` checks it with.

:func:`all_tools` maps a tool name to what runs it. The side-effect tools come from the action
registry (:func:`gateway.operations.registry.agent_tools`: each registered action with an
:class:`~gateway.operations.registry.AgentTool` - today media, draft and block), run through the
action's ``send`` and answered with the body its registration carries, the HTTP call's
(:class:`~gateway.operations.registry.Answer`); the others are reads and steps that are not
ledger actions (verification, approval requests, the job's version bump, recover). Operation
keys are made by the domain from job, task version, action and slot - never from a ``call_id`` -
so an agent that calls put-draft again under a new call id gets the stored receipt. No tool
approves or publishes (no registered action with a tool does).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from functools import cache

from jsonschema import Draft202012Validator

from gateway.actions import drafts
from gateway.core import exceptions as exc
from gateway.core import media_request
from gateway.core import tool_schemas
from gateway.core import validation
from gateway.editorial import approvals
from gateway.jobs import checkpoints
from gateway.jobs import records
from gateway.operations import registry
from gateway.operations.target import Target
from gateway.recovery import reconciliation

BUMP_TOOL = "bump_task_version"


@dataclass(frozen=True)
class Tool:
    """One function tool.

    Attributes:
        name: the function name the agent calls.
        description: what it does, for the model.
        schema: the ``gateway/schemas`` file of the HTTP call's body.
        path: path parameters of the HTTP call, ``{name: JSON Schema}`` (all required).
        only: keep only these body properties (None: all).
        run: ``(target, arguments, actor) -> dict`` the JSON the agent receives.
    """

    name: str
    description: str
    schema: str
    run: Callable[[Target, dict, str], dict]
    path: dict = field(default_factory=dict)
    only: tuple[str, ...] | None = None


def _slot_schema(what: str) -> dict:
    return {"type": "string", "pattern": validation.SLOT.pattern, "description": what}


def _performer(action: registry.Action) -> Callable[[Target, dict, str], dict]:
    """A tool's ``run`` for a registered action: its ``send`` with the arguments as the
    request (path parameters included), answered with the HTTP call's body (the action's
    :class:`~gateway.operations.registry.Answer`)."""

    def run(target: Target, args: dict, _actor: str) -> dict:
        return action.answer.body(action.send(target, args))

    return run


def _action_tools() -> list[Tool]:
    """The function tools of the registered actions an agent may perform
    (:func:`gateway.operations.registry.agent_tools`)."""
    return [
        Tool(
            a.tool.name,
            a.tool.description,
            a.tool.schema,
            _performer(a),
            path={name: _slot_schema(what) for name, what in a.tool.path},
        )
        for a in registry.agent_tools()
    ]


def _verify(target: Target, _args: dict, _actor: str) -> dict:
    return drafts.verify_job(target)


def _request_approval(target: Target, _args: dict, actor: str) -> dict:
    return approvals.request_view(target.job, approvals.request_approval(target, actor))


def _bump(target: Target, args: dict, _actor: str) -> dict:
    job = target.job
    bumped, _created = records.put_job(job.tenant, job.job_id, job.site, args["task_version"])
    target.job = bumped
    return {"job_id": bumped.job_id, "task_version": bumped.task_version}


def _recover(target: Target, _args: dict, _actor: str) -> dict:
    return reconciliation.recover_job(target)


def _checkpoint(target: Target, args: dict, _actor: str) -> dict:
    checkpoint, _created = checkpoints.post_checkpoint(target, args)
    return checkpoints.checkpoint_view(target.job, checkpoint)


# The tools that are not ledger actions (reads and steps), in the order agents see them after
# the action tools.
_STEP_TOOLS: tuple[Tool, ...] = (
    Tool(
        "verify",
        "Read the post back from WordPress and compare it field by field with the draft.",
        "empty",
        _verify,
    ),
    Tool(
        "request_approval",
        "Put the verified post in front of editors. Only an editor approves or publishes.",
        "empty",
        _request_approval,
    ),
    Tool(
        BUMP_TOOL,
        "Start a new task version of the job (needed to change content already written "
        "under the current version). Counted against the job's budget.",
        "job",
        _bump,
        only=("task_version",),
    ),
    Tool(
        "recover",
        "Reconcile the job's unproven WordPress operations and report what is completed, "
        "failed, unknown or needs a person.",
        "empty",
        _recover,
    ),
    Tool(
        "checkpoint",
        "Record a phase of your work with its artifacts, each named with the SHA-256 of its "
        "content (the body: of the exact draft content you will send; an image of slot S: "
        "role media:S, of its bytes). Resuming checks your session against these digests.",
        "checkpoint",
        _checkpoint,
    ),
)


def all_tools() -> dict[str, Tool]:
    """``{name: Tool}``: the registered actions' tools (as the registry holds them now: the
    composition root, :mod:`gateway.composition`, registers every action in every process),
    then the step tools."""
    return {t.name: t for t in (*_action_tools(), *_STEP_TOOLS)}


@cache
def parameters(name: str) -> dict:
    """The JSON Schema tool ``name``'s arguments are validated with, generated from its schema
    file (what the model sees: :func:`advertised`)."""
    tool = all_tools()[name]
    schema = validation.inline_shared(copy.deepcopy(validation.schema(tool.schema)))
    for meta in ("$schema", "title", "if", "then"):
        schema.pop(meta, None)
    properties = schema.setdefault("properties", {})
    required = list(schema.get("required", []))
    if tool.only is not None:
        properties = {k: v for k, v in properties.items() if k in tool.only}
        required = [r for r in required if r in tool.only]
    schema["properties"] = {**tool.path, **properties}
    schema["required"] = [*tool.path, *required]
    schema["additionalProperties"] = False
    return schema


@cache
def advertised(name: str) -> dict:
    """Tool ``name``'s parameters as the model sees them: :func:`parameters` in OpenAI's
    strict form (:func:`gateway.core.tool_schemas.advertised`: no ``$ref``, closed objects,
    every property required with the optional ones nullable; nulls are dropped before the
    arguments are validated with :func:`parameters`)."""
    return tool_schemas.advertised(parameters(name), validation.text_pattern())


@cache
def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(parameters(name))


def definitions() -> list[dict]:
    """Every tool as an OpenAI Agents function tool definition (parameters:
    :func:`advertised`)."""
    return [
        {
            "type": "function",
            "name": t.name,
            "description": t.description,
            "parameters": advertised(t.name),
        }
        for t in all_tools().values()
    ]


def arguments_of(arguments) -> dict:
    """The call's arguments as a dict (the API may hand them over as JSON text).

    Raises:
        ValidationFailed: not a JSON object.
    """
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except ValueError:
            arguments = None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise exc.ValidationFailed(
            "the arguments must be a JSON object",
            errors=[{"pointer": "", "message": "expected an object"}],
        )
    return arguments


def execute(target: Target, name: str, arguments, actor: str) -> dict:
    """Run tool ``name`` through the same domain function as its HTTP call.

    Args:
        target: the job's target, carrying the fencing token of the worker's lease.
        arguments: the function call's arguments (dict or JSON text).
        actor: who asks (recorded where the domain records a person), e.g. ``agent:{session}``.

    Returns the JSON body the HTTP call would answer.

    Raises:
        KeyError: ``name`` is not a gateway tool (callers check :func:`all_tools` first).
        ValidationFailed (422) and everything the domain function raises.

    The arguments pass the liberal door first
    (:func:`gateway.core.tool_schemas.at_the_door`: ``"null"`` for an optional identifier,
    an array sent as JSON text; docs/mcp.md, "What the tools accept").
    """
    tool = all_tools()[name]
    if name != "recover":  # the agent asks something of the job, as an HTTP client does
        records.record_request(target.job.tenant, target.job.job_id)
    arguments = tool_schemas.at_the_door(
        arguments_of(arguments), parameters(name), validation.text_pattern()
    )
    if name == "upload_media":  # "" in an unset source (Cursor's way): not given
        arguments = media_request.unset_empty_sources(arguments)
    args = validation.check(_validator(name), arguments, tool.schema)
    records.ensure_active(target.job)
    return tool.run(target, args, actor)
