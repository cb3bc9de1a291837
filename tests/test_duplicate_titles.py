"""Suspected duplicates whose titles WordPress stores otherwise than sent: an author's
``Tom & Jerry`` is stored as ``Tom &amp; Jerry`` (``wp_filter_kses`` on ``title_save_pre``),
``A < B`` as ``A &lt; B``, ``A > B`` as ``A &gt; B``, and surrounding spaces are trimmed. A
retry after a lost create must still find the post and open a review for an editor, never
send the create again (:mod:`gateway.operations.duplicates`)."""

from __future__ import annotations

import time

import pytest
from support import draft_body
from support import hide_companion
from support import new_job_id
from support import op_key
from support import problem_slug

from gateway.operations.duplicates import as_read
from gateway.operations.duplicates import search_texts
from gateway_tools.fault_proxy import Fault

CREATE = r"^/wp-json/wp/v2/posts/?$"

# {} is the job id; each title is one WordPress stores otherwise than sent (for an author)
CHANGED_TITLES = {
    "ampersand": "Tom & Jerry {}",
    "less-than": "A < B {}",
    "greater-than": "A > B {}",  # the content holds no ">": only the title can match
    "trailing-space": "Trimmed {} ",
    # more than nine words: WordPress searches the whole title as one phrase
    "long-with-ampersand": "Tom & Jerry: the long story of a cat and a mouse, {}",
}


def test_titles_read_alike_as_a_reader_sees_them():
    assert as_read("Tom &amp; Jerry") == as_read("Tom & Jerry ") == "Tom & Jerry"
    assert as_read("A &lt; B &#038; C &#x1f389;") == "A < B & C 🎉"
    assert as_read("x <script>y</script> z") == as_read("x y z")  # kses keeps the text
    assert as_read("Tom and Jerry") != as_read("Tom & Jerry")
    assert as_read("Tom &amp;amp; Jerry") != as_read("Tom & Jerry")


def test_a_title_wordpress_escapes_is_searched_as_sent_and_as_stored():
    assert search_texts("Tom & Jerry ") == ["Tom & Jerry", "Tom &amp; Jerry"]
    assert search_texts("A > B") == ["A > B", "A &gt; B"]
    assert search_texts("Plain title") == ["Plain title"]


@pytest.mark.wordpress
@pytest.mark.parametrize("title", list(CHANGED_TITLES.values()), ids=list(CHANGED_TITLES))
def test_lost_create_of_a_title_wordpress_changes_is_a_suspected_duplicate(gwp, proxy, title):
    """Without the companion plugin (its routes answer 404 at the proxy), the create's
    response is lost after WordPress stored the post; the retry past the in-flight window
    opens a review naming that post, and sends no second create."""
    from gateway.tenancy import sites

    hide_companion(proxy)
    job_id = new_job_id()
    body = draft_body(title=title.format(job_id), content="<p>Plain words only.</p>")
    assert gwp.put_job(job_id).status_code == 201
    proxy.add_fault(Fault(kind="drop_response", method="POST", path=CREATE))
    first = gwp.put_draft(job_id, body)
    assert first.status_code == 503 and problem_slug(first) == "outcome-unknown"
    time.sleep(3.2)  # past the in-flight window: absence is all the gateway could prove
    second = gwp.put_draft(job_id, body)
    assert second.status_code == 409 and problem_slug(second) == "needs-review", second.text
    assert proxy.count(method="POST", path=CREATE, forwarded=True) == 1  # no second create
    stored = gwp.lookup(op_key(job_id, "draft"))  # the companion's routes, past the proxy
    assert len(stored) == 1
    editor = gwp.make_token("editor")
    reviews = gwp.client.get("/v1/reviews", headers=gwp.headers(editor)).get_json()["reviews"]
    review = next(r for r in reviews if r["job_id"] == job_id)
    assert review["kind"] == "suspected_duplicate"
    assert [s["id"] for s in review["detail"]["suspects"]] == [stored[0]["id"]]
    assert [(o["state"], o["remote_id"]) for o in gwp.operations(job_id)] == [("UNKNOWN", None)]
    sites.forget_companion()
