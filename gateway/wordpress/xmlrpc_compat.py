"""Compatibility shim for ``python-wordpress-xmlrpc`` 2.3 on Python >= 3.10.

The library's ``XmlrpcMethod.process_result`` tests ``isinstance(raw, collections.Iterable)``;
that alias of ``collections.abc.Iterable`` was removed in Python 3.10, so every method returning
a list (``GetPosts``, ``GetMediaLibrary``, ``GetTerms``...) raises ``AttributeError``. The
library is unmaintained (last release 2014), so rather than forking it we restore the one alias
it needs before it is imported. Import :mod:`wordpress_xmlrpc` only through this module.

Remove this module when the library (or a maintained fork) uses ``collections.abc``.
"""

from __future__ import annotations

import collections
import collections.abc

if not hasattr(collections, "Iterable"):  # Python >= 3.10
    collections.Iterable = collections.abc.Iterable  # the only alias the library uses

import wordpress_xmlrpc  # noqa: E402  (must follow the alias)
from wordpress_xmlrpc import exceptions  # noqa: E402
from wordpress_xmlrpc import methods  # noqa: E402
from wordpress_xmlrpc.methods import taxonomies  # noqa: E402, F401  (methods.taxonomies)

__all__ = ["wordpress_xmlrpc", "methods", "exceptions"]
