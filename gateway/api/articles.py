"""Checking an article before anything is written (docs/api.md, ``POST
/v1/articles/validate``): the one route that a pipeline or the n8n node calls before its
first upload, so an article the draft or media routes would refuse reaches neither the
ledger nor WordPress (it only reads: the site's terms, the images' first bytes)."""

from __future__ import annotations

from flask import Blueprint
from flask import g

from gateway.actions import article_checks
from gateway.api.http import config
from gateway.api.http import json_body
from gateway.api.http import roles

bp = Blueprint("articles", __name__, url_prefix="/v1")


@bp.post("/articles/validate")
@roles("workflow", "editor", "admin")
def validate():
    """Check a whole article (draft body and images) as the draft and media routes would,
    category and tag names looked up in the site and ``source_url`` images probed (read-only):
    200 with what was checked, or 422 naming every problem; writes nothing."""
    body = json_body("article_validation")
    return article_checks.check_article(config(), g.principal.tenant, body)
