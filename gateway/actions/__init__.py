"""The actions: each kind of WordPress side effect the gateway performs (media,
drafts, blocks, attachments, terms, repair, scheduling, publishing, notifications), each
registered with :mod:`gateway.operations.registry`; and the guarded, deadline-bound
outbound HTTP they share (:mod:`gateway.actions.egress`: image downloads, notifications)."""
