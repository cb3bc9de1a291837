"""The HTTP layer: thin views (one blueprint per area), the OpenAPI document, JSON I/O and
the response shapes shared with the agent tools (:mod:`gateway.api.answers`). Wiring:
:mod:`gateway.api.routes`; what views share: :mod:`gateway.api.http`."""
