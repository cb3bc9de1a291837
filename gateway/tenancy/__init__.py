"""Tenants and their sites: WordPress sites with their credentials, API tokens and
editor sessions, and the per-site concurrency slot."""
