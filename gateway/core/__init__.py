"""The gateway's foundation: configuration, problem types (RFC 9457), digests, request
validation and structured logs. Imports nothing of the gateway but itself."""
