"""The HTTP transport under ``xmlrpc.client`` for :mod:`gateway.wordpress.xmlrpc`: a timeout
per call, no silent resend of a write, pages that are not XML-RPC told apart
(:class:`~gateway.wordpress.xmlrpc_errors.NotXmlRpcAnswer`), and stray output before
``<?xml`` tolerated when it is only whitespace and byte order marks.

A plugin or theme file with a blank line after its closing ``?>``, or saved with a UTF-8 BOM,
prints it before every answer of ``xmlrpc.php``; an XML parser refuses a declaration that is
not at the very start ("XML or text declaration not at start of entity",
maxcutler/python-wordpress-xmlrpc#12, #101, #146). WordPress's own client trims it
(``IXR_Message::parse``: ``trim()`` before parsing), and so does this transport, keeping the
bytes it removed (:attr:`TimeoutTransport.stray_output`) for ``gateway doctor``. Anything else
before the XML (a PHP notice) is still a garbled answer.
"""

from __future__ import annotations

import http.client
import xml.parsers.expat
import xmlrpc.client

from gateway.wordpress.xmlrpc_errors import NotXmlRpcAnswer

BOM = b"\xef\xbb\xbf"
_BLANK = b" \t\r\n"


def stray_prefix(body: bytes) -> bytes:
    """The whitespace and UTF-8 byte order marks in front of the first ``<`` of ``body`` (what
    a file printing a blank line or a BOM adds), ``b""`` when there are none."""
    rest = body
    while True:
        trimmed = rest.lstrip(_BLANK)
        if trimmed.startswith(BOM):
            trimmed = trimmed[len(BOM) :]
        if trimmed == rest:
            return body[: len(body) - len(rest)]
        rest = trimmed


class TimeoutTransport(xmlrpc.client.SafeTransport):
    """``xmlrpc.client`` transport with a socket timeout (connect and each read) and no
    silent resend: the standard transport sends a request a second time when a kept-alive
    connection was reset, which would repeat a write WordPress already committed. Writes go
    once, over a fresh connection; reads may reuse a kept-alive one (and are retried once on a
    reset, as the standard transport does)."""

    accept_gzip_encoding = False  # plain bodies: a page that is not XML-RPC can be read
    user_agent = "publishing-gateway/0.1"  # as the REST client: one name for firewall rules

    def __init__(self, timeout: float, https: bool):
        super().__init__()
        self.timeout = timeout
        self.https = https
        self.fresh_connection = False
        self.stray_output = b""  # what the last answer carried before its XML (doctor)

    def make_connection(self, host):
        if self._connection and host == self._connection[0]:
            return self._connection[1]
        chost, self._extra_headers, _x509 = self.get_host_info(host)
        if self.https:
            conn = http.client.HTTPSConnection(chost, timeout=self.timeout, context=self.context)
        else:
            conn = http.client.HTTPConnection(chost, timeout=self.timeout)
        self._connection = host, conn
        return conn

    def parse_response(self, response):
        """Parse a 200 answer, after the whitespace and byte order marks a site may print
        before ``<?xml`` (:func:`stray_prefix`, kept in :attr:`stray_output`); one holding no
        ``<methodResponse`` at all is a page from in front of WordPress
        (:class:`NotXmlRpcAnswer`), while other output before the XML (a PHP notice) raises
        the parser's error."""
        body = response.read()
        self.stray_output = stray_prefix(body)
        body = body[len(self.stray_output) :]
        parser, unmarshaller = self.getparser()
        try:
            parser.feed(body)
            parser.close()
        except xml.parsers.expat.ExpatError:
            if b"<methodResponse" in body:
                raise
            raise NotXmlRpcAnswer(
                response.status,
                (response.getheader("Content-Type") or "").split(";")[0].strip(),
                body[:65536].decode("utf-8", "replace"),
            ) from None
        return unmarshaller.close()

    def request(self, host, handler, request_body, verbose=False):
        if not self.fresh_connection:  # a read: sending it again after a reset is harmless
            return super().request(host, handler, request_body, verbose)
        self.close()
        return self.single_request(host, handler, request_body, verbose)
