"""GPU pools measured without TVM on the GPU machine: launch plans, bundles, timing, pools.

The timing runs here against a stand-in for CuPy that records every launch and charges a
known cost per launched block, so that what the protocol computes can be checked exactly;
``TUNA_GPU_TESTS=1`` also times a real bundle on a GPU (CuPy and nvcc needed).
"""

from __future__ import annotations

import gzip
import json
import re
import types

import numpy as np
import pytest

import tuna
from tuna import bench, cli, integration
from tuna.bench import gpu_collect
from tuna.integration import cuda
from tuna.integration.measure import gpu_bundle

H100 = tuna.preset("h100")


def _signatures(source: str) -> dict[str, int]:
    """Kernel name -> number of parameters, read from the CUDA C."""
    out = {}
    for m in re.finditer(r'extern "C" __global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(([^)]*)\)', source):
        out[m.group(1)] = len([p for p in m.group(2).split(",") if p.strip()])
    return out


@pytest.fixture(scope="module")
def softmax_bundle():
    """A bundle of 3 random softmax candidates for the H100 (several kernels, workspaces)."""
    header = gpu_bundle.bundle_header("h100")
    header["workloads"] = [gpu_bundle.bundle_workload("bert/softmax", "h100", 3, seed=2)]
    return gpu_collect.check_bundle(header)


def test_launch_plan_matches_the_cuda_source(softmax_bundle):
    (work,) = softmax_bundle["workloads"]
    assert len(work["candidates"]) == 3
    params = {p["name"]: p for p in work["params"]}
    assert params["lv14"]["shape"] == [1, 12, 128, 128] and params["lv14"]["dtype"] == "float32"
    for cand in work["candidates"]:
        signatures = _signatures(cand["source"])
        # every kernel of the source is launched once, with as many arguments as it takes
        assert sorted(k["name"] for k in cand["kernels"]) == sorted(signatures)
        for k in cand["kernels"]:
            assert len(k["args"]) == signatures[k["name"]]
            assert all(a in params or a in cand["workspace"] for a in k["args"])
            assert all(n >= 1 for n in k["grid"] + k["block"]) and np.prod(k["block"]) <= 1024
        # the row statistics the host allocates between kernels: one value per softmax row
        assert all(w == {"elems": 1536, "dtype": "float32"} for w in cand["workspace"].values())
        # the last kernel writes the output
        assert "T_softmax_norm" in cand["kernels"][-1]["args"]


def test_plan_of_a_single_kernel_matmul():
    mod = integration.load_workload("GMM:1")
    target = integration.tvm_target(H100)
    (sch,) = cuda.sample_candidates(mod, target, 1, seed=4)
    plan = cuda.launch_plan(sch.mod, target)
    assert plan["workspace"] == {}
    (kernel,) = plan["kernels"]
    assert sorted(kernel["args"]) == ["X", "Y", "Z"]
    assert kernel["shared_dyn"] == 0


class _FakeCupy:
    """CuPy as far as :func:`gpu_collect.time_bundle` uses it; a launch costs ``US_PER_BLOCK`` per block."""

    US_PER_BLOCK = 0.5

    def __init__(self, arch: str = "90"):
        self.launches: list[tuple] = []
        self.clock_ms = 0.0
        fake = self

        class Device:
            id = 0
            compute_capability = arch

            def synchronize(self):
                pass

        class Event:
            def record(self):
                self.at = fake.clock_ms

            def synchronize(self):
                pass

        class Function:
            def __init__(self, name):
                self.name = name

            def __call__(self, grid, block, args, shared_mem=0):
                fake.launches.append((self.name, grid, block, tuple(a.shape for a in args), shared_mem))
                fake.clock_ms += int(np.prod(grid)) * fake.US_PER_BLOCK / 1e3

        class RawModule:
            def __init__(self, path):
                self.path = path

            def get_function(self, name):
                return Function(name)

        runtime = types.SimpleNamespace(
            getDeviceCount=lambda: 1,
            getDeviceProperties=lambda i: {"name": b"Fake GPU", "multiProcessorCount": 132, "totalGlobalMem": 1 << 34},
            driverGetVersion=lambda: 13000, runtimeGetVersion=lambda: 13000)
        self.cuda = types.SimpleNamespace(Device=Device, Event=Event, runtime=runtime, get_elapsed_time=lambda a, b:
                                          b.at - a.at)
        self.RawModule = RawModule
        self.random = types.SimpleNamespace(RandomState=lambda seed: np.random.RandomState(seed))
        self.zeros = np.zeros


@pytest.fixture
def fake_gpu(monkeypatch):
    fake = _FakeCupy()
    monkeypatch.setattr(gpu_collect, "_cupy", lambda: fake)
    monkeypatch.setattr(gpu_collect, "device_record", lambda cupy, nvcc: {
        "device": "Fake GPU", "compute_capability": "sm_90", "nvcc": "none"})
    monkeypatch.setattr("tuna.gpu.nvcc.require_nvcc", lambda: "nvcc")

    def compile_(nvcc, arch, source, folder, stem):  # no nvcc needed: the fake loads nothing
        path = f"{folder}/{stem}.cubin"
        open(path, "w").write(source)
        return path

    monkeypatch.setattr(gpu_collect, "_compile", compile_)
    return fake


def test_time_bundle_follows_the_plans(softmax_bundle, fake_gpu):
    saved = []
    times = gpu_collect.time_bundle(softmax_bundle, jobs=2, partial=lambda t: saved.append(json.dumps(t)))
    (work,) = softmax_bundle["workloads"]
    rows = times["workloads"]["bert-softmax"]
    assert len(rows) == 3 and len(saved) == 2  # one save per workload and pass
    params = {p["name"]: tuple(p["shape"]) for p in work["params"]}
    for cand, (a, b, err) in zip(work["candidates"], rows):
        # seconds per run of the candidate: its kernels' blocks at the fake's cost, whatever the repeats
        expected = sum(int(np.prod(k["grid"])) for k in cand["kernels"]) * _FakeCupy.US_PER_BLOCK * 1e-6
        assert err is None
        assert a == pytest.approx(expected) and b == pytest.approx(expected)
    # each launch had the plan's grid, block and arrays of the right sizes
    first = work["candidates"][0]
    shapes = {**params, **{n: (w["elems"],) for n, w in first["workspace"].items()}}
    launched = [x for x in fake_gpu.launches[: len(first["kernels"])]]
    for k, (name, grid, block, arg_shapes, shared) in zip(first["kernels"], launched):
        assert (name, grid, block, shared) == (k["name"], tuple(k["grid"]), tuple(k["block"]), k["shared_dyn"])
        assert arg_shapes == tuple(shapes[a] for a in k["args"])


def test_time_bundle_refuses_another_architecture(softmax_bundle, fake_gpu, monkeypatch):
    monkeypatch.setattr(gpu_collect, "device_record", lambda cupy, nvcc: {
        "device": "Fake A100", "compute_capability": "sm_80", "nvcc": "none"})
    with pytest.raises(tuna.TunaError, match=r"bundle is for sm_90.*sm_80"):
        gpu_collect.time_bundle(softmax_bundle)


def test_pools_from_a_bundle_and_its_times(softmax_bundle, fake_gpu, tmp_path):
    times = gpu_collect.time_bundle(softmax_bundle)
    times["workloads"]["bert-softmax"][1] = [None, None, "nvcc failed: something"]
    ((stem, pool),) = gpu_collect.pools_from_bundle(softmax_bundle, times)
    assert stem == "bert-softmax"
    loaded = bench.write_pool(tmp_path / f"{stem}.json.gz", pool)
    assert len(loaded) == 2 and loaded.failed == 1
    assert loaded.machine["device"] == "Fake GPU" and loaded.target["arch"] == "sm_90"
    assert loaded.family == "softmax" and loaded.second_timing
    # the stored traces rebuild the candidates that were timed
    sch = integration.apply_trace(integration.load_workload("bert/softmax"), loaded.traces[0])
    plan = cuda.launch_plan(sch.mod, integration.tvm_target(H100))
    assert plan["source"] == softmax_bundle["workloads"][0]["candidates"][0]["source"]
    with pytest.raises(gpu_collect.BundleError, match="not the times of this bundle"):
        times["workloads"]["bert-softmax"].pop()
        gpu_collect.pools_from_bundle(softmax_bundle, times)


def test_cli_joins_bundle_and_times_into_pools(softmax_bundle, fake_gpu, tmp_path, capsys):
    bundle, times = tmp_path / "b.json.gz", tmp_path / "t.json"
    gpu_collect.write_json(bundle, softmax_bundle)
    gpu_collect.write_json(times, gpu_collect.time_bundle(softmax_bundle))
    assert cli.main(["bench", "gpu-pools", str(bundle), str(times), "-o", str(tmp_path), "--json",
                     str(tmp_path / "picks.json")]) == 0
    out = capsys.readouterr().out
    assert "bert-softmax.json.gz: 3 candidates timed (0 failed)" in out and "timed on Fake GPU" in out
    (row,) = json.loads((tmp_path / "picks.json").read_text())["pools"]
    assert row["pool"] == "bert-softmax" and row["timed"] == 3 and "pick" not in row  # no tuna search bundled
    assert len(bench.load_pool(tmp_path / "bert-softmax.json.gz")) == 3


def test_pick_summary():
    cands = [{"origin": "random", "secs_a": 1e-5}, {"origin": "random", "secs_a": None},
             {"origin": "tuna", "secs_a": 2e-5, "predicted_secs": 1e-6},
             {"origin": "tuna", "secs_a": 0.5e-5, "predicted_secs": 3e-6}]
    got = gpu_collect.pick_summary({"candidates": cands})
    assert got["timed"] == 3 and got["best"] == 0.5e-5 and got["random_best"] == 1e-5
    assert got["pick"] == 2e-5 and got["best_to_pick"] == pytest.approx(0.25)
    assert got["fastest_rank"] == 2 and got["shortlist_size"] == 2


def test_bad_bundles_are_named(tmp_path, softmax_bundle):
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(gpu_collect.BundleError, match=r"cannot read bundle .*bad\.json\.gz: Not a gzipped file"):
        gpu_collect.read_bundle(bad)
    other = json.loads(json.dumps(softmax_bundle))
    other["format"] = "something-else"
    with pytest.raises(gpu_collect.BundleError, match="format 'something-else'"):
        gpu_collect.check_bundle(other, "x")
    other = json.loads(json.dumps(softmax_bundle))
    other["workloads"][0]["candidates"][1]["kernels"][0]["args"].append("nowhere")
    with pytest.raises(gpu_collect.BundleError, match=r"candidate 1: kernel .* takes nowhere"):
        gpu_collect.check_bundle(other, "x")
    path = tmp_path / "b.json.gz"
    gpu_collect.write_json(path, softmax_bundle)
    assert json.loads(gzip.decompress(path.read_bytes()))["arch"] == "sm_90"


def test_cli_gpu_commands_check_their_input(tmp_path, capsys):
    assert cli.main(["bench", "gpu-bundle", "GMM:1", "--target", "zen4", "-o", str(tmp_path / "b.json")]) == 2
    assert "need a GPU preset" in capsys.readouterr().err
    assert cli.main(["bench", "gpu-pools", str(tmp_path / "missing.json"), str(tmp_path / "t.json"),
                     "-o", str(tmp_path)]) == 2
    assert "cannot read bundle" in capsys.readouterr().err
    assert cli.main(["bench", "gpu-time", str(tmp_path / "b.json"), "--jobs", "0", "-o", str(tmp_path / "t.json")]) == 2
    assert "--jobs must be at least 1" in capsys.readouterr().err


@pytest.mark.gpu
def test_time_a_real_bundle_on_the_gpu(softmax_bundle):
    times = gpu_collect.time_bundle(softmax_bundle)
    rows = times["workloads"]["bert-softmax"]
    assert all(err is None and 0 < a < 0.1 and 0 < b < 0.1 for a, b, err in rows)
