"""Errors of the WordPress client. Each carries the HTTP facts (method, URL, status, WordPress
error ``code``) and says whether the outcome is *definite*: a definite refusal proves that
nothing was created; anything else after the request left us means the outcome is unknown."""

from __future__ import annotations


class WordPressError(Exception):
    """Base class.

    Attributes:
        method, url: the call (the URL never carries credentials).
        status: HTTP status, or None when no response arrived.
        code: WordPress's error code (``rest_upload_sideload_error``...), or None.
        data: WordPress's ``data`` member (dict), or {}.
        definite: True when WordPress proved that it did not act.
        retry_after: seconds from a ``Retry-After`` header, or None.
    """

    definite = False

    def __init__(
        self,
        message: str,
        *,
        method: str = "",
        url: str = "",
        status: int | None = None,
        code: str | None = None,
        data: dict | None = None,
        retry_after: int | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.method = method
        self.url = url
        self.status = status
        self.code = code
        self.data = data or {}
        self.retry_after = retry_after

    def as_dict(self) -> dict:
        """A JSON-safe summary for receipts and problem details (no credentials)."""
        return {
            "status": self.status,
            "code": self.code,
            "message": self.message,
            "method": self.method,
            "url": self.url,
        }


class WordPressRefused(WordPressError):
    """WordPress said no (a 4xx, or its 500 ``rest_upload_sideload_error``): nothing created."""

    definite = True


class WordPressAuthError(WordPressRefused):
    """401/403: the application password was revoked or the user lacks a capability."""


class WordPressDuplicate(WordPressRefused):
    """409 from the companion plugin's guard: an object with this operation key exists.

    ``existing_id`` names it, so the gateway adopts it instead of creating another."""

    @property
    def existing_id(self) -> int | None:
        value = self.data.get("existing_id")
        return int(value) if value is not None else None


class WordPressNotFound(WordPressRefused):
    """404: the object does not exist (or the route is missing)."""


class WordPressOutcomeUnknown(WordPressError):
    """The request may have been processed: timeout, reset, 5xx, or a 2xx without JSON."""


class WordPressUnavailable(WordPressOutcomeUnknown):
    """No connection could be made, or WordPress asked us to back off (429/503)."""
