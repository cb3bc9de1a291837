"""The ledger: the database connection, the peewee models, the migrations and the
compiled hot statements. Every other layer keeps its state here."""
