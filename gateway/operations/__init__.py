"""Side-effect operations: the operation key, the ledger rules of one write
(perform: PREPARED -> SENT -> CONFIRMED/FAILED/UNKNOWN), what an operation does and what
came of it (effects: ``Effect``, ``Outcome``), the action registry (with each action's answer
shape), ownership of WordPress objects, read-back verification and refusals from in front of
WordPress."""
