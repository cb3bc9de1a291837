"""A local stand-in for the editors' chat or mail bridge and the n8n alert URL.

``python3 -m gateway_tools.receiver --port 8099`` listens on ``127.0.0.1`` and prints each POST
it gets as one JSON line on stdout (``{"path", "idempotency_key", "body"}``), answering 200
``{"ok": true}``: so that the gateway's notifications (``gateway notifications set-url``) and
``workflow_alert``'s alerts can be watched on one machine before a real bridge exists
(``n8n_workflows/README.md``). Standard library only; any path is taken, so one receiver serves
``/editors`` and ``/alerts``. A body that is not JSON is printed as ``{"raw": text}``.
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    """Prints each POST (one JSON line) and answers 200."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = {"raw": raw.decode("utf-8", "replace")}
        record = {
            "path": self.path,
            "idempotency_key": self.headers.get("Idempotency-Key"),
            "body": body,
        }
        print(json.dumps(record, ensure_ascii=False), flush=True)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "11")
        self.end_headers()
        self.wfile.write(b'{"ok":true}')

    def log_message(self, *args) -> None:
        pass  # the JSON lines are the output


def serve(port: int, host: str = "127.0.0.1") -> ThreadingHTTPServer:
    """A receiver bound to ``host:port`` (port 0: a free one), not yet serving.

    Raises:
        OSError: the port is taken.
    """
    return ThreadingHTTPServer((host, port), Handler)


def main(argv: list[str] | None = None) -> int:
    """``--port N`` (default 8099): serve until interrupted; exit 0."""
    parser = argparse.ArgumentParser(prog="python3 -m gateway_tools.receiver")
    parser.add_argument("--port", type=int, default=8099)
    args = parser.parse_args(argv)
    server = serve(args.port)
    print(f"receiving on http://127.0.0.1:{server.server_port}/", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
