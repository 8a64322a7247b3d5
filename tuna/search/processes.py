"""Running external tools (nvcc, ptxas); with :mod:`tuna.search.workers`, the only places tuna starts processes."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from ..errors import TunaError


@dataclass(frozen=True)
class ToolResult:
    """What an external tool printed and its exit status."""

    returncode: int
    stdout: str
    stderr: str


def which(tool: str) -> str | None:
    """Path of ``tool`` on PATH, or None."""
    return shutil.which(tool)


def run_tool(argv: list[str], *, timeout: float = 120.0, cwd: str | None = None) -> ToolResult:
    """Run an external tool to completion and capture its output.

    Parameters
    ----------
    argv
        The command and its arguments; ``argv[0]`` is looked up on PATH.
    timeout
        Seconds before the tool is killed.
    cwd
        Working directory for the tool.

    Raises
    ------
    TunaError
        If the tool is not on PATH or runs past ``timeout``.
    """
    if which(argv[0]) is None:
        raise TunaError(f"{argv[0]} is not on PATH")
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False)
    except subprocess.TimeoutExpired as err:
        raise TunaError(f"{argv[0]} ran past {timeout:g} s") from err
    return ToolResult(done.returncode, done.stdout, done.stderr)
