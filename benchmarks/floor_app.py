"""The stack floor's app (``benchmarks/stack_floor.py``): a bare Flask app doing the job's
WordPress work and nothing else: no ledger, no validation, no logs, no metrics.

* ``PUT /v1/jobs/<id>``: parse the JSON body, answer 201.
* ``PUT /v1/jobs/<id>/draft``: ``POST /wp/v2/posts`` + ``GET /wp/v2/posts/{id}?context=edit``
  with the body's fields, answer 201 with the post id.
* ``PUT /v1/jobs/<id>/replay``: parse the body, answer 200 with a stored dict.

Reads the test site's ``site.json`` named in ``FLOOR_SITE_JSON``. ``FLOOR_CLIENT`` picks the
WordPress client: ``requests`` (one keep-alive ``requests.Session``, issue 18's floor) or
``gateway`` (the gateway's own REST client, :class:`gateway.wordpress.client.WordPressClient`,
whatever it is built on: the floor follows the gateway's client when that changes). The server
is whatever runs this module (``stack_floor.py`` starts gunicorn or granian).
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
stored: dict[str, dict] = {}
app = Flask(__name__)

if os.environ.get("FLOOR_CLIENT", "requests") == "gateway":
    from gateway.wordpress.client import WordPressClient

    client = WordPressClient(site["url"], author["username"], author["app_password"], timeout=60)

    def create_and_read(fields: dict) -> tuple[int, str]:
        post_id = client.create_post(fields)["id"]
        return post_id, client.get_post(post_id)["title"]["raw"]

else:
    wordpress = requests.Session()
    wordpress.auth = (author["username"], author["app_password"])

    def create_and_read(fields: dict) -> tuple[int, str]:
        created = wordpress.post(base + "/wp/v2/posts", json=fields, timeout=60)
        created.raise_for_status()
        post_id = created.json()["id"]
        read = wordpress.get(
            f"{base}/wp/v2/posts/{post_id}", params={"context": "edit"}, timeout=60
        )
        read.raise_for_status()
        return post_id, read.json()["title"]["raw"]


@app.put("/v1/jobs/<job_id>")
def put_job(job_id: str):
    request.get_json()
    return jsonify({"job_id": job_id}), 201


@app.put("/v1/jobs/<job_id>/draft")
def put_draft(job_id: str):
    body = request.get_json()
    fields = {"title": body["title"], "content": body["content"], "status": "draft"}
    post_id, title = create_and_read(fields)
    stored[job_id] = {"post_id": post_id, "title": title}
    return jsonify(stored[job_id]), 201


@app.put("/v1/jobs/<job_id>/replay")
def replay(job_id: str):
    request.get_json()
    return jsonify(stored.get(job_id, {})), 200
