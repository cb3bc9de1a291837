"""The MCP authorization server's ledger (issue 43): a grant's codes and tokens are single use
whoever races, a reused code or refresh token ends the grant's family, and nothing secret is
stored in clear. Runs on SQLite and, in the PostgreSQL pass, on PostgreSQL; the clock is
injected (``now``), never waited for."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from gateway.ledger import db
from gateway.ledger import migrations
from gateway.ledger.db import database
from gateway.ledger.oauth_models import OAuthGrant
from gateway.tenancy import grants
from gateway.tenancy import oauth_clients
from gateway.tenancy import oauth_tokens
from tests.support import all_ledger_rows

T0 = dt.datetime(2026, 12, 5, 12, 0, 0)
LIFETIMES = oauth_tokens.Lifetimes(access=dt.timedelta(minutes=10), refresh=dt.timedelta(days=30))
RESOURCE = "https://gw.example/mcp"


@pytest.fixture
def ledger(ledger_url):
    db.bind(ledger_url)
    migrations.migrate()
    with database.connection_context():
        yield ledger_url
    db.close_all()


def _approved(client_id: str = "https://app.example/client.json", now=T0) -> str:
    pending_id = grants.open_pending(
        client_id,
        "http://127.0.0.1:33418/callback",
        True,
        "challenge",
        RESOURCE,
        ["gateway:tools", "admin"],
        "s1",
        dt.timedelta(minutes=15),
        now=now,
    )
    assert grants.claim(pending_id, "editor-1-hash", now) is not None
    decision = grants.approve(
        pending_id,
        "editor-1-hash",
        "acme",
        ["blog"],
        "editor-1",
        "App",
        dt.timedelta(seconds=60),
        now=now,
    )
    assert decision is not None and decision.state == "s1"
    return decision.code


def _race(calls: list) -> list:
    """Run ``calls`` at once, each in its own thread with its own ledger connection."""
    barrier = threading.Barrier(len(calls))
    results: list = [None] * len(calls)

    def run(i, call):
        with database.connection_context():
            barrier.wait()
            results[i] = call()

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_a_pending_authorisation_is_claimed_by_one_editor_and_decided_once(ledger):
    pending_id = grants.open_pending(
        "c", "https://x/cb", True, "ch", RESOURCE, ["admin"], None, dt.timedelta(minutes=15), T0
    )
    assert grants.pending(pending_id, T0).scopes == ["gateway:tools"]  # clamped, not refused
    minute = dt.timedelta(seconds=60)
    assert grants.claim(pending_id, "editor-a", T0) is not None
    assert grants.claim(pending_id, "editor-b", T0) is None  # another editor, any tenant
    assert grants.approve(pending_id, "editor-b", "other", ["x"], "b", "C", minute, T0) is None
    assert grants.deny(pending_id, "editor-b", T0) is None
    assert grants.approve(pending_id, "editor-a", "acme", ["blog"], "a", "C", minute, T0)
    assert grants.approve(pending_id, "editor-a", "acme", ["blog"], "a", "C", minute, T0) is None
    assert grants.deny(pending_id, "editor-a", T0) is None
    assert grants.pending(pending_id, T0) is None
    late = grants.open_pending(
        "c", "https://x/cb", True, "ch", RESOURCE, [], None, dt.timedelta(minutes=15), T0
    )
    later = T0 + dt.timedelta(minutes=16)
    assert grants.claim(late, "editor-a", later) is None
    assert grants.deny(late, "editor-a", later) is None
    assert OAuthGrant.select().count() == 1


def test_a_code_is_redeemed_once_and_a_reused_code_revokes_the_grant(ledger, caplog):
    code = _approved()
    view = oauth_tokens.code_view(code, T0)
    assert (view.scopes, view.resource) == (["gateway:tools"], RESOURCE)
    issued = oauth_tokens.redeem_code(code, LIFETIMES, T0)
    assert issued.expires_in == 600
    seen = oauth_tokens.access(issued.access_token, T0 + dt.timedelta(minutes=1))
    assert (seen.tenant, seen.sites, seen.resource) == ("acme", frozenset({"blog"}), RESOURCE)
    assert oauth_tokens.code_view(code, T0) is None  # presented again
    assert oauth_tokens.access(issued.access_token, T0 + dt.timedelta(minutes=1)) is None
    assert OAuthGrant.get().revoked_why == "code-reused"
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert f"OAuth grant {issued.grant_id} revoked: code-reused" in warned  # said once, no code
    assert not any(code in r.getMessage() for r in caplog.records)


def test_an_expired_code_and_an_expired_access_token_are_refused(ledger):
    code = _approved()
    assert oauth_tokens.redeem_code(code, LIFETIMES, T0 + dt.timedelta(seconds=61)) is None
    assert grants.live(OAuthGrant.get().id) is not None  # expiry alone revokes nothing
    issued = oauth_tokens.redeem_code(_approved(), LIFETIMES, T0)
    assert oauth_tokens.access(issued.access_token, T0 + dt.timedelta(minutes=10)) is None


def test_racing_redemptions_of_one_code_issue_one_token_pair_then_revoke(ledger):
    code = _approved()
    results = _race([lambda: oauth_tokens.redeem_code(code, LIFETIMES, T0)] * 4)
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    assert OAuthGrant.get().revoked_why == "code-reused"  # the others presented a used code
    assert oauth_tokens.access(winners[0].access_token, T0) is None


def test_a_refresh_rotates_and_a_reused_refresh_token_revokes_the_family(ledger):
    first = oauth_tokens.redeem_code(_approved(), LIFETIMES, T0)
    later = T0 + dt.timedelta(minutes=20)
    assert oauth_tokens.refresh_check(first.refresh_token, later).tenant == "acme"
    second = oauth_tokens.rotate(first.refresh_token, LIFETIMES, later)
    assert second.refresh_token != first.refresh_token
    assert oauth_tokens.access(second.access_token, later).grant_id == second.grant_id
    # the lost answer's client (or a thief) presents the used token: the family ends
    assert oauth_tokens.rotate(first.refresh_token, LIFETIMES, later) is None
    assert oauth_tokens.access(second.access_token, later) is None
    assert oauth_tokens.rotate(second.refresh_token, LIFETIMES, later) is None
    assert OAuthGrant.get().revoked_why == "refresh-reused"


def test_racing_refreshes_of_one_token_rotate_once_then_revoke(ledger):
    first = oauth_tokens.redeem_code(_approved(), LIFETIMES, T0)
    results = _race([lambda: oauth_tokens.rotate(first.refresh_token, LIFETIMES, T0)] * 4)
    assert len([r for r in results if r is not None]) == 1
    assert OAuthGrant.get().revoked_why == "refresh-reused"


GRACE = oauth_tokens.Lifetimes(
    access=dt.timedelta(minutes=10),
    refresh=dt.timedelta(days=30),
    reuse_grace=dt.timedelta(seconds=30),
)


@pytest.mark.parametrize("kept", [0, 1])
def test_two_nodes_refreshing_at_once_keep_the_grant_and_the_pair_the_client_kept(ledger, kept):
    """claude.ai refreshes from two egress nodes at once and keeps whichever answer it
    stored last (PrefectHQ/fastmcp#4264): both get a pair, neither revokes the grant, the
    kept pair goes on, the other fork's refresh token retires at the kept one's rotation."""
    first = oauth_tokens.redeem_code(_approved(), GRACE, T0)
    at = T0 + dt.timedelta(minutes=20)
    forks = _race([lambda: oauth_tokens.rotate(first.refresh_token, GRACE, at)] * 2)
    assert all(f is not None for f in forks)
    assert len({f.refresh_token for f in forks}) == 2
    assert all(oauth_tokens.access(f.access_token, at) for f in forks)
    later = at + dt.timedelta(minutes=20)
    assert oauth_tokens.rotate(forks[kept].refresh_token, GRACE, later) is not None
    assert oauth_tokens.rotate(forks[1 - kept].refresh_token, GRACE, later) is None  # retired
    retired = oauth_tokens.refresh_check(forks[1 - kept].refresh_token, later, GRACE.reuse_grace)
    assert (retired.cause, retired.at) == (oauth_tokens.RETIRED, later)
    assert grants.live(first.grant_id) is not None  # a retired fork revokes nothing


def test_a_reuse_after_the_window_or_of_an_older_rotation_still_revokes_the_family(ledger):
    first = oauth_tokens.redeem_code(_approved(), GRACE, T0)
    second = oauth_tokens.rotate(first.refresh_token, GRACE, T0)
    again = oauth_tokens.rotate(first.refresh_token, GRACE, T0 + dt.timedelta(seconds=30))
    assert again is not None and grants.live(first.grant_id) is not None  # within 30 s
    late = T0 + dt.timedelta(seconds=31)
    refused = oauth_tokens.refresh_check(first.refresh_token, late, GRACE.reuse_grace)
    assert (refused.cause, refused.at) == (oauth_tokens.REUSED, T0)
    assert OAuthGrant.get().revoked_why == "refresh-reused"
    assert oauth_tokens.access(second.access_token, late) is None
    # within the window, but not the last rotation (Auth0: only the previous token)
    chain = [oauth_tokens.redeem_code(_approved(), GRACE, T0)]
    second = T0 + dt.timedelta(seconds=1)
    chain.append(oauth_tokens.rotate(chain[0].refresh_token, GRACE, T0))
    chain.append(oauth_tokens.rotate(chain[1].refresh_token, GRACE, second))
    assert oauth_tokens.rotate(chain[0].refresh_token, GRACE, second) is None
    assert grants.live(chain[0].grant_id) is None


def test_revoking_a_token_ends_its_grant_for_its_own_client_only(ledger):
    issued = oauth_tokens.redeem_code(_approved("client-a"), LIFETIMES, T0)
    assert not oauth_tokens.revoke_token(issued.refresh_token, "client-b", T0)
    assert oauth_tokens.access(issued.access_token, T0) is not None
    assert oauth_tokens.revoke_token(issued.refresh_token, "client-a", T0)
    assert oauth_tokens.access(issued.access_token, T0) is None


def test_an_editor_revokes_a_grant_of_their_tenant_only(ledger):
    issued = oauth_tokens.redeem_code(_approved(), LIFETIMES, T0)
    grant_id = issued.grant_id
    assert not grants.revoke_for_tenant("other", grant_id, T0)
    assert oauth_tokens.access(issued.access_token, T0) is not None
    assert grants.revoke_for_tenant("acme", grant_id, T0)
    assert oauth_tokens.access(issued.access_token, T0) is None
    assert [g.revoked_why for g in grants.list_grants("acme")] == ["editor"]


def test_last_use_is_written_at_most_once_a_minute(ledger):
    issued = oauth_tokens.redeem_code(_approved(), LIFETIMES, T0)
    for second in (0, 10, 59):
        oauth_tokens.access(issued.access_token, T0 + dt.timedelta(seconds=second))
    assert OAuthGrant.get().last_used_at == T0
    oauth_tokens.access(issued.access_token, T0 + dt.timedelta(seconds=61))
    assert OAuthGrant.get().last_used_at == T0 + dt.timedelta(seconds=61)


def test_dynamic_registrations_expire_unless_approved(ledger):
    unused = oauth_clients.register(
        {"redirect_uris": ["http://127.0.0.1/cb"]}, dt.timedelta(hours=24), T0
    )
    kept = oauth_clients.register(
        {"redirect_uris": ["http://127.0.0.1/cb"]}, dt.timedelta(hours=24), T0
    )
    oauth_clients.note_approved(kept, T0)
    day = T0 + dt.timedelta(hours=25)
    assert oauth_clients.known(unused, day) is None and oauth_clients.known(kept, day)
    assert oauth_clients.forget_expired(day) == 1
    oauth_clients.remember_document("https://a/c.json", {"v": 1}, dt.timedelta(seconds=300), T0)
    oauth_clients.remember_document("https://a/c.json", {"v": 2}, dt.timedelta(seconds=300), T0)
    assert oauth_clients.known("https://a/c.json", T0).metadata == {"v": 2}
    assert oauth_clients.known("https://a/c.json", T0 + dt.timedelta(seconds=301)) is None


def test_no_code_token_or_pending_id_is_stored_in_clear(ledger):
    pending_id = grants.open_pending(
        "c", "https://x/cb", True, "ch", RESOURCE, [], None, dt.timedelta(minutes=15), T0
    )
    code = _approved()
    issued = oauth_tokens.redeem_code(code, LIFETIMES, T0)
    rotated = oauth_tokens.rotate(issued.refresh_token, LIFETIMES, T0)
    rows = all_ledger_rows()
    for secret in (
        pending_id,
        code,
        issued.access_token,
        issued.refresh_token,
        rotated.access_token,
    ):
        assert secret not in rows


def test_migration_15_adds_the_oauth_tables_to_a_version_14_ledger(ledger):
    tables = ("oauth_client", "oauth_pending", "oauth_grant", "oauth_code", "oauth_token")
    for table in tables:
        database.execute_sql(f"DROP TABLE {table}")
    database.execute_sql("DELETE FROM schema_version WHERE version >= 15")
    with pytest.raises(migrations.LedgerError, match="init-db"):
        migrations.check(ledger)
    assert migrations.migrate() == (14, migrations.latest_version())
    assert set(tables) <= set(database.get_tables())
    assert migrations.migrate() == (migrations.latest_version(),) * 2
