"""Tenants and their sites: WordPress sites with their credentials, API tokens and
editor sessions, the per-site concurrency slot, and clients' own request keys
(``Idempotency-Key``, per token)."""
