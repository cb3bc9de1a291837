"""Checks a real response against the OpenAPI document: its status is listed for the
operation, its media type too, and its body validates against the listed schema (jsonschema,
draft 2020-12, ``$ref`` resolved inside the document)."""

from __future__ import annotations

import re

from jsonschema import Draft202012Validator


class Conformance:
    """The OpenAPI document as a response checker."""

    def __init__(self, document: dict):
        self.document = document
        self.templates = [
            (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", path) + "$"), path)
            for path in document["paths"]
        ]

    def template(self, path: str) -> str:
        """The documented path template matching a concrete ``path`` (literal segments win)."""
        found = [t for rx, t in self.templates if rx.match(path)]
        assert found, f"{path} matches no documented path"
        return max(found, key=lambda t: len(re.sub(r"\{[^}]+\}", "", t)))

    def check(self, method: str, path: str, status: int, content_type: str, body) -> None:
        """Assert that ``(status, content_type, body)`` is what the document promises for
        ``method path`` (a concrete path such as ``/v1/jobs/J-1/draft``)."""
        template = self.template(path.split("?")[0])
        operation = self.document["paths"][template].get(method.lower())
        assert operation is not None, f"{method} {template} is not documented"
        response = operation["responses"].get(str(status))
        assert response is not None, (
            f"{method} {template} answered {status}, documented only "
            f"{sorted(operation['responses'])}: {body}"
        )
        media = (content_type or "").split(";")[0].strip()
        content = response.get("content")
        if content is None:
            return
        assert media in content, f"{method} {template} {status}: {media} not in {list(content)}"
        schema = content[media]["schema"]
        if media.endswith("json"):
            self.validate(schema, body)

    def validate(self, schema: dict, instance) -> None:
        """Validate ``instance`` against ``schema`` whose refs point into the document."""
        root = {**schema, "components": self.document["components"]}
        errors = sorted(Draft202012Validator(root).iter_errors(instance), key=str)
        assert not errors, f"{[e.message for e in errors][:5]} in {instance}"
