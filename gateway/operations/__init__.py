"""Side-effect operations: the operation key, the ledger rules of one write
(perform: PREPARED -> SENT -> CONFIRMED/FAILED/UNKNOWN), the action registry, ownership of
WordPress objects, read-back verification and refusals from in front of WordPress."""
