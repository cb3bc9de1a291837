"""WordPress transport: the REST client and its error tree (no Flask, no ledger)."""

from gateway.wordpress.client import OPERATION_KEY_META
from gateway.wordpress.client import SEO_META
from gateway.wordpress.client import WordPressClient

__all__ = ["OPERATION_KEY_META", "SEO_META", "WordPressClient"]
