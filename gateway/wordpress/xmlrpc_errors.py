"""How a failed XML-RPC call maps onto the WordPress error tree (:mod:`gateway.wordpress.errors`):
one function, so the mapping can follow the REST client's classes as they evolve."""

from __future__ import annotations

import http.client
import socket
import xml.parsers.expat
import xmlrpc.client

from gateway.wordpress.errors import WordPressAuthError
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressNotFound
from gateway.wordpress.errors import WordPressOutcomeUnknown
from gateway.wordpress.errors import WordPressRefused
from gateway.wordpress.errors import WordPressUnavailable
from gateway.wordpress.xmlrpc_compat import exceptions as xr_errors


def error_for(rpc_method: str, url: str, error: Exception, sent: bool) -> WordPressError:
    """Map an exception of one XML-RPC call to the WordPress error tree.

    A fault is WordPress's own answer, hence definite (403 ``InvalidCredentialsError`` and
    401 capability faults are :class:`WordPressAuthError`). Anything else after the request
    was sent - an HTTP error page in front of ``xmlrpc.php`` (host blocks, WAF 403), output
    printed before ``<?xml`` (parse error), a reset or timeout - is an unknown outcome.
    ``sent=False`` (connecting, listing methods) makes those :class:`WordPressUnavailable`.
    """
    facts = {"method": rpc_method, "url": url}
    if isinstance(error, xr_errors.InvalidCredentialsError):
        return WordPressAuthError(str(error), status=403, code="xmlrpc_fault_403", **facts)
    if isinstance(error, xr_errors.XmlrpcDisabledError):
        return WordPressRefused(str(error), status=405, code="xmlrpc_fault_405", **facts)
    if isinstance(error, xr_errors.UnsupportedXmlrpcMethodError):
        return WordPressRefused(f"unsupported: {error}", code="xmlrpc_unsupported", **facts)
    if isinstance(error, xmlrpc.client.Fault):
        code, text = error.faultCode, error.faultString
        cls = {401: WordPressAuthError, 403: WordPressAuthError, 404: WordPressNotFound}
        return cls.get(code, WordPressRefused)(
            text, status=code if isinstance(code, int) else None, code=f"xmlrpc_fault_{code}",
            **facts,
        )  # fmt: skip
    if isinstance(error, xr_errors.ServerConnectionError | ConnectionRefusedError):
        return WordPressUnavailable(f"xmlrpc.php not usable: {error}"[:300], **facts)
    if isinstance(error, xmlrpc.client.ProtocolError):
        message = f"HTTP {error.errcode} {error.errmsg} from xmlrpc.php"
        status = error.errcode
        if status in (429, 503) or not sent:
            return WordPressUnavailable(message, status=status, **facts)
        return WordPressOutcomeUnknown(message, status=status, **facts)
    if isinstance(error, xml.parsers.expat.ExpatError | xmlrpc.client.ResponseError):
        kind = WordPressOutcomeUnknown if sent else WordPressUnavailable
        return kind(f"answer is not XML-RPC (output before <?xml?): {error}"[:300], **facts)
    if isinstance(error, socket.timeout | TimeoutError):
        kind = WordPressOutcomeUnknown if sent else WordPressUnavailable
        return kind("read timeout", **facts)
    if isinstance(error, OSError | http.client.HTTPException):
        kind = WordPressOutcomeUnknown if sent else WordPressUnavailable
        return kind(f"connection lost: {error}"[:300], **facts)
    return WordPressOutcomeUnknown(f"{type(error).__name__}: {error}"[:300], **facts)
