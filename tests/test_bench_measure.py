"""Measuring on this machine: timing a schedule, collecting a pool, the networks of `bench network`."""

import json
import math
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import special

from tuna import bench, cli
from tuna.errors import TunaError
from tuna.integration import load_workload, measure, networks
from tuna.machine import presets


def test_cross_and_gpu_targets_cannot_be_measured_here(host):
    assert measure.unrunnable_reason(host) is None  # this machine's own preset
    assert "cross target" in measure.unrunnable_reason("graviton2")
    with pytest.raises(measure.MeasureError, match="no measurements possible on this machine"):
        measure.time_schedule(load_workload("NRM:0"), "cortex-a53")


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 targets")
def test_a_target_runs_here_unless_the_cpu_reports_an_extension_it_needs_absent(monkeypatch):
    from tuna.integration.measure import timing

    # As LLVM reads a guest whose hypervisor hides system extensions (and shows another model number)
    host = {"avx512f": True, "amx-tile": False, "enqcmd": False, "waitpkg": False, "uintr": False}
    monkeypatch.setattr(timing, "_host_features", lambda: host)
    assert timing.unrunnable_reason("skylake-avx512") is None
    why = timing.unrunnable_reason("sapphirerapids")
    assert "needs amx-tile" in why and "enqcmd" not in why  # the system extensions are no tensor program's
    host["amx-tile"] = True
    assert timing.unrunnable_reason("sapphirerapids") is None


def test_time_schedule_gives_seconds_per_run(host):
    secs = measure.time_schedule(load_workload("NRM:0"), host, repeat=3, min_repeat_ms=5)
    assert math.isfinite(secs) and 0 < secs < 1.0


def test_schedules_compared_are_timed_in_turn(host):
    fast = load_workload("NRM:0")
    secs = measure.time_interleaved([fast, None, fast], host, rounds=2, repeat=2, min_repeat_ms=5)
    assert secs[1] is None and all(math.isfinite(s) and 0 < s < 1.0 for s in (secs[0], secs[2]))


@pytest.mark.parametrize("env", [{}, {"TVM_NUM_THREADS": "3"}, {"OMP_NUM_THREADS": "2"}, {"TVM_NUM_THREADS": "x"}])
def test_recorded_tvm_threads_are_those_the_runtime_uses(env):
    # Fresh processes: TVM's pool reads the environment once. Records of pools and benchmarks
    # name this count; the presets of this project's 2-vCPU x86 guests say 1, which it is there.
    base = {k: v for k, v in os.environ.items() if k not in ("TVM_NUM_THREADS", "OMP_NUM_THREADS")}
    code = ("import tvm; from tuna.bench.records import tvm_threads; "
            "print(tvm.get_global_func('runtime.NumThreads')(), tvm_threads())")
    out = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == out[1]
    host = bench.preset_of(bench.machine_info())
    if not env and host and os.cpu_count() == 2 and platform.machine() == "x86_64":
        assert int(out[0]) == presets()[host].threads == 1


def test_bench_launch_measures_a_parallel_region(capsys, host):
    assert cli.main(["bench", "launch", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    per_region = float(out.rsplit("parallel_region_us = ", 1)[1])
    assert 0 < per_region < 1000  # microseconds: a fork and join, not a failed timing


class NumpyOps:
    """A reference for the operations of the networks the test below checks (float64 numpy)."""

    def relu(self, x):
        return np.maximum(x, 0)

    def conv(self, x, w, b, stride, padding, groups=1):
        ph, pw = (padding, padding) if isinstance(padding, int) else padding
        x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        cout, cin_g, kh, kw = w.shape
        # (1, C, H, W) -> windows (1, C, Ho, Wo, kh, kw), then a per-group contraction.
        win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
        win = win.reshape(1, groups, cin_g, *win.shape[2:])
        wg = w.reshape(groups, cout // groups, cin_g, kh, kw)
        y = np.einsum("bgchwij,gocij->bgohw", win, wg).reshape(1, cout, *win.shape[3:5])
        return y + b.reshape(1, -1, 1, 1)

    def conv1d(self, x, w, b, stride, padding):
        x = np.pad(x, ((0, 0), (0, 0), (padding, padding)))
        k = w.shape[2]
        win = np.lib.stride_tricks.sliding_window_view(x, k, axis=2)[:, :, ::stride]  # (1, C, L, k)
        return np.einsum("bclk,ock->bol", win, w) + b.reshape(1, -1, 1)

    def global_avg_pool(self, x):
        return x.mean((2, 3), keepdims=True)

    def flatten(self, x, features):
        return x.reshape(1, features)

    def multiply_constant(self, x, c):
        return x * c

    def dense(self, x, w, b):
        return x @ w + b

    def reshape(self, x, shape):
        return x.reshape(shape)

    def transpose(self, x, axes):
        return x.transpose(axes)

    def matmul(self, x, y):
        return x @ y

    def scale(self, x, factor):
        return x * factor

    def add(self, x, y):
        return x + y

    def softmax(self, x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def gelu(self, x):
        return 0.5 * x * (1 + special.erf(x / math.sqrt(2)))

    def layer_norm(self, x, gamma, beta):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * gamma + beta

    def rms_norm(self, x, gamma):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * gamma

    def linear(self, x, w):
        return x @ w

    def add_constant(self, x, c):
        return x + c

    def multiply(self, x, y):
        return x * y

    def silu(self, x):
        return x / (1 + np.exp(-x))

    def sigmoid(self, x):
        return 1 / (1 + np.exp(-x))

    @staticmethod
    def _windows(x, size, stride, padding, fill):
        """(1, C, Ho, Wo, size, size): each pooling window, the padding filled with ``fill``."""
        x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)), constant_values=fill)
        return np.lib.stride_tricks.sliding_window_view(x, (size, size), axis=(2, 3))[:, :, ::stride, ::stride]

    def max_pool(self, x, size, stride, padding):
        return self._windows(x, size, stride, padding, -np.inf).max((-2, -1))

    def avg_pool(self, x, size, stride, padding):
        return self._windows(x, size, stride, padding, 0.0).mean((-2, -1))  # the zeros counted

    def split(self, x, parts):
        return np.split(x, parts, axis=1)

    def concat(self, xs):
        return np.concatenate(xs, axis=1)


@pytest.mark.parametrize(("name", "out_shape"),
                         [("bert", (1, 128, 768)), ("llama", (1, 96, 960)), ("convnext", (1, 1000)),
                          ("gpt2", (1, 256, 768)), ("whisper", (1, 500, 384)),
                          ("efficientnet", (1, 24, 56, 56)), ("yolo", (1, 64, 40, 40)),
                          ("resnext", (1, 1000)), ("shufflenet", (1, 1000)),
                          ("mnasnet", (1, 40, 28, 28)), ("squeezenet", (1, 256, 13, 13)),
                          ("inception", (1, 768, 17, 17)), ("densenet", (1, 128, 28, 28))])
def test_network_built_with_relax_computes_what_numpy_does(name, out_shape):
    import tvm
    from tvm import relax

    mod = networks.relax_module(name, seed=3)
    ex = tvm.compile(mod, tvm.target.Target({"kind": "llvm", "num-cores": 2}))
    vm = relax.VirtualMachine(ex, tvm.cpu())
    x = networks.example_input(name)
    got = vm["main"](tvm.runtime.tensor(x, tvm.cpu())).numpy()
    want = networks.NETWORKS[name].body(NumpyOps(), x.astype("float64"), networks._Weights(3))
    assert got.shape == want.shape == out_shape
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_decoder_attention_is_causal(name):
    """The first token's output does not change when the later tokens do."""
    x = networks.example_input(name)
    y = x.copy()
    y[:, 1:] += 1.0
    run = networks.NETWORKS[name].body
    a, b = (run(NumpyOps(), v.astype("float64"), networks._Weights(0)) for v in (x, y))
    np.testing.assert_allclose(a[:, 0], b[:, 0], rtol=1e-12)
    assert not np.allclose(a[:, 1], b[:, 1])


def test_resnet18_has_the_layers_of_resnet18():
    mod = networks.relax_module("resnet18")
    text = mod.script()
    assert text.count("R.nn.conv2d(") == 20  # 17 3x3/7x7 convolutions + 3 projection shortcuts
    assert text.count("R.matmul(") == 1  # the classifier
    assert "R.Tensor((1, 1000)" in text
    with pytest.raises(TunaError, match="unknown network 'vgg'"):
        networks.relax_module("vgg")


def test_pytorch_row_is_a_note_when_torch_is_missing():
    if networks.torch_available():
        pytest.skip("PyTorch is installed here")
    row, timer, out = measure.whole_networks._torch_row("bert", 0)
    assert row.latency is None and timer is None and out is None and "not installed" in row.note


def test_a_way_whose_output_differs_says_so_in_its_note():
    wn = measure.whole_networks
    ref = np.linspace(-2.0, 2.0, 12, dtype="float32").reshape(3, 4)
    rows = [wn.NetworkRow("n", m, 0.0, None, note="torch 2" if m == "pytorch" else "")
            for m in ("untuned", "tuna", "metaschedule", "pytorch")]
    lines = []
    wn._check_outputs(rows, [ref, ref + 1e-4, ref * 1.01, None], lines.append)
    by = {r.method: r for r in rows}
    assert "output_error" not in by["untuned"].extra and "output_error" not in by["pytorch"].extra
    assert by["tuna"].extra["output_error"] == pytest.approx(1e-4 / 2, rel=0.01) and by["tuna"].note == ""
    assert by["metaschedule"].extra["output_error"] == pytest.approx(0.01, rel=1e-3)
    assert "differs from untuned's" in by["metaschedule"].note and len(lines) == 1
    assert wn.output_error(ref[:2], ref) == math.inf
    assert wn.output_error(np.full_like(ref, np.nan), ref) == math.inf


@pytest.mark.slow
def test_collect_writes_a_pool_that_loads_and_ranks(tmp_path, capsys):
    out = tmp_path / "NRM-0.json"
    assert cli.main(["bench", "collect", "NRM:0", "--trials", "4", "--per-iter", "4", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data) == {"workload", "family", "target", "machine", "tune_seconds", "trials", "mod", "candidates"}
    assert data["family"] == "norm" and data["machine"]["microcode"] is not None
    assert data["workload"] == ["NRM", 0] and data["trials"] == 4
    assert all(set(c) == {"trace", "tuner_secs", "secs_a", "secs_b"} for c in data["candidates"])
    pool = bench.load_pool(out)
    assert len(pool) >= 1 and np.all(pool.secs_a > 0)
    # the same format as the shipped pools: a shipped pool's keys, and `bench rank` takes it
    shipped = json.loads(bench.shipped_pools()[0].read_text())
    assert set(shipped) | {"family"} == set(data) and set(shipped["candidates"][0]) == set(data["candidates"][0])
    results = bench.evaluate([pool], bench.baselines(), n_train=0)
    assert {r.model for r in results} == {"random", "noise-ceiling"}
    err = capsys.readouterr().err
    assert "re-timing" in err and "secs_b" in err


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 targets")
def test_retime_times_a_pool_again_and_keeps_the_earlier_timings(tmp_path, capsys):
    here = bench.machine_info()
    preset = bench.preset_of(here)
    if preset is None:
        pytest.skip("this CPU is no preset's")
    nrm = next(p for p in bench.shipped_pools() if p.name == "NRM-0.json")
    data = json.loads(nrm.read_text())  # a small pool's first two candidates
    data["candidates"] = data["candidates"][:2]
    data["target"] = dict(presets()[preset].target)
    data["machine"] = here
    src, out = tmp_path / "pool.json", tmp_path / "retimed.json.gz"
    src.write_text(json.dumps(data))
    assert cli.main(["bench", "retime", str(src), "-o", str(out)]) == 0
    new = bench.pools.read_json(out, "pool", bench.PoolError)
    assert [c["earlier_secs"] for c in new["candidates"]] == [[[c["secs_a"], c["secs_b"]]] for c in data["candidates"]]
    assert all(c["secs_a"] > 0 and c["secs_b"] > 0 for c in new["candidates"])
    assert [c["tuner_secs"] for c in new["candidates"]] == [c["tuner_secs"] for c in data["candidates"]]
    assert new["retimed"][0]["machine"]["cpu_family"] == here["cpu_family"] and len(bench.load_pool(out)) == 2
    assert "timed again" in capsys.readouterr().out
    # A pool another machine measured is not timed here: its timings would mix two machines'.
    data["machine"] = {**here, "model_name": "Some Other CPU", "cpu_family": "99", "cpu_model": "1"}
    src.write_text(json.dumps(data))
    assert cli.main(["bench", "retime", str(src), "-o", str(tmp_path / "no.json")]) == 2
    assert "mix two machines" in capsys.readouterr().err and not (tmp_path / "no.json").exists()


@pytest.mark.slow
def test_bench_tune_times_every_pick_and_the_pools_best_here(tmp_path, capsys):
    out = tmp_path / "tune.json"
    argv = ["bench", "tune", "NRM:0", "--trials", "4", "--per-iter", "4", "--search", "es", "--more-seeds", "1",
            "--work-dir", str(tmp_path / "work"), "--json", str(out), "--shortlists", str(tmp_path / "short")]
    assert cli.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    # Each tuna run's predicted candidates, timed here, as a pool that bench rank takes.
    for r in rows[:2]:
        pool = bench.load_pool(r["shortlist_pool"])
        assert pool.name == f"NRM:0@{r['method']}" and pool.family == "norm" and len(pool) == r["shortlist_size"] == 4
        assert np.all(pool.secs_a > 0) and np.all(np.isfinite(pool.secs_b)) and np.all(np.isnan(pool.tuner_secs))
        assert 0 < r["pick_to_fastest"] <= 1 and 1 <= r["fastest_rank"] <= 4
    assert sorted(p.name for p in (tmp_path / "short").iterdir()) == ["NRM-0-tuna-es-seed1.json.gz",
                                                                        "NRM-0-tuna-es.json.gz"]
    methods = [r["method"] for r in rows]
    assert methods == ["tuna-es", "tuna-es@seed1", "metaschedule@tuna-es-time", "metaschedule", "pool-best"]
    assert [r.get("seed") for r in rows[:2]] == [0, 1]
    best = rows[-1]
    assert best["trials"] == 192 and 0 < best["latency"] < 1.0 and best["ratio_to_reference"] == 1.0
    assert all(0 < r["ratio"] <= 1.0 for r in rows if r["latency"])
    printed = capsys.readouterr().out
    assert "re-timed here" in printed and "Ratio to pool best by seed:" in printed and "pick/fastest" in printed
    for r in rows:  # every pick's scheduled TIR is kept in the work directory
        if r["latency"]:
            assert Path(r["schedule"]).parent == tmp_path / "work" / "NRM-0" / "picks"
            assert "def main" in Path(r["schedule"]).read_text()
        else:
            assert r["schedule"] is None


@pytest.mark.slow
def test_network_bench_times_every_way_of_a_network_together(tmp_path, host):
    rows = measure.whole_networks.network_bench("bert", host, tmp_path, trials_per_task=1,
                                                methods=("untuned", "tuna", "pytorch"), repeat=1)
    by = {r.method: r for r in rows}
    assert by["untuned"].latency > 0 and by["tuna"].latency > 0 and by["tuna"].trials >= 11
    assert by["tuna"].tune_seconds > 0 and by["tuna"].extra["tasks"] == 11
    assert (by["pytorch"].latency is None) == (not networks.torch_available())
    assert by["tuna"].extra["output_error"] < measure.whole_networks.OUTPUT_TOLERANCE
