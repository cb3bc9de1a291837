"""JSON encoding and decoding through orjson, with the standard library's behaviour kept.

Every call decodes a request body and one or two WordPress answers and encodes a response;
with :mod:`json` that is a few percent of the gateway's CPU per job, with orjson (a compiled,
well-kept library) a fraction of it. orjson is stricter than :mod:`json` (no ``NaN``, no
integers beyond 64 bits, UTF-8 only, no lone surrogates), so whatever orjson refuses goes to
:mod:`json` unchanged: a document both accept decodes to the same value, and whatever
:mod:`json` would refuse or raise is still refused or raised by it.
"""

from __future__ import annotations

import json

import orjson
from flask.json.provider import DefaultJSONProvider

# datetime and dataclasses go to Flask's ``default`` (HTTP dates, asdict), as without orjson.
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_COMPACT = (",", ":")


def loads(data: bytes | str):
    """Decode JSON ``data`` like :func:`json.loads` (same value, same errors)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


class JSONProvider(DefaultJSONProvider):
    """Flask's JSON provider with orjson for the compact, unsorted, non-ASCII-escaping
    output the gateway configures (``app.json.sort_keys = False``, ``ensure_ascii = False``);
    any other setting, argument or object orjson cannot encode goes to Flask's own."""

    def dumps(self, obj, **kwargs) -> str:
        """``obj`` as JSON text (see :meth:`flask.json.provider.DefaultJSONProvider.dumps`)."""
        if kwargs == {"separators": _COMPACT} and not self.sort_keys and not self.ensure_ascii:
            try:
                return orjson.dumps(obj, default=self.default, option=_OPTIONS).decode()
            except TypeError:  # orjson.JSONEncodeError: big int, non-str keys, ...
                pass
        return super().dumps(obj, **kwargs)

    def loads(self, s: str | bytes, **kwargs):
        """Decode ``s`` (see :func:`loads`)."""
        return super().loads(s, **kwargs) if kwargs else loads(s)
