"""Configuration (``gateway/core/config.py``): every setting is declared once, in
``config.SETTINGS`` (attribute, environment variable, parser, default, doc line), and both
:class:`~gateway.core.config.Config` and :func:`~gateway.core.config.load` are built from it."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.core import config


def test_every_setting_has_one_declaration():
    names = [s.name for s in config.SETTINGS]
    variables = [s.env for s in config.SETTINGS if s.env]
    assert len(names) == len(set(names)), "a setting is declared twice"
    assert len(variables) == len(set(variables)), "two settings read one variable"
    assert [f.name for f in dataclasses.fields(config.Config)] == names
    assert all(v.startswith("GATEWAY_") for v in variables)
    assert [s.name for s in config.SETTINGS if not s.env] == ["testing"]
    for setting in config.SETTINGS:
        assert setting.doc.strip(), f"{setting.name} has no doc line"
        assert f"    {setting.name}" in config.Config.__doc__
    hidden = {f.name for f in dataclasses.fields(config.Config) if not f.repr}
    assert hidden == {s.name for s in config.SETTINGS if s.secret}
    assert {"secret_key", "metrics_token", "openai_api_key"} <= hidden


def test_load_of_an_empty_environment_equals_the_defaults():
    assert config.load({"GATEWAY_SECRET_KEY": "k"}) == config.Config(secret_key="k")
    assert config.load({}, testing=True) == config.Config(
        secret_key=config.TEST_SECRET_KEY, testing=True
    )
    defaults = config.Config()
    for setting in config.SETTINGS:
        assert getattr(defaults, setting.name) == setting.default, setting.name
    assert defaults.inflight_window == defaults.wp_timeout + 10


def test_a_missing_secret_key_stops_start_up():
    with pytest.raises(config.ConfigError, match="GATEWAY_SECRET_KEY is required"):
        config.load({"GATEWAY_WP_TIMEOUT": "5"})
    with pytest.raises(config.ConfigError, match="GATEWAY_SECRET_KEY is required"):
        config.load({"GATEWAY_SECRET_KEY": ""})


# (variable, text, the attribute, the value it gives)
PARSED = [
    ("GATEWAY_DATABASE_URL", "", "database_url", config.DEFAULT_DATABASE_URL),
    ("GATEWAY_DATABASE_URL", "sqlite:///x.db", "database_url", "sqlite:///x.db"),
    ("GATEWAY_WP_TIMEOUT", "2.5", "wp_timeout", 2.5),
    ("GATEWAY_WP_TIMEOUT", "", "wp_timeout", config.DEFAULT_WP_TIMEOUT),
    ("GATEWAY_WP_TIMEOUT", "5", "inflight_window", 15.0),  # follows wp_timeout when unset
    ("GATEWAY_INFLIGHT_WINDOW", "7", "inflight_window", 7.0),
    ("GATEWAY_RESUME_BUDGET", "4", "resume_budget", 4),
    ("GATEWAY_JOB_WRITE_BUDGET", " 0 ", "job_write_budget", 0),
    ("GATEWAY_TENANT_REQUESTS", "", "tenant_requests", None),
    ("GATEWAY_TENANT_REQUESTS", "0", "tenant_requests", 0),
    ("GATEWAY_TOKEN_RATE", "600/60", "token_rate", (600, 60)),
    ("GATEWAY_TOKEN_RATE", "5", "token_rate", (5, 1)),
    ("GATEWAY_UNAUTHENTICATED_RATE", "0", "unauthenticated_rate", None),
    ("GATEWAY_UNAUTHENTICATED_RATE", "", "unauthenticated_rate", None),
    ("GATEWAY_PUBLIC_URL", " https://gw.example/ ", "public_url", "https://gw.example"),
    ("GATEWAY_MEDIA_URL_SCHEMES", "HTTPS, http", "media_url_schemes", {"https", "http"}),
    ("GATEWAY_MEDIA_URL_SCHEMES", "", "media_url_schemes", frozenset()),
    ("GATEWAY_CRASH_POINTS", "a, b,,", "crash_points", {"a", "b"}),
    ("GATEWAY_METRICS_TOKEN", "", "metrics_token", ""),
    ("GATEWAY_OPENAI_BASE_URL", "", "openai_base_url", None),
    ("GATEWAY_AGENT_ENVIRONMENT_HOOK", " /bin/hook ", "agent_environment_hook", "/bin/hook"),
]


@pytest.mark.parametrize(("variable", "text", "name", "value"), PARSED)
def test_each_variable_is_parsed_into_its_setting(variable, text, name, value):
    loaded = config.load({"GATEWAY_SECRET_KEY": "k", variable: text})
    assert getattr(loaded, name) == value


# (variable, text, the message load raises)
REFUSED = [
    ("GATEWAY_WP_TIMEOUT", "soon", "GATEWAY_WP_TIMEOUT must be a number, got 'soon'"),
    ("GATEWAY_WP_TIMEOUT", "0", "GATEWAY_WP_TIMEOUT must be positive, got '0'"),
    ("GATEWAY_MAX_CONTENT_LENGTH", "1.5", "GATEWAY_MAX_CONTENT_LENGTH must be a number, got '1.5'"),
    ("GATEWAY_PROXY_HOPS", "-1", "GATEWAY_PROXY_HOPS must be a whole number >= 0, got '-1'"),
    ("GATEWAY_TOKEN_RATE", "x/60", "GATEWAY_TOKEN_RATE must look like 600/60 (requests per "
     "seconds), got 'x/60'"),
    ("GATEWAY_PUBLIC_URL", "gw.example", "GATEWAY_PUBLIC_URL must start with http:// or "
     "https://, got 'gw.example'"),
    ("GATEWAY_MCP_LISTEN", "8001", "GATEWAY_MCP_LISTEN must look like 127.0.0.1:8001 (or be "
     "empty), got '8001'"),
]  # fmt: skip


def test_a_listener_on_a_public_address_needs_the_public_url():
    from gateway.core import mcp_listen as settings

    env = {"GATEWAY_SECRET_KEY": "k", "GATEWAY_MCP_LISTEN": "0.0.0.0:8001"}
    with pytest.raises(config.ConfigError, match="set GATEWAY_PUBLIC_URL"):
        settings.of(config.load(env))
    behind = settings.of(config.load({**env, "GATEWAY_PUBLIC_URL": "https://gw.example/"}))
    assert (behind.issuer, behind.resource) == ("https://gw.example", "https://gw.example/mcp")
    assert settings.of(config.load({**env, "GATEWAY_MCP_LISTEN": ""})) is None
    loopback = settings.of(config.load({"GATEWAY_SECRET_KEY": "k"}))
    assert loopback.resource == "http://127.0.0.1:8001/mcp"


@pytest.mark.parametrize(("variable", "text", "message"), REFUSED)
def test_a_malformed_variable_is_refused_by_name(variable, text, message):
    with pytest.raises(config.ConfigError) as refused:
        config.load({"GATEWAY_SECRET_KEY": "k", variable: text})
    assert str(refused.value) == message


def test_every_variable_is_read():
    """Each declared variable reaches its setting: a valid text different from the default
    changes the attribute."""
    samples = {str: "text", float: "3.5", int: "7", bool: "off"}
    for setting in config.SETTINGS:
        if not setting.env or setting.env == "GATEWAY_SECRET_KEY":
            continue
        text = samples.get(setting.kind, "9")
        if setting.env.endswith(("_RATE",)):
            text = "9/9"
        elif setting.env.endswith(("_SCHEMES", "_HOSTS", "_POINTS")):
            text = "one,two"
        elif setting.env.endswith("_URL") and setting.kind is str:
            text = "https://gw.example"
        elif setting.env.endswith("_LISTEN"):
            text = "127.0.0.1:9"
        loaded = config.load({"GATEWAY_SECRET_KEY": "k", setting.env: text})
        assert getattr(loaded, setting.name) != setting.default, setting.env


def test_a_switch_is_on_or_off():
    """``GATEWAY_OAUTH_DCR`` and ``GATEWAY_OAUTH_CIMD`` take on/off (1/0, true/false,
    yes/no); anything else names the variable."""
    assert config.load({"GATEWAY_SECRET_KEY": "k", "GATEWAY_OAUTH_DCR": "No"}).oauth_dcr is False
    assert config.load({"GATEWAY_SECRET_KEY": "k", "GATEWAY_OAUTH_CIMD": " on "}).oauth_cimd
    with pytest.raises(config.ConfigError, match="GATEWAY_OAUTH_DCR must be on or off"):
        config.load({"GATEWAY_SECRET_KEY": "k", "GATEWAY_OAUTH_DCR": "maybe"})


def test_a_setting_is_chosen_when_its_variable_is_set_even_empty():
    assert config.chosen("mcp_listen", {"GATEWAY_MCP_LISTEN": ""})
    assert config.chosen("mcp_listen", {"GATEWAY_MCP_LISTEN": "127.0.0.1:8001"})
    assert not config.chosen("mcp_listen", {"GATEWAY_PUBLIC_URL": "https://gw.example"})
    with pytest.raises(KeyError):
        config.chosen("testing", {})
