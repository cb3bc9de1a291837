"""The gateway's version (the package metadata repeats it in pyproject.toml)."""

VERSION = "0.1.0"
