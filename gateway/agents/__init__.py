"""AI agents as the gateway's second caller: OpenAI Agents API sessions
(``client.beta.agents.sessions`` in the ``openai`` SDK) driven through the ledger.

This package owns the job <-> session mapping and the state rebuild (:mod:`.sessions`), the
function tools agents call and their one dispatch table (:mod:`.tools`), session inputs as
ledger operations (:mod:`.submissions`), required actions answered exactly once or handed to a
person (:mod:`.required_actions`), stops and counters (:mod:`.stops`), inbound webhooks
(:mod:`.webhooks`) and the worker that acts on them (:mod:`.worker`). It knows no Flask.
"""
