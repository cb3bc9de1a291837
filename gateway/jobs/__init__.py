"""Jobs: a job's record and stages, its lease and fencing token, its budgets and the
client's checkpoints."""
