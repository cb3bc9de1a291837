"""A session's environment (seed, section 7: "ID相同，不代表文件和进程相同"): the
``environment_connection`` required action answered through the operator's hook, and the
``agent.environment.*`` webhook events shown on the job.

**The hook** (``GATEWAY_AGENT_ENVIRONMENT_HOOK``) is what connects an environment; the gateway
never starts machines itself. It is either a command line (split like a shell would, run
without a shell, the JSON input on stdin, the JSON output on stdout, exit status 0) or an
``https://``/``http://`` URL (the JSON input POSTed with ``Idempotency-Key``, the JSON output
in a 2xx answer); each run may take ``GATEWAY_AGENT_ENVIRONMENT_HOOK_TIMEOUT`` seconds.

Input::

    {"type": "environment_connection", "idempotency_key": "<64 hex>",
     "tenant", "job_id", "task_version", "session_id",
     "environment": {"id", "type", "remote_url", "workspace_directory"},
     "artifacts": [{"phase", "role", "uri", "sha256"}]}

``environment`` is what the session's retrieve shows (``remote_url``: pass it unchanged to
``codex exec-server --remote`` for a self-hosted environment); ``artifacts`` are the job's
checkpointed artifacts of its current task version, which the environment must hold.
``idempotency_key`` is the same for every run for one request (session and environment id):
the hook may be run again for one request (a crash, a retry) and must be repeat-safe.

Output::

    {"connected": true, "artifacts": [{"uri", "sha256"}]}
    {"connected": false, "reason": "why not"}

With ``connected: true`` the hook lists the SHA-256 of the content it found at each artifact's
``uri`` in the environment: every checkpointed artifact must be listed with its checkpointed
digest, else the session is stopped and a review item opened - the agent never goes on with
files nobody can prove (:mod:`gateway.agents.evidence`). With ``connected: false``, or without
a hook, the request is *refused*: the reason is shown on the job
(``agent.environment.status: "refused"``) and an ``agent_action`` review item asks a person
(``dismiss`` once the environment was dealt with). A run that fails (exit status, timeout, an
answer that is not the output above) is tried again at a later pass.

**Events**: ``agent.environment.ready``, ``.suspended``, ``.expired``, ``.failed`` (the
``openai`` SDK's webhook models; ``data.id`` is the environment's id) update the environment
shown on every job whose session runs in it (``agent.environment``); an expired or failed
environment's files are gone, so its next connection is checked against the checkpoints again.
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess

import requests

from gateway.core import states
from gateway.core.config import Config
from gateway.core.digests import sha256_hex
from gateway.ledger import db
from gateway.ledger.models import AgentSession
from gateway.ledger.models import Checkpoint
from gateway.ledger.models import Job

log = logging.getLogger(__name__)
EVENT_STATUS = {
    "agent.environment.ready": "ready",
    "agent.environment.suspended": "suspended",
    "agent.environment.expired": "expired",
    "agent.environment.failed": "failed",
}
# The environment's ``status`` as the connection hook leaves it (events set the others).
CONNECTED, REFUSED = "connected", "refused"
HOOK, NO_HOOK = "hook", "no_hook"  # who decided (``event``): the hook, or its absence


class HookFailed(Exception):
    """The hook did not answer as documented (tried again at a later pass)."""


def record(
    row: AgentSession,
    status: str,
    reason: str | None = None,
    event: str | None = None,
    environment_id: str | None = None,
) -> None:
    """Store the environment's state on the session row (what the job view shows as
    ``agent.environment``: ``{"id", "type", "status", "reason", "event", "updated_at"}``)."""
    fresh = AgentSession.get_by_id(row.id)
    current = dict(fresh.environment or {"id": fresh.environment_id, "type": None})
    if environment_id and environment_id != current.get("id"):
        current = {"id": environment_id, "type": None}
    current.update(status=status, reason=reason, event=event, updated_at=db.rfc3339(db.utcnow()))
    fields = {"environment": current}
    if current.get("id"):
        fields["environment_id"] = current["id"]
    AgentSession.update(**fields).where(AgentSession.id == row.id).execute()


def on_event(event_type: str, environment_id: str | None) -> int:
    """Apply one ``agent.environment.*`` event to every session in that environment; returns
    how many sessions it concerned (0: none of ours)."""
    status = EVENT_STATUS.get(event_type)
    if status is None or not environment_id:
        return 0
    rows = list(AgentSession.select().where(AgentSession.environment_id == environment_id))
    for row in rows:
        record(row, status, event=event_type)
        log.info("job_id=%s environment %s: %s", row.job_id, environment_id, status)
    return len(rows)


def checkpointed_artifacts(job: Job) -> list[dict]:
    """The job's checkpointed artifacts of its current task version:
    ``[{"phase", "role", "uri", "sha256"}]``."""
    rows = Checkpoint.select().where(
        Checkpoint.tenant == job.tenant,
        Checkpoint.job_id == job.job_id,
        Checkpoint.task_version == job.task_version,
    )
    ordered = sorted(rows, key=lambda c: states.PHASES.index(c.phase))
    return [{"phase": c.phase, **a} for c in ordered for a in c.artifacts]


def hook_input(job: Job, row: AgentSession, session, environment_id: str) -> dict:
    """The hook's input (see the module docstring)."""
    environment = session.environment
    same = getattr(environment, "id", None) == environment_id
    return {
        "type": "environment_connection",
        "idempotency_key": sha256_hex(f"{row.session_id}/environment_connection/{environment_id}"),
        "tenant": job.tenant,
        "job_id": job.job_id,
        "task_version": job.task_version,
        "session_id": row.session_id,
        "environment": {
            "id": environment_id,
            "type": environment.type if same else None,
            "remote_url": getattr(environment, "remote_url", None) if same else None,
            "workspace_directory": getattr(environment, "workspace_directory", None)
            if same
            else None,
        },
        "artifacts": checkpointed_artifacts(job),
    }


def run_hook(config: Config, payload: dict) -> dict:
    """Run the configured hook once with ``payload``; its output, checked.

    Returns ``{"connected": bool, "reason": str | None, "artifacts": [{"uri", "sha256"}]}``.

    Raises:
        HookFailed: no answer as documented (exit status, timeout, HTTP status, not JSON,
            not the output's shape).
    """
    hook, timeout = config.agent_environment_hook, config.agent_environment_hook_timeout
    body = json.dumps(payload, ensure_ascii=False)
    if hook.startswith(("https://", "http://")):
        try:
            answer = requests.post(
                hook,
                data=body.encode(),
                headers={
                    "Content-Type": "application/json",
                    "Idempotency-Key": payload["idempotency_key"],
                },
                timeout=timeout,
            )
        except requests.RequestException as error:
            raise HookFailed(f"the hook URL could not be reached: {type(error).__name__}") from None
        if not 200 <= answer.status_code < 300:
            raise HookFailed(f"the hook URL answered {answer.status_code}")
        text = answer.text
    else:
        try:
            done = subprocess.run(
                shlex.split(hook),
                input=body,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except (OSError, ValueError, subprocess.TimeoutExpired) as error:
            raise HookFailed(f"the hook command did not run: {type(error).__name__}") from None
        if done.returncode != 0:
            raise HookFailed(f"the hook command exited with {done.returncode}")
        text = done.stdout
    return _output(text)


def _output(text: str) -> dict:
    try:
        output = json.loads(text)
    except ValueError:
        raise HookFailed("the hook's output is not JSON") from None
    if not isinstance(output, dict) or not isinstance(output.get("connected"), bool):
        raise HookFailed("the hook's output has no boolean 'connected'")
    listed = output.get("artifacts") or []
    if not isinstance(listed, list) or not all(
        isinstance(a, dict) and isinstance(a.get("uri"), str) and isinstance(a.get("sha256"), str)
        for a in listed
    ):
        raise HookFailed("the hook's 'artifacts' must be a list of {uri, sha256}")
    reason = output.get("reason")
    return {
        "connected": output["connected"],
        "reason": str(reason)[:500] if reason is not None else None,
        "artifacts": [{"uri": a["uri"], "sha256": a["sha256"].lower()} for a in listed],
    }


def unproven(expected: list[dict], found: list[dict]) -> list[dict]:
    """The checkpointed artifacts the environment does not hold as checkpointed:
    ``[{"uri", "expected_sha256", "actual_sha256" (None: not listed)}]``."""
    held = {a["uri"]: a["sha256"] for a in found}
    return [
        {"uri": a["uri"], "expected_sha256": a["sha256"], "actual_sha256": held.get(a["uri"])}
        for a in expected
        if held.get(a["uri"]) != a["sha256"].lower()
    ]
