"""The gateway's registries (issue 37): one :class:`gateway.core.registry.Registry` type behind
the actions, the review deciders and the doctor checks. Each refuses a name that is taken
(the first entry stays, where a dict once replaced it silently) and raises its own typed error
for a name nobody registered; the composition root fills each one in every process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support import ROOT

from gateway.core.registry import NameTaken
from gateway.core.registry import Registry
from gateway.core.registry import UnknownName
from gateway.editorial import resolution
from gateway.operations import registry
from gateway.operator import doctor_registry


def test_a_registry_refuses_a_taken_name_and_keeps_the_first_entry():
    class UnknownThing(UnknownName):
        pass

    things: Registry[str] = Registry("thing", UnknownThing)
    assert things.add("a", "first") == "first"
    things.add("b", "second")
    with pytest.raises(NameTaken) as refused:
        things.add("a", "other")
    assert (refused.value.registry, refused.value.name) == ("thing", "a")
    assert things.get("a") == "first"
    assert list(things) == ["first", "second"] and things.names() == ["a", "b"]
    with pytest.raises(UnknownThing, match="no thing 'c' is registered"):
        things.get("c")
    things.remove("a")
    assert "a" not in things and len(things) == 1
    things.add("a", "again")  # a removed name is free again
    assert things.get("a") == "again"


def test_a_second_action_of_a_registered_name_is_refused():
    draft = registry.get("draft")
    impostor = registry.Action(
        "draft", registry.LOOKUP, send=None, rebuild=draft.rebuild, step="create_draft"
    )
    with pytest.raises(NameTaken, match="action named 'draft'"):
        registry.register(impostor)
    assert registry.get("draft") is draft
    assert [a.name for a in registry.all_actions()].count("draft") == 1


def test_an_unknown_action_is_a_typed_error():
    with pytest.raises(registry.UnknownAction, match="no action 'no-such-action'"):
        registry.get("no-such-action")
    assert issubclass(registry.UnknownAction, UnknownName)


def test_an_action_an_agent_may_perform_carries_its_answer():
    draft = registry.get("draft")
    with pytest.raises(ValueError, match="a tool needs the answer"):
        registry.Action(
            "tool-without-answer",
            registry.LOOKUP,
            send=draft.send,
            rebuild=draft.rebuild,
            step="x",
            tool=draft.tool,
        )
    assert all(a.answer is not None for a in registry.agent_tools())
    assert registry.get("publish").answer.id_name == "post_id"


def test_a_second_decider_for_a_kind_is_refused():
    first = resolution.decider_for("agent_action")
    with pytest.raises(NameTaken, match="review decider named 'agent_action'"):
        resolution.register_decider(
            "agent_action", resolution.Decider(("approve",), decide=lambda *a: {})
        )
    assert resolution.decider_for("agent_action") is first
    with pytest.raises(resolution.UnknownDecider, match="no review decider 'duplicate'"):
        resolution.decider_for("duplicate")  # decided without one (same_as / distinct)


def test_a_second_doctor_check_of_a_name_is_refused():
    first = doctor_registry.get("rest_api")
    with pytest.raises(NameTaken, match="doctor check named 'rest_api'"):
        doctor_registry.register(doctor_registry.Check("rest_api", "x", "y", run=first.run))
    assert doctor_registry.get("rest_api") is first
    with pytest.raises(doctor_registry.UnknownCheck, match="no doctor check 'no_such_check'"):
        doctor_registry.get("no_such_check")


FRESH_PROCESS = """
import json
from gateway import composition
from gateway.editorial import resolution
from gateway.operations import registry
from gateway.operator import doctor_registry
print(json.dumps({
    "actions": sorted(registry._registry.names()),
    "deciders": sorted(resolution._deciders.names()),
    "checks": sorted(doctor_registry.CHECKS.names()),
}))
"""


def test_the_composition_root_fills_every_registry_in_a_fresh_process():
    """A process that imports only the composition root has every action, every review
    decider and every doctor check (no module registered twice: that would now raise)."""
    out = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    fresh = json.loads(out.stdout)
    assert fresh["actions"] == sorted(a.name for a in registry.all_actions())
    assert {"media", "draft", "block", "repair", "publish", "notify"} <= set(fresh["actions"])
    assert fresh["deciders"] == ["agent_action", "artifact_mismatch"]
    assert fresh["checks"] == sorted(doctor_registry.CHECKS.names())
    assert "rest_api" in fresh["checks"] and len(fresh["checks"]) > 10
