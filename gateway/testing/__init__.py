"""Test helpers for the gateway: tools that simulate failures around WordPress."""
