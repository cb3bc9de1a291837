"""Checking an article before anything is written (docs/api.md, ``POST
/v1/articles/validate``): the one route that a pipeline or the n8n node calls before its
first upload, so an article the draft or media routes would refuse reaches neither the
ledger nor WordPress (it only reads: the site's terms, the images' first bytes); and the
read-only term listing a form's category and tag pickers use (the n8n node's)."""

from __future__ import annotations

from flask import Blueprint
from flask import g
from flask import request

from gateway.actions import article_checks
from gateway.actions import article_lookups
from gateway.api.http import config
from gateway.api.http import json_body
from gateway.api.http import roles
from gateway.core import exceptions as exc

bp = Blueprint("articles", __name__, url_prefix="/v1")


@bp.post("/articles/validate")
@roles("workflow", "editor", "admin")
def validate():
    """Check a whole article (draft body and images) as the draft and media routes would,
    category and tag names looked up in the site and ``source_url`` images probed (read-only):
    200 with what was checked, or 422 naming every problem; writes nothing."""
    body = json_body("article_validation")
    return article_checks.check_article(config(), g.principal.tenant, body)


@bp.get("/sites/<site>/terms/<taxonomy>")
@roles("workflow", "editor", "admin")
def site_terms(site: str, taxonomy: str):
    """List a site's categories or tags, read-only (a form's pickers, the n8n node's).

    ``?search=``: only terms whose name or slug holds it. Answers ``{"site", "taxonomy",
    "terms": [{"id", "name", "parent"}], "truncated"}``; an unknown taxonomy is 404."""
    if taxonomy not in ("categories", "tags"):
        raise exc.NotFound(f"no taxonomy {taxonomy!r}: categories or tags")
    search = request.args.get("search", "")
    if len(search) > 200:
        raise exc.ValidationFailed(
            "invalid query", errors=[{"pointer": "/search", "message": "at most 200 characters"}]
        )
    tenant = g.principal.tenant
    return article_lookups.list_terms(config(), tenant, site, taxonomy, search)
