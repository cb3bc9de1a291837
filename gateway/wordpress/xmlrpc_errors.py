"""How a failed XML-RPC call maps onto the WordPress error tree (:mod:`gateway.wordpress.errors`):
one function, so the mapping can follow the REST client's classes as they evolve."""

from __future__ import annotations

import http.client
import socket
import xml.parsers.expat
import xmlrpc.client
from urllib.parse import urljoin

from gateway.wordpress.errors import WordPressAuthError
from gateway.wordpress.errors import WordPressError
from gateway.wordpress.errors import WordPressOutcomeUnknown
from gateway.wordpress.errors import WordPressRefused
from gateway.wordpress.errors import WordPressUnavailable
from gateway.wordpress.errors import answer_error
from gateway.wordpress.errors import shortened
from gateway.wordpress.errors import upstream_error
from gateway.wordpress.rest_root import suggested_site_url
from gateway.wordpress.xmlrpc_compat import exceptions as xr_errors


class NotXmlRpcAnswer(Exception):
    """A 200 answer from ``xmlrpc.php`` that holds no XML-RPC response at all (a login,
    maintenance or challenge page): raised by the transport with the HTTP facts."""

    def __init__(self, status: int, content_type: str, text: str):
        super().__init__(f"{status} {content_type or 'without a content type'}")
        self.status = status
        self.content_type = content_type
        self.text = text


def _upstream(rpc_method: str, url: str, error: xmlrpc.client.ProtocolError) -> WordPressError:
    """A non-200 answer: WordPress answers every XML-RPC call with 200 (faults included), so
    the page came from in front of it or from the web server."""
    headers = {k.lower(): v for k, v in (error.headers or {}).items()}
    location = headers.get("location") if 300 <= error.errcode < 400 else None
    location = urljoin(url, location) if location else None
    site_url = url.removesuffix("/xmlrpc.php")
    return upstream_error(  # the table: errors.UPSTREAM_ANSWERS
        method=rpc_method,
        url=url,
        status=error.errcode,
        content_type=headers.get("content-type", ""),
        text="",  # xmlrpc.client discards the body of a non-200 answer
        retry_after=headers.get("retry-after"),
        message=f"HTTP {error.errcode} {error.errmsg} from xmlrpc.php",
        location=location,
        suggested_url=suggested_site_url(site_url, url, location) if location else None,
    )


def error_for(rpc_method: str, url: str, error: Exception, sent: bool) -> WordPressError:
    """:func:`classify` ``error``; the result's ``sent`` is False when the call never left:
    ``sent=False`` (setting the client up) or a refused connection."""
    mapped = classify(rpc_method, url, error, sent)
    if not sent or isinstance(error, ConnectionRefusedError):
        mapped.sent = False
    return mapped


def classify(rpc_method: str, url: str, error: Exception, sent: bool) -> WordPressError:
    """Map an exception of one XML-RPC call to the WordPress error tree (the classes of
    :mod:`gateway.wordpress.errors`, origins included).

    A fault is WordPress's own answer, hence definite (403 ``InvalidCredentialsError`` and
    401 capability faults are :class:`WordPressAuthError`). A non-200 page (a host blocking
    ``xmlrpc.php``, a WAF's 403) or a 200 page without XML-RPC is from in front of WordPress:
    :class:`UpstreamRefused` (other 5xx: unknown, origin ``upstream``; the table
    :data:`gateway.wordpress.errors.UPSTREAM_ANSWERS`). Output printed before
    ``<?xml`` (a parse error of WordPress's answer), a reset or a timeout after sending is an
    unknown outcome; ``sent=False`` (connecting, listing methods) makes those
    :class:`WordPressUnavailable`. Nothing after a send is ever a definite refusal unless
    WordPress said so.
    """
    facts = {"method": rpc_method, "url": url}
    if isinstance(error, xr_errors.ServerConnectionError) and isinstance(
        error.__context__, xmlrpc.client.ProtocolError
    ):
        error = error.__context__  # the library wraps the constructor's HTTP error in a string
    if isinstance(error, xr_errors.InvalidCredentialsError):
        return WordPressAuthError(str(error), status=403, code="xmlrpc_fault_403", **facts)
    if isinstance(error, xr_errors.XmlrpcDisabledError):
        return WordPressRefused(str(error), status=405, code="xmlrpc_fault_405", **facts)
    if isinstance(error, xr_errors.UnsupportedXmlrpcMethodError):
        return WordPressRefused(f"unsupported: {error}", code="xmlrpc_unsupported", **facts)
    if isinstance(error, xmlrpc.client.Fault):  # the table: errors.FAULT_ANSWERS
        code, text = error.faultCode, error.faultString
        status = code if isinstance(code, int) else None
        return answer_error(status, None, fault=True)(
            text, status=status, code=f"xmlrpc_fault_{code}", **facts
        )
    if isinstance(error, xmlrpc.client.ProtocolError):
        return _upstream(rpc_method, url, error)
    if isinstance(error, NotXmlRpcAnswer):  # a 200 page: UpstreamRefused
        return upstream_error(
            status=error.status, content_type=error.content_type, text=error.text,
            retry_after=None, **facts,
        )  # fmt: skip
    network = {**facts, "origin": "network"}
    if isinstance(error, xr_errors.ServerConnectionError | ConnectionRefusedError):
        return WordPressUnavailable(shortened(f"xmlrpc.php not usable: {error}"), **network)
    if isinstance(error, xml.parsers.expat.ExpatError | xmlrpc.client.ResponseError):
        kind = WordPressOutcomeUnknown if sent else WordPressUnavailable
        return kind(
            shortened(f"WordPress's answer is garbled (output before <?xml?): {error}"), **facts
        )
    if isinstance(error, socket.timeout | TimeoutError):
        kind = WordPressOutcomeUnknown if sent else WordPressUnavailable
        return kind("read timeout", **network)
    if isinstance(error, OSError | http.client.HTTPException):
        kind = WordPressOutcomeUnknown if sent else WordPressUnavailable
        return kind(shortened(f"connection lost: {error}"), **network)
    return WordPressOutcomeUnknown(shortened(f"{type(error).__name__}: {error}"), **facts)
