#!/usr/bin/env python3
"""Self-test for the local WordPress test site and the companion plugin.

Usage: python3 wp_test_site/selftest.py   (after wp_test_site/up.sh)
Standard library only. Creates objects on the site (keys are unique per run).
"""

import base64
import concurrent.futures as cf
import json
import os
import re
import struct
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
LINE = os.environ.get("WP_TEST_SITE_WORDPRESS", "bookworm")  # wordpress_line.sh
RUNTIME = ".runtime" if LINE == "bookworm" else f".runtime-{LINE}"
SITE = json.load(open(os.path.join(HERE, RUNTIME, "site.json")))
URL = SITE["url"]
RUN = uuid.uuid4().hex[:8]


def auth(user):
    u = SITE["users"][user]
    tok = base64.b64encode(f"{u['username']}:{u['app_password']}".encode()).decode()
    return {"Authorization": "Basic " + tok}


def call(method, path, user=None, body=None, headers=None, query=None):
    url = URL + path
    if query:
        url += ("&" if "?" in url else "?") + urllib.parse.urlencode(query)
    h = {"Accept": "application/json"}
    if user:
        h.update(auth(user))
    data = None
    if isinstance(body, (dict, list)):
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    elif body is not None:
        data = body
    h.update(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        raise AssertionError(f"{method} {path}: non-JSON answer {status}: {raw[:300]!r}") from None


def png_bytes():
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    raw = b"\x00\xff\x00\x00"  # one red pixel
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def multipart(fields, filename, content, ctype):
    boundary = "pgw" + uuid.uuid4().hex
    parts = []
    for k, v in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
        )
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{filename}"\r\n'
        f"Content-Type: {ctype}\r\n\r\n".encode()
        + content
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)
    print("ok -", msg)


def main():
    s, j = call("GET", "/wp-json/")
    check(s == 200, "GET /wp-json/ 200")
    s, j = call("GET", "/wp-json/publishing-gateway/v1/status")
    check(
        s == 401 and j["code"] == "rest_forbidden",
        "status endpoint unauthenticated -> 401 rest_forbidden",
    )
    s, j = call("GET", "/wp-json/publishing-gateway/v1/objects", query={"keys": "x"})
    check(
        s == 401 and j["code"] == "rest_forbidden",
        "objects endpoint unauthenticated -> 401 rest_forbidden",
    )
    s, j = call("GET", "/wp-json/publishing-gateway/v1/status", "author")
    wordpress = j.pop("wordpress", None) if isinstance(j, dict) else None
    check(
        s == 200
        and bool(re.fullmatch(r"\d+\.\d+(\.\d+)?", wordpress or ""))
        and j
        == {
            "plugin": "publishing-gateway-companion",
            "version": "1.4.0",
            "guard": True,
            "operation_key_meta": "_gateway_operation_key",
            "lookup_meta": ["_gateway_operation_key", "gateway_operation_key"],
            "seo_meta": ["rank_math_title", "rank_math_description", "rank_math_focus_keyword"],
            "key_index": True,
        },
        "status endpoint (author)",
    )

    # Draft with SEO meta + operation key.
    key = f"selftest/{RUN}/draft"
    meta = {
        "rank_math_title": "SEO title",
        "rank_math_description": "SEO desc",
        "rank_math_focus_keyword": "focus",
        "_gateway_operation_key": key,
    }
    s, j = call(
        "POST",
        "/wp-json/wp/v2/posts",
        "author",
        {"title": "Selftest draft", "content": "<p>Hello</p>", "status": "draft", "meta": meta},
    )
    check(s == 201, f"author creates draft -> 201 (id {j.get('id')})")
    pid = j["id"]
    s, j = call("GET", f"/wp-json/wp/v2/posts/{pid}", "author", query={"context": "edit"})
    check(
        s == 200 and all(j["meta"].get(k) == v for k, v in meta.items()),
        "meta visible with context=edit",
    )
    s, j = call(
        "POST",
        "/wp-json/wp/v2/posts",
        "author",
        {"title": "dup", "status": "draft", "meta": {"_gateway_operation_key": key}},
    )
    check(
        s == 409 and j["code"] == "gateway_duplicate_operation" and j["data"]["existing_id"] == pid,
        "duplicate create -> 409 " + json.dumps(j),
    )

    # Trash keeps the key reserved.
    s, _ = call("DELETE", f"/wp-json/wp/v2/posts/{pid}", "author")
    check(s == 200, "author trashes the draft")
    s, j = call(
        "POST",
        "/wp-json/wp/v2/posts",
        "author",
        {"title": "dup", "meta": {"_gateway_operation_key": key}},
    )
    check(s == 409 and j["data"]["existing_id"] == pid, "duplicate of a trashed post -> 409")

    # Concurrency: 20 identical post creates.
    ckey = f"selftest/{RUN}/concurrent-post"

    def create_post(_):
        return call(
            "POST",
            "/wp-json/wp/v2/posts",
            "author",
            {"title": "race", "status": "draft", "meta": {"_gateway_operation_key": ckey}},
        )

    with cf.ThreadPoolExecutor(20) as ex:
        res = list(ex.map(create_post, range(20)))
    created = [j for s, j in res if s == 201]
    refused = [j for s, j in res if s == 409]
    check(
        len(created) == 1 and len(refused) == 19,
        f"20 concurrent post creates -> 1x201, 19x409 ({sorted(s for s, _ in res)})",
    )
    check(
        all(j["data"]["existing_id"] == created[0]["id"] for j in refused),
        "every 409 names the created post",
    )

    png = png_bytes()
    # Media: raw body + key as query parameter.
    mkey = f"selftest/{RUN}/media-raw"
    s, j = call(
        "POST",
        "/wp-json/wp/v2/media",
        "author",
        png,
        {"Content-Type": "image/png", "Content-Disposition": 'attachment; filename="raw.png"'},
        {"meta[_gateway_operation_key]": mkey},
    )
    check(
        s == 201 and j["meta"].get("_gateway_operation_key") == mkey,
        "raw media upload stores key from query param",
    )
    mid = j["id"]
    s, j = call("GET", f"/wp-json/wp/v2/media/{mid}", "author", query={"context": "edit"})
    check(
        j["meta"].get("_gateway_operation_key") == mkey, "attachment meta readable (context=edit)"
    )
    # Media: multipart + form field.
    fkey = f"selftest/{RUN}/media-multipart"
    body, h = multipart(
        {"meta[_gateway_operation_key]": fkey, "title": "multi"}, "multi.png", png, "image/png"
    )
    s, j = call("POST", "/wp-json/wp/v2/media", "author", body, h)
    check(
        s == 201 and j["meta"].get("_gateway_operation_key") == fkey,
        "multipart media upload stores key from form field",
    )
    body, h = multipart({"meta[_gateway_operation_key]": fkey}, "multi.png", png, "image/png")
    s, j = call("POST", "/wp-json/wp/v2/media", "author", body, h)
    check(
        s == 409 and j["data"]["existing_type"] == "attachment", "duplicate multipart upload -> 409"
    )

    # Concurrency: 10 identical raw uploads.
    ckey2 = f"selftest/{RUN}/concurrent-media"

    def upload(_):
        return call(
            "POST",
            "/wp-json/wp/v2/media",
            "author",
            png,
            {"Content-Type": "image/png", "Content-Disposition": 'attachment; filename="race.png"'},
            {"meta[_gateway_operation_key]": ckey2},
        )

    with cf.ThreadPoolExecutor(10) as ex:
        res = list(ex.map(upload, range(10)))
    created = [j for s, j in res if s == 201]
    refused = [j for s, j in res if s == 409]
    check(
        len(created) == 1 and len(refused) == 9,
        f"10 concurrent uploads -> 1x201, 9x409 ({sorted(s for s, _ in res)})",
    )
    check(
        all(j["data"]["existing_id"] == created[0]["id"] for j in refused),
        "every 409 names the created attachment",
    )

    # Lookup.
    keys = [key, ckey, mkey, fkey, ckey2, f"selftest/{RUN}/unknown"]
    s, j = call(
        "GET", "/wp-json/publishing-gateway/v1/objects", "author", query={"keys": ",".join(keys)}
    )
    check(s == 200, "lookup -> 200")
    by_key = {}
    for o in j["objects"]:
        by_key.setdefault(o["operation_key"], []).append(o)
        check(
            set(o)
            == {
                "operation_key",
                "id",
                "type",
                "readable",
                "editable",
                "status",
                "date_gmt",
                "modified_gmt",
                "author",
                "title",
                "parent",
            },
            f"lookup entry shape ({o['operation_key']})",
        )
    check(
        by_key[key][0]["id"] == pid and by_key[key][0]["status"] == "trash",
        "lookup finds trashed post",
    )
    check(
        by_key[mkey][0]["type"] == "attachment" and by_key[mkey][0]["status"] == "inherit",
        "lookup finds attachment",
    )
    check(len(j["objects"]) == 5, "lookup returns exactly the 5 keyed objects")
    s, j = call(
        "GET",
        "/wp-json/publishing-gateway/v1/objects",
        "author",
        query={"keys": ",".join(f"k{i}" for i in range(101))},
    )
    check(s == 400, "more than 100 keys -> 400")
    print("ALL OK")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print("FAIL -", e)
        sys.exit(1)
