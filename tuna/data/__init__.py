"""tuna's packaged data: target, micro-architecture, ABI and coefficient files (TOML), GPU
facts, shipped pools and databases; :func:`read_toml` parses one of the TOML files."""

from __future__ import annotations

import tomllib
from importlib.resources.abc import Traversable


def read_toml(entry: Traversable, kind: str, error: type[Exception]) -> dict:
    """Parse one packaged TOML file; ``error`` says "``kind`` file NAME is not valid TOML" if it is not."""
    try:
        return tomllib.loads(entry.read_text())
    except tomllib.TOMLDecodeError as err:
        raise error(f"{kind} file {entry.name} is not valid TOML: {err}") from None
