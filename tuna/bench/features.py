"""tuna's features of every candidate of measured pools, per tier: what calibration fits
and what tuna's scorers weigh.

:func:`tuna.integration.pool_features` computes them (applying each trace, lowering, and
for the full tier compiling); it is imported when called, so that ``import tuna.bench``
stays free of TVM.
"""

from __future__ import annotations

import ast
import hashlib
import json
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path

from ..machine import Machine
from .pools import Pool

#: Per tier, per pool name, each candidate's features (None: not analysable).
Features = dict[str, dict[str, list[Mapping[str, float] | None]]]
#: Per tier, per pool name, seconds of analysis per candidate.
Seconds = dict[str, dict[str, float]]
#: ``progress(tier, pool, done, total, seconds)``: after each candidate, with the seconds
#: spent on that pool and tier so far.
Progress = Callable[[str, Pool, int, int, float], None]


def pool_features(
    pools: Sequence[Pool], machine: Machine, tiers: Sequence[str], progress: Progress | None = None
) -> tuple[Features, Seconds]:
    """Features of every candidate of every pool with each tier, tier by tier.

    Raises
    ------
    AnalysisError
        When a tier can analyse no candidate of a pool (e.g. a CPU pool with a GPU preset).
    """
    from .. import integration

    feats: Features = {t: {} for t in tiers}
    secs: Seconds = {t: {} for t in tiers}
    for tier in tiers:
        for pool in pools:
            start = time.perf_counter()

            def report(done: int, total: int, pool: Pool = pool, tier: str = tier, start: float = start) -> None:
                if progress is not None:
                    progress(tier, pool, done, total, time.perf_counter() - start)

            feats[tier][pool.name], secs[tier][pool.name] = integration.pool_features(pool, machine, tier, report)
    return feats, secs


#: Parts of tuna that do not enter a candidate's features: the yardstick, the command, the
#: search, the linear model (it weighs features, it does not make them) ...
_NOT_ANALYSIS = ("bench", "cli.py", "search", "linear.py", "databases")
#: ... what only uses features (package exports, profiling, MetaSchedule's extension
#: points, tuning runs, timing, export) ...
_NOT_MAKING_FEATURES = (
    ("__init__.py",), ("profile.py",), ("explain.py",), ("integration", "__init__.py"),
    ("integration", "builder"), ("integration", "cost_model"), ("integration", "feature_extractor"),
    ("integration", "runner"), ("integration", "search_strategy"), ("integration", "hybrid.py"),
    ("integration", "tuning.py"), ("integration", "network_tuning.py"), ("integration", "export.py"),
    ("integration", "work_dir.py"), ("integration", "reporting.py"), ("integration", "networks.py"),
    ("integration", "measure", "measured_tuning.py"), ("integration", "measure", "timing.py"),
    ("integration", "measure", "whole_networks.py"), ("integration", "measure", "hybrid.py"),
)
#: ... and measured data (pools, coefficients, databases).
_NOT_DATA = (("data", "pools"), ("data", "coeffs"), ("data", "databases"))


def _makes_features(rel: Path) -> bool:
    """Whether a source or data file of tuna (``rel``: relative to the package) can change features."""
    parts = rel.parts
    return (rel.suffix in (".py", ".toml") and parts[0] not in _NOT_ANALYSIS and parts[:2] not in _NOT_DATA
            and not any(parts[:len(p)] == p for p in _NOT_MAKING_FEATURES))


def _meaning(path: Path) -> bytes:
    """What of a source or data file can change features: a Python module's syntax tree less its
    docstrings, a TOML file's data, so that comments and docstrings (which reviews rewrite) leave
    a features cache valid; the bytes of a file neither parses."""
    text = path.read_bytes()
    try:
        if path.suffix == ".toml":
            return json.dumps(tomllib.loads(text.decode()), sort_keys=True, default=str).encode()
        tree = ast.parse(text)
    except (SyntaxError, ValueError, UnicodeDecodeError):
        return text
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


@cache
def code_fingerprint() -> str:
    """A hash of what the features depend on besides the pool and the machine: tuna's own
    source and data files (presets, micro-architecture tables; read by :func:`_meaning`, so
    that their comments and docstrings do not enter) and the TVM release, whose lowering and
    LLVM produce the code analysed."""
    from importlib import metadata

    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if _makes_features(rel):
            digest.update(str(rel).encode())
            digest.update(_meaning(path))
    try:
        digest.update(metadata.version("apache-tvm").encode())
    except metadata.PackageNotFoundError:
        pass
    return digest.hexdigest()[:16]


def features_key(pool: Pool, machine: Machine, tier: str) -> str:
    """A name for one pool's features with one tier on one machine, which changes whenever
    they could: with the pool's workload and traces, the machine's description and
    :func:`code_fingerprint` (coefficients and timings do not enter features)."""
    digest = hashlib.sha256()
    digest.update(json.dumps([pool.mod, list(pool.traces)], sort_keys=True).encode())
    digest.update(repr(machine).encode())
    digest.update(tier.encode())
    digest.update(code_fingerprint().encode())
    return f"{pool.name.replace('/', '-')}.{machine.name}.{tier}.{digest.hexdigest()[:16]}"
