"""Whole networks tuned offline: every task of a Relax module, the report, the executable, resuming."""

import json

import numpy as np
import pytest
import tvm
from tvm import relax

from tuna import cli
from tuna.errors import ExportError, WorkloadError
from tuna.integration import network_tuning

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _tiny_network() -> tvm.IRModule:
    """x @ w + b, ReLU, then softmax: two or three tuning tasks, weights as constants."""
    rng = np.random.default_rng(0)
    w = relax.const(rng.standard_normal((64, 32)).astype("float32"))
    b = relax.const(rng.standard_normal((32,)).astype("float32"))
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64), "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.relu(relax.op.add(relax.op.matmul(x, w), b)))
            out = bb.emit_output(relax.op.nn.softmax(y))
        bb.emit_func_output(out)
    return bb.get()


def _reference(mod: tvm.IRModule, x: np.ndarray) -> np.ndarray:
    ex = tvm.compile(mod, "llvm")
    return relax.VirtualMachine(ex, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def test_a_network_is_tuned_task_by_task_and_runs_as_compiled_untuned(tmp_path, host):
    # Tuned for this machine's preset: the executable runs here (zen4's AVX-512 faults on Zen 3).
    mod = _tiny_network()
    lines = []
    result = network_tuning.tune_network(mod, host, tmp_path / "w", trials_per_task=4, num_trials_per_iter=4,
                                         workers=1, progress=lines.append)
    assert len(result.tasks) >= 2 and result.trials == sum(t.trials for t in result.tasks)
    assert all(1 <= t.trials <= 4 and t.seconds > 0 and t.weight == 1 for t in result.tasks)
    assert result.predicted_seconds == pytest.approx(sum(t.seconds for t in result.tasks))
    assert any("candidates | task" in line for line in lines)
    x = np.random.default_rng(1).standard_normal((1, 64)).astype("float32")
    got = relax.VirtualMachine(result.executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, _reference(mod, x), rtol=1e-5, atol=1e-6)
    # Run again on the same work directory: every task has its trials; nothing is predicted again.
    again = network_tuning.tune_network(mod, host, tmp_path / "w", trials_per_task=4, num_trials_per_iter=4,
                                        workers=1)
    assert again.trials == 0 and [t.trials for t in again.tasks] == [t.trials for t in result.tasks]
    assert len(list((tmp_path / "w").glob("tuna-es-state-*.json"))) == len(result.tasks)


def test_tuna_tune_of_a_relax_file_prints_the_tasks_and_exports_the_executable(tmp_path, capsys, host):
    path = tmp_path / "net.py"
    path.write_text(_tiny_network().script(show_meta=True))  # the weights too
    out = tmp_path / "net.so"
    code = cli.main(["tune", str(path), "--trials", "4", "--per-iter", "4", "--workers", "1",
                     "--work-dir", str(tmp_path / "runs"), "--export", str(out), "--target", host])
    text = capsys.readouterr().out
    assert code == 0
    assert "(a network)" in text and "network (tuned tasks, one run)" in text and "Relax VM executable" in text
    report = json.loads((tmp_path / "runs" / f"net-{host}" / "tasks.json").read_text())
    assert report["network"] == "net" and all(t["trials"] >= 1 for t in report["tasks"])
    x = np.random.default_rng(2).standard_normal((1, 64)).astype("float32")
    vm = relax.VirtualMachine(tvm.runtime.load_module(str(out)), tvm.cpu())
    np.testing.assert_allclose(vm["main"](tvm.runtime.tensor(x)).numpy(), _reference(_tiny_network(), x),
                               rtol=1e-5, atol=1e-6)


def test_bad_networks_and_export_paths_are_refused_before_tuning(tmp_path):
    tir_only = tmp_path / "tir.py"
    tir_only.write_text("this is not TVMScript @R.function")
    with pytest.raises(WorkloadError, match="does not parse"):
        network_tuning.tune_network(tir_only, "zen4", tmp_path / "w")
    no_weights = tmp_path / "no_weights.py"
    no_weights.write_text(_tiny_network().script())  # printed without its constants
    assert network_tuning.is_network(no_weights)
    with pytest.raises(WorkloadError, match=r"show_meta=True"):
        network_tuning.load_network(no_weights)
    with pytest.raises(WorkloadError, match="no Relax function"):
        network_tuning.load_network(tvm.IRModule())
    from tuna.integration import export

    with pytest.raises(ExportError, match="Relax VM executable"):
        export.check_network_path(tmp_path / "net.o", "zen4")
    with pytest.raises(ExportError, match="CPU targets only"):
        export.check_network_path(tmp_path / "net.so", "a100")
    assert network_tuning.is_network("resnet18") and not network_tuning.is_network("GMM:1")
