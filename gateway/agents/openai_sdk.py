"""The ``openai`` SDK, imported when the agents package first uses it, not when the gateway
starts: importing it costs about 1.1 s of CPU (its generated types), and every ``gateway``
command and every ``gateway serve`` imports the agents package, while most never talk to
OpenAI (``import gateway.cli``: 2.2–2.7 s before, 1.3 s after).

``from gateway.agents.openai_sdk import openai`` gives an object that stands for the module:
each attribute read (``openai.OpenAI``, ``openai.APIError`` in an ``except`` clause) runs a
plain ``import openai`` (the first one loads the SDK, under Python's import lock; later ones
are a dictionary lookup) and returns the module's attribute, so a test's
``monkeypatch.setattr(openai, ...)`` on the real module is seen. Annotations name
``openai.OpenAI`` as text only (``from __future__ import annotations``).
"""

from __future__ import annotations


class _DeferredOpenAI:
    """Stands for the ``openai`` module; imports it at the first attribute read."""

    def __getattr__(self, attribute: str):
        import openai  # deferred on purpose: see the module docstring

        return getattr(openai, attribute)

    def __repr__(self) -> str:
        return "<the openai module, imported at first use>"


openai = _DeferredOpenAI()
