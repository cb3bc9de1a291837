"""WordPress transports - the REST client and the XML-RPC client behind one interface
(:mod:`gateway.wordpress.transport`) - and their error tree (no Flask, no ledger)."""

from gateway.wordpress.client import OPERATION_KEY_META
from gateway.wordpress.client import SEO_META
from gateway.wordpress.client import WordPressClient
from gateway.wordpress.transport import TRANSPORTS
from gateway.wordpress.transport import Transport
from gateway.wordpress.transport import connect

__all__ = [
    "OPERATION_KEY_META",
    "SEO_META",
    "TRANSPORTS",
    "Transport",
    "WordPressClient",
    "connect",
]
