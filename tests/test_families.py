"""Operator families, the machine a pool was measured on, and leave-one-family-out fits."""

import json
import re

import numpy as np
import pytest

from tuna import bench
from tuna.bench import records
from tuna.errors import TunaError
from tuna.machine import preset


def _pool(name, family=None, machine=None, n=6, scale=1.0):
    cands = [{"trace": [[], []], "tuner_secs": None, "secs_a": scale * 1e-3 * (i + 1),
              "secs_b": scale * 1e-3 * (i + 1.05)} for i in range(n)]
    data = {"workload": name, "target": {"kind": "llvm"}, "mod": "# TVMScript", "candidates": cands}
    if family:
        data["family"] = family
    if machine:
        data["machine"] = machine
    return bench.load_pool(data)


DENSE = '''
@T.prim_func
def main(lv: T.Buffer((T.int64(1), T.int64(128), T.int64(768)), "float32"),
         param_0: T.Buffer((T.int64(768), T.int64(768)), "float32"),
         T_add: T.Buffer((T.int64(1), T.int64(128), T.int64(768)), "float32")):
    with T.sblock("matmul"):
        pass
'''
BATCH = DENSE.replace("param_0: T.Buffer((T.int64(768), T.int64(768))",
                      "lv2: T.Buffer((T.int64(1), T.int64(768), T.int64(768))")
DEPTHWISE = '''
def main(lv: T.Buffer((T.int64(1), T.int64(96), T.int64(112), T.int64(112)), "float32"),
         param_0: T.Buffer((T.int64(96), T.int64(1), T.int64(3), T.int64(3)), "float32")):
    with T.sblock("pad_temp"):
        pass
    with T.sblock("group_conv2d_nchw"):
        pass
'''


@pytest.mark.parametrize(("workload", "script", "family"), [
    ("GMM", "", "batch_matmul"),
    ("c2d", "", "conv2d"),
    ("DEP", "", "depthwise"),
    ("bert/fused_matmul_add", DENSE, "dense"),
    ("bert/matmul2", BATCH, "batch_matmul"),
    ("mobilenetv2/fused_conv2d1", DEPTHWISE, "depthwise"),
    ("x/grouped", DEPTHWISE.replace("T.int64(96), T.int64(1)", "T.int64(96), T.int64(4)"), "group_conv2d"),
    ("x/pool", 'T.sblock("pad_temp") T.sblock("pool_max")', "pool"),
    ("task18-T_matmul_NT", 'p0 = T.match_buffer(var_p0, (T.int64(1), T.int64(512)), "float32")\n'
     'p1 = T.match_buffer(var_p1, (T.int64(1000), T.int64(512)), "float32")\nT.sblock("T_matmul_NT")', "dense"),
    ("task05-conv2d_winograd", 'T.sblock("data_pack") T.sblock("bgemm") T.sblock("conv2d_winograd")',
     "conv2d_winograd"),
    ("x/softmax", 'T.sblock("T_softmax_maxelem")', "softmax"),
    ("x/ln", 'T.sblock("T_layer_norm")', "layernorm"),
    ("x/rms", 'T.sblock("T_multiply_red") T.sblock("T_rms_norm")', "layernorm"),
    ("x/reshape", 'T.sblock("root") T.sblock("T_reshape")', "layout"),
    ("x/unknown", 'T.sblock("compute")', "other"),
])
def test_family_of_reads_the_name_and_the_blocks(workload, script, family):
    assert bench.family_of(workload, script) == family
    assert family in bench.FAMILIES


def test_every_task_of_the_networks_has_a_family():
    from tuna.integration import networks

    families = {}
    for net in networks.NETWORKS:
        for task in networks.cpu_tasks(net):
            families[f"{net}/{task.task_name}"] = bench.family_of(f"{net}/{task.task_name}",
                                                                  task.dispatched[0].script())
    assert "other" not in families.values()
    assert families["mobilenetv2/fused_conv2d1_add_tir_clip"] == "depthwise"
    assert families["bert/fused_matmul3_add2_gelu"] == "dense"
    assert families["bert/matmul2"] == "batch_matmul"
    # QK^T with a causal mask added: the rank-2 mask is not a weight
    assert families["llama/fused_matmul1_multiply_add"] == "batch_matmul"
    assert families["llama/fused_matmul3_silu_multiply1"] == "dense"
    assert families["llama/rms_norm"] == "layernorm"
    assert families["bert-large/layer_norm"] == "layernorm"
    # ConvNeXt: a 7x7 depthwise convolution, its channels-last dense layers, the stem's patch conv
    assert families["convnext/fused_conv2d1_add"] == "depthwise"
    assert families["convnext/fused_matmul1_add2_multiply_add3"] == "dense"
    assert families["convnext/fused_conv2d_add"] == "conv2d"
    # GPT-2: QK^T scaled and masked, the GELU dense layer, the layer norms
    assert families["gpt2/fused_matmul1_multiply_add1"] == "batch_matmul"
    assert families["gpt2/fused_matmul3_add3_gelu"] == "dense"
    assert families["gpt2/layer_norm"] == "layernorm"
    # Whisper's stem: two 1-D convolutions with GELU
    assert families["whisper/fused_conv1d_add_gelu"] == "conv1d"
    assert families["whisper/fused_conv1d1_add1_gelu1"] == "conv1d"
    assert families["resnet50/max_pool2d"] == "pool"
    # EfficientNet: squeeze-and-excitation's channel means, and its 1x1 convolution whose sigmoid
    # scales the block's whole feature map
    assert families["efficientnet/adaptive_avg_pool2d"] == "pool"
    assert families["efficientnet/fused_conv2d3_add2_tir_sigmoid_multiply"] == "conv2d"
    assert families["efficientnet/fused_conv2d6_add5_silu3"] == "depthwise"
    # YOLO: a convolution with SiLU and a residual, SPPF's 5x5 stride-1 max pool, the data copies
    assert families["yolo/fused_conv2d3_add2_silu2_add3"] == "conv2d"
    assert families["yolo/max_pool2d"] == "pool"
    assert families["yolo/split"] == families["yolo/concatenate1"] == "layout"
    # ResNeXt: the 3x3 convolutions of 32 groups (4 and 8 channels each), the 1x1 ones around them
    assert families["resnext/fused_conv2d3_add2_relu1"] == "group_conv2d"
    assert families["resnext/fused_conv2d8_add5_relu3"] == "group_conv2d"
    assert families["resnext/fused_conv2d2_add2_relu1"] == "conv2d"
    # ShuffleNetV2: depthwise convolutions of 24 and 58 channels without ReLU, the channel shuffle
    assert families["shufflenet/fused_conv2d1_add1"] == "depthwise"
    assert families["shufflenet/fused_conv2d6_add2"] == "depthwise"
    assert families["shufflenet/fused_conv2d5_add2_relu1"] == "conv2d"
    assert families["shufflenet/fused_concatenate_reshape_transpose_reshape1_split"] == "layout"
    # MnasNet: 5x5 depthwise convolutions, a projection that adds the residual
    assert families["mnasnet/fused_conv2d9_add7_relu4"] == "depthwise"
    assert families["mnasnet/fused_conv2d13_add8_add10"] == "conv2d"
    # SqueezeNet: the unpadded stem, a fire module's 3x3 expansion, its concatenation, a max pool
    assert families["squeezenet/fused_conv2d_add_relu"] == "conv2d"
    assert families["squeezenet/fused_conv2d3_add2_relu2"] == "conv2d"
    assert families["squeezenet/concatenate"] == "layout"
    assert families["squeezenet/max_pool2d1"] == "pool"
    # Inception-v3: 1x7 and 7x1 convolutions, the stride-1 average pool, the four-way concatenation
    assert families["inception/fused_conv2d5_add4_relu4"] == "conv2d"
    assert families["inception/fused_conv2d6_add5_relu5"] == "conv2d"
    assert families["inception/avg_pool2d"] == "pool"
    assert families["inception/concatenate1"] == "layout"
    # DenseNet-121: the 3x3 growth convolution, the 1x1 bottlenecks over concatenated inputs, the
    # transition's 2x2 average pool, a concatenation with the next layer's batch norm and ReLU
    assert families["densenet/fused_conv2d1_add2"] == "conv2d"
    assert families["densenet/fused_conv2d4_add1_relu1"] == "conv2d"
    assert families["densenet/avg_pool2d"] == "pool"
    assert families["densenet/fused_concatenate2_multiply3_add4_relu3"] == "elementwise"
    assert families["densenet/fused_multiply_add_relu"] == "elementwise"


def test_pools_carry_their_family_and_machine():
    pool = _pool("resnet50/x", family="conv2d", machine={"model_name": "AMD EPYC", "cpu_family": "26"})
    assert pool.family == "conv2d" and pool.name == "resnet50/x"
    assert bench.machine_key(pool.machine) == "zen5"
    ansor = {"workload": ["SFM", 1], "target": {"kind": "llvm"}, "mod": "#",
             "candidates": [{"trace": [], "secs_a": 1.0}]}
    assert bench.load_pool(ansor).family == "softmax"
    with pytest.raises(bench.PoolError, match="machine must be an object"):
        bench.load_pool({"workload": "w", "target": {"kind": "llvm"}, "mod": "#", "machine": "zen4",
                         "candidates": [{"trace": [], "secs_a": 1.0}]})
    shipped = [bench.load_pool(p) for p in bench.shipped_pools()]
    assert {bench.machine_key(p.machine) for p in shipped} == {"zen4"}
    # an imported database names its device beside the pool: that is its machine
    imported = {"workload": "task00", "target": {"kind": "cuda"}, "mod": "#", "device": "NVIDIA A100",
                "second_timing": False, "candidates": [{"trace": [], "secs_a": 1.0}]}
    assert bench.machine_key(bench.load_pool(imported).machine) == "NVIDIA A100"


@pytest.mark.parametrize(("info", "preset_name", "key"), [
    ({"model_name": "AMD EPYC", "cpu_family": "25", "cpu_model": "17"}, "zen4", "zen4"),
    ({"model_name": "AMD EPYC", "cpu_family": "25", "cpu_model": "1"}, "zen3", "zen3"),  # Milan guest
    ({"model_name": "AMD Ryzen 7 5800X", "cpu_family": "25", "cpu_model": "33"}, "zen3", "zen3"),  # Vermeer
    ({"model_name": "AMD EPYC 9654", "cpu_family": "25", "cpu_model": "17"}, "zen4", "zen4"),
    ({"model_name": "AMD EPYC", "cpu_family": "25", "cpu_model": "128"}, None,  # a model no range names
     "AMD EPYC (family 25, model 128)"),
    ({"model_name": "AMD EPYC", "cpu_family": "26", "cpu_model": "2"}, "zen5", "zen5"),
    ({"model_name": "Intel Xeon", "cpu_family": "6"}, None, "Intel Xeon (family 6, model ?)"),
    ({"model_name": "Intel(R) Xeon(R) Processor", "cpu_family": "6", "cpu_model": "207"},  # Emerald Rapids
     "emeraldrapids", "emeraldrapids"),
    ({"model_name": "Intel(R) Xeon(R) Processor", "cpu_family": "6", "cpu_model": "207", "tvm_threads": 2},
     "emeraldrapids", "emeraldrapids (2 TVM threads)"),
    ({"model_name": "Intel(R) Xeon(R) Platinum 8488C", "cpu_family": "6", "cpu_model": "143"}, None,  # Sapphire
     "Intel(R) Xeon(R) Platinum 8488C (family 6, model 143)"),  # Rapids: its preset is a 48-core instance
    ({"model_name": "Intel(R) Xeon(R) 6972P", "cpu_family": "6", "cpu_model": "173"}, "graniterapids",
     "graniterapids"),
    # The Granite Rapids guest shows Rocket Lake's model number: AMX and a 64 KiB L1i say what it is.
    ({"model_name": "Intel(R) Xeon(R) Processor", "cpu_family": "6", "cpu_model": "167", "amx": True,
      "l1i_kib": 64}, "graniterapids", "graniterapids"),
    ({"model_name": "Intel(R) Xeon(R) Processor", "cpu_family": "6", "cpu_model": "167", "amx": True,
      "l1i_kib": 32}, None, "Intel(R) Xeon(R) Processor (family 6, model 167)"),  # masked, core unknown
    ({"model_name": "11th Gen Intel(R) Core(TM) i9-11900K", "cpu_family": "6", "cpu_model": "167", "amx": False,
      "l1i_kib": 32}, None, "11th Gen Intel(R) Core(TM) i9-11900K (family 6, model 167)"),  # Rocket Lake itself
    ({"preset": "zen4"}, "zen4", "zen4"),
    ({"device": "NVIDIA A100"}, None, "NVIDIA A100"),
    ({}, None, "unrecorded"),
])
def test_preset_of_a_machine_record(info, preset_name, key):
    assert bench.preset_of(info) == preset_name
    assert bench.machine_key(info) == key


def test_this_machine_is_recorded_with_its_microcode():
    info = bench.machine_info()
    assert {"model_name", "cores", "microcode", "amx"} <= set(info)


@pytest.mark.parametrize(("text", "kib"), [("128 KiB (2 instances)", 64), ("32 KiB (1 instance)", 32),
                                           ("2 MiB (2 instances)", 1024), ("48 KiB", 48), ("", None)])
def test_lscpu_cache_sizes_are_read_per_instance(text, kib):
    assert records._per_instance_kib(text) == kib


def test_pools_of_two_machines_are_not_mixed_unless_asked():
    zen4 = _pool("a", machine={"preset": "zen4"})
    zen5 = _pool("b", machine={"preset": "zen5"})
    assert bench.check_one_machine([zen4, _pool("c", machine={"preset": "zen4"})]) == "zen4"
    with pytest.raises(TunaError, match=r"2 machines \(zen4: a; zen5: b\).*--mix-machines"):
        bench.check_one_machine([zen4, zen5])
    assert bench.check_one_machine([zen4, zen5], mix=True) == "zen4 + zen5"


def test_leave_one_family_out_fits_never_see_the_family():
    zen4 = preset("zen4")
    clock = zen4.frequency_ghz * 1e9
    rng = np.random.default_rng(0)
    # conv2d pools cost 10 cycles per load beside their compute, the softmax pool 0.1: the
    # price of a load that a fit finds is its training families'.
    pools = [_pool("c1", "conv2d", n=40), _pool("c2", "conv2d", n=40), _pool("s1", "softmax", n=40)]
    feats: dict = {"full": {}}
    for p in pools:
        per_load = 10.0 if p.family == "conv2d" else 0.1
        rows = []
        for secs in p.secs_a:
            loads = rng.uniform(0.2, 0.8) * secs * clock / per_load
            rows.append({"compute_cycles": secs * clock - per_load * loads, "load_ops": loads})
        feats["full"][p.name] = rows
    lofo = bench.family_coefficients(feats, pools, zen4)
    loo = bench.unseen_coefficients(feats, pools, zen4)

    def price(fit):
        return fit["full"].values["load_ops"] / fit["full"].values["compute_cycles"]

    assert lofo["c1"]["full"] is lofo["c2"]["full"]  # one fit per family
    assert price(lofo["c1"]) < 1 < 5 < price(lofo["s1"])  # each priced by the other family only
    assert loo["c1"]["full"] != lofo["c1"]["full"]  # leaving one pool out fits on its family's other pool too
    assert bench.family_coefficients(feats, pools[:2], zen4) == {}
    # Pools that only join the fits (bench rank --fit-on): the two conv2d pools ranked alone are
    # priced by the softmax pool, never by the other conv2d pool.
    also = bench.family_coefficients(feats, pools[:2], zen4, also=pools[2:])
    assert set(also) == {"c1", "c2"} and price(also["c1"]) < 1
    assert price(bench.unseen_coefficients(feats, pools[:1], zen4, also=pools[1:])["c1"]) == pytest.approx(
        price(loo["c1"]))
    assert bench.family_coefficients(feats, pools[:1], zen4, also=pools[1:2]) == {}  # no other family to fit on
    with pytest.raises(TunaError, match="share names"):
        bench.family_coefficients(feats, pools, zen4, also=pools[2:])


def test_family_table_names_each_family_and_the_worst():
    pools = [_pool("c1", "conv2d", n=30), _pool("s1", "softmax", n=30)]
    results = bench.evaluate(pools, bench.baselines())
    table = bench.family_table(results)
    assert re.search(r"^conv2d +random +1 ", table, re.M)
    assert re.search(r"^softmax +noise-ceiling +1 +1\.000", table, re.M)
    assert re.search(r"^mean of families +noise-ceiling +2 +1\.000", table, re.M)
    assert re.search(r"^worst: \w+ +random", table, re.M)
    data = bench.rank_json(results)
    assert set(data["family_mean"]["random"]) == {"conv2d", "softmax"}
    markdown = bench.rank_markdown(data)
    assert "Per operator family" in markdown and "| conv2d | random | 1 |" in markdown
    assert {r["family"] for r in data["results"]} == {"conv2d", "softmax"}


def test_network_tasks_are_workloads_and_listed(capsys):
    from tuna import cli
    from tuna.errors import WorkloadError
    from tuna.integration import load_workload

    assert "T_softmax_norm" in load_workload("bert/softmax").script()
    with pytest.raises(WorkloadError, match=r"network bert has no task 'nope'; its tasks: .*softmax"):
        load_workload("bert/nope")
    with pytest.raises(WorkloadError, match="unknown workload 'vgg/conv'"):
        load_workload("vgg/conv")
    assert cli.main(["bench", "tasks", "bert"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^layer_norm +layernorm +2$", out, re.M) and "11 tasks" in out
    assert cli.main(["bench", "tasks", "vgg"]) == 2
    assert "unknown network 'vgg'" in capsys.readouterr().err


def test_bench_rank_skips_families_and_refuses_mixed_machines(tmp_path, capsys):
    from tuna import cli

    shipped = bench.shipped_pools()
    assert cli.main(["bench", "rank", *map(str, shipped), "--skip-family",
                     ",".join(sorted({bench.load_pool(p).family for p in shipped}))]) == 2
    assert "no pool left once the families" in capsys.readouterr().err
    other = tmp_path / "zen5-pool.json"
    data = json.loads(shipped[0].read_text())
    other.write_text(json.dumps({**data, "machine": {"preset": "zen5"}}))
    assert cli.main(["bench", "rank", str(shipped[0]), str(other), "--no-xgb"]) == 2
    assert "2 machines" in capsys.readouterr().err


def test_gzipped_pools_read_and_write(tmp_path):
    data = json.loads(bench.shipped_pools()[0].read_text())
    plain = bench.load_pool(bench.shipped_pools()[0])
    path = tmp_path / "copy.json.gz"
    again = bench.write_pool(path, data)
    assert path.read_bytes()[:2] == b"\x1f\x8b" and len(again) == len(plain)
    assert bench.pool_stem(path) == "copy" and bench.pool_files(tmp_path) == [path]
    (tmp_path / "bad.json.gz").write_bytes(b"not gzip")
    with pytest.raises(bench.PoolError, match=r"bad\.json\.gz"):
        bench.load_pool(tmp_path / "bad.json.gz")


def test_shortlist_scorer_ranks_only_what_the_screen_passes():
    from tuna.bench.ranking import shortlist_scorer
    from tuna.estimate import WORST_SCORE

    pool = _pool("p", n=40)  # secs_a grows with the index: candidate 0 is the fastest
    screen = lambda p, tr, te: (np.arange(len(te), dtype=float), 0.001)  # noqa: E731 - thinks the slowest best
    rank = lambda p, tr, te: (-p.secs_a[te], 0.1)  # noqa: E731 - perfect
    train, test = bench.split(pool, 0)
    scores, secs = shortlist_scorer(screen, rank, share=0.25)(pool, train, test)
    kept = np.flatnonzero(scores > WORST_SCORE)
    assert len(kept) == round(0.25 * len(test)) and set(kept) == set(range(len(test) - len(kept), len(test)))
    assert secs == pytest.approx(0.001 + 0.25 * 0.1)
    # the pick is the best of the shortlist, not of the pool: top-1 below 1
    top1 = bench.all_metrics(pool.secs_a[test], scores)["top-1"]
    assert 0 < top1 < 1


def test_bench_rank_reuses_cached_features(tmp_path, capsys):
    from tuna import cli

    nrm = next(p for p in bench.shipped_pools() if bench.pool_stem(p) == "NRM-0")  # the smallest
    cache = tmp_path / "features"
    args = ["bench", "rank", str(nrm), "--tiers", "ir", "--no-xgb", "--features-cache", str(cache),
            "--json", str(tmp_path / "r.json")]
    assert cli.main(args) == 0
    first = json.loads((tmp_path / "r.json").read_text())
    files = list(cache.iterdir())
    assert len(files) == 1 and files[0].name.startswith("NRM-0.zen4.ir.")
    saved = json.loads(files[0].read_text())
    saved["features"][0] = {"compute_cycles": 1e12}  # a cached entry is used as it is
    files[0].write_text(json.dumps(saved))
    assert cli.main(args) == 0
    second = json.loads((tmp_path / "r.json").read_text())
    assert second["predictions"]["tuna-ir"]["NRM-0"]["predicted"][0] > 100 * max(
        first["predictions"]["tuna-ir"]["NRM-0"]["predicted"])
    capsys.readouterr()


def test_calibrate_refuses_another_machines_pools(tmp_path, capsys):
    from tuna import cli

    nrm = next(p for p in bench.shipped_pools() if bench.pool_stem(p) == "NRM-0")
    assert cli.main(["calibrate", str(nrm), "--target", "zen5", "-o", str(tmp_path / "c.toml")]) == 2
    assert "measured on zen4; they cannot calibrate zen5" in capsys.readouterr().err
    assert not (tmp_path / "c.toml").exists()
