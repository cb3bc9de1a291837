"""The gateway's foundation: configuration, problem types (RFC 9457), digests, request
validation, structured logs, the one registry type (:mod:`gateway.core.registry`), the names
of its states, the media request parser and the verdict on an upstream's answer. Imports
nothing of the gateway but itself and, for that verdict (:mod:`gateway.core.answers`), the
WordPress package's table of WordPress's answers (the one layer below)."""
