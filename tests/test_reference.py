"""Behaviour reference: both tiers say what they said when the reference was made.

``tests/fixtures/reference/reference.json.gz`` holds each tier's features and predicted
seconds for every candidate of the shipped pools on zen4, and for every tenth candidate on
graviton2 and cortex-a53 (``make_reference.py`` beside it says how it is made). Moving or
restructuring code must leave every number as it was; a change of the model regenerates
the reference in the same commit. The default suite checks every seventh case of each group
(about two minutes); with ``TUNA_SLOW_TESTS=1`` every case is checked (about twelve on two
cores), and ``TUNA_REFERENCE_STRIDE=N`` checks every N-th.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "reference"))
import make_reference

REFERENCE = json.loads(gzip.decompress(make_reference.OUT.read_bytes()))


def _groups() -> dict[tuple[str, str, str], list[tuple[str, str, str, int]]]:
    groups: dict[tuple[str, str, str], list] = {}
    for case in make_reference.cases():
        path, machine, tier, _ = case
        groups.setdefault((Path(path).stem, machine, tier), []).append(case)
    return groups


GROUPS = _groups()
STRIDE = int(os.environ.get("TUNA_REFERENCE_STRIDE", "1" if os.environ.get("TUNA_SLOW_TESTS") == "1" else "7"))


def test_reference_covers_every_case():
    assert sorted(make_reference.key(c) for cases in GROUPS.values() for c in cases) == sorted(REFERENCE)
    assert sum(1 for v in REFERENCE.values() if "error" in v) < len(REFERENCE) / 100


@pytest.mark.parametrize("group", sorted(GROUPS), ids=lambda g: "-".join(g))
def test_tier_matches_reference(group):
    mismatches = []
    for case in GROUPS[group][::STRIDE]:
        key = make_reference.key(case)
        got = make_reference.analyse(case)
        if got != REFERENCE[key]:
            want = REFERENCE[key]
            diff = sorted(
                k for k in set(got.get("features", {})) | set(want.get("features", {}))
                if got.get("features", {}).get(k) != want.get("features", {}).get(k)
            )
            mismatches.append(f"{key}: seconds {got.get('seconds')} != {want.get('seconds')}; features {diff}")
    assert not mismatches, "\n".join(mismatches[:10])
