"""Structured logs: one line per request and per WordPress call, JSON under ``gateway serve``
(``--log-format json``, the default) or text for a terminal (``--log-format text``).

Fields that belong to the request being served (``request_id``, ``tenant``, ``job_id``,
``operation_key``, ``wordpress_status``) live in a :class:`contextvars.ContextVar`: the HTTP
layer binds the request id and tenant, the domain binds the operation key it works on
(:func:`bind` needs no Flask), and every log line of that request carries them. JSON
rendering is python-json-logger's ``OrjsonFormatter`` (a well-kept library, so escaping, time
format and exception rendering are not ours).

Never a secret or a body: only the fields named here are added, and the request line carries
the route, never the query string or the payload.
"""

from __future__ import annotations

import contextvars
import logging
import re
import sys
import uuid

from pythonjsonlogger.orjson import OrjsonFormatter

FORMATS = ("json", "text")
CONTEXT_FIELDS = ("request_id", "tenant", "job_id", "operation_key", "wordpress_status")
_context: contextvars.ContextVar[dict | None] = contextvars.ContextVar("gateway_log_context")


def start(request_id: str | None = None) -> str:
    """Begin a new context (one request): a fresh field set with ``request_id`` (the
    caller's ``X-Request-Id`` once the HTTP layer checked it), else a new uuid4 hex.
    Returns the request id."""
    if not request_id:
        request_id = uuid.uuid4().hex
    _context.set({"request_id": request_id})
    return request_id


def bind(**fields) -> None:
    """Add ``fields`` (names from :data:`CONTEXT_FIELDS`) to the current context's lines."""
    current = _context.get(None)
    if current is None:
        current = {}
        _context.set(current)
    current.update({k: v for k, v in fields.items() if v is not None})


def context() -> dict:
    """The fields bound in the current context (a copy)."""
    return dict(_context.get(None) or {})


def clear() -> None:
    """Forget the current context's fields (end of a request)."""
    _context.set(None)


class ContextFilter(logging.Filter):
    """Copies the bound context fields onto every record (absent fields stay absent)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in (_context.get(None) or {}).items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


# C0 and C1 controls, DEL, and the Unicode line and paragraph separators: whatever a terminal
# or a log shipper may take for the end of a line.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape(text: str) -> str:
    """``text`` with every control character written as a Python escape (``\\n``,
    ``\\x1b``, ``\\u2028``): one log line stays one line, whatever a request carried."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


class TextFormatter(logging.Formatter):
    """``[time] [pid] [LEVEL] logger: message key=value ...`` for a terminal.

    Every field is escaped (:func:`escape`): a path holding ``%0A[2026-12-01 ...] [1]
    [INFO]`` cannot forge a line. A traceback keeps its lines, each indented, so no line of
    it starts like a record (``[``)."""

    def format(self, record: logging.LogRecord) -> str:
        record.message = escape(record.getMessage())
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        extras = [
            f"{name}={escape(str(getattr(record, name)))}"
            for name in (*CONTEXT_FIELDS, *REQUEST_FIELDS, *WORDPRESS_FIELDS)
            if getattr(record, name, None) is not None and f"{name}=" not in line
        ]
        text = " ".join([line, *extras])
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        for more in (record.exc_text, record.stack_info and self.formatStack(record.stack_info)):
            if more:
                text += "".join(f"\n    {escape(part)}" for part in more.splitlines())
        return text


REQUEST_FIELDS = ("method", "route", "path", "status", "duration_ms", "client")
WORDPRESS_FIELDS = ("wp_method", "wp_route", "wp_outcome")


def formatter(kind: str) -> logging.Formatter:
    """The formatter for ``kind`` (``json`` or ``text``)."""
    if kind == "json":  # orjson (a dependency already): a third of the standard json's cost
        return OrjsonFormatter(
            "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s",
            rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            datefmt="%Y-%m-%dT%H:%M:%S%z",
        )
    return TextFormatter("[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s")


def configure(kind: str = "text", stream=None) -> logging.Handler:
    """Send every log line (the gateway's, the server's, libraries') to ``stream`` (stderr) in
    format ``kind``, replacing the root logger's handlers. Returns the handler.

    Raises:
        ValueError: ``kind`` is not one of :data:`FORMATS`.
    """
    if kind not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter(kind))
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    return handler


def server_logconfig(kind: str) -> dict:
    """The HTTP server's (granian's) ``log_dictconfig``: its own lines (start, workers, stop)
    go through the same formatter, so a JSON log stays one JSON document per line; its access
    logger writes nowhere (the gateway's own request line, ``gateway.http``, replaces it)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": ContextFilter}},
        "formatters": {"gateway": {"()": formatter, "kind": kind}},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "gateway",
                "filters": ["context"],
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": "INFO", "handlers": ["console"]},
        "loggers": {
            "_granian": {"level": "INFO", "handlers": [], "propagate": True},
            "granian.access": {"level": "CRITICAL", "handlers": [], "propagate": False},
        },
    }


_wordpress_log = logging.getLogger("gateway.wordpress")


def log_wordpress_call(
    method: str, route: str, status: int | None, outcome: str, seconds: float
) -> None:
    """A :data:`gateway.wordpress.client.OBSERVERS` entry: one line per WordPress call (REST:
    the HTTP method and the route without its query string, which may carry titles; XML-RPC:
    the method name, e.g. ``wp.newPost``, and ``/xmlrpc.php``) and the status remembered
    for the request's own line."""
    bind(wordpress_status=status)
    _wordpress_log.info(
        "wordpress call",
        extra={
            "wp_method": method,
            "wp_route": route,
            "wordpress_status": status,
            "wp_outcome": outcome,
            "duration_ms": round(seconds * 1000, 1),
        },
    )
