"""The HTTP layer: thin views (one blueprint per area), the OpenAPI document, JSON I/O and
the response shapes only it shows (:mod:`gateway.api.answers`, :mod:`gateway.api.job_views`;
the side-effect answers it shares with the agent tools are each action's registered
:class:`~gateway.operations.registry.Answer`). Wiring: :mod:`gateway.api.routes`; what views
share: :mod:`gateway.api.http`."""
