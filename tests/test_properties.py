"""Property-based tests (hypothesis) of the two identities the ledger rests on.

* The request digest depends on what a request means, not on how it is spelled: key order,
  whitespace and number spelling never change it; changing any semantic field always does.
  Checked on :func:`gateway.core.digests.request_digest` over arbitrary JSON documents, and end to
  end through ``PUT /v1/jobs/{id}/draft`` (the same key with a respelled body is never 422
  ``operation-key-reused``; a changed field always is).
* The operation key is injective: no two distinct (tenant, job, version, action, slot) give
  one key, for every value the validation accepts.
"""

from __future__ import annotations

import datetime as dt
import json
import random

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
from support import draft_body
from support import new_job_id
from support import problem_slug

from gateway.core import validation
from gateway.core.digests import request_digest
from gateway.ledger import db
from gateway.ledger.db import database
from gateway.ledger.models import Operation
from gateway.operations.perform import operation_key

# Lean enough for CI on two shared cores: 60 examples per property, no deadline.
settings.register_profile("gateway", max_examples=60, deadline=None)
settings.load_profile("gateway")

ACTIONS = ("media", "draft", "block", "repair", "publish")
scalars = st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.text(max_size=20)
scalars |= st.floats(allow_nan=False, allow_infinity=False, width=64)
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
objects = st.dictionaries(st.text(max_size=8), documents, min_size=1, max_size=6)


def _respell(value, rng: random.Random) -> str:
    """JSON text of ``value`` with shuffled keys, random whitespace and integral numbers
    spelled as ``n``, ``n.0`` or ``nE0``."""
    space = rng.choice(["", " ", "\n", "\t  "])
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        inner = f",{space}".join(
            f"{json.dumps(k)}{space}:{space}{_respell(v, rng)}" for k, v in items
        )
        return "{" + space + inner + space + "}"
    if isinstance(value, list):
        return "[" + f",{space}".join(_respell(v, rng) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int) or (
        isinstance(value, float) and value.is_integer() and abs(value) < 1e15
    ):
        n = int(value)
        return rng.choice([str(n), f"{n}.0", f"{n}E0", f"{n}.000e+0"])
    return json.dumps(value)


@given(objects, st.randoms(use_true_random=False))
def test_spelling_never_changes_the_digest(document, rng):
    respelled = json.loads(_respell(document, rng))
    assert request_digest(respelled) == request_digest(document)


def _paths(value, prefix=()):
    if isinstance(value, dict | list) and not value:
        yield prefix  # an empty container is a leaf too
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))
    else:
        yield prefix


def _replace(value, path, new):
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(value[path[0]], path[1:], new)
    return copy


def _get(value, path):
    for step in path:
        value = value[step]
    return value


@given(objects, st.data())
def test_any_semantic_change_changes_the_digest(document, data):
    path = data.draw(st.sampled_from(list(_paths(document))))
    old = _get(document, path)
    new = data.draw(scalars.filter(lambda v: json.dumps(v) != json.dumps(old)))
    if isinstance(new, float) and new.is_integer() and json.dumps(int(new)) == json.dumps(old):
        return  # 2.0 and 2 are the same number: not a semantic change
    assert request_digest(_replace(document, path, new)) != request_digest(document)


@given(objects, st.text(min_size=1, max_size=8), documents)
def test_an_added_or_removed_field_changes_the_digest(document, name, value):
    if name in document:
        smaller = {k: v for k, v in document.items() if k != name}
        assert request_digest(smaller) != request_digest(document)
    else:
        assert request_digest({**document, name: value}) != request_digest(document)


# --------------------------------------------------------------------------- operation key


class _Job:
    def __init__(self, tenant: str, job_id: str, version: int):
        self.tenant, self.job_id, self.task_version = tenant, job_id, version


identities = st.tuples(
    st.from_regex(validation.TENANT, fullmatch=True),
    st.from_regex(validation.JOB_ID, fullmatch=True),
    st.integers(1, 1_000_000),
    st.sampled_from(ACTIONS),
    st.none() | st.from_regex(validation.SLOT, fullmatch=True),
)


def _key(identity) -> str:
    tenant, job_id, version, action, slot = identity
    return operation_key(_Job(tenant, job_id, version), action, slot)


def _parse(key: str):
    """The identity back from a key: every segment is free of '/', so the split is unique."""
    tenant, job_id, version, action, *slot = key.split("/")
    assert version.startswith("v") and len(slot) <= 1
    return tenant, job_id, int(version[1:]), action, slot[0] if slot else None


@given(identities)
def test_the_key_gives_back_its_identity(identity):
    assert _parse(_key(identity)) == identity


@given(identities, identities)
def test_no_two_identities_share_a_key(one, other):
    if one != other:
        assert _key(one) != _key(other)


# --------------------------------------------------------------------------- end to end


@pytest.fixture
def unknown_draft(offline_gw):
    """A job whose draft operation exists (UNKNOWN: sent once, its answer lost, and its site
    does not answer now)."""
    job_id = new_job_id()
    assert offline_gw.put_job(job_id).status_code == 201
    first = offline_gw.put_draft(job_id, draft_body())
    assert first.status_code == 503, first.get_json()
    assert first.get_json()["ledger_state"] == "PREPARED"  # refused connection: never sent
    with offline_gw.app.app_context(), database.connection_context():
        Operation.update(state="UNKNOWN", sent_at=db.utcnow()).execute()
    return offline_gw, job_id


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rng=st.randoms(use_true_random=False), field=st.sampled_from(["title", "content", "excerpt"])
)
def test_the_api_digests_meaning_not_spelling(unknown_draft, rng, field):
    gw, job_id = unknown_draft
    respelled = gw.put_draft(job_id, _respell(draft_body(), rng))
    # the same operation: looked up again (503 unreachable, or 409 still in its window)
    assert respelled.status_code in (409, 503), respelled.get_json()
    changed = gw.put_draft(job_id, draft_body(**{field: draft_body()[field] + " "}))
    assert changed.status_code == 422 and problem_slug(changed) == "operation-key-reused"


def test_an_unreachable_site_after_the_window_is_503_not_500(unknown_draft):
    """Found by the property above: past the in-flight window, on a site without the
    companion plugin, the suspected-duplicate search could not reach WordPress and the
    error escaped as a 500."""
    gw, job_id = unknown_draft
    with gw.app.app_context(), database.connection_context():
        earlier = db.utcnow() - dt.timedelta(minutes=5)
        Operation.update(sent_at=earlier, updated_at=earlier).execute()
    again = gw.put_draft(job_id, draft_body())
    assert again.status_code == 503 and problem_slug(again) == "wordpress-unavailable"
    assert gw.operations(job_id)[0]["state"] == "UNKNOWN"
