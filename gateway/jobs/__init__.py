"""Jobs: a job's record and stages, its lease and fencing token, its budgets and the
client's checkpoints, its timeline and the events a workflow waits on (:mod:`.events`)."""
