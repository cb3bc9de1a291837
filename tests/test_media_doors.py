"""One media request parser (``gateway/core/media_request.py``) at every door: the HTTP view
(JSON and multipart, through Flask's test client), an agent's ``upload_media`` tool call
(``gateway.agents.tools.execute``, as the agent worker runs it) and the MCP server's
``upload_media`` tool (``gateway.mcp.tools.Runner``). Both sources or neither, bytes that are
not base64 and an empty file get the same problem at each door, before anything is claimed or
sent: the tenant's site is an address where nothing listens, and the MCP server's gateway too,
so a request that went further would end in another answer."""

from __future__ import annotations

import base64

import pytest
from support import TENANT
from support import new_job_id
from support import png_bytes

from gateway.agents import tools as agent_tools
from gateway.core import exceptions as exc
from gateway.jobs import records
from gateway.ledger.db import database
from gateway.mcp import tools as mcp_tools
from gateway.mcp.client import GatewayAPI
from gateway.mcp.client import Problem
from gateway.operations.target import target_for

PNG = base64.b64encode(png_bytes((200, 10, 10), 8)).decode("ascii")
BOTH = "send exactly one of content_base64 and source_url"
BOTH_OR_PATH = "send exactly one of content_base64, source_url and path"
# (arguments besides the slot, the problem's detail, its pointer)
REFUSED = [
    ({"content_base64": PNG, "source_url": "https://images.example/a.png"}, BOTH,
     "/content_base64"),
    ({"alt_text": "no source"}, BOTH, "/content_base64"),
    ({"content_base64": "not base64!"}, "content_base64 is not valid base64", "/content_base64"),
    ({"content_base64": ""}, "the file is empty", "/content_base64"),
]  # fmt: skip
UPLOAD_MEDIA = next(s for s in mcp_tools.SPECS if s.name == "upload_media")
NOWHERE = "http://127.0.0.1:9"  # nothing listens: an MCP call that is sent fails otherwise


def _seen(problem: dict) -> dict:
    """What a client reads of a problem: type, status, detail and the errors' pointers."""
    pointers = [e["pointer"] for e in problem.get("errors", [])]
    return {k: problem.get(k) for k in ("type", "status", "detail")} | {"pointers": pointers}


def _expected(detail: str, pointer: str) -> dict:
    return {
        "type": exc.PROBLEM_BASE + "validation-failed",
        "status": 422,
        "detail": detail,
        "pointers": [pointer],
    }


@pytest.fixture
def media_job(offline_gw):
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    return job_id


def _http(gw, job_id: str, arguments: dict) -> dict:
    answer = gw.client.put(f"/v1/jobs/{job_id}/media/hero", json=arguments, headers=gw.headers())
    assert answer.status_code == 422, answer.get_json()
    return answer.get_json()


def _agent(gw, job_id: str, arguments: dict) -> dict:
    with gw.app.app_context(), database.connection_context():
        target = target_for(gw.app.config["GATEWAY"], records.get_job(TENANT, job_id))
        with pytest.raises(exc.GatewayError) as refused:
            agent_tools.execute(target, "upload_media", {"slot": "hero", **arguments}, "agent:t")
    return refused.value.problem()


def _mcp(job_id: str, arguments: dict, roots=()) -> dict:
    runner = mcp_tools.Runner(GatewayAPI(NOWHERE, timeout=5, wait_seconds=0), roots=roots)
    with pytest.raises(Problem) as refused:
        runner.run(UPLOAD_MEDIA, "a-token", {"job_id": job_id, "slot": "hero", **arguments}, None)
    return refused.value.body


@pytest.mark.parametrize(("arguments", "detail", "pointer"), REFUSED)
def test_each_door_refuses_a_bad_media_request_with_the_same_problem(
    offline_gw, media_job, arguments, detail, pointer
):
    expected = _expected(detail, pointer)
    assert _seen(_http(offline_gw, media_job, arguments)) == expected
    assert _seen(_agent(offline_gw, media_job, arguments)) == expected
    assert _seen(_mcp(media_job, arguments)) == expected
    assert offline_gw.operations(media_job) == []  # nothing claimed


def test_an_empty_file_is_refused_where_it_came_from(offline_gw, media_job, tmp_path):
    """The same "the file is empty" problem at the member that carried the bytes: the
    multipart ``file``, MCP's local ``path``."""
    answer = offline_gw.client.put(
        f"/v1/jobs/{media_job}/media/hero",
        data={"file": (b"", "empty.png"), "alt_text": "empty"},
        headers=offline_gw.headers(),
        content_type="multipart/form-data",
    )
    assert answer.status_code == 422
    assert _seen(answer.get_json()) == _expected("the file is empty", "/file")
    (tmp_path / "empty.png").write_bytes(b"")
    path = {"path": str(tmp_path / "empty.png")}
    assert _seen(_mcp(media_job, path, roots=(tmp_path,))) == _expected(
        "the file is empty", "/path"
    )
    both = {"path": str(tmp_path / "empty.png"), "content_base64": PNG}
    assert _seen(_mcp(media_job, both, roots=(tmp_path,))) == _expected(
        BOTH_OR_PATH, "/content_base64"
    )
    assert offline_gw.operations(media_job) == []


def test_a_valid_request_passes_the_parser_at_every_door(offline_gw, media_job):
    """The doors send a valid request on: the HTTP view and the agent tool reach the
    (unreachable) site, the MCP tool the (unreachable) gateway; none refuses it as invalid."""
    valid = {"content_base64": PNG, "alt_text": "a hero"}
    answer = offline_gw.client.put(
        f"/v1/jobs/{media_job}/media/hero", json=valid, headers=offline_gw.headers()
    )
    assert answer.status_code == 503, answer.get_json()
    with offline_gw.app.app_context(), database.connection_context():
        target = target_for(offline_gw.app.config["GATEWAY"], records.get_job(TENANT, media_job))
        with pytest.raises(exc.GatewayError) as unreachable:
            agent_tools.execute(target, "upload_media", {"slot": "hero", **valid}, "agent:t")
    assert unreachable.value.status == 503
    assert _mcp(media_job, valid)["type"].endswith("/gateway-unreachable")


def test_a_local_path_outside_the_roots_gets_one_answer_whether_or_not_it_exists(tmp_path):
    """Issue 40: MCP's stdio ``path`` outside the operator's folders is refused with the same
    problem for a file that exists, one that does not, one reached through ``..`` and one
    reached through a link out of the root, so the tool is no oracle of the file system.
    Inside the roots a missing file is still "no such file"."""
    root, elsewhere = tmp_path / "media", tmp_path / "private"
    root.mkdir()
    elsewhere.mkdir()
    (elsewhere / "secret.png").write_bytes(png_bytes((1, 2, 3), 2))
    (root / "link.png").symlink_to(elsewhere / "secret.png")
    (root / "dangling.png").symlink_to(elsewhere / "missing.png")

    def answer(path) -> tuple[str, str]:
        with pytest.raises(Problem) as refused:
            mcp_tools.read_local_image(str(path), (root.resolve(),))
        return refused.value.body["detail"], refused.value.body["errors"][0]["pointer"]

    outside = ("the file is not under a folder the operator allows", "/path")
    for path in (
        elsewhere / "secret.png",
        elsewhere / "missing.png",
        tmp_path / "nowhere" / "x.png",
        root / ".." / "private" / "secret.png",
        root / ".." / "private" / "missing.png",
        root / "link.png",
        root / "dangling.png",
    ):
        assert answer(path) == outside, path
    assert answer(root / "missing.png") == ("no such file", "/path")


def test_an_empty_unset_source_beside_a_given_one_is_not_given_at_the_tools_doors(
    offline_gw, media_job, tmp_path
):
    """A client that sends ``""`` for every optional it does not mean (Cursor,
    cursor/cursor#3614; the issue 52 tryout) names its one source so: the agent tool and the
    MCP tool pass it on (to the download's checks, to the unreachable gateway), by URL and by
    local path. The
    HTTP API stays strict, and a lone empty ``content_base64`` is still "the file is empty"
    at every door (:data:`REFUSED`)."""
    by_url = {"content_base64": "", "source_url": "https://images.example/a.png"}
    assert _seen(_http(offline_gw, media_job, by_url)) == _expected(BOTH, "/content_base64")
    with offline_gw.app.app_context(), database.connection_context():
        target = target_for(offline_gw.app.config["GATEWAY"], records.get_job(TENANT, media_job))
        with pytest.raises(exc.GatewayError) as past_the_parser:
            agent_tools.execute(target, "upload_media", {"slot": "hero", **by_url}, "agent:t")
    # the parser took the URL: the download's own check refused the host that does not resolve
    assert "the image URL is not allowed" in past_the_parser.value.problem()["detail"]
    assert _mcp(media_job, by_url)["type"].endswith("/gateway-unreachable")
    (tmp_path / "pic.png").write_bytes(png_bytes((5, 6, 7), 2))
    unset = ("content_base64", "source_url", "filename", "alt_text", "caption", "title",
             "idempotency_key")  # fmt: skip
    cursor = {**dict.fromkeys(unset, ""), "path": str(tmp_path / "pic.png")}
    assert _mcp(media_job, cursor, roots=(tmp_path,))["type"].endswith("/gateway-unreachable")
    assert offline_gw.operations(media_job) == []
