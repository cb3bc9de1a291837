"""The gateway's MCP tools: each one HTTP call of docs/api.md, keyed by the job, never by the
call (docs/mcp.md, "Tools").

Input schemas are made from the same JSON Schema files the HTTP API validates the call's body
with (``gateway/schemas/*.json``, through :mod:`gateway.core.validation`), plus ``job_id``,
the path's ``slot`` or ``name``, and ``idempotency_key`` on the writes. The gateway makes the
operation key ``{tenant}/{job_id}/v{task_version}/{action}[/{slot}]`` from the job exactly as
over HTTP; the MCP request id and the model's call id never reach it.

Every result carries ``structuredContent`` (:data:`OUTPUT_SCHEMA`): ``operation_key``,
``state``, ``replayed``, ``reconciled``, ``job_id`` and the gateway's ``answer``. Every
refusal is a tool error (:func:`error_result`): the problem's type, detail, ``retryable``,
``retry_after`` and the ``next_step`` an agent can take. There is no publish or approve tool:
publishing stays behind an editor's approval. Every result fits clients with caps: long texts
are stubs with their digest, read in pages with ``read_text`` (:mod:`gateway.mcp.paging`).
"""

from __future__ import annotations

import base64
import copy
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from jsonschema import Draft202012Validator
from mcp.types import CallToolResult
from mcp.types import TextContent
from mcp.types import ToolAnnotations

from gateway.core import exceptions as exc
from gateway.core import media_request
from gateway.core import states
from gateway.core import tool_schemas
from gateway.core import validation
from gateway.mcp import paging
from gateway.mcp.client import Answer
from gateway.mcp.client import Caller
from gateway.mcp.client import GatewayAPI
from gateway.mcp.client import Problem

REQUEST_KEY_ARGUMENT = "idempotency_key"
# The _meta member a tools/call may carry its request key in, named after the protocol's
# proposed field (SEP-3182, "Request Idempotency": ``idempotencyKey`` on tools/call).
REQUEST_KEY_META = "idempotencyKey"
MAX_PATH_BYTES = 15 * 1024 * 1024  # base64 of it stays under GATEWAY_MAX_CONTENT_LENGTH

OUTPUT_SCHEMA = {
    "type": "object",
    "required": ["operation_key", "state", "replayed", "reconciled", "job_id", "answer"],
    "additionalProperties": False,
    "properties": {
        "operation_key": {
            "type": ["string", "null"],
            "description": "the ledger operation this call wrote or replayed, "
            "{tenant}/{job_id}/v{task_version}/{action}[/{slot}]; null for a call that is "
            "not one WordPress write",
        },
        "state": {
            "type": "string",
            "description": f"the operation's ledger state ({', '.join(states.STATES)}); for "
            f"other calls the job's status (start_job, get_job, recover: "
            f"{', '.join(states.STATUSES)}), verified or not_verified (verify), the job's "
            "phase (request_approval)",
        },
        "replayed": {
            "type": "boolean",
            "description": "the gateway answered from its ledger: nothing was sent to WordPress",
        },
        "reconciled": {
            "type": "boolean",
            "description": "the outcome of an earlier, unanswered write was proven by looking "
            "it up in WordPress (not written again)",
        },
        "job_id": {"type": "string"},
        "answer": {"type": "object", "description": "the gateway's answer (docs/api.md)"},
    },
}

Summary = tuple[str | None, str, bool, bool]  # operation_key, state, replayed, reconciled


def _ledger(body: dict) -> Summary:
    return body["operation_key"], body["state"], body["replayed"], body["reconciled"]


def _job_status(body: dict) -> Summary:
    return None, body["status"], False, False


def _verified(body: dict) -> Summary:
    return None, states.VERIFIED if body.get("ok") else "not_verified", False, False


def _phase(body: dict) -> Summary:
    return None, body["phase"], False, False


def _recovered(body: dict) -> Summary:
    proven = any(entry.get("reconciled") for entry in body.get("completed", []))
    return None, body["status"], False, proven


@dataclass(frozen=True)
class Spec:
    """One tool: the HTTP call it makes and how its answer is summed up.

    Attributes:
        path: the route, with ``{job_id}`` and the names in ``path_params``.
        schema: the ``gateway/schemas`` file of the body (None: the call has no body).
        only: keep only these body properties (None: all).
        path_params: ``(name, description)`` of the path's identifiers besides ``job_id``.
        summary: ``answer body -> (operation_key, state, replayed, reconciled)``.
        writes: the call may reach WordPress: it takes a client request key.
        pages: the call reads one long text of the job's answer by its digest, a page at a
            time (``read_text``: :mod:`gateway.mcp.paging`).
    """

    name: str
    title: str
    description: str
    method: str
    path: str
    schema: str | None
    annotations: ToolAnnotations
    summary: Callable[[dict], Summary]
    only: tuple[str, ...] | None = None
    path_params: tuple[tuple[str, str], ...] = ()
    writes: bool = False
    body: dict = field(default_factory=dict)  # sent when schema is "empty"
    pages: bool = False


def _hints(read_only: bool, destructive: bool, idempotent: bool = True) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=True,  # WordPress, and for media an image URL
    )


KEYED = (
    " Keyed by the job: the same call again (any request id) returns the stored receipt and "
    "writes nothing; other arguments under the same task_version are refused (bump it with "
    "start_job)."
)

SPECS: tuple[Spec, ...] = (
    Spec(
        "start_job",
        "Start or bump a job",
        "Start the job (task_version 1) or bump it to a higher task_version, which is needed "
        "to change content already written under the current one. Every other tool is keyed "
        "by this job_id. Read where a job stands first with get_job.",
        "PUT",
        "/v1/jobs/{job_id}",
        "job",
        _hints(read_only=False, destructive=False),
        _job_status,
        only=("site", "task_version"),
    ),
    Spec(
        "upload_media",
        "Upload one image",
        "Upload one image of the job into a named slot, once: from source_url (downloaded by "
        "the gateway), content_base64 (small images: a request is capped at 4 MiB), or path "
        "(a local file, stdio only, under the folders the operator allows)." + KEYED,
        "PUT",
        "/v1/jobs/{job_id}/media/{slot}",
        "media",
        _hints(read_only=False, destructive=False),
        _ledger,
        path_params=(("slot", "the media slot, e.g. hero"),),
        writes=True,
    ),
    Spec(
        "put_draft",
        "Put the job's draft",
        "Create the job's WordPress post as a draft, once, verified by read-back; under a "
        "bumped task_version update the same post. {{media:SLOT}} placeholders in content "
        "become image blocks." + KEYED,
        "PUT",
        "/v1/jobs/{job_id}/draft",
        "draft",
        _hints(read_only=False, destructive=True),
        _ledger,
        writes=True,
    ),
    Spec(
        "insert_block",
        "Insert a named block",
        "Insert a named HTML block at the end of the job's post, exactly once; new HTML under "
        "the same name replaces it in place (under a bumped task_version)." + KEYED,
        "PUT",
        "/v1/jobs/{job_id}/blocks/{name}",
        "block",
        _hints(read_only=False, destructive=True),
        _ledger,
        path_params=(("name", "the block's name, e.g. resources"),),
        writes=True,
    ),
    Spec(
        "verify",
        "Verify the post by read-back",
        "Read the job's post back from WordPress and compare it field by field with the draft.",
        "GET",
        "/v1/jobs/{job_id}/verification",
        None,
        _hints(read_only=True, destructive=False),
        _verified,
    ),
    Spec(
        "request_approval",
        "Request an editor's approval",
        "Put the verified post in front of editors (once per task version). Only an editor "
        "approves or publishes: there is no publish tool.",
        "POST",
        "/v1/jobs/{job_id}/approval-requests",
        "empty",
        _hints(read_only=False, destructive=False),
        _phase,
    ),
    Spec(
        "recover",
        "Recover unproven writes",
        "Reconcile the job's writes whose outcome is not proven (after a lost answer or a "
        "crash) by looking them up in WordPress, and report what is completed, failed, "
        "unknown or needs a person, and the next allowed actions.",
        "POST",
        "/v1/jobs/{job_id}/recover",
        "empty",
        _hints(read_only=False, destructive=False),
        _recovered,
    ),
    Spec(
        "get_job",
        "Read a job's state",
        "The job: task version, phase, status, post, its ledger operations and open reviews, "
        "approvals, the editors' decision on its version and their notes (decision "
        "changes_requested: an editor sent it back with a note; write a new task version). "
        "Read it first after reconnecting, then continue.",
        "GET",
        "/v1/jobs/{job_id}",
        None,
        _hints(read_only=True, destructive=False),
        _job_status,
    ),
    Spec(
        paging.READ_TOOL,
        "Read a long text in pages",
        "What is too long for a result is a stub with its sha256 and read_with: a text (an "
        "article, a block's HTML; omitted: text), a list cut after its first items (its last "
        "item says omitted: items) or an object (omitted: object). Call this with read_with's "
        "arguments, then each page's next_offset until it is null: a text's pages joined are "
        "the text (its UTF-8 SHA-256 is the sha256), a list's pages give its items, an "
        "object's its entries. A sha256 no longer found means the job changed: read it again.",
        "GET",
        "/v1/jobs/{job_id}",
        None,
        _hints(read_only=True, destructive=False),
        _job_status,
        pages=True,
    ),
)


def _identifier(pattern, what: str) -> dict:
    return {"type": "string", "pattern": pattern.pattern, "description": what}


def advertised_schema(spec: Spec, local_paths: bool = False) -> dict:
    """The tool's ``inputSchema`` as advertised: :func:`input_schema` in the form every client
    reads (:func:`gateway.core.tool_schemas.advertised`: no ``$ref``, closed objects, OpenAI's
    strict subset of keywords, the optional properties nullable), ``required`` only what the
    call needs (issue 52: Claude Code fills every required property, anthropics/claude-code
    #95239; a client in strict mode makes them all required again, null still allowed)."""
    schema = input_schema(spec, local_paths)
    return tool_schemas.advertised(schema, validation.text_pattern(), strict=False)


def input_schema(spec: Spec, local_paths: bool = False) -> dict:
    """The schema the tool's arguments are validated with (after their nulls are dropped):
    ``job_id``, the path's identifiers, the body's properties from its schema file (``only``
    kept), ``idempotency_key`` on writes; ``path`` on ``upload_media`` when
    ``local_paths``."""
    body = {"properties": {}, "required": []}
    if spec.schema not in (None, "empty"):
        body = validation.inline_shared(copy.deepcopy(validation.schema(spec.schema)))
    properties = dict(body.get("properties", {}))
    required = list(body.get("required", []))
    if spec.only is not None:
        properties = {k: v for k, v in properties.items() if k in spec.only}
        required = [r for r in required if r in spec.only]
    if spec.name == "upload_media":
        properties.pop("mime_type", None)  # sniffed from the bytes
        if local_paths:
            properties["path"] = {
                "type": "string",
                "minLength": 1,
                "maxLength": 4096,
                "description": "a local image file under the folders the operator allows",
            }
    head = {"job_id": _identifier(validation.JOB_ID, "the job's id, chosen by the caller")}
    for name, what in spec.path_params:
        head[name] = _identifier(validation.SLOT, what)
    if spec.pages:
        head["sha256"] = {
            "type": "string",
            "pattern": r"^[0-9a-f]{64}(?![\s\S])",
            "description": "the sha256 of the text's stub",
        }
        properties["offset"] = {
            "type": "integer",
            "minimum": 0,
            "description": "the character to start at: 0, then the last page's next_offset",
        }
    if spec.writes:
        properties[REQUEST_KEY_ARGUMENT] = {
            "type": "string",
            "pattern": r"^[\x21-\x7e]{1,255}(?![\s\S])",
            "description": "optional: your own key for this request; a retry with the same key "
            "returns the first result, the same key with other arguments is refused",
        }
    schema = {
        "type": "object",
        "properties": {**head, **properties},
        "required": [*head, *required],
        "additionalProperties": False,
    }
    if "$defs" in body:  # what the body's fields refer to (#/$defs/...)
        schema["$defs"] = body["$defs"]
    return schema


def error_result(problem: Problem) -> CallToolResult:
    """The tool error for ``problem`` (``isError: true``, never a success): its JSON as the
    text (type, title, status, detail, retryable, retry_after, the problem's own members) with
    the ``next_step`` an agent can take, its long texts and lists cut to fit the bound
    (:func:`gateway.mcp.paging.shortened`)."""
    body = dict(problem.body)
    body.setdefault("retryable", False)
    body["retry_after"] = problem.retry_after
    body["next_step"] = next_step(problem.slug, body)
    text = json.dumps(paging.shortened(body), ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


_NEXT_STEPS = {
    "operation-key-reused": "these arguments differ from the ones already written under this "
    "task version: bump the task version (start_job with task_version + 1) and call again, "
    "or call again with the original arguments",
    "operation-in-progress": "the same write is still in flight after this server waited for "
    "it: call recover for this job, then this tool again; do not change the arguments",
    "outcome-unknown": "call recover for this job, then call this tool again; do not change "
    "the arguments",
    "gateway-connection-lost": "call recover for this job, then call this tool again; do not "
    "change the arguments",
    "request-key-reused": "this idempotency key was used with other arguments: send the "
    "original arguments, or use a new key for a new request",
    "needs-review": "an editor must decide first (the review board); stop and tell the user",
    "job-not-found": "start the job with start_job first",
    "stale-task-version": "read the job with get_job and continue under its task_version",
    "job-cancelled": "stop: the job was cancelled",
    "media-not-ready": "upload the missing media slots (upload_media) or call recover, then "
    "call this tool again",
    "verification-failed": "the post does not verify: call verify and tell the user which "
    "fields drifted (a person repairs it)",
    "budget-exhausted": "stop: the job used up a budget; an editor must raise it",
    "validation-failed": "fix the fields named in errors and call again",
    "template-leftover": "replace the template text named in errors and call again",
    "lease-required": "another worker holds the job's lease: stop and tell the user",
    "unauthenticated": "the gateway token is missing, unknown or revoked: tell the user",
    "forbidden": "this token may not do that: tell the user",
    "not-found": "nothing to act on yet (e.g. no draft to verify): put the draft first",
}


def next_step(slug: str, body: dict) -> str:
    """What an agent should do after the problem ``slug`` (see :data:`_NEXT_STEPS`)."""
    if slug in _NEXT_STEPS:
        return _NEXT_STEPS[slug]
    if body.get("retryable"):
        return "wait retry_after seconds and call this tool again with the same arguments"
    return "do not call again unchanged: tell the user what the detail says"


def _local_problem(detail: str, pointer: str, slug: str = "validation-failed") -> Problem:
    return Problem(
        {
            "type": exc.PROBLEM_BASE + slug,
            "title": "Validation failed",
            "status": 422,
            "detail": detail,
            "retryable": False,
            "errors": [{"pointer": pointer, "message": detail}],
        }
    )


def read_local_image(path: str, roots: tuple[Path, ...]) -> tuple[bytes, str]:
    """The bytes and file name of the image at ``path``, which must resolve (symbolic links
    followed) to a regular file of at most :data:`MAX_PATH_BYTES` under one of ``roots``.

    Outside the roots a path gets one answer whether or not it exists, so the tool tells a
    caller nothing about the rest of the file system (issue 40).

    Raises:
        Problem: ``validation-failed`` at ``/path`` otherwise; nothing is read or sent.
    """
    outside = _local_problem("the file is not under a folder the operator allows", "/path")
    try:
        where = Path(path).resolve(strict=False)  # every link that exists followed
    except (OSError, RuntimeError, ValueError):
        raise outside from None
    if not any(where.is_relative_to(root) for root in roots):
        raise outside
    try:
        real = Path(path).resolve(strict=True)
    except (OSError, RuntimeError, ValueError):
        raise _local_problem("no such file", "/path") from None
    if not any(real.is_relative_to(root) for root in roots):
        raise outside
    if not real.is_file():
        raise _local_problem("not a regular file", "/path")
    if real.stat().st_size > MAX_PATH_BYTES:
        raise _local_problem(f"larger than {MAX_PATH_BYTES} bytes", "/path")
    return real.read_bytes(), real.name


@dataclass
class Runner:
    """Runs tools against the gateway at ``api``; ``roots``: the folders local ``path``
    uploads may read from (empty: none, e.g. over streamable HTTP)."""

    api: GatewayAPI
    roots: tuple[Path, ...] = ()
    _validators: dict = field(default_factory=dict)

    def schema_of(self, spec: Spec) -> dict:
        """The tool's advertised ``inputSchema`` (:func:`advertised_schema`)."""
        return advertised_schema(spec, local_paths=bool(self.roots))

    def _validated(self, spec: Spec, arguments: dict) -> dict:
        if spec.name not in self._validators:
            schema = input_schema(spec, local_paths=bool(self.roots))
            self._validators[spec.name] = Draft202012Validator(schema)
        validator = self._validators[spec.name]
        try:
            arguments = tool_schemas.at_the_door(
                arguments, validator.schema, validation.text_pattern()
            )
            if spec.name == "upload_media":
                arguments = media_request.unset_empty_sources(arguments, self._sources())
            return validation.check(validator, arguments, spec.schema)
        except exc.GatewayError as error:
            raise Problem(error.problem()) from None

    def _sources(self) -> tuple[str, ...]:
        """``upload_media``'s sources: a local ``path`` is one when ``roots`` allow them."""
        return (*media_request.SOURCES, "path") if self.roots else media_request.SOURCES

    def run(
        self, spec: Spec, caller: Caller, arguments: dict, meta_key: str | None
    ) -> CallToolResult:
        """Call the gateway for tool ``spec`` as ``caller`` (a gateway token over HTTP, a
        principal in process: :mod:`gateway.mcp.client`); the client's request key is the
        ``idempotency_key`` argument or else ``meta_key`` (from ``_meta``).

        Raises:
            Problem: the arguments are invalid (nothing sent), or the gateway refused.
        """
        args = self._validated(spec, arguments)
        if spec.pages:
            return self._page(caller, args)
        key = args.pop(REQUEST_KEY_ARGUMENT, None) or meta_key
        job_id = args.pop("job_id")
        names = {"job_id": job_id}
        for name, _ in spec.path_params:
            names[name] = args.pop(name)
        path = spec.path.format(**names)
        body = self._body(spec, args)
        key = key if spec.writes else None
        answer = self.api.call(caller, spec.method, path, body, key, job_id=job_id)
        structured = sized(result(spec, job_id, answer))
        # the first result stored under the client's key (the ledger's own replays say so in
        # the body)
        stored_first = key is not None and answer.replayed and not structured["replayed"]
        return call_result(structured, stored_first)

    def _page(self, caller: Caller, args: dict) -> CallToolResult:
        """``read_text``: the page from ``offset`` of the text, list or object whose digest
        is ``sha256``, found in the job's answer or else in its verification (what results
        stub: :mod:`gateway.mcp.paging`).

        Raises:
            Problem: ``not-found`` (no such text now), or the gateway refused.
        """
        job_id, sha, offset = args["job_id"], args["sha256"], args.get("offset", 0)
        job = self.api.call(caller, "GET", f"/v1/jobs/{job_id}", job_id=job_id).body
        found = paging.find(job, sha)
        if found is None:
            try:
                checked = self.api.call(caller, "GET", f"/v1/jobs/{job_id}/verification")
                found = paging.find(checked.body, sha)
            except Problem:
                found = None
        if found is None:
            detail = "nothing of this job has this sha256 now: read the job again"
            raise _local_problem(detail, "/sha256")
        if offset > len(found):
            raise _local_problem(f"past the end ({len(found)})", "/offset")
        _key, state, _replayed, _reconciled = _job_status(job)
        structured = {
            "operation_key": None,
            "state": state,
            "replayed": False,
            "reconciled": False,
            "job_id": job_id,
            "answer": paging.page(found, offset, job_id),
        }
        return call_result(structured, False)

    def _body(self, spec: Spec, args: dict) -> dict | None:
        if spec.schema is None:
            return None
        if spec.name == "upload_media":
            try:
                _check_media(args, self._sources())
                if "path" in args:
                    content, name = read_local_image(args.pop("path"), self.roots)
                    media_request.not_empty(content, "/path")
                    args["content_base64"] = base64.b64encode(content).decode("ascii")
                    args.setdefault("filename", name)
            except exc.GatewayError as error:  # refused as the gateway would: nothing sent
                raise Problem(error.problem()) from None
        return args


def _check_media(args: dict, sources: tuple[str, ...]) -> None:
    """``upload_media``'s arguments through the gateway's media request parser
    (:mod:`gateway.core.media_request`): exactly one of ``sources``, base64 that decodes to
    bytes.

    Raises:
        ValidationFailed (422): the parser's problem, as the gateway would answer it.
    """
    if media_request.one_source(args, sources) != "path":
        media_request.parse(args)


def result(spec: Spec, job_id: str, answer: Answer) -> dict:
    """The structured result of ``spec``'s call (:data:`OUTPUT_SCHEMA`)."""
    key, state, replayed, reconciled = spec.summary(answer.body)
    return {
        "operation_key": key,
        "state": state,
        "replayed": bool(replayed),
        "reconciled": bool(reconciled),
        "job_id": job_id,
        "answer": answer.body,
    }


def sized(structured: dict) -> dict:
    """``structured`` with its answer :func:`gateway.mcp.paging.fitted` to the size of the
    whole tool result (its two copies, as :func:`call_result` sends them)."""

    def size(answer) -> int:
        whole = call_result({**structured, "answer": answer}, True)
        return len(whole.model_dump_json(by_alias=True, exclude_none=True).encode())

    answer = paging.fitted(structured["answer"], structured["job_id"], size)
    return {**structured, "answer": answer}


def call_result(structured: dict, request_key_replayed: bool) -> CallToolResult:
    """The MCP result: the structured content, the same JSON as text for clients that read
    only text, and ``_meta`` saying when a client request key returned a stored result."""
    meta = {"publishing-gateway/request-key-replayed": True} if request_key_replayed else None
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(structured, ensure_ascii=False))],
        structured_content=structured,
        _meta=meta,
    )


def media_roots(raw: str) -> tuple[Path, ...]:
    """Folders from ``os.pathsep``-separated text, resolved (each must exist).

    Raises:
        ValueError: a folder does not exist.
    """
    roots = []
    for part in filter(None, (p.strip() for p in raw.split(os.pathsep))):
        root = Path(part).expanduser()
        if not root.is_dir():
            raise ValueError(f"media root {part!r} is not a folder")
        roots.append(root.resolve())
    return tuple(roots)
