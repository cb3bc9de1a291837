"""The gateway's foundation: configuration, problem types (RFC 9457), digests, request
validation, structured logs, the one registry type (:mod:`gateway.core.registry`), the names
of its states, the media request parser, the verdict on an upstream's answer and the security
headers of its HTML pages (:mod:`gateway.core.page_headers`), text as readers see it
(:mod:`gateway.core.plain_text`). Imports nothing of the gateway
but itself and, for that verdict (:mod:`gateway.core.answers`), the WordPress package's table
of WordPress's answers (the one layer below)."""
