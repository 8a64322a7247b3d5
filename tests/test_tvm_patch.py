"""contrib/tvm_patch applied to a temporary copy of the installed TVM, then a tiny tune by name."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tvm

PATCH = Path(__file__).resolve().parents[1] / "contrib" / "tvm_patch" / "tvm-0.27-tuna.patch"

SCRIPT = """
import tvm, tuna
from tvm.s_tir import meta_schedule as ms
from tuna import integration
assert tvm.__file__.startswith({root!r}), tvm.__file__
mod = integration.load_workload("GMM:0")
target = integration.tvm_target(tuna.preset("cortex-a53"))
db = ms.tune_tir(mod, target, {work!r}, max_trials_global=4, num_trials_per_iter=4,
                 cost_model="tuna", runner="tuna-static", num_tuning_cores=1, seed=0)
sch = ms.tir_integration.compile_tir(db, mod, target)
assert sch is not None
print("tuned", len(db.get_all_tuning_records()))
"""


@pytest.mark.slow  # copies TVM and tunes through it: 103 s on the Zen 3 guest
@pytest.mark.skipif(shutil.which("patch") is None, reason="needs the patch program")
def test_patch_lets_tune_tir_name_tuna(tmp_path):
    installed = Path(tvm.__file__).parent
    root = tmp_path / "site"
    copy = root / "tvm"
    # Copy the Python sources; link the (large) shared libraries.
    shutil.copytree(installed, copy, ignore=shutil.ignore_patterns("lib", "__pycache__"), symlinks=True)
    if (installed / "lib").exists():
        os.symlink(installed / "lib", copy / "lib")
    subprocess.run(["patch", "-p1", "-d", str(root), "-i", str(PATCH)], check=True, capture_output=True)
    assert "tuna-static" in (copy / "s_tir" / "meta_schedule" / "tune.py").read_text()
    env = {**os.environ, "PYTHONPATH": str(root)}
    code = SCRIPT.format(root=str(root), work=str(tmp_path / "work"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "tuned 4" in out.stdout
