"""Tenants and their sites: WordPress sites with their credentials, API tokens and
editor sessions, the per-site concurrency slot, the per-token rate, clients' own request keys
(``Idempotency-Key``, per token), and what no tenant may exceed in one worker (the fair shares,
the per-address limit of calls without a token)."""
