"""The composition root: the one module that imports every part which registers itself with a
registry below it, so that each registry is complete in every process.

* Actions (:mod:`gateway.operations.registry`): each action module registers its
  :class:`~gateway.operations.registry.Action` when imported - media, drafts, blocks, repair,
  publishing, terms, attachments, media metadata, scheduling (``unschedule``), deliveries
  (the notifications' ``notify``), and the agents' own session inputs
  (:mod:`gateway.agents.submissions`).
* Review deciders (:mod:`gateway.editorial.resolution`): the agents package decides its
  ``agent_action`` items (:mod:`gateway.agents.required_actions`) and its
  ``artifact_mismatch`` items (:mod:`gateway.agents.evidence`).
* Doctor checks (:mod:`gateway.operator.doctor_registry`): :mod:`gateway.operator.doctor_checks`.

Each registry is a :class:`gateway.core.registry.Registry`: a module that registered twice
would raise :class:`~gateway.core.registry.NameTaken` at import.

The app factory (:mod:`gateway.app`: ``gateway serve``, and every CLI command, which runs in
the app: ``gateway reconcile``, ``gateway sweep``, ``gateway worker``) imports this module;
nothing below it does. The registry is filled by these explicit imports, never by
``importlib``, so every reader and linter sees the edges.
"""

from __future__ import annotations

from gateway.actions import attachments
from gateway.actions import blocks
from gateway.actions import deliveries
from gateway.actions import drafts
from gateway.actions import media
from gateway.actions import media_metadata
from gateway.actions import publishing
from gateway.actions import repair
from gateway.actions import scheduling
from gateway.actions import terms
from gateway.agents import evidence
from gateway.agents import required_actions
from gateway.agents import submissions
from gateway.operator import doctor_checks

REGISTERING = (
    media,
    drafts,
    blocks,
    repair,
    publishing,
    terms,
    attachments,
    media_metadata,
    scheduling,
    submissions,
    deliveries,
    required_actions,
    evidence,
    doctor_checks,
)
