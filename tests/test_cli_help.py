"""The command line explains itself: ``--help`` of every command and group has a whole one-line
summary per subcommand, every option says what it means, every option with a default shows
it, durations take a unit (a bare number in the option's own unit), and ``sites list`` /
``tokens list`` show what exists without a secret."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner
from support import SECRET_KEY
from support import gateway_cli

from gateway import cli as cli_module


def _commands(group: click.Group, path: tuple[str, ...] = ()):
    for name, command in sorted(group.commands.items()):
        yield (*path, name), command
        if isinstance(command, click.Group):
            yield from _commands(command, (*path, name))


def _help(*path: str) -> str:
    result = CliRunner().invoke(cli_module.cli, [*path, "--help"], prog_name="gateway")
    assert result.exit_code == 0, result.output
    return result.output


COMMANDS = list(_commands(cli_module.cli))


def test_every_command_is_listed():
    assert {" ".join(path) for path, _ in COMMANDS} >= {
        "serve",
        "reconcile",
        "prune",
        "doctor",
        "sites add",
        "sites list",
        "tokens create",
        "tokens list",
        "tokens revoke",
    }


@pytest.mark.parametrize("path", [(), *(p for p, c in COMMANDS if isinstance(c, click.Group))])
def test_group_help_lists_whole_summaries(path):
    text = _help(*path)
    listing = text.split("Commands:", 1)[1]
    assert "..." not in listing, listing  # a summary Click had to cut


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_option_has_a_meaning_and_shows_its_default(path, command):
    text = _help(*path)
    for param in command.params:
        if not isinstance(param, click.Option) or param.hidden:
            continue
        assert param.help, f"gateway {' '.join(path)} {param.opts[0]} has no description"
        if param.is_flag or param.multiple or param.default in (None, ()) or param.required:
            continue
        assert f"[default: {param.default}" in text.replace("\n", " ").replace("  ", " ") or (
            "Default:" in param.help
        ), f"gateway {' '.join(path)} {param.opts[0]} does not show its default"


@pytest.mark.parametrize(
    "given,bare,unit,expected",
    [
        ("90s", "s", "s", 90.0),
        ("5m", "s", "s", 300.0),
        ("30", "s", "s", 30.0),  # a bare number: the option's own unit
        ("7d", "d", "d", 7.0),
        ("12h", "d", "d", 0.5),
        ("2", "d", "d", 2.0),
        (0, "s", "s", 0.0),
    ],
)
def test_durations_take_a_unit(given, bare, unit, expected):
    assert cli_module.Duration(bare, unit).convert(given, None, None) == expected


def test_a_duration_without_a_number_is_refused_with_the_accepted_forms():
    result = CliRunner().invoke(cli_module.cli, ["prune", "--older-than", "week"])
    assert result.exit_code == 2
    assert "not a duration" in result.output and "7d" in result.output


def test_sites_and_tokens_list_never_show_a_secret(ledger_url, wp_site):
    env = {"GATEWAY_DATABASE_URL": ledger_url, "GATEWAY_SECRET_KEY": SECRET_KEY}
    password = wp_site["users"]["author"]["app_password"]

    def run(*args: str, **extra: str):
        done = gateway_cli(list(args), {**env, **extra})  # in-process: the output is the point
        assert done.exit_code == 0, done.output
        return done

    run("init-db")
    run(
        "sites", "add", "--tenant", "acme", "--name", "blog", "--url", wp_site["url"],
        "--username", wp_site["users"]["author"]["username"], "--app-password-env", "PW",
        PW=password,
    )  # fmt: skip
    token = run(
        "tokens", "create", "--tenant", "acme", "--role", "workflow", "--name", "n8n"
    ).stdout.split()[-1]
    run("tokens", "revoke", "--tenant", "acme", "--name", "n8n")
    run("tokens", "create", "--tenant", "acme", "--role", "editor", "--name", "ed")
    listed_sites = run("sites", "list").stdout
    listed_tokens = run("tokens", "list", "--tenant", "acme").stdout
    assert [(s["tenant"], s["name"], s["transport"]) for s in json.loads(listed_sites)] == [
        ("acme", "blog", "rest")
    ]
    tokens = {t["name"]: t for t in json.loads(listed_tokens)}
    assert set(tokens) == {"n8n", "ed"} and tokens["ed"]["role"] == "editor"
    assert tokens["n8n"]["revoked_at"] and tokens["ed"]["revoked_at"] is None
    for text in (listed_sites, listed_tokens):
        assert password not in text and token not in text
        assert "hash" not in text and "password" not in text


def test_an_error_detail_is_never_cut_mid_word():
    from gateway.wordpress.errors import shortened

    text = "HTTPConnectionPool(host='blog.example', port=443): Failed to resolve 'blog.example'"
    assert shortened(text, 200) == text
    cut = shortened(text, 60)
    assert cut.endswith(" …") and len(cut) <= 60
    assert text.startswith(cut[:-2]) and text[len(cut) - 2] in " ,;:("
