"""Session inputs as ledger operations: every event the gateway sends to an agent session
(a tool result, an MCP or computer-use approval result, a cancel, a checked follow-up message)
is one row of the ledger.

Operation key ``{tenant}/{job_id}/v{version}/{action}/{slot}`` - for a tool result the action is
``tool_result`` and the slot the ``call_id`` exactly as the SDK gives it. The idempotency key
sent with the event is the SHA-256 hex of that operation key, so a resend after a crash or a
lost answer carries the same key and the Agents API keeps one event
(``POST /v1/agents/sessions/{id}/events``, ``Idempotency-Key``; HTTP 202 = accepted).

Recovery kind: *idempotent resend*. PREPARED (claimed, intent stored: the event itself) ->
SENT -> CONFIRMED on 202; a connection error or a 5xx/429 leaves UNKNOWN and the worker sends
the same event with the same key again; a 401/403 refused the gateway's key, not the event: the
row stays UNKNOWN and the workers pause (:mod:`gateway.agents.openai_key`); any other 4xx is a
definite FAILED.
"""

from __future__ import annotations

import logging
import time

from gateway.agents import openai_key
from gateway.agents.openai_sdk import openai
from gateway.core import answers
from gateway.core import exceptions as exc
from gateway.core.config import Config
from gateway.core.digests import request_digest
from gateway.core.digests import sha256_hex
from gateway.ledger.models import CONFIRMED
from gateway.ledger.models import FAILED
from gateway.ledger.models import PREPARED
from gateway.ledger.models import SENT
from gateway.ledger.models import UNKNOWN
from gateway.ledger.models import Job
from gateway.ledger.models import Lease
from gateway.ledger.models import Operation
from gateway.ledger.models import Site
from gateway.operations import perform
from gateway.operations import registry
from gateway.operations import transitions

log = logging.getLogger(__name__)
# The session inputs this module registers (each an *idempotent resend* action, resent by the
# agent worker); everyone else asks the registry (``registry.worker_actions()``).
ACTIONS = (
    "tool_result",
    "mcp_approval_result",
    "computer_use_approval_result",
    "session_cancel",
    "follow_up",
)
CANCEL = "session_cancel"
FOLLOW_UP = "follow_up"  # a checked follow-up message (gateway.agents.follow_ups)
# Seconds a SENT input counts as in flight (by the database's clock): nobody sends it again
# before, so racing senders post it once; after, a resend carries the same idempotency key.
IN_FLIGHT_SECONDS = 5.0


def idempotency_key(operation_key: str) -> str:
    """SHA-256 hex of the operation key: the ``Idempotency-Key`` of the event."""
    return sha256_hex(operation_key)


def find(job: Job, action: str, slot: str) -> Operation | None:
    """The job's row of ``action``/``slot`` under any task version (a tool result belongs to
    its call id whatever version the job moved to since)."""
    return (
        Operation.select()
        .where(
            Operation.tenant == job.tenant,
            Operation.job_id == job.job_id,
            Operation.action == action,
            Operation.slot == slot,
        )
        .order_by(Operation.id)
        .first()
    )


def claim(
    job: Job,
    action: str,
    slot: str,
    session_id: str,
    event: dict,
    fencing_token: int | None = None,
) -> Operation:
    """The PREPARED row of this input (the event stored as its intent), or the existing one:
    :func:`claim_new`'s row without whether it was new."""
    return claim_new(job, action, slot, session_id, event, fencing_token)[0]


def claim_new(
    job: Job,
    action: str,
    slot: str,
    session_id: str,
    event: dict,
    fencing_token: int | None = None,
) -> tuple[Operation, bool]:
    """Claim this input (:func:`gateway.operations.transitions.claim`: the event stored as
    its intent, no WordPress object bound, the site's ``credential_version`` and a fencing
    token, as :func:`gateway.operations.perform.claim` writes them). ``fencing_token`` is the
    lease grant the caller holds (a follow-up's own lease); without one, the job's latest
    grant is written (the worker answers under no lease of its own), None for a job never
    leased.

    Returns ``(row, created)``: ``created`` False when the key was claimed before.

    Raises:
        OperationKeyReused: the key exists with another event (e.g. an editor's different
            decision on the same request).
    """
    key = perform.operation_key(job, action, slot)
    digest = request_digest(event)
    if fencing_token is None:
        lease = Lease.get_or_none(Lease.tenant == job.tenant, Lease.job_id == job.job_id)
        fencing_token = lease.fencing_token if lease is not None else None
    site = Site.get_or_none(Site.tenant == job.tenant, Site.name == job.site)
    row, created = transitions.claim(
        key=key,
        tenant=job.tenant,
        job_id=job.job_id,
        task_version=job.task_version,
        action=action,
        slot=slot,
        request_hash=digest,
        intent={"session_id": session_id, "event": event},
        binds=None,  # an input to an OpenAI session: no WordPress object
        credential_version=site.credential_version if site is not None else None,
        fencing_token=fencing_token,
    )
    if row.request_hash != digest:
        raise exc.OperationKeyReused(
            f"operation {key} was first submitted with another event",
            operation_key=key,
            ledger_state=row.state,
        )
    return row, created


def send(config: Config, client: openai.OpenAI, row: Operation) -> Operation:
    """Send the row's stored event once more (same idempotency key) unless it is settled or
    in flight: the send is claimed by one conditional UPDATE
    (:func:`gateway.operations.transitions.claim_send`), and a SENT row counts as in flight
    for :data:`IN_FLIGHT_SECONDS` by the database's clock, so two racing senders post the
    event once (the loser returns the row as the winner left it).

    Returns the row as recorded afterwards. Never raises for OpenAI trouble: the row stays
    UNKNOWN for the worker's next pass.
    """
    if row.state in (CONFIRMED, FAILED):
        return row
    if (
        row.action != CANCEL
        and Job.get(Job.tenant == row.tenant, Job.job_id == row.job_id).cancelled
    ):
        log.info("not sending %s: job_id=%s was cancelled", row.operation_key, row.job_id)
        return row
    if not transitions.claim_send(row, IN_FLIGHT_SECONDS):  # in flight, or another sender won
        return Operation.get_by_id(row.id)
    intent, key = row.intent, idempotency_key(row.operation_key)
    log.info("submitting %s job_id=%s attempt=%s", row.operation_key, row.job_id, row.attempts)
    try:
        client.beta.agents.sessions.events.create(
            intent["session_id"], events=[intent["event"]], idempotency_key=key
        )
    except openai.APIStatusError as error:
        found = answers.verdict(answers.OPENAI, error.status_code)
        if found == answers.KEY_REFUSED:  # the key, not this event
            openai_key.refused(config, error.status_code, error.message)
            return _settle(row, UNKNOWN, error)
        return _settle(row, FAILED if found == answers.REFUSED else UNKNOWN, error)
    except openai.APIError as error:  # connection, timeout: the event may have arrived
        return _settle(row, UNKNOWN, error)
    perform.crash_point(config, "after_session_input_sent")
    receipt = {"idempotency_key": key, "accepted": True, "session_id": intent["session_id"]}
    transitions.move(row, CONFIRMED, transitions.NOT_CONFIRMED, receipt=receipt, problem=None)
    return Operation.get_by_id(row.id)


def _settle(row: Operation, state: str, error: Exception) -> Operation:
    status = getattr(error, "status_code", None)
    log.warning("submission %s: %s (%s)", row.operation_key, state, type(error).__name__)
    problem = {"detail": str(error)[:500], "openai_status": status}
    transitions.move(row, state, SENT, problem=problem)
    return Operation.get_by_id(row.id)


def settled(row: Operation, timeout: float = IN_FLIGHT_SECONDS + 1) -> Operation:
    """``row`` as stored once no other sender's call is in flight: read again every 0.1 s
    while it is PREPARED or SENT, for at most ``timeout`` seconds (the racer that lost a
    claim answers with what the winner recorded)."""
    deadline = time.monotonic() + timeout
    current = Operation.get_by_id(row.id)
    while current.state in (PREPARED, SENT) and time.monotonic() < deadline:
        time.sleep(0.1)
        current = Operation.get_by_id(row.id)
    return current


def submit(
    config: Config,
    client: openai.OpenAI,
    job: Job,
    action: str,
    slot: str,
    session_id: str,
    event: dict,
) -> Operation:
    """Claim and send one input event (see the module docstring)."""
    return send(config, client, claim(job, action, slot, session_id, event))


def unsettled(sent_older_than: float) -> list[Operation]:
    """Inputs not yet accepted: PREPARED and UNKNOWN ones, and SENT ones untouched for
    ``sent_older_than`` seconds (a resend carries the same key, so overlapping a sender that
    is still waiting costs nothing but a deduplicated request)."""
    rows = Operation.select().where(
        Operation.action.in_(registry.worker_actions()),
        Operation.state.in_((PREPARED, SENT, UNKNOWN)),
    )
    return [
        r for r in rows if r.state != SENT or perform.seconds_since(r.updated_at) >= sent_older_than
    ]


def _resent_by_the_worker(target, row: Operation, found=None, prefetched=None):
    raise RuntimeError(f"{row.operation_key} is sent again by the agent worker (send above)")


for _name in ACTIONS:  # idempotent resend, by the agent worker: recover reports, never sends
    registry.register(
        registry.Action(
            name=_name,
            recovery=registry.RESEND,
            send=None,
            rebuild=_resent_by_the_worker,
            step="none",
            scope=registry.WORKER,
            refusal="refused-by-openai",
            resent_by="the agent worker",
            binds=None,  # an input to an OpenAI session: no WordPress object
        )
    )
