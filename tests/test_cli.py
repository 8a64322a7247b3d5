import json
import re
import subprocess
import sys
from pathlib import Path

from tuna import cli


def test_targets_lists_every_preset(capsys):
    assert cli.main(["targets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["preset"] for r in rows} >= {"zen4", "graviton2", "cortex-a53", "skylake-avx512", "v100", "a100",
                                           "h100", "xavier"}


def test_explain_prints_a_feature_breakdown(capsys, gmm_pool, tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps(gmm_pool["candidates"][0]["trace"]))
    assert cli.main(["explain", "GMM:1", "--target", "zen4", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    assert "predicted" in out and "bound by" in out and "untuned schedule" in out and "peak" in out
    assert "lanes_fma" not in out  # raw features only on request
    report, png = tmp_path / "r.json", tmp_path / "r.png"
    assert cli.main(["explain", "GMM:1", "--target", "zen4", "--trace", str(trace), "--verbose",
                     "--json", str(report), "--png", str(png)]) == 0
    out = capsys.readouterr().out
    assert "lanes_fma" in out and "8,388,608" in out
    features = json.loads(report.read_text())["features"]
    assert 8388608 in [v for k, v in features.items() if k.endswith("lanes_fma")]
    assert png.stat().st_size > 1000


def test_bad_input_gets_a_clear_message_and_exit_code_2(capsys):
    assert cli.main(["explain", "NOPE:1"]) == 2
    assert "unknown workload 'NOPE:1'" in capsys.readouterr().err
    assert cli.main(["explain", "GMM:1", "--target", "zen9"]) == 2
    assert "unknown target preset 'zen9'" in capsys.readouterr().err
    assert cli.main(["explain", "GMM:1", "--target", '{"kind": "llvm", "mtriple": "riscv64-linux-gnu"}']) == 2
    assert "instruction set" in capsys.readouterr().err


def test_the_docstring_lists_every_command():
    parser = cli.build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, sub in commands.items():
        nested = [a for a in sub._actions if a.dest == "bench_command"]
        for full in [f"{name} {b}" for b in nested[0].choices] if nested else [name]:
            assert f"``tuna {full}" in cli.__doc__, full


def test_the_help_and_the_readme_name_every_built_in_network():
    # The names are written out so that ``tuna --help`` needs no TVM; this keeps them whole.
    from tuna.integration import networks

    parser = cli.build_parser()
    bench = parser._subparsers._group_actions[0].choices["bench"]
    subs = next(a for a in bench._actions if a.dest == "bench_command").choices
    helps = [a.help for a in subs["tasks"]._actions if a.dest == "network"]
    helps += [a.help for a in subs["network"]._actions if a.dest == "models"]
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    for name in networks.NETWORKS:
        for text in helps:
            assert re.search(rf"\b{re.escape(name)}\b(?!-)", text), (name, text)
        assert f"`{name}`" in readme, name


def test_a_reader_that_goes_away_ends_the_command_quietly():
    # As ``tuna targets | head -1`` does: the pipe is closed before tuna writes.
    proc = subprocess.Popen([sys.executable, "-m", "tuna.cli", "targets"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert "Traceback" not in err and "Exception ignored" not in err, err


def test_bench_work_directories_keep_two_networks_tasks_of_one_name_apart(tmp_path):
    script = tmp_path / "my_op.py"
    script.write_text("")
    names = [cli._work_name(w) for w in ("resnet50/adaptive_avg_pool2d", "mobilenetv2/adaptive_avg_pool2d",
                                          "GMM:1", str(script))]
    assert names == ["resnet50-adaptive_avg_pool2d", "mobilenetv2-adaptive_avg_pool2d", "GMM-1", "my_op.py"]
