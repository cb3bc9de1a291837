"""Recovery: reconciliation of SENT/UNKNOWN operations, the sweep, retries by a
person's decision, resume points."""
