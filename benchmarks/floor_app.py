"""The stack floor's app (``benchmarks/stack_floor.py``): the gateway's web stack (Flask on
gunicorn's gthread worker, ``requests`` with one keep-alive session to WordPress) doing the
job's WordPress work and nothing else: no ledger, no validation, no logs, no metrics.

* ``PUT /v1/jobs/<id>``: parse the JSON body, answer 201.
* ``PUT /v1/jobs/<id>/draft``: ``POST /wp/v2/posts`` + ``GET /wp/v2/posts/{id}?context=edit``
  with the body's fields, answer 201 with the post id.
* ``PUT /v1/jobs/<id>/replay``: parse the body, answer 200 with a stored dict.

Reads the test site's ``site.json`` named in ``FLOOR_SITE_JSON``.
"""

from __future__ import annotations

import json
import os

import requests
from flask import Flask
from flask import jsonify
from flask import request

site = json.loads(open(os.environ["FLOOR_SITE_JSON"]).read())  # noqa: SIM115
author = site["users"]["author"]
base = site["url"].rstrip("/") + "/wp-json"
wordpress = requests.Session()
wordpress.auth = (author["username"], author["app_password"])
stored: dict[str, dict] = {}
app = Flask(__name__)


@app.put("/v1/jobs/<job_id>")
def put_job(job_id: str):
    request.get_json()
    return jsonify({"job_id": job_id}), 201


@app.put("/v1/jobs/<job_id>/draft")
def put_draft(job_id: str):
    body = request.get_json()
    fields = {"title": body["title"], "content": body["content"], "status": "draft"}
    created = wordpress.post(base + "/wp/v2/posts", json=fields, timeout=60)
    created.raise_for_status()
    post_id = created.json()["id"]
    read = wordpress.get(f"{base}/wp/v2/posts/{post_id}", params={"context": "edit"}, timeout=60)
    read.raise_for_status()
    stored[job_id] = {"post_id": post_id, "title": read.json()["title"]["raw"]}
    return jsonify(stored[job_id]), 201


@app.put("/v1/jobs/<job_id>/replay")
def replay(job_id: str):
    request.get_json()
    return jsonify(stored.get(job_id, {})), 200
