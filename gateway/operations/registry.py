"""The action registry: one place that says what each kind of side effect is.

Every action module (media, drafts, blocks, repair, approvals for ``publish``, terms,
attachments, media metadata, scheduling for ``unschedule``, the agent session inputs,
notifications) registers its :class:`Action` when it is imported; the composition root
(:mod:`gateway.composition`, imported by the app factory and so by every process) imports
them all. This module imports none of them: the registry sits below the actions.
Reconciliation, the sweep, ``recover``, the report, ``next_allowed_actions``, ownership's
chains and the agents' function tools ask the registry and never name an action kind
themselves, so an action registered here is recovered correctly everywhere.

How to use it (e.g. from the agent worker)::

    from gateway.operations import registry

    action = registry.get("draft")            # by name; UnknownAction when none is registered
    outcome = action.send(target, request)   # run it once under its operation key
    effect = action.rebuild(target, row)     # the effect of a ledger row, without the request
    action.recovery                          # LOOKUP, RESEND or PERSON

* ``send(target, request)`` takes a :class:`gateway.operations.target.Target` (whose job,
  task version and fencing token decide the operation key
  ``{tenant}/{job_id}/v{n}/{action}[/{slot}]``, see
  :func:`gateway.operations.perform.operation_key`) and the request as the HTTP API takes it
  (the JSON body plus the path's ``slot``/``name``); it returns the
  :class:`gateway.operations.effects.Outcome` (``replayed``, ``created``, ``reconciled``), or
  None when there was nothing to do. Cancellation and fencing are checked inside. The same
  request under the same key is a replay. Requests: ``media`` ``{"slot", "content_base64" |
  "source_url", "filename"?, "alt_text"?, "caption"?, "title"?}``, ``draft`` the draft body
  (``schemas/draft.json``), ``block`` ``{"name", "html", "position"?}``, ``repair`` ``{}``,
  ``publish`` ``{"by": who publishes}``,
  ``notify`` ``{"event", "reason"?}``.
* ``rebuild(target, row, found=None, prefetched=None)`` returns an
  :class:`gateway.operations.effects.Effect` built from the row's stored ``intent`` alone (after a
  restart), whose ``find`` looks the operation up in WordPress and whose ``read_back`` builds the
  receipt. ``found`` and ``prefetched`` are results of batched queries (the sweep).
* ``recovery``: :data:`LOOKUP` (the object is found in WordPress and read back), :data:`RESEND`
  (sent again with the same idempotency key; the receiver deduplicates) or :data:`PERSON`
  (nothing can prove the outcome: an editor decides).
* ``scope``: :data:`JOB` (``recover`` of the job handles it), :data:`SITE` (only the sweep:
  terms; notifications, which live in their own table and are resent by their
  ``sweep_pass``) or :data:`WORKER` (the worker that owns the receiver sends it again, e.g.
  agent-session inputs resent by the agent worker; ``recover`` only reports it, the sweep
  leaves it alone).
* ``tool``: the :class:`AgentTool` through which an agent performs the action, if any.
* ``answer``: the :class:`Answer`, the body its call answers with (the HTTP view and the agent
  tool present the same one: ``action.answer.body(outcome)``); every action with a ``tool``
  has one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gateway.core.registry import Registry
from gateway.core.registry import UnknownName
from gateway.ledger.models import Operation
from gateway.operations.effects import Effect
from gateway.operations.effects import Outcome
from gateway.operations.target import Target

LOOKUP = "lookup"
RESEND = "idempotent_resend"
PERSON = "person_decides"
RECOVERY_KINDS = (LOOKUP, RESEND, PERSON)
JOB = "job"
SITE = "site"
WORKER = "worker"


class UnknownAction(UnknownName):
    """No action of this name is registered."""


@dataclass(frozen=True)
class AgentTool:
    """How an agent calls an action: :mod:`gateway.agents.tools` makes the function tool from
    it, runs the action's ``send`` and answers what the HTTP call answers.

    Attributes:
        name: the function name the agent calls (``upload_media``...).
        description: what it does, for the model.
        schema: the ``gateway/schemas`` file of the HTTP call's body (the tool's parameters
            are generated from it).
        path: the HTTP call's path parameters, ``((name, description), ...)``: slot-like
            identifiers (:data:`gateway.core.validation.SLOT`), all required.
    """

    name: str
    description: str
    schema: str
    path: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Answer:
    """The body an action's call answers with, from its :class:`Outcome` (docs/api.md,
    "Response shapes"): the HTTP view and the agent tool both build it here.

    Attributes:
        id_name: the member that carries the row's ``remote_id`` (``media_id``, ``post_id``).
        receipt: the receipt fields shown, in order (None when the receipt lacks one).
    """

    id_name: str
    receipt: tuple[str, ...] = ()

    def body(self, outcome: Outcome) -> dict:
        """``{"operation_key", "state", id_name, *receipt, "replayed", "reconciled"}`` plus
        ``"pruned": true`` when retention dropped the receipt's bulky parts
        (:mod:`gateway.operator.retention`)."""
        row = outcome.row
        stored = row.receipt or {}
        return {
            "operation_key": row.operation_key,
            "state": row.state,
            self.id_name: row.remote_id,
            **{name: stored.get(name) for name in self.receipt},
            "replayed": outcome.replayed,
            "reconciled": outcome.reconciled,
            **({"pruned": True} if row.pruned_at is not None else {}),
        }


@dataclass(frozen=True)
class Action:
    """One kind of side effect.

    Attributes:
        name: the action part of the operation key (``draft``, ``media``, ``block``...).
        recovery: :data:`LOOKUP`, :data:`RESEND` or :data:`PERSON`.
        send: ``(target, request) -> Outcome | None``: performs the action (see the module
            docstring for ``request``); None for a :data:`WORKER` action, which its worker
            sends (agent-session inputs: :func:`gateway.agents.submissions.submit`).
            ``notify`` (its own ledger table) returns ``(notification, decided_now)``.
        rebuild: ``(target, row, found=None, prefetched=None) -> Effect`` from the row alone.
        step: the name of the call that does it (again) in ``next_allowed_actions``, e.g.
            ``create_draft``.
        scope: :data:`JOB`, :data:`SITE` or :data:`WORKER` (see the module docstring).
        object_type: the WordPress type (``post``, ``attachment``) of the object that carries
            the operation key, for lookups by key batched across operations (the sweep, the
            duplicate report); None when the operation is found by reading its object.
        phases: job stages (:func:`gateway.jobs.records.stage`) in which ``step`` moves the job on.
        settle: ``(target, row)``: what the job records once the row is CONFIRMED (phase, post
            id); repeat-safe. None when nothing.
        refusal: the problem slug ``recover`` reports for a FAILED row.
        resent_by: :data:`WORKER` scope: who sends it again (shown by ``recover``).
        resend_if_absent: a :data:`LOOKUP` action that no client call repeats (``unschedule``
            after a cancel, ``attach`` after a draft): when the lookup finds nothing it is
            sent again (an idempotent update), not for a cancelled job unless
            ``resend_when_cancelled``.
        resend_when_cancelled: the action is made by a cancel itself (``unschedule``): its
            resend goes on for a cancelled job.
        counted_as: the sweep's count name for its rows confirmed (besides ``confirmed``).
        sweep_pass: ``(config) -> counts``: extra work of every sweep that is not about a
            SENT/UNKNOWN row (e.g. reading scheduled posts back); its counts join the sweep's.
        binds: the WordPress object type its ``remote_id`` is (``post``, ``attachment``,
            ``term``), or None when it binds no WordPress object (agent inputs,
            notifications). Operations of one type belong to one chain of a job (the draft's
            post; one image slot's attachment); ``term`` objects are shared by the site's jobs
            and owned by none (:mod:`gateway.operations.ownership`).
        tool: the :class:`AgentTool` by which an agent performs it, or None when agents may
            not (no tool approves or publishes).
        answer: the :class:`Answer` its call answers with, or None when its call answers
            otherwise (repair, notifications) or it has no call of its own; required with a
            ``tool``.
    """

    name: str
    recovery: str
    send: Callable[[Target, dict], Outcome | None] | None
    rebuild: Callable[..., Effect]
    step: str
    scope: str = JOB
    object_type: str | None = None
    phases: frozenset[str] = frozenset()
    settle: Callable[[Target, Operation], None] | None = None
    refusal: str = "wordpress-refused"
    resent_by: str | None = None
    resend_if_absent: bool = False
    resend_when_cancelled: bool = False
    counted_as: str | None = None
    sweep_pass: Callable[..., dict] | None = None
    binds: str | None = "post"
    tool: AgentTool | None = None
    answer: Answer | None = None

    def __post_init__(self):
        if self.recovery not in RECOVERY_KINDS:
            raise ValueError(f"action {self.name}: unknown recovery kind {self.recovery!r}")
        if self.scope not in (JOB, SITE, WORKER):
            raise ValueError(f"action {self.name}: unknown scope {self.scope!r}")
        if self.tool is not None and self.answer is None:
            raise ValueError(f"action {self.name}: a tool needs the answer it gives")


_registry: Registry[Action] = Registry("action", UnknownAction)


def register(action: Action) -> Action:
    """Add ``action`` (an action module calls this once, at import) and return it.

    Raises:
        NameTaken: an action of that name is registered already (the first one stays).
    """
    return _registry.add(action.name, action)


def unregister(name: str) -> None:
    """Remove an entry (tests that register an action of their own)."""
    _registry.remove(name)


def get(name: str) -> Action:
    """The registered action ``name``.

    Raises:
        UnknownAction: nothing of that name is registered.
    """
    return _registry.get(name)


def all_actions() -> list[Action]:
    """Every registered action, in registration order."""
    return list(_registry)


def for_row(row: Operation) -> Action:
    """The action of a ledger row (raises :class:`UnknownAction` for an unregistered one)."""
    return get(row.action)


def keyed() -> dict[str, str]:
    """``{action name: WordPress object type}`` of the actions whose objects carry their
    operation key (found by a batched lookup by key)."""
    return {a.name: a.object_type for a in all_actions() if a.object_type}


def binding(kind: str) -> frozenset[str]:
    """Names of the actions whose operations bind a WordPress object of type ``kind``
    (``post``: the job's draft chain; ``attachment``: an image slot's chain; ``term``: shared
    site objects)."""
    return frozenset(a.name for a in all_actions() if a.binds == kind)


def agent_tools() -> list[Action]:
    """The actions an agent may perform (those with a :attr:`Action.tool`), in registration
    order."""
    return [a for a in all_actions() if a.tool is not None]


def worker_actions() -> list[str]:
    """Names of the :data:`WORKER`-scoped actions (neither ``recover`` nor the sweep sends
    them)."""
    return [a.name for a in all_actions() if a.scope == WORKER]
