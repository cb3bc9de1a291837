"""The gateway's foundation: configuration, problem types (RFC 9457), digests, request
validation, structured logs and the one registry type (:mod:`gateway.core.registry`). Imports
nothing of the gateway but itself."""
