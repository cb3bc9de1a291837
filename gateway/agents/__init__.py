"""AI agents as the gateway's second caller: OpenAI Agents API sessions
(``client.beta.agents.sessions`` in the ``openai`` SDK) driven through the ledger.

This package owns the job <-> session mapping and the state rebuild (:mod:`.sessions`), the
function tools agents call and their one dispatch table (:mod:`.tools`), session inputs as
ledger operations (:mod:`.submissions`), required actions answered exactly once or handed to a
person (:mod:`.required_actions`), stops and counters (:mod:`.stops`), inbound webhooks
(:mod:`.webhooks`) and the worker that acts on them (:mod:`.worker`), the tenants taking
turns in its passes (:mod:`.turns`); the poll's schedule (:mod:`.polling`), the permission
re-checked at every resume (:mod:`.permissions`), the pause on a refused OpenAI key
(:mod:`.openai_key`), artifact evidence (:mod:`.evidence`), the environment hook and events
(:mod:`.environments`) and the checked follow-up (:mod:`.follow_ups`). It knows no Flask.
docs/agents.md tells the rules.
"""
