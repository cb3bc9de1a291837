"""A plain HTTP client for the gateway's API, calling it the way an n8n HTTP Request node
does (Bearer token, multipart images, Retry On Fail). Used by ``gateway demo`` and the
benchmarks; n8n itself needs none of it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import requests

RETRYABLE = frozenset((409, 429, 500, 502, 503, 504))


class GatewayClient:
    """Small verbs over the gateway's ``/v1`` API.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000``.
        token: a workflow token from ``gateway tokens create``.
        timeout: seconds per call.
        on_retry: called as ``on_retry(attempt, response_or_error)`` before each retry.
    """

    def __init__(
        self, base_url: str, token: str, timeout: float = 60, on_retry: Callable | None = None
    ):
        self.base_url = base_url.rstrip("/")
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout
        self.on_retry = on_retry

    def call(
        self, method: str, path: str, tries: int = 1, wait: float = 1.0, **kwargs
    ) -> requests.Response:
        """One API call, retried up to ``tries`` times on a retryable status or a lost
        connection, as n8n's Retry On Fail does (it ignores ``Retry-After``; we honour it,
        capped at ``wait`` * 3 seconds)."""
        for attempt in range(1, tries + 1):
            try:
                response = self.session.request(
                    method, self.base_url + path, timeout=self.timeout, **kwargs
                )
            except requests.ConnectionError as error:
                if attempt == tries:
                    raise
                self._retrying(attempt, error, wait)
                continue
            if response.status_code not in RETRYABLE or attempt == tries:
                return response
            advised = response.headers.get("Retry-After", "")
            pause = min(float(advised), wait * 3) if advised.isdigit() else wait
            self._retrying(attempt, response, pause)
        raise AssertionError("unreachable")

    def _retrying(self, attempt: int, what, pause: float) -> None:
        if self.on_retry:
            self.on_retry(attempt, what)
        time.sleep(pause)

    def put_job(self, job_id: str, site: str, task_version: int = 1, **kw) -> requests.Response:
        """``PUT /v1/jobs/{job_id}``."""
        return self.call(
            "PUT", f"/v1/jobs/{job_id}", json={"site": site, "task_version": task_version}, **kw
        )

    def put_media(
        self, job_id: str, slot: str, filename: str, content: bytes, **fields
    ) -> requests.Response:
        """``PUT /v1/jobs/{job_id}/media/{slot}`` as multipart (field ``file``)."""
        tries = fields.pop("tries", 1)
        return self.call(
            "PUT",
            f"/v1/jobs/{job_id}/media/{slot}",
            tries=tries,
            files={"file": (filename, content)},
            data=fields,
        )

    def put_draft(self, job_id: str, body: dict, **kw) -> requests.Response:
        """``PUT /v1/jobs/{job_id}/draft``."""
        return self.call("PUT", f"/v1/jobs/{job_id}/draft", json=body, **kw)

    def verification(self, job_id: str) -> requests.Response:
        """``GET /v1/jobs/{job_id}/verification``."""
        return self.call("GET", f"/v1/jobs/{job_id}/verification")

    def recover(self, job_id: str) -> requests.Response:
        """``POST /v1/jobs/{job_id}/recover``."""
        return self.call("POST", f"/v1/jobs/{job_id}/recover", json={})

    def job(self, job_id: str) -> requests.Response:
        """``GET /v1/jobs/{job_id}``."""
        return self.call("GET", f"/v1/jobs/{job_id}")
