"""Checkpoints: what a client claims to have done before the gateway writes anything.

Clients post the four client phases (``sources_collected``, ``body_generated``,
``structure_checked``, ``images_prepared``) with artifacts ``[{role, uri, sha256}]``; skipping
forward is allowed. A checkpoint belongs to one task version (a bump starts afresh). Re-posting a
reached phase with the same artifacts is a replay (200); with other artifacts it is 409
``checkpoint-conflict``. The phases the gateway owns (``draft_confirmed``, ``verified``,
``approval_pending``, ``published``) are set only on its own evidence: a client posting one gets
403 ``phase-owned-by-gateway`` and the ``rejected_checkpoint_advances`` counter grows.

Checkpoint ``data`` is scanned for secret-looking keys and values before anything is stored
(422 ``secret-in-checkpoint``): the ledger never holds a credential. Source: docs/api.md, "Job
status and phases".
"""

from __future__ import annotations

import logging
import re

from gateway.core import exceptions as exc
from gateway.core import states
from gateway.core.digests import canonical_json
from gateway.core.digests import sha256_hex
from gateway.jobs import guards
from gateway.jobs import records
from gateway.ledger import db
from gateway.ledger import hot_sql
from gateway.ledger import models
from gateway.ledger import unique
from gateway.ledger.models import Checkpoint
from gateway.ledger.models import Job

log = logging.getLogger(__name__)
REJECTED_ADVANCES = "rejected_checkpoint_advances"
MAX_DATA_BYTES = 1024 * 1024  # 1 MiB of canonical JSON per checkpoint

# Keys: normalised (lower case, no separators) substrings, or a whole word "token"
# (so "access_token" is refused but "prompt_tokens" - LLM usage data - is not).
_SECRET_KEY_PARTS = ("password", "passwd", "secret", "authorization", "apikey", "privatekey")
_TOKEN_WORD = re.compile(r"(^|[^a-z])token($|[^a-z])")
_APP_PASSWORD = re.compile(r"\b[A-Za-z0-9]{4}( [A-Za-z0-9]{4}){5}\b")
_SECRET_VALUES = (
    re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"),  # OpenAI-style API key
    re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}"),  # an Authorization header value
    re.compile(r"(?i)\b(password|passwd|api[ _-]?key|token|authorization)\s*[:=]\s*\S+"),
)


def _camel_to_snake(key: str) -> str:
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key).lower()


def secret_key(key: str) -> bool:
    """Whether a mapping key names a secret (``password``, ``api_key``, ``authToken``...)."""
    snake = _camel_to_snake(key)
    flat = re.sub(r"[^a-z0-9]", "", snake)
    return any(part in flat for part in _SECRET_KEY_PARTS) or bool(_TOKEN_WORD.search(snake))


def secret_value(value: str) -> bool:
    """Whether a string looks like a credential (application password, ``sk-...``, ...).

    Six groups of four letters are an application password only with a digit or a capital
    letter in them (generated ones nearly always have both; prose such as "that will also
    make some more" has neither)."""
    if any(re.search(r"[A-Z0-9]", m.group(0)) for m in _APP_PASSWORD.finditer(value)):
        return True
    return any(pattern.search(value) for pattern in _SECRET_VALUES)


def find_secrets(value, pointer: str = "") -> list[dict]:
    """JSON pointers of secret-looking keys or values anywhere in ``value``.

    Returns ``[{"pointer", "message"}]`` (never the secret itself)."""
    found: list[dict] = []
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}"
            if secret_key(str(key)):
                found.append({"pointer": here, "message": "key names a secret"})
            else:
                found.extend(find_secrets(item, here))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(find_secrets(item, f"{pointer}/{index}"))
    elif isinstance(value, str) and secret_value(value):
        found.append({"pointer": pointer, "message": "value looks like a credential"})
    return found


def check_data_size(data) -> None:
    """Refuse checkpoint ``data`` whose stored JSON (UTF-8) exceeds :data:`MAX_DATA_BYTES`:
    checkpoints hold phase notes and usage figures, not documents (those are artifacts).

    Raises:
        ValidationFailed (422, pointer ``/data``).
    """
    if data is None:
        return
    size = len(canonical_json(data).encode("utf-8"))
    if size > MAX_DATA_BYTES:
        raise exc.ValidationFailed(
            f"checkpoint data is {size} bytes; at most {MAX_DATA_BYTES} are stored",
            errors=[{"pointer": "/data", "message": f"at most {MAX_DATA_BYTES} bytes of JSON"}],
        )


def _artifacts_key(artifacts: list[dict]) -> str:
    """Artifacts compare as a set: order does not matter."""
    return canonical_json(sorted(canonical_json(a) for a in artifacts))


def post_checkpoint(target: guards.Writer, body: dict) -> tuple[Checkpoint, bool]:
    """Record a client phase of the job's current task version (no WordPress call).

    Args:
        target: the job's target (a :class:`gateway.operations.target.Target`, built by the
            caller; cancellation and fencing are checked first).
        body: validated ``{"phase", "artifacts": [{role, uri, sha256}], "data"?}``.

    Returns ``(checkpoint, created)``.

    Raises:
        JobCancelled, LeaseRequired, StaleFencingToken (409), PhaseOwnedByGateway (403,
        counted), SecretInCheckpoint (422, nothing stored), ValidationFailed (422): ``data``
        larger than :data:`MAX_DATA_BYTES`. CheckpointConflict (409).
    """
    guards.check_writable(target)
    job = target.job
    phase = body["phase"]
    if phase in states.GATEWAY_PHASES:
        models.bump_counter(REJECTED_ADVANCES, tenant=job.tenant)
        log.warning("job_id=%s: client tried to set gateway phase %s", job.job_id, phase)
        raise exc.PhaseOwnedByGateway(
            f"phase {phase!r} is set only by the gateway on its own evidence", phase=phase
        )
    check_data_size(body.get("data"))
    secrets = find_secrets(body.get("data"), "/data") + find_secrets(
        body["artifacts"], "/artifacts"
    )
    if secrets:
        raise exc.SecretInCheckpoint(
            "checkpoint data must not contain credentials; nothing was stored", errors=secrets
        )
    checkpoint, created = unique.insert_or_get(
        lambda: Checkpoint.create(
            tenant=job.tenant,
            job_id=job.job_id,
            task_version=job.task_version,
            phase=phase,
            artifacts=body["artifacts"],
            data=body.get("data"),
        ),
        lambda: _get(job, phase),
    )
    if not created and _artifacts_key(checkpoint.artifacts) != _artifacts_key(body["artifacts"]):
        raise exc.CheckpointConflict(
            f"phase {phase!r} of task_version {job.task_version} was reached with other "
            "artifacts; bump the task_version to change them",
            phase=phase,
        )
    records.advance_phase(job, phase)
    return checkpoint, created


def _get(job: Job, phase: str, task_version: int | None = None) -> Checkpoint | None:
    version = job.task_version if task_version is None else task_version
    return hot_sql.checkpoint_of(job.tenant, job.job_id, version, phase)


def body_digest(job: Job) -> str | None:
    """The ``sha256`` of the ``body`` artifact of the current version's ``body_generated``
    checkpoint, or None when there is none."""
    checkpoint = _get(job, states.BODY_GENERATED)
    if checkpoint is None:
        return None
    return next((a["sha256"] for a in checkpoint.artifacts if a["role"] == "body"), None)


def check_body(job: Job, content: str) -> None:
    """Refuse a draft whose ``content`` (UTF-8, placeholders included) does not match the
    checkpointed body artifact.

    Raises:
        ArtifactDigestMismatch (409, counted as a rejected advance).
    """
    expected = body_digest(job)
    if expected is None or expected == sha256_hex(content):
        return
    models.bump_counter(REJECTED_ADVANCES, tenant=job.tenant)
    raise exc.ArtifactDigestMismatch(
        "the draft content's SHA-256 differs from the body artifact of the body_generated "
        "checkpoint",
        expected_sha256=expected,
        actual_sha256=sha256_hex(content),
    )


def checkpoint_view(job: Job, checkpoint: Checkpoint) -> dict:
    """The checkpoint endpoint's response body (``data`` is not echoed)."""
    return {
        "job_id": job.job_id,
        "task_version": checkpoint.task_version,
        "phase": checkpoint.phase,
        "artifacts": checkpoint.artifacts,
        "job_phase": job.phase,
        "created_at": db.rfc3339(checkpoint.created_at),
    }


def checkpoints_of(job: Job) -> list[dict]:
    """The current task version's checkpoints, in phase order."""
    rows = Checkpoint.select().where(
        Checkpoint.tenant == job.tenant,
        Checkpoint.job_id == job.job_id,
        Checkpoint.task_version == job.task_version,
    )
    ordered = sorted(rows, key=lambda c: states.PHASES.index(c.phase))
    return [{"phase": c.phase, "artifacts": c.artifacts} for c in ordered]
