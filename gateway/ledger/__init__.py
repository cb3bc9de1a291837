"""The ledger: the database connection, the peewee models, the migrations and the hot
path's statements in plain SQL (``hot_sql``). Every other layer keeps its state here."""
