"""The editors' desk (issue 56, items 4-6): filter, search and paging over ledger rows; a
suspected duplicate side by side; titles as readers see them, buttons only where they can
succeed, and accessibility checked with axe-core in headless Chromium.

The ledger-only tests seed job rows directly (as ``benchmarks/reconcile.py`` does): the desk's
filters are SQL over existing columns, so no WordPress is needed to see which jobs a page
lists; each card's own read-back is ``tests/test_review_page.py``'s.
"""

from __future__ import annotations

import datetime as dt
import html.parser
import json
import os
import re
import shutil
import subprocess

import pytest
from support import ROOT
from support import SECRET_KEY
from support import SITE_NAME
from support import TENANT
from test_review_page import _csrf
from test_review_page import _sign_in

JOBS = 25  # three pages of 10
OTHER_SITE = "second-blog"
AXE_VERSION = "4.14.1"  # npm package axe-core (Deque), MPL-2.0
AXE_CACHE = ROOT / ".cache" / "axe-core"


def _seed(gw, prefix: str, jobs: int = JOBS, first: bool = True) -> list[str]:
    """``jobs`` verified drafts' ledger rows: every fifth on :data:`OTHER_SITE`, titles
    ``Storm & Sea n`` (odd n) or ``Quiet harbour n``, the newest (highest n) first on the
    page. The ``first`` seed registers the site and approves its first three; a later one
    approves none and is a day older."""
    from gateway.ledger.db import database
    from gateway.ledger.models import Approval
    from gateway.ledger.models import Job
    from gateway.ledger.models import Operation
    from gateway.tenancy import sites

    now = dt.datetime.now(dt.UTC).replace(tzinfo=None) - dt.timedelta(days=0 if first else 1)
    ids = [f"{prefix}-{n:03d}" for n in range(jobs)]
    with gw.app.app_context(), database.connection_context(), database.atomic():
        if first:
            sites.add_site(SECRET_KEY, TENANT, OTHER_SITE, "http://127.0.0.1:9", "a", "b c d e f")
        Job.insert_many(
            {
                "tenant": TENANT,
                "job_id": job_id,
                "site": OTHER_SITE if n % 5 == 0 else SITE_NAME,
                "phase": "verified",
                "updated_at": now + dt.timedelta(seconds=n),
            }
            for n, job_id in enumerate(ids)
        ).execute()
        Operation.insert_many(
            {
                "operation_key": f"{TENANT}/{job_id}/v1/draft",
                "tenant": TENANT,
                "job_id": job_id,
                "task_version": 1,
                "action": "draft",
                "request_hash": "0" * 64,
                "intent": {"sent": {"title": _title(n), "content": "<p>x</p>"}},
            }
            for n, job_id in enumerate(ids)
        ).execute()
        Approval.insert_many(
            {
                "tenant": TENANT,
                "job_id": job_id,
                "task_version": 1,
                "post_id": 1,
                "content_sha256": "0" * 64,
                "expires_at": now + dt.timedelta(hours=1),
                "approved_by": "test-editor",
            }
            for job_id in ids[:3]
            if first
        ).execute()
    return ids


def _title(n: int) -> str:
    return f"Storm & Sea {n}" if n % 2 else f"Quiet harbour {n}"


def _send_back(gw, job_id: str) -> None:
    """Changes requested on ``job_id``'s version, as the ledger records the decision."""
    from gateway.ledger import moves
    from gateway.ledger.db import database
    from gateway.ledger.models import JOB_DECISION
    from gateway.ledger.models import Job

    with gw.app.app_context(), database.connection_context():
        job = Job.get(Job.tenant == TENANT, Job.job_id == job_id)
        assert moves.move(JOB_DECISION, {"id": job.id}, "changes_requested", (None,))


def _listed(client, query: str) -> tuple[list[str], str]:
    page = client.get(f"/review?{query}")
    assert page.status_code == 200, page.get_data(as_text=True)[:400]
    html = page.get_data(as_text=True)
    return re.findall(r'class="card draft" id="job-[^"]+" data-job="([^"]+)"', html), html


def test_filter_search_and_paging_over_the_ledger(offline_gw):
    ids = _seed(offline_gw, "DESK")
    _sign_in(offline_gw.client, offline_gw.make_token("editor"))
    newest_first = ids[::-1]
    listed, html = _listed(offline_gw.client, "")
    assert listed == newest_first[:10] and "Page 1 of 3" in html
    listed, _ = _listed(offline_gw.client, "page=3")
    assert listed == newest_first[20:]
    listed, html = _listed(offline_gw.client, "page=4")  # past the end: said, not page 3 again
    assert listed == [] and "Page 4 is past the end: there are 3 pages" in html
    assert 'href="/review?page=3">Go to the last page (3)' in html
    other = [i for n, i in enumerate(ids) if n % 5 == 0][::-1]
    listed, html = _listed(offline_gw.client, f"site={OTHER_SITE}")
    assert listed == other and "Page 1 of" not in html  # five: one page
    listed, html = _listed(offline_gw.client, "state=approved")
    assert listed == ids[:3][::-1]
    assert '<span class="badge valid approved-count">3</span>' in html
    listed, html = _listed(offline_gw.client, "state=waiting")
    assert listed == newest_first[:10] and "Page 1 of 3" in html and ids[2] not in html
    # the pager keeps the filter: page 2 of the waiting drafts
    assert "page=2&amp;state=waiting" in html
    listed, _ = _listed(offline_gw.client, "state=waiting&page=3")
    assert listed == newest_first[20:22]  # 22 waiting, the last two
    # a draft sent back (changes requested) is counted and filtered apart, and says so
    _send_back(offline_gw, ids[24])
    listed, html = _listed(offline_gw.client, "state=changes_requested")
    assert listed == [ids[24]] and '<span class="badge changes-count">1</span>' in html
    assert "changes requested: waiting for a new version" in html
    assert "waiting for an approval</span>" not in html.split('id="job-')[1]
    listed, html = _listed(offline_gw.client, "state=waiting")
    assert listed == newest_first[1:11] and '<span class="badge waiting-count">21</span>' in html
    # each card's controls name their job: no two cards share an accessible name
    names = re.findall(r'aria-label="((?:Comment|Request changes)[^"]*)"', html)
    assert len(names) == len(set(names)) >= 20 and f"Comment on v1 of job {ids[23]}" in names
    # search: the sent title (an & in it, case-insensitively), a job id, its beginning
    storms = [i for n, i in enumerate(ids) if n % 2][::-1]
    listed, _ = _listed(offline_gw.client, "q=storm+%26+sea")
    assert listed == storms[:10]
    listed, _ = _listed(offline_gw.client, f"q=STORM+%26+SEA&site={OTHER_SITE}&state=waiting")
    assert listed == [i for n, i in enumerate(ids) if n % 10 == 5][::-1]
    listed, _ = _listed(offline_gw.client, f"q={ids[7]}")
    assert listed == [ids[7]]
    listed, _ = _listed(offline_gw.client, "q=DESK-01")
    assert listed == [f"DESK-{n:03d}" for n in range(19, 9, -1)]
    listed, html = _listed(offline_gw.client, "q=no+such+thing")
    assert listed == [] and "No draft matches" in html
    # 1,000 drafts (issue 56): the pages, a search and a site still find what they should
    more = _seed(offline_gw, "MORE", 1000 - JOBS, first=False)
    listed, html = _listed(offline_gw.client, "")
    assert listed == newest_first[:10] and "Page 1 of 100" in html
    listed, _ = _listed(offline_gw.client, "page=3")
    assert listed == newest_first[20:] + more[::-1][:5]
    listed, _ = _listed(offline_gw.client, "page=100")
    assert listed == more[:10][::-1]
    listed, _ = _listed(offline_gw.client, f"q={ids[7]}")
    assert listed == [ids[7]]
    listed, _ = _listed(offline_gw.client, "state=approved")
    assert listed == ids[:3][::-1]


def _seed_busy_desk(gw, jobs: list[str]) -> None:
    """Everything else the desk lists, two or more of each, all about ``jobs``: suspected
    duplicates (two naming the same post), two items on one job (its draft's and its image's),
    agent requests (two of one job), exhausted budgets, operations WordPress refused (with a
    technical detail; a post's and an image's of one job) and OAuth grants of the same app
    name."""
    from gateway.ledger.db import database
    from gateway.ledger.models import Budget
    from gateway.ledger.models import Operation
    from gateway.ledger.models import Review
    from gateway.ledger.oauth_models import OAuthGrant

    suspects = [{"id": 7, "title": "Quiet harbour", "link": "http://127.0.0.1:9/?p=7"}]
    agent = {
        "action": {"type": "function_call", "name": "wipe", "arguments": "{}"},
        "decisions": ["approve", "deny"],
    }
    refused = {"detail": "Sorry, you are not allowed to do that.", "wordpress_status": 403}
    with gw.app.app_context(), database.connection_context(), database.atomic():
        for n, job_id in enumerate(jobs[:4]):
            key = f"{TENANT}/{job_id}/v1/draft"
            detail = {"suspects": suspects} if n < 2 else agent
            kind = "suspected_duplicate" if n < 2 else "agent_action"
            Review.create(tenant=TENANT, job_id=job_id, operation_key=key, kind=kind, detail=detail)
            Budget.create(tenant=TENANT, job_id=job_id, name="write_attempts", used=99, allowed=5)
            Operation.update(state="FAILED", problem=refused).where(
                Operation.operation_key == key
            ).execute()
        # a second item on one job (its image's two objects) and a second agent request on
        # another: told apart by what their cards show (the operation key, what is asked)
        media = {"tenant": TENANT, "task_version": 1, "action": "media", "slot": "hero"}
        for job_id, state in ((jobs[0], "UNKNOWN"), (jobs[1], "FAILED")):
            Operation.create(
                **media,
                operation_key=f"{TENANT}/{job_id}/v1/media/hero",
                job_id=job_id,
                request_hash="1" * 64,
                state=state,
                problem=refused,
            )
        objects = {"objects": [{"id": 8, "title": "harbour.jpg"}, {"id": 9}]}
        Review.create(
            tenant=TENANT,
            job_id=jobs[0],
            operation_key=f"{TENANT}/{jobs[0]}/v1/media/hero",
            kind="multiple_objects",
            detail=objects,
        )
        format_call = {**agent, "action": {**agent["action"], "name": "format_disk"}}
        Review.create(
            tenant=TENANT,
            job_id=jobs[2],
            operation_key=f"{TENANT}/{jobs[2]}/v1/function_call_result/call-2",
            kind="agent_action",
            detail=format_call,
        )
        for n in range(2):
            OAuthGrant.create(
                tenant=TENANT,
                sites=[SITE_NAME],
                scopes=["drafts"],
                client_id=f"dcr-{n}",
                client_name="Drafts bot",
                resource="http://localhost/mcp",
                approved_by="ed",
                principal_hash=f"grant-{n}",
            )


class _Controls(html.parser.HTMLParser):
    """The focusable controls of a page with their accessible names, computed as WAI-ARIA's
    accname 1.2 does for this markup: ``aria-labelledby``, else ``aria-label``, else the
    ``<label for>`` of a field or the element's own text; an ``aria-describedby`` text is
    appended (a screen reader says it after the name). ``[(tag, name, visible words)]``: a
    field's visible words are its ``<label>``'s."""

    FOCUSABLE = {"a", "button", "input", "select", "textarea", "summary"}

    def __init__(self, page: str):
        super().__init__()
        self.open: list[tuple[str, dict, list[str]]] = []  # controls and id'd elements inside
        self.texts: dict[str, str] = {}  # element id -> its text
        self.labels: dict[str, str] = {}  # <label for> -> its text
        self.found: list[tuple[str, dict, str]] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "input" and attrs.get("type") == "hidden":
            return
        if (
            tag in self.FOCUSABLE
            and (tag != "a" or "href" in attrs)
            or "id" in attrs
            or (tag == "label" and "for" in attrs)
        ):
            if tag not in ("input", "img", "br"):  # void elements: nothing inside
                self.open.append((tag, attrs, []))
            if tag == "input":
                self.found.append((tag, attrs, ""))

    def handle_data(self, data):
        for _tag, _attrs, text in self.open:
            text.append(data)

    def handle_endtag(self, tag):
        if self.open and self.open[-1][0] == tag:
            tag, attrs, text = self.open.pop()
            said = " ".join("".join(text).split())
            if "id" in attrs:
                self.texts[attrs["id"]] = said
            if tag == "label":
                self.labels[attrs["for"]] = said
            if tag in self.FOCUSABLE and (tag != "a" or "href" in attrs):
                self.found.append((tag, attrs, said))

    def named(self) -> list[tuple[str, str, str]]:
        result = []
        for tag, attrs, text in self.found:
            ref = attrs.get("aria-labelledby")
            name = " ".join(self.texts.get(i, "") for i in ref.split()) if ref else None
            name = name or attrs.get("aria-label") or self.labels.get(attrs.get("id")) or text
            described = attrs.get("aria-describedby")
            if described:
                name += " " + " ".join(self.texts.get(i, "") for i in described.split())
            if tag in ("input", "select", "textarea"):  # a field's visible words: its label,
                text = self.labels.get(attrs.get("id")) or attrs.get("placeholder") or ""
                # else its placeholder (what the field shows while empty)
            result.append((tag, " ".join(name.split()), text))
        return result


def test_every_control_on_a_busy_desk_names_the_item_it_acts_on(offline_gw):
    """A screen-reader user tabbing through a desk of several items hears which job each
    control acts on, by its id and title (never a number the page does not show): no two
    controls share an accessible name, and each name starts with the words on the control,
    a field's label or placeholder (WCAG 2.5.3 "Label in Name": a voice-control user says
    what they see)."""
    ids = _seed(offline_gw, "NAME", jobs=6)
    _seed_busy_desk(offline_gw, ids)
    _sign_in(offline_gw.client, offline_gw.make_token("editor"))
    page = offline_gw.client.get("/review")
    assert page.status_code == 200
    controls = _Controls(page.get_data(as_text=True)).named()
    names = [name for _tag, name, _text in controls]
    repeated = sorted({name for name in names if names.count(name) > 1})
    assert repeated == [], repeated
    for tag, name, text in controls:
        assert name.startswith(text), (tag, name, text)
    assert not [name for name in names if "review item" in name]  # the cards never show it
    # every kind of repeated control was there to be told apart, each naming its job and title
    first, second, agent = (f"job {ids[n]} “{_title(n)}”" for n in range(3))
    for words in (
        f"Same as #7 for {first} ({TENANT}/{ids[0]}/v1/draft)",  # two items of one job
        f"Same as #8 for {first} ({TENANT}/{ids[0]}/v1/media/hero)",
        f"Distinct: none of these for {first} ({TENANT}/{ids[0]}/v1/media/hero)",
        f"Same as #7 for {second}",  # its job's only item: no more is needed
        f"Distinct: none of these for {second}",
        f"Deny for job {ids[3]} “{_title(3)}”",
        f"Reason (optional) for approve for {agent} (call of unknown tool 'wipe' with '{{}}')",
        f"Approve for {agent} (call of unknown tool 'format_disk' with '{{}}')",
        f"compare side by side for {first} ({TENANT}/{ids[0]}/v1/draft)",
        f"view post #7 for {second}",
        f"Raise the write attempts budget of job {ids[2]}",
        f"New write attempts limit of job {ids[3]}",
        f"Allow retry of the post of {second}",
        f"Allow retry of the image 'hero' of {second}",
        f"Why (recorded) a retry of the image 'hero' of {second} is allowed",
        f"Technical detail of {TENANT}/{ids[0]}/v1/draft",
        "Revoke grant #2 of Drafts bot",
        f"Comment of job {ids[5]}",  # a draft's card (its title: once WordPress answers)
    ):
        assert words in names, (words, names)


def _long_timeline(gw, job_id: str, entries: int) -> None:
    """``entries`` comments on ``job_id``'s timeline, noted ``entry 1``, ``entry 2``...,
    interleaved with another job's (a page holds only its own job's)."""
    from gateway.ledger.db import database
    from gateway.ledger.models import JobEvent

    with gw.app.app_context(), database.connection_context(), database.atomic():
        JobEvent.insert_many(
            {
                "tenant": TENANT,
                "job_id": job_id if n % 3 else f"{job_id}-OTHER",
                "task_version": 1,
                "event": "commented",
                "actor": "ed",
                "note": f"entry {n // 3 * 2 + n % 3}" if n % 3 else "another job's",
            }
            for n in range(1, entries * 3 // 2 + 1)
        ).execute()


def _timeline_page(client, url: str) -> tuple[list[str], str, dict]:
    """The notes a timeline page lists, its text, and its older/newer links."""
    page = client.get(url)
    assert page.status_code == 200, page.get_data(as_text=True)[:400]
    text = page.get_data(as_text=True)
    notes = re.findall(r'<td class="note">([^<]*)</td>', text)
    links = dict(re.findall(r'<a rel="(prev|next)" href="([^"]+)"', text))
    return notes, text, {k: v.replace("&amp;", "&") for k, v in links.items()}


def test_the_timeline_page_reads_every_entry_in_pages_of_200(offline_gw):
    """Issue 56's timeline showed its first 200 entries only: the page says how many there
    are, and older/newer links (keyset by entry id) reach every one of them."""
    [job_id] = _seed(offline_gw, "LONG", jobs=1)
    _long_timeline(offline_gw, job_id, 450)
    _sign_in(offline_gw.client, offline_gw.make_token("editor"))
    url = f"/review/jobs/{job_id}/timeline"
    notes, text, links = _timeline_page(offline_gw.client, url)
    assert notes == [f"entry {n}" for n in range(1, 201)] and "Entries 1–200 of 450" in text
    assert list(links) == ["next"]
    notes, text, links = _timeline_page(offline_gw.client, links["next"])
    assert notes == [f"entry {n}" for n in range(201, 401)] and "Entries 201–400 of 450" in text
    assert '<td class="number">201</td>' in text and set(links) == {"prev", "next"}
    second = links
    notes, text, links = _timeline_page(offline_gw.client, links["next"])
    assert notes == [f"entry {n}" for n in range(401, 451)] and "Entries 401–450 of 450" in text
    assert list(links) == ["prev"]
    notes, _, links = _timeline_page(offline_gw.client, links["prev"])  # back: the same page
    assert notes == [f"entry {n}" for n in range(201, 401)] and links == second
    notes, _, links = _timeline_page(offline_gw.client, links["prev"])
    assert notes == [f"entry {n}" for n in range(1, 201)] and list(links) == ["next"]
    # past the end: said, with the way back; a short timeline: its count, no pager
    notes, text, _ = _timeline_page(offline_gw.client, url + "?after=2000000000")
    assert notes == [] and "No entries there: this timeline has 450." in text
    [short] = _seed(offline_gw, "SHORT", jobs=1, first=False)
    notes, text, links = _timeline_page(offline_gw.client, f"/review/jobs/{short}/timeline")
    assert notes == [] and "Nothing recorded yet" in text and not links
    _long_timeline(offline_gw, short, 3)
    notes, text, links = _timeline_page(offline_gw.client, f"/review/jobs/{short}/timeline")
    assert notes == ["entry 1", "entry 2", "entry 3"] and "3 entries" in text and not links


@pytest.mark.parametrize(
    "query, words",
    [
        ("after=x", "after must be an integer from 0 to 2147483647"),
        ("before=-1", "before must be an integer from 0 to 2147483647"),
        ("after=1&before=9", "after and before cannot be combined"),
    ],
)
def test_a_bad_timeline_page_is_a_clear_problem_not_a_500(offline_gw, query, words):
    [job_id] = _seed(offline_gw, "BAD", jobs=1)
    _sign_in(offline_gw.client, offline_gw.make_token("editor"))
    page = offline_gw.client.get(f"/review/jobs/{job_id}/timeline?{query}")
    html = page.get_data(as_text=True)
    assert page.status_code == 422 and words in html and "Traceback" not in html


@pytest.mark.parametrize(
    "query, words",
    [
        ("state=published", "state must be one of waiting, changes_requested, approved"),
        ("site=nowhere", "unknown site &#39;nowhere&#39;: one of blog"),
        ("q=" + "x" * 201, "a search is at most 200 characters"),
    ],
)
def test_a_bad_filter_is_a_clear_problem_not_a_500(offline_gw, query, words):
    _sign_in(offline_gw.client, offline_gw.make_token("editor"))
    page = offline_gw.client.get(f"/review?{query}")
    html = page.get_data(as_text=True)
    assert page.status_code == 422 and words in html and "Traceback" not in html


def test_side_by_side_marks_the_words_each_side_lacks():
    from gateway.editorial import side_by_side

    draft = side_by_side.words_of("<p>The tide &amp; the <b>storm</b> came early.</p>")
    post = side_by_side.words_of("<p>The tide &amp; the storm came late.</p>")
    assert draft[:2] == ["The", "tide"] and "&" in draft  # entities decoded, tags gone
    left, right, ratio = side_by_side.marked(draft, post)
    assert [r["text"] for r in left if r["changed"]] == ["early."]
    assert [r["text"] for r in right if r["changed"]] == ["late."]
    assert 0.8 < ratio < 1.0
    assert side_by_side.marked(draft, draft)[2] == 1.0


def test_titles_read_as_readers_see_them():
    from gateway.editorial import review_board

    assert review_board.as_read("Storm &amp; Sea &#8211; a &#8220;test&#8221;") == (
        "Storm & Sea \u2013 a \u201ctest\u201d"
    )
    assert review_board.as_read(None) is None
    # tags a theme renders read as their text (the issue 56 tester's "Paging item 3 <b>bold</b>")
    assert review_board.as_read("Paging item 3 <b>bold</b> &lt;i&gt;") == "Paging item 3 bold <i>"
    assert review_board.as_read("x<script>alert(1)</script>y") == "xy"


def test_compare_of_an_unknown_review_is_a_404_page(offline_gw):
    _sign_in(offline_gw.client, offline_gw.make_token("editor"))
    page = offline_gw.client.get("/review/reviews/999/compare")
    assert page.status_code == 404 and "no open review 999" in page.get_data(as_text=True)
    token = _csrf(offline_gw.client.get("/review"))
    assert token  # the desk still renders


# --------------------------------------------------------------------------- axe-core


def axe_source() -> str:
    """axe-core's ``axe.min.js`` (Deque's accessibility engine), installed once with npm into
    ``.cache/axe-core`` (as ``scripts/install_n8n.sh`` installs n8n), or ``AXE_CORE_JS``."""
    given = os.environ.get("AXE_CORE_JS")
    path = AXE_CACHE / "node_modules" / "axe-core" / "axe.min.js"
    if given:
        path = type(path)(given)
    elif not path.exists() and shutil.which("npm"):
        subprocess.run(
            ["npm", "install", "--prefix", str(AXE_CACHE), "--no-audit", "--no-fund"]
            + ["--loglevel=error", f"axe-core@{AXE_VERSION}"],
            check=True,
            timeout=300,
            capture_output=True,
        )
    if not path.exists():
        message = f"axe-core not found at {path}: install npm (it installs axe-core there)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path.read_text()


AXE_RUN = (
    "const done = arguments[arguments.length - 1];"
    "axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a',"
    " 'wcag21aa', 'best-practice']}}).then(r => done(JSON.stringify(r.violations)),"
    " e => done(JSON.stringify([{id: 'axe-error', help: String(e), nodes: []}])));"
)


def axe_violations(driver, source: str) -> list[dict]:
    """axe-core's violations of the page ``driver`` shows: ``[{"id", "impact", "help",
    "nodes"}]`` (its script injected through Selenium: the page's CSP limits only what the
    page loads itself, not what WebDriver evaluates)."""
    driver.execute_script(source)
    driver.set_script_timeout(60)
    found = json.loads(driver.execute_async_script(AXE_RUN))
    return [
        {
            "id": v["id"],
            "impact": v.get("impact"),
            "help": v["help"],
            "nodes": [n["html"][:160] for n in v["nodes"]][:3],
        }
        for v in found
    ]


# --------------------------------------------------------------------------- browser

import test_review_page  # noqa: E402
from test_review_page import _draft_awaiting_approval  # noqa: E402
from test_review_page import _submit  # noqa: E402
from test_review_page import _suspected_duplicate  # noqa: E402

browser = test_review_page.browser  # its fixtures: a headless Chromium, a served gateway
server = test_review_page.server

GUIDE = ROOT / "docs"  # the guide's screenshots, docs/editors-*.png: EDITORS_GUIDE_SHOTS=1


def _shot(element, name: str) -> None:
    """A PNG of ``element`` in test-artifacts/, and under ``EDITORS_GUIDE_SHOTS=1`` as
    ``docs/editors-{name}.png`` for the editors' guide (64 colours: kept small)."""
    from PIL import Image

    artifacts = ROOT / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    path = artifacts / f"editors-{name}.png"
    # no focus ring left by an earlier Tab walk (_assert_accessible) in the picture
    element.parent.execute_script("document.activeElement && document.activeElement.blur()")
    element.screenshot(str(path))
    if os.environ.get("EDITORS_GUIDE_SHOTS") == "1":
        with Image.open(path) as image:
            small = image.convert("RGB").quantize(64)
            small.save(GUIDE / f"editors-{name}.png", optimize=True)


def _assert_accessible(driver, source: str, where: str) -> None:
    """No axe-core violation (WCAG 2.1 A/AA and best practice), and Tab from the top reaches the
    page's controls (up to six), each drawn with a visible focus ring."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    violations = axe_violations(driver, source)
    assert violations == [], (where, violations)
    seen = []  # a page just loaded: Tab starts at the document's top
    for _ in range(6):
        ActionChains(driver).send_keys(Keys.TAB).perform()
        active = driver.switch_to.active_element
        if active.tag_name == "body":
            break  # past the last control
        seen.append(active.tag_name)
        outline = active.value_of_css_property("outline-style")
        assert outline not in ("none", ""), (where, active.get_attribute("outerHTML")[:120])
    assert {"a", "button", "select", "input"} & set(seen), (where, seen)


TIDE = (
    "<p>The tide turned at dawn and the boats stayed in the harbour. The storm reached the "
    "coast by noon. Nobody was hurt, and the ferry ran again the next morning.</p>"
)


def _edit_post(wp_site: dict, title: str, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in the text of the post titled ``title``, as someone editing
    it in WordPress would (the admin's application password, over REST)."""
    from support import admin_session

    wordpress = admin_session(wp_site)
    posts = f"{wp_site['url'].rstrip('/')}/wp-json/wp/v2/posts"
    found = wordpress.get(
        posts, params={"search": title, "status": "draft", "context": "edit"}, timeout=30
    )
    [post] = [p for p in found.json() if p["title"]["raw"] == title]
    content = post["content"]["raw"]
    assert old in content, content
    changed = wordpress.post(
        f"{posts}/{post['id']}", json={"content": content.replace(old, new)}, timeout=30
    )
    assert changed.status_code == 200, changed.text


@pytest.mark.wordpress
def test_editor_decides_a_duplicate_side_by_side_and_finds_a_draft(browser, server, proxy, wp_site):
    """Issue 56: a suspected duplicate decided from the side-by-side view; the search finds a
    draft by its job id; its title reads as readers see it (``&`` not ``&amp;``); once
    approved only Publish is offered; axe-core finds nothing on either page."""
    from selenium.webdriver.common.by import By

    axe = axe_source()
    suspect_job, draft_job = f"DUP-{os.getpid()}-{id(browser) % 9999}", None
    suspect_title = f"Tide and storm {suspect_job}"
    _suspected_duplicate(server, proxy, suspect_job, suspect_title, content=TIDE)
    # someone changed a sentence of the post in WordPress since: the view marks it
    _edit_post(wp_site, suspect_title, "by noon.", "late in the evening.")
    server.start()  # a fresh process: the companion plugin is visible again
    from support import new_job_id

    draft_job = new_job_id()
    _draft_awaiting_approval(server, draft_job, f"Ready & waiting {draft_job}")
    editor = server._cli("tokens", "create", "--tenant", TENANT, "--role", "editor", "--name", "ed")
    browser.get(server.url + "/review")
    browser.find_element(By.ID, "token").send_keys(editor.strip().splitlines()[-1])
    _submit(browser, browser.find_element(By.ID, "sign-in"))
    _assert_accessible(browser, axe, "desk")

    browser.find_element(By.ID, "desk-q").send_keys(draft_job)
    _submit(browser, browser.find_element(By.CSS_SELECTOR, "button.find"))
    cards = browser.find_elements(By.CSS_SELECTOR, "#drafts .draft")
    assert [c.get_attribute("data-job") for c in cards] == [draft_job]
    title = cards[0].find_element(By.CSS_SELECTOR, ".title").text
    assert title.startswith(f"Ready & waiting {draft_job}") and "&amp;" not in title
    _shot(browser.find_element(By.ID, "drafts"), "desk-search")

    review = browser.find_element(By.CSS_SELECTOR, f'.review[data-job="{suspect_job}"]')
    _submit(browser, review.find_element(By.CSS_SELECTOR, "a.compare"))
    pair = browser.find_element(By.CSS_SELECTOR, "#compare .pair")
    assert (
        pair.find_element(By.CSS_SELECTOR, ".draft-title").text == f"Tide and storm {suspect_job}"
    )
    assert pair.find_element(By.CSS_SELECTOR, ".post-title").text == f"Tide and storm {suspect_job}"
    alike = int(pair.find_element(By.CSS_SELECTOR, ".ratio").text.split(" %")[0])
    assert 50 < alike < 100, alike
    # the changed sentence marked: green on the draft's side, struck red on the post's
    marked = {
        tag: " ".join(e.text for e in pair.find_elements(By.CSS_SELECTOR, f"td.rendered {tag}"))
        for tag in ("ins", "del")
    }
    assert marked == {"ins": "by noon.", "del": "late in the evening."}, marked
    assert pair.find_element(By.CSS_SELECTOR, "ins").value_of_css_property("background-color") == (
        "rgba(215, 247, 220, 1)"
    )  # the guide's "green"
    # every decision inside the one bordered card: Same as under the post, Distinct after it
    card = browser.find_element(By.CSS_SELECTOR, "#compare .card")
    assert card.find_elements(By.CSS_SELECTOR, "button.same-as")
    assert card.find_elements(By.CSS_SELECTOR, "button.distinct")
    _assert_accessible(browser, axe, "compare")
    _shot(browser.find_element(By.ID, "compare"), "side-by-side")
    same_as = pair.find_element(By.CSS_SELECTOR, "button.same-as")
    post = same_as.text.removeprefix("Same as #")
    flashed = _submit(browser, same_as)
    adopted = (
        f"Same as #{post}: job {suspect_job} “{suspect_title}” takes post #{post} as its draft; "
        "no new post is written."
    )
    assert adopted in flashed, flashed
    suspect = server.call("GET", f"/v1/jobs/{suspect_job}").json()
    assert [r["state"] for r in suspect["operations"]] == ["CONFIRMED"]
    decided = server.call("GET", f"/v1/jobs/{suspect_job}/timeline").json()["entries"]
    said = [
        (e["event"], e["actor"], e["note"]) for e in decided if e["event"] == "duplicate_decided"
    ]
    assert said == [("duplicate_decided", "ed", f"same_as #{suspect['post_id']}")], decided

    card = browser.find_element(By.CSS_SELECTOR, f'#drafts .draft[data-job="{draft_job}"]')
    _submit(browser, card.find_element(By.CSS_SELECTOR, "button.approve"))
    card = browser.find_element(By.CSS_SELECTOR, f'#drafts .draft[data-job="{draft_job}"]')
    assert card.find_elements(By.CSS_SELECTOR, "button.publish")
    assert not card.find_elements(By.CSS_SELECTOR, "button.approve")  # it cannot succeed now
    # the guide's picture: the whole approved card, what it still offers (Revoke, Comment,
    # the timeline, Publish) and not Approve or Request changes
    offered = {b.text for b in card.find_elements(By.CSS_SELECTOR, "button")}
    assert offered == {"Revoke", "Comment", "Publish"}, offered
    assert card.find_elements(By.CSS_SELECTOR, "a.timeline-link")
    browser.execute_script("arguments[0].scrollIntoView()", card)
    _shot(card, "approved-card")
    # the job's timeline (issue 56, part A): reached from the card, accessible as the desk is
    browser.get(card.find_element(By.CSS_SELECTOR, "a.timeline-link").get_attribute("href"))
    events = [
        e.get_attribute("data-event")
        for e in browser.find_elements(By.CSS_SELECTOR, "table.timeline .entry")
    ]
    assert events[-1] == "approved", events
    _assert_accessible(browser, axe, "timeline")
