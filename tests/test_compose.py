"""``docker-compose.yml``, ``Dockerfile`` and ``.env.example``.

Docker cannot run here: Debian's ``docker-compose`` (1.29, Python) parses and interpolates the
file without an engine (``docker-compose config``); that part is skipped when it is not
installed. Always checked: every service the documentation names exists, the gateway's
environment names are exactly what ``gateway/core/config.py`` reads, and no secret is in the file.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gateway.core import config

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
DOCS = [ROOT / "README.md", ROOT / "n8n_workflows" / "README.md"]
GATEWAY_SERVICES = ("gateway", "gateway-setup", "gateway-replica")


def env_example() -> dict[str, str]:
    values = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value.strip()
    return values


def gateway_reads() -> set[str]:
    """The ``GATEWAY_*`` names ``gateway/core/config.py`` reads from the environment (its
    table of settings, :data:`gateway.core.config.SETTINGS`)."""
    return {setting.env for setting in config.SETTINGS if setting.env}


def compose(tmp_path, *args: str) -> str:
    """``docker-compose ... config`` with ``.env.example`` (plus a dummy secret key)."""
    env = env_example()
    env["GATEWAY_SECRET_KEY"] = "not-a-real-key"
    env_file = tmp_path / ".env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    done = subprocess.run(
        ["docker-compose", "--project-directory", str(ROOT), "-f", str(COMPOSE),
         "--env-file", str(env_file), "--profile", "postgres", "config", *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def service_blocks(config_text: str) -> dict[str, str]:
    """Service name -> its block in ``docker-compose config``'s normalised output."""
    services = ("\n" + config_text).split("\nservices:\n", 1)[1]
    services = re.split(r"^\S", services, maxsplit=1, flags=re.M)[0]
    parts = re.split(r"^  ([a-z0-9-]+):\n", services, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_docker_compose_config_accepts_the_file(tmp_path):
    names = set(compose(tmp_path, "--services").split())
    expected = {"mariadb", "wordpress", "wordpress-setup", "gateway-setup", "gateway",
                "postgres", "gateway-replica", "n8n-import", "n8n"}  # fmt: skip
    assert expected == names
    services = service_blocks(compose(tmp_path))
    assert set(services) == names
    for name in ("mariadb", "wordpress", "gateway", "postgres", "n8n"):
        assert "healthcheck:" in services[name], name
    assert "image: wordpress:6" in services["wordpress"]
    assert "image: mariadb:" in services["mariadb"]
    assert "image: wordpress:cli" in services["wordpress-setup"]
    assert "mu-plugins/publishing-gateway-companion.php" in services["wordpress"]
    assert re.search(r"gateway:\n\s+condition: service_healthy", services["n8n-import"])
    assert "GATEWAY_SECRET_KEY: not-a-real-key" in services["gateway"]


def test_every_documented_service_exists():
    text = COMPOSE.read_text()
    defined = set(re.findall(r"^  ([a-z0-9-]+):\s*$", text.split("\nvolumes:")[0], re.M))
    mentioned = set()
    for doc in DOCS:
        if doc.exists():
            for table_row in re.findall(
                r"^\| `([a-z0-9-]+)`(?:, `([a-z0-9-]+)`)? \|", doc.read_text(), re.M
            ):
                mentioned.update(name for name in table_row if name)
    mentioned -= {"article_pipeline.json", "recover_job.json", "publish_approved.json"}
    assert {"gateway", "n8n", "wordpress", "mariadb", "n8n-import"} <= mentioned
    assert mentioned <= defined, f"documented but not in docker-compose.yml: {mentioned - defined}"


def test_gateway_environment_names_match_what_the_gateway_reads():
    reads = gateway_reads()
    assert {"GATEWAY_DATABASE_URL", "GATEWAY_SECRET_KEY", "GATEWAY_WP_TIMEOUT"} <= reads
    text = COMPOSE.read_text()
    anchor = re.search(r"x-gateway-env: &gateway-env\n((?:  .+\n)+)", text)
    assert anchor, "the gateway's environment block (x-gateway-env) is missing"
    names = set(re.findall(r"^  (GATEWAY_[A-Z_]+):", anchor.group(1), re.M))
    assert names, "no GATEWAY_* variable in x-gateway-env"
    assert names <= reads, f"the gateway does not read {names - reads}"
    set_by_serve = {"GATEWAY_WORKER_THREADS"}  # gateway serve tells its workers (--threads)
    assert names >= reads - {"GATEWAY_CRASH_POINTS", *set_by_serve}, (
        f"not passed on: {reads - names}"
    )
    for service in GATEWAY_SERVICES:
        block = re.search(rf"^  {service}:\n((?:    .*\n|\n)+)", text, re.M)
        assert block and "*gateway-env" in block.group(1), service
    dockerfile = (ROOT / "Dockerfile").read_text()
    for name in re.findall(r"\b(GATEWAY_[A-Z_]+)=", dockerfile):
        assert name in reads, name
    assert set(n for n in env_example() if n in reads) >= names - {"GATEWAY_CRASH_POINTS"}


def test_no_secret_in_the_compose_file():
    text = COMPOSE.read_text()
    for match in re.finditer(r"(PASSWORD|SECRET|KEY|TOKEN)[A-Z_]*:\s*(\S+)", text):
        value = match.group(2)
        assert value.startswith("${") or value.startswith('"${'), match.group(0)
    assert not re.search(r"\b[A-Za-z0-9]{4}( [A-Za-z0-9]{4}){5}\b", text)
    example = env_example()
    assert example["GATEWAY_SECRET_KEY"] == ""
    for name, value in example.items():
        if "PASSWORD" in name or name.endswith("_KEY"):
            assert value.startswith("change-me") or value == "", name


def test_both_n8n_services_get_the_node_unverified_packages_and_the_current_line():
    """Issue 54: the ``n8n`` and ``n8n-import`` services run the current line's tag by default,
    mount the community node's packed tarball into the user folder's ``nodes/`` (n8n-import
    installs it there, on the volume both share), and enable unverified community packages
    explicitly (n8n 3.0 turns them off by default; the node is not verified)."""
    from n8n_support import CURRENT_LINE

    text = COMPOSE.read_text()
    package = ROOT / "n8n-nodes-publishing-gateway" / "package.json"
    version = json.loads(package.read_text())["version"]
    tarball = f"./n8n-nodes-publishing-gateway/n8n-nodes-publishing-gateway-{version}.tgz"
    mounted = "/home/node/.n8n/nodes/n8n-nodes-publishing-gateway.tgz:ro"
    for service in ("n8n-import", "n8n"):
        block = re.search(rf"^  {service}:\n((?:    .*\n|\n)+)", text, re.M).group(1)
        assert f"image: docker.n8n.io/n8nio/n8n:${{N8N_VERSION:-{CURRENT_LINE}}}" in block
        assert f"- ${{N8N_NODE_TARBALL:-{tarball}}}:{mounted}" in block, service
        assert 'N8N_UNVERIFIED_PACKAGES_ENABLED: "true"' in block, service
        assert "N8N_EXPRESSION_ENGINE" not in block and "N8N_RUNNERS_ENABLED" not in block
    importer = re.search(r"^  n8n-import:\n((?:    .*\n|\n)+)", text, re.M).group(1)
    assert "cd /home/node/.n8n/nodes && npm install --omit=peer" in importer
    assert "n8n publish:workflow" in importer
    assert env_example()["N8N_VERSION"] == CURRENT_LINE


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="docker-compose not installed")
def test_docker_compose_resolves_the_node_tarball_in_both_n8n_services(tmp_path):
    services = service_blocks(compose(tmp_path))
    for name in ("n8n-import", "n8n"):
        assert "n8n-nodes-publishing-gateway/n8n-nodes-publishing-gateway-" in services[name]
        assert (
            "target: /home/node/.n8n/nodes/n8n-nodes-publishing-gateway.tgz" in services[name]
            or ":/home/node/.n8n/nodes/n8n-nodes-publishing-gateway.tgz" in services[name]
        ), name
