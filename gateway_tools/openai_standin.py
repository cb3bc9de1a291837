"""A local stand-in for the OpenAI Agents API, for tests and ``gateway demo --agent``.

A small real HTTP server (werkzeug, in a thread) serving the endpoints the gateway uses, in the
wire format of the installed ``openai`` SDK:

* ``GET  /v1/agents/sessions/{id}`` - an ``AgentSession``;
* ``GET  /v1/agents/sessions/{id}/items?after=&limit=&order=`` - a cursor page of
  ``AgentSessionItem`` (``has_more``), so sessions with hundreds of items are paged;
* ``POST /v1/agents/sessions/{id}/events`` - ``AgentSessionInputParam`` events, 202;
  an ``Idempotency-Key`` seen before returns the first answer and records nothing new;
* ``POST /v1/chat/completions`` - a scripted ``ChatCompletion`` (one call of the first offered
  tool, then an answer quoting its result), for n8n's OpenAI chat model node in the AI Agent
  test of the community node (``tests/test_n8n_node.py``).

Every response body and every webhook event it emits is validated with the SDK's own pydantic
models (``AgentSession``, ``AgentSessionItem``, the webhook event classes, ``agent.session.failed``
and ``agent.environment.*`` included) with no member the model does not declare, and dumped from
them. Every incoming event is validated against the SDK's ``AgentSessionInputParam`` with extra
keys forbidden at every level (an ``"ouput"`` is a 400, as a typo should be), and a tool result
or approval result must name a pending call or request *and its turn* (a wrong ``turn_id`` is a
400). A change in the SDK fails a test here instead of passing against a stale copy of the
format. Webhook deliveries are signed as ``client.webhooks.unwrap`` verifies them
(``webhook-id``, ``webhook-timestamp``, ``webhook-signature: v1,<base64 HMAC-SHA256 of
"{id}.{timestamp}.{body}">``).

Sessions are scripted per test: :meth:`OpenAIStandIn.require` puts required actions on a
session now, :meth:`OpenAIStandIn.then` queues the next turn's actions for when the current
ones are answered; :meth:`~OpenAIStandIn.fail`, :meth:`~OpenAIStandIn.delete_session`,
:meth:`~OpenAIStandIn.revoke_key` / :meth:`~OpenAIStandIn.new_key` and the environment helpers
play what OpenAI does on its own. Not a model: it never decides anything by itself.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
import json
import secrets
import threading
import time
from typing import Any

import requests
from openai.types.beta import AgentSession
from openai.types.beta import AgentSessionInputParam
from openai.types.beta.agent_session_item import AgentSessionItem
from openai.types.chat import ChatCompletion
from openai.types.chat import ChatCompletionChunk
from openai.types.webhooks import UnwrapWebhookEvent
from pydantic import BaseModel
from pydantic import ConfigDict
from pydantic import TypeAdapter
from werkzeug.serving import WSGIRequestHandler
from werkzeug.serving import make_server
from werkzeug.wrappers import Request
from werkzeug.wrappers import Response

_ITEM = TypeAdapter(AgentSessionItem)
# Extra keys forbidden at every level: the SDK's TypedDicts would otherwise drop a misspelt key.
_EVENTS = TypeAdapter(list[AgentSessionInputParam], config=ConfigDict(extra="forbid"))
_WEBHOOK = TypeAdapter(UnwrapWebhookEvent)
ACTIVE = ("in_progress", "requires_action")
# What each session webhook event's ``data`` carries besides ``id`` (the SDK's models).
_ENVIRONMENT_DATA = ("agent.session.created", "agent.session.failed", "agent.session.idle")
_ENVIRONMENT_DATA += ("agent.session.in_progress",)


def strict_events(events) -> list[dict]:
    """``events`` validated as the SDK's ``AgentSessionInputParam`` with no undeclared key at
    any level, as plain lists and dicts (the SDK's ``Iterable`` members are validated only when
    read, so they are read here).

    Raises:
        pydantic.ValidationError: an event the SDK's types do not describe.
    """
    return _plain(_EVENTS.validate_python(events))


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    return [_plain(v) for v in value]  # lists, tuples and pydantic's ValidatorIterator


def _undeclared(model, where: str = "") -> list[str]:
    """Members a parsed SDK model holds that its class does not declare (the SDK's models
    accept extra members; an event the stand-in emits must not have any)."""
    found = []
    if isinstance(model, BaseModel):
        found += [f"{where}/{k}" for k in (model.model_extra or {})]
        for name in type(model).model_fields:
            found += _undeclared(getattr(model, name), f"{where}/{name}")
    elif isinstance(model, list | tuple):
        for index, item in enumerate(model):
            found += _undeclared(item, f"{where}/{index}")
    return found


class _QuietHandler(WSGIRequestHandler):
    def log_request(self, *_args) -> None:  # the test output stays readable
        pass


def _dump(model) -> dict:
    return model.model_dump(mode="json", by_alias=True)


class OpenAIStandIn:
    """The scripted service. Use as a context manager; ``base_url`` goes to the SDK client.

    Attributes:
        api_key: the key clients must send (``Authorization: Bearer``); others get 401.
        webhook_secret: ``whsec_...`` the deliveries are signed with.
        down: while True every API call answers 503 (OpenAI unreachable).
        event_delay: seconds a POST of events waits before it is handled (a slow answer, so
            that a second sender arrives while the first one's call is in flight).
    """

    def __init__(
        self, api_key: str | None = None, webhook_secret: str | None = None, port: int = 0
    ):
        self.port = port
        self.api_key = api_key or "sk-standin-" + secrets.token_hex(16)
        self._keys = {self.api_key}  # keys answered; others get 401 (revoke_key, new_key)
        raw = secrets.token_bytes(24)
        self.webhook_secret = webhook_secret or "whsec_" + base64.b64encode(raw).decode()
        self.down = False
        self.event_delay = 0.0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._sessions: dict[str, dict] = {}
        self._idempotent: dict[str, tuple[int, bytes]] = {}
        self.log: list[dict] = []  # every API request: method, path, idempotency key
        self.chat_requests: list[dict] = []  # every chat completion request body, in order
        # the arguments of the scripted tool call (what "the model" proposes; {} by default)
        self.tool_arguments: dict = {}
        self._server = None
        self._thread = None

    # ----------------------------------------------------------------- server

    def start(self) -> OpenAIStandIn:
        self._server = make_server(
            "127.0.0.1", self.port, self._wsgi, threaded=True, request_handler=_QuietHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> OpenAIStandIn:
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        port = self._server.server_port if self._server is not None else self.port
        return f"http://127.0.0.1:{port}/v1"

    # ----------------------------------------------------------------- scripting

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}{secrets.token_hex(4)}"

    def revoke_key(self, key: str | None = None) -> None:
        """Revoke ``key`` (default: :attr:`api_key`): every call with it gets 401."""
        with self._lock:
            self._keys.discard(key or self.api_key)

    def new_key(self) -> str:
        """Issue another key (the project's new key after a rotation) and return it."""
        key = "sk-standin-" + secrets.token_hex(16)
        with self._lock:
            self._keys.add(key)
        return key

    def create_session(
        self,
        tools: list[dict] | None = None,
        session_id: str | None = None,
        environment: str = "none",
    ):
        """A new idle session whose agent has ``tools`` (function tool definitions), in an
        ``environment`` of type ``none``, ``self_hosted`` or ``openai_hosted``."""
        sid = session_id or self._new_id("sess")
        now = int(time.time())
        with self._lock:
            self._sessions[sid] = {
                "id": sid,
                "object": "agent.session",
                "created_at": now,
                "last_active_at": now,
                "metadata": {},
                "vault_ids": [],
                "agent": {
                    "id": "agent_standin",
                    "model": "standin-model",
                    "multi_agent": {"enabled": False},
                    "reasoning": {},
                    "service_tier": "auto",
                    "text": {"format": {"type": "text"}, "verbosity": "medium"},
                    "tools": [{"defer_loading": False, **t} for t in tools or []],
                },
                "environment": self._environment(environment),
                "error": None,
                "required_actions": [],
                # created without a limit: unlimited, consumption not reported (openai 3.60)
                "spend_control": {"limit": None, "consumed": None},
                "status": "idle",
                "usage": None,
                "_items": [],
                "_events": [],
                "_next": [],
                "_turn": None,
            }
        self._validate_session(sid)
        return sid

    def _environment(self, kind: str) -> dict:
        if kind == "none":
            return {"type": "none"}
        env_id = self._new_id("env")
        if kind == "self_hosted":
            return {
                "type": "self_hosted",
                "id": env_id,
                "capability_directories": [],
                "remote_url": f"wss://standin.invalid/environments/{env_id}",
                "workspace_directory": "/workspace",
            }
        return {
            "type": "openai_hosted",
            "id": env_id,
            "capability_directories": [],
            "files": [],
            "network": {"access": "disabled", "allowed_domains": []},
            "packages": {"npm": [], "python": [], "system": []},
            "plugins": [],
            "skills": [],
        }

    def environment_id(self, sid: str) -> str | None:
        """The id of the session's environment (None for ``none``)."""
        return self._sessions[sid]["environment"].get("id")

    def fail(self, sid: str, error: str = "the agent runtime failed") -> tuple[bytes, dict]:
        """The session fails as OpenAI fails one (status ``failed``, ``error`` set, nothing
        required any more); returns the signed ``agent.session.failed`` delivery."""
        with self._lock:
            session = self._sessions[sid]
            session.update(status="failed", error=error, required_actions=[], _next=[])
        self._validate_session(sid)
        return self.webhook("agent.session.failed", sid)

    def delete_session(self, sid: str) -> None:
        """Delete the session: every call naming it gets 404 from now on."""
        with self._lock:
            self._sessions.pop(sid)

    def add_call(self, sid: str, name: str, arguments: dict, output: dict | str) -> str:
        """A completed call of tool ``name`` and its output as saved items (history the
        session holds, e.g. from before a restore); returns the call id."""
        session = self._sessions[sid]
        turn, call_id = self._new_id("turn"), "call_" + secrets.token_hex(8)
        call = {"type": "function_call", "name": name, "arguments": arguments}
        self._add_item(session, {**call, "call_id": call_id, "status": "completed"}, turn)
        text = output if isinstance(output, str) else json.dumps(output)
        self._add_item(
            session,
            {
                "type": "function_call_output",
                "call_id": call_id,
                "output": text,
                "status": "completed",
            },
            turn,
        )
        return call_id

    def add_items(self, sid: str, count: int, tool_calls: int = 0, tool: str = "verify") -> None:
        """``count`` saved items: user/assistant messages and reasoning, of which
        ``tool_calls`` are completed calls of ``tool`` (each with its output item)."""
        session = self._sessions[sid]
        turn = self._new_id("turn")
        for n in range(count):
            if n < tool_calls * 2:
                call_id = f"call_hist_{n // 2:05d}_{sid[-6:]}"
                if n % 2 == 0:
                    item = {
                        "type": "function_call",
                        "name": tool,
                        "arguments": {},
                        "call_id": call_id,
                        "status": "completed",
                    }
                else:
                    item = {
                        "type": "function_call_output",
                        "call_id": call_id,
                        "output": '{"ok": true}',
                        "status": "completed",
                    }
            elif n % 3 == 0:
                item = {"type": "reasoning", "summary": [], "status": "completed"}
            else:
                role = "user" if n % 3 == 1 else "assistant"
                kind = "input_text" if role == "user" else "output_text"
                content = [{"type": kind, "text": f"message {n} " + "lorem ipsum " * 20}]
                if kind == "output_text":
                    content[0]["annotations"] = []
                item = {
                    "type": "message",
                    "role": role,
                    "content": content,
                    "status": "completed",
                    "phase": None if role == "user" else "commentary",
                }
            self._add_item(session, item, turn)

    def require(self, sid: str, *actions: dict) -> list[dict]:
        """Put required actions on the session now (status ``requires_action``); each action
        is a dict as :meth:`function_call` & co. build. Returns them with their ids."""
        with self._lock:
            session = self._sessions[sid]
            turn = session["_turn"] or self._new_id("turn")
            session["_turn"] = turn
            placed = [self._place(session, dict(a), turn) for a in actions]
            session["status"] = "requires_action"
        self._validate_session(sid)
        return placed

    def then(self, sid: str, *actions: dict) -> None:
        """Queue a next turn: when every current action is answered, these are required."""
        with self._lock:
            self._sessions[sid]["_next"].append([dict(a) for a in actions])

    @staticmethod
    def function_call(name: str, arguments: dict, call_id: str | None = None) -> dict:
        return {
            "type": "function_call",
            "name": name,
            "arguments": arguments,
            "call_id": call_id or "call_" + secrets.token_hex(8),
        }

    @staticmethod
    def mcp_approval(server_label: str = "crm", name: str = "delete_contact") -> dict:
        return {
            "type": "mcp_approval_request",
            "request_id": "mcpr_" + secrets.token_hex(6),
            "request": {
                "type": "mcp_tool_call",
                "server_label": server_label,
                "name": name,
                "arguments": {"id": 7},
                "message": f"Run {name}?",
            },
        }

    @staticmethod
    def computer_use_approval(origin: str = "https://example.org") -> dict:
        return {
            "type": "computer_use_approval_request",
            "request_id": "cua_" + secrets.token_hex(6),
            "request": {
                "type": "browser_origin_access",
                "origin": origin,
                "reason": "the agent wants to read a source page",
            },
        }

    @staticmethod
    def environment_connection(environment_id: str = "env_standin") -> dict:
        return {"type": "environment_connection", "environment_id": environment_id}

    def set_usage(self, sid: str, total_tokens: int) -> None:
        self._sessions[sid]["usage"] = {
            "input_tokens": total_tokens // 2,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": total_tokens - total_tokens // 2,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": total_tokens,
        }

    def set_status(self, sid: str, status: str) -> None:
        with self._lock:
            session = self._sessions[sid]
            session["status"] = status
            if status == "in_progress" and not session["_turn"]:
                session["_turn"] = self._new_id("turn")
        self._validate_session(sid)

    def finish_turn(self, sid: str) -> None:
        """The current turn ends with a final answer (the session goes idle)."""
        with self._lock:
            session = self._sessions[sid]
            session["required_actions"], session["_next"] = [], []
            self._after_answer(session)
        self._validate_session(sid)

    def session(self, sid: str) -> AgentSession:
        """The session as the SDK would parse it."""
        return self._validate_session(sid)

    def events(self, sid: str, kind: str | None = None) -> list[dict]:
        """Accepted events of the session (each once, whatever the resends)."""
        found = self._sessions[sid]["_events"]
        return [e for e in found if kind is None or e["type"] == kind]

    def event_posts(self, sid: str) -> list[dict]:
        """Every POST of events to the session (resends included), with its key."""
        path = f"/v1/agents/sessions/{sid}/events"
        return [r for r in self.log if r["method"] == "POST" and r["path"] == path]

    # ----------------------------------------------------------------- webhooks

    def webhook(
        self,
        event_type: str,
        sid: str,
        action_type: str | None = None,
        event_id: str | None = None,
        timestamp: int | None = None,
        secret: str | None = None,
    ) -> tuple[bytes, dict]:
        """A signed delivery ``(body, headers)`` of an ``agent.session.*`` event of session
        ``sid``, or of an ``agent.environment.*`` event of environment ``sid``. The event is
        built as the SDK's model of that type declares it, and refused (``ValueError``) when
        the model does not take it or it holds a member the model does not declare."""
        data: dict[str, Any] = {"id": sid}
        if event_type == "agent.session.action_required":
            data["required_action"] = {"type": action_type or "function_call"}
        elif event_type in _ENVIRONMENT_DATA:
            environment = self._sessions[sid]["environment"] if sid in self._sessions else {}
            data["environment_type"] = environment.get("type", "none")
            data["environment_id"] = environment.get("id")
        event = {
            "id": event_id or "evt_" + secrets.token_hex(10),
            "object": "event",
            "created_at": int(time.time()),
            "type": event_type,
            "data": data,
        }
        model = _WEBHOOK.validate_python(event)
        if getattr(model, "type", None) != event_type or _undeclared(model):
            raise ValueError(f"not an SDK {event_type} event: {_undeclared(model)}")
        event = _dump(model)
        body = json.dumps(event).encode()
        stamp = str(int(time.time()) if timestamp is None else timestamp)
        return body, self.sign(body, event["id"], stamp, secret)

    def sign(self, body: bytes, webhook_id: str, stamp: str, secret: str | None = None) -> dict:
        """The three ``webhook-*`` headers for ``body``."""
        secret = secret or self.webhook_secret
        key = base64.b64decode(secret[6:]) if secret.startswith("whsec_") else secret.encode()
        signed = f"{webhook_id}.{stamp}.{body.decode()}".encode()
        signature = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        return {
            "webhook-id": webhook_id,
            "webhook-timestamp": stamp,
            "webhook-signature": f"v1,{signature}",
            "content-type": "application/json",
        }

    @staticmethod
    def deliver(url: str, body: bytes, headers: dict) -> requests.Response:
        """POST a delivery to ``url`` as OpenAI does."""
        return requests.post(url, data=body, headers=headers, timeout=30)

    # ----------------------------------------------------------------- internals

    def _add_item(self, session: dict, item: dict, turn: str) -> dict:
        item = {"id": self._new_id("item"), "turn_id": turn, **item}
        session["_items"].append(_dump(_ITEM.validate_python(item)))
        return item

    def _place(self, session: dict, action: dict, turn: str) -> dict:
        if action["type"] in (
            "function_call",
            "mcp_approval_request",
            "computer_use_approval_request",
        ):
            action["turn_id"] = turn
        if action["type"] == "function_call":
            self._add_item(
                session,
                {
                    **{k: action[k] for k in ("name", "arguments", "call_id")},
                    "type": "function_call",
                    "status": "in_progress",
                },
                turn,
            )
        session["required_actions"].append(action)
        return action

    def _validate_session(self, sid: str) -> AgentSession:
        public = {k: v for k, v in self._sessions[sid].items() if not k.startswith("_")}
        model = AgentSession.model_validate(public)
        if _undeclared(model):
            raise ValueError(f"not an SDK AgentSession: {_undeclared(model)}")
        return model

    def _answer(self, session: dict, match, item: dict | None) -> bool:
        kept = [a for a in session["required_actions"] if not match(a)]
        if len(kept) == len(session["required_actions"]):
            return False
        session["required_actions"] = kept
        if item is not None:
            self._add_item(session, item, session["_turn"] or "turn_none")
        return True

    @staticmethod
    def _wrong_turn(session: dict, key: str, value: str, turn_id: str | None) -> str | None:
        """Why a result naming pending ``key`` = ``value`` under ``turn_id`` is refused (400):
        the pending action was requested by another turn."""
        for action in session["required_actions"]:
            if action.get(key) == value and turn_id is not None:
                if action.get("turn_id") != turn_id:
                    return f"turn_id {turn_id} is not the turn of {key} {value}"
        return None

    def _after_answer(self, session: dict) -> None:
        if session["required_actions"]:
            return
        if session["_next"]:
            for action in session["_next"].pop(0):
                self._place(session, action, session["_turn"])
            session["status"] = "requires_action"
            return
        if session["status"] in ACTIVE:
            text = [{"type": "output_text", "text": "done", "annotations": []}]
            self._add_item(
                session,
                {
                    "type": "message",
                    "role": "assistant",
                    "content": text,
                    "status": "completed",
                    "phase": "final_answer",
                },
                session["_turn"] or "turn_none",
            )
        session["status"], session["_turn"] = "idle", None

    def _refusal(self, session: dict, event: dict) -> str | None:
        """Why the session refuses ``event`` as a bad request (400), before anything."""
        if session["status"] == "failed":
            return "the session failed; it takes no input"
        if event["type"] == "agent.session.input.tool_result":
            return self._wrong_turn(session, "call_id", event["call_id"], event["turn_id"])
        return None

    def _apply(self, session: dict, event: dict) -> str | None:
        """Apply one event; returns an error text for an event the session cannot take."""
        kind = event["type"]
        if kind == "agent.session.input.tool_result":
            item = {
                "type": "function_call_output",
                "call_id": event["call_id"],
                "status": "completed" if event["success"] else "failed",
                "output": event.get("output"),
                "error": event.get("error"),
            }
            if not self._answer(session, lambda a: a.get("call_id") == event["call_id"], item):
                return f"no pending function call {event['call_id']}"
        elif kind.endswith("approval_request_result"):
            if not self._answer(
                session, lambda a: a.get("request_id") == event["request_id"], None
            ):
                return f"no pending approval request {event['request_id']}"
        elif kind == "agent.session.input.cancel":
            session["required_actions"], session["_next"] = [], []
            session["status"] = "idle"
            return None
        elif kind == "agent.session.input.message":
            if session["status"] != "idle":  # a message to a working session steers its turn
                return None
            session["_turn"] = self._new_id("turn")
            for message in event["input"]:
                self._add_item(
                    session,
                    {
                        "type": "message",
                        "role": "user",
                        "content": message["content"],
                        "status": "completed",
                        "phase": None,
                    },
                    session["_turn"],
                )
            session["status"] = "in_progress"
            if session["_next"]:  # the scripted agent's next calls, in the new turn
                for action in session["_next"].pop(0):
                    self._place(session, action, session["_turn"])
                session["status"] = "requires_action"
            return None
        self._after_answer(session)
        return None

    def _wsgi(self, environ, start_response):
        request = Request(environ)
        response = self._handle(request)
        return response(environ, start_response)

    def _handle(self, request: Request) -> Response:
        key = request.headers.get("Idempotency-Key")
        with self._lock:
            self.log.append({"method": request.method, "path": request.path, "key": key})
        sent = request.headers.get("Authorization", "")
        if not sent.startswith("Bearer ") or sent[7:] not in self._keys:
            return _error(401, "invalid_api_key", "Incorrect API key provided")
        if self.down:
            return _error(503, "service_unavailable", "The stand-in is down")
        parts = request.path.strip("/").split("/")
        if parts == ["v1", "chat", "completions"] and request.method == "POST":
            return self._chat(request.get_json(silent=True) or {})
        if parts[:3] != ["v1", "agents", "sessions"] or len(parts) < 4:
            return _error(404, "not_found", "unknown path")
        sid = parts[3]
        if parts[4:] == ["events"] and request.method == "POST" and self.event_delay:
            time.sleep(self.event_delay)
        with self._lock:
            session = self._sessions.get(sid)
            if session is None:
                return _error(404, "not_found", f"no session {sid}")
            if len(parts) == 4 and request.method == "GET":
                return _json(_dump(self._validate_session(sid)))
            if parts[4:] == ["items"] and request.method == "GET":
                return self._items(session, request)
            if parts[4:] == ["events"] and request.method == "POST":
                if key and key in self._idempotent:
                    status, body = self._idempotent[key]
                    return Response(body, status=status, mimetype="application/json")
                response = self._events(session, request)
                if key:
                    self._idempotent[key] = (response.status_code, response.get_data())
                return response
        return _error(405, "method_not_allowed", "unsupported")

    def _items(self, session: dict, request: Request) -> Response:
        order = request.args.get("order", "desc")
        limit = max(1, min(100, int(request.args.get("limit", "20"))))
        items = session["_items"] if order == "asc" else session["_items"][::-1]
        after = request.args.get("after")
        start = 0
        if after:
            start = next((i + 1 for i, it in enumerate(items) if it["id"] == after), len(items))
        page = items[start : start + limit]
        return _json(
            {
                "object": "list",
                "data": page,
                "first_id": page[0]["id"] if page else None,
                "last_id": page[-1]["id"] if page else None,
                "has_more": start + limit < len(items),
            }
        )

    def _events(self, session: dict, request: Request) -> Response:
        try:
            body = request.get_json()
            if set(body) != {"events"}:
                raise ValueError(f"the body takes only 'events', got {sorted(body)}")
            events = strict_events(body["events"])
        except Exception as error:  # the SDK's own types refuse it: a bad request
            return _error(400, "invalid_request_error", str(error)[:500])
        for event in events:
            refused = self._refusal(session, event)
            if refused:
                return _error(400, "invalid_request_error", refused)
        for event in events:
            problem = self._apply(session, event)
            if problem:
                return _error(409, "conflict", problem)
            session["_events"].append(event)
        self._validate_session(session["id"])
        return Response(b"", status=202)

    # ----------------------------------------------------------------- chat completions

    def _chat(self, body: dict) -> Response:
        """``POST /v1/chat/completions``, scripted, never a model: while the conversation has no
        tool result yet and tools are offered, one call of the first offered tool with
        :attr:`tool_arguments` (``{}`` unless a test scripts what the model proposes: the tool's
        fixed parameters come from the workflow, not from the model); after a tool
        result, a final answer quoting its first 300 characters. Answers are
        ``ChatCompletion`` objects (``ChatCompletionChunk`` events when ``stream`` is true)."""
        with self._lock:
            self.chat_requests.append(body)
        messages = body.get("messages") or []
        tools = body.get("tools") or []
        answered = [m for m in messages if m.get("role") == "tool"]
        message: dict = {"role": "assistant", "content": None}
        if tools and not answered:
            name = tools[0]["function"]["name"]
            message["tool_calls"] = [
                {
                    "id": self._new_id("call"),
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(self.tool_arguments)},
                }
            ]
            finish = "tool_calls"
        else:
            result = str(answered[-1].get("content", ""))[:300] if answered else "no tool"
            message["content"] = f"The tool answered: {result}"
            finish = "stop"
        completion = ChatCompletion.model_validate(
            {
                "id": self._new_id("chatcmpl"),
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "gpt-4.1-mini"),
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )
        if not body.get("stream"):
            return _json(_dump(completion))
        return _chat_stream(completion, message, finish)


def _chat_stream(completion, message: dict, finish: str) -> Response:
    """The completion as server-sent ``ChatCompletionChunk`` events, then ``[DONE]``."""
    delta = dict(message)
    if "tool_calls" in delta:
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(delta["tool_calls"])]
    base = {"id": completion.id, "object": "chat.completion.chunk", "created": completion.created,
            "model": completion.model}  # fmt: skip
    chunks = [
        ChatCompletionChunk.model_validate(
            {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        ),
        ChatCompletionChunk.model_validate(
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
        ),
    ]
    lines = [f"data: {json.dumps(_dump(chunk))}\n\n" for chunk in chunks]
    return Response("".join(lines) + "data: [DONE]\n\n", mimetype="text/event-stream")


def _json(body: dict) -> Response:
    return Response(json.dumps(body), status=200, mimetype="application/json")


def _error(status: int, code: str, message: str) -> Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return Response(json.dumps(body), status=status, mimetype="application/json")
