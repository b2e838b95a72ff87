"""scheduler.py with a model file for -g, driven in a subprocess: an ONNX
file and a config.json through --output and --evaluate, strategy files that
belong to another model, and bad model files."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper

from conftest import ROOT, modules_loaded_by_a_plain_run
from onnx_models import model
from test_cli import run, total_of

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
ALEXNET = os.path.join(LIGHT, "light_bvlc_alexnet.onnx")
TINY = {"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8,
        "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 320, "max_position_embeddings": 64,
        "num_local_experts": 4, "num_experts_per_tok": 2}


def one_line_error(proc, message):
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr  # a bad input
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr, proc.stderr


def sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_onnx_model_through_output_evaluate_and_dump(tmp_path):
    plan = tmp_path / "plan.json"
    out = run("-g", ALEXNET, "-p", 8, "-b", 64, "--output", plan, "-d", cwd=tmp_path).stdout
    assert "Wrote the graph (16 operators, 15 edges)" in out
    assert "11: n15/unravel" in (tmp_path / "graph.dot").read_text()
    out = out.split("\n", 1)[1]  # the report
    head = out.splitlines()
    assert head[0] == "PaSE strategy: light_bvlc_alexnet, batch 64, p = 8"
    assert head[1] == ("60,965,224 parameters, 16 operators; read from light_bvlc_alexnet.onnx "
                       f"(sha256 {sha256(ALEXNET)[:12]})")
    data = json.loads(plan.read_text())
    assert data["model"] == {"name": "light_bvlc_alexnet", "source": "light_bvlc_alexnet.onnx", "path": ALEXNET,
                             "sha256": sha256(ALEXNET)}
    assert data["graph"] == "light_bvlc_alexnet" and data["params"] == {"batch": 64}
    assert data["parameters"] == 60_965_224 and total_of(out) == data["total_cost"]
    again = run("--evaluate", plan, "--bw", 32).stdout  # the model found again from the file's record
    assert again.startswith("PaSE evaluation of a given strategy: light_bvlc_alexnet, batch 64, p = 8")
    assert total_of(again) < total_of(out)
    assert total_of(run("--evaluate", plan).stdout) == total_of(out)


def test_config_through_output_evaluate_and_compare(tmp_path):
    folder = tmp_path / "tiny-moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    plan = tmp_path / "plan.json"
    out = run("-g", folder, "-p", 4, "-b", 8, "--seq", 32, "--compare", "--output", plan).stdout
    assert out.startswith("PaSE strategy: tiny-moe, batch 8, seq 32, p = 4\n")
    assert "expert (Mesh-TensorFlow: batch" in out and "layer1/mlp/dispatch" in out
    data = json.loads(plan.read_text())
    assert data["params"] == {"batch": 8, "seq": 32, "attention": "fused"} and data["model"]["source"] == "config.json"
    assert total_of(run("--evaluate", plan).stdout) == total_of(out)
    # the config changes: the plan is for another model now
    (folder / "config.json").write_text(json.dumps(dict(TINY, intermediate_size=128)))
    proc = run("--evaluate", plan, ok=False)
    one_line_error(proc, f"is a strategy for config.json (sha256 {data['model']['sha256'][:12]}), not for "
                         "config.json (sha256 ")


def test_evaluate_refuses_a_strategy_for_another_model(tmp_path):
    plan = tmp_path / "plan.json"
    run("-g", ALEXNET, "-p", 4, "--output", plan)
    out = tmp_path / "out.json"
    out.write_text("keep me")
    zfnet = os.path.join(LIGHT, "light_zfnet512.onnx")  # the same operators, another model
    one_line_error(run("--evaluate", plan, "-g", zfnet, "--output", out, ok=False),
                   f"{plan} is a strategy for light_bvlc_alexnet.onnx (sha256 {sha256(ALEXNET)[:12]}), "
                   f"not for light_zfnet512.onnx (sha256 {sha256(zfnet)[:12]})")
    one_line_error(run("--evaluate", plan, "-g", "alexnet", ok=False), "not for alexnet")
    builtin = tmp_path / "builtin.json"
    run("-g", "alexnet", "-p", 4, "--output", builtin)
    one_line_error(run("--evaluate", builtin, "-g", ALEXNET, "--output", out, ok=False),
                   f"{builtin} is a strategy for alexnet, not for light_bvlc_alexnet.onnx")
    assert out.read_text() == "keep me"


def test_a_plan_moved_with_its_model(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    shutil.copy(ALEXNET, here / "net.onnx")
    run("-g", here / "net.onnx", "-p", 4, "--output", here / "plan.json")
    shutil.move(here, there)
    assert "read from net.onnx" in run("--evaluate", there / "plan.json").stdout  # found beside the plan
    os.remove(there / "net.onnx")
    one_line_error(run("--evaluate", there / "plan.json", ok=False),
                   f"is a strategy for net.onnx, which is not at {here / 'net.onnx'}; give the model with -g")


def unsupported_model(path):
    H = helper.make_node
    nodes = [H("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], name="conv"), H("TopK", ["c", "k"], ["y", "i"],
                                                                                name="top")]
    return model(path, nodes, [("x", [1, 3, 8, 8])], [("y", None)],
                 [("w", (4, 3, 3, 3)), ("k", np.array([2], np.int64))])


def written(path, content):
    """``path`` with ``content`` (bytes, or a config as a dict): the file, or
    the directory holding a config."""
    if isinstance(content, dict):
        (path / "config.json").write_text(json.dumps(content))
        return path
    path.write_bytes(content)
    return path


BAD = [
    (lambda d: unsupported_model(d / "m.onnx"), [], "m.onnx: operators the importer does not support: TopK: 1 node, "
                                                    "first 'top'"),
    (lambda d: written(d / "m.onnx", b"\x00garbage"), [], "m.onnx: not an ONNX model"),
    (lambda d: d / "missing.onnx", [], "missing.onnx: no such file"),
    (lambda d: written(d, dict(TINY, model_type="t5")), [],
     "config.json: model_type 't5' is not a decoder family the tool reads"),
    (lambda d: written(d, dict(TINY, num_attention_heads=80)), [],
     "config.json: num_attention_heads 80 is more than hidden_size 64"),
    (lambda d: written(d, TINY), ["-m", "64"], "-m is not a parameter of model (it takes batch, seq, attention)"),
    (lambda d: d, [], "no config.json or .onnx file in this directory"),
]


@pytest.mark.parametrize("make, flags, message", BAD, ids=[m.split(": ", 1)[-1][:40] for _, _, m in BAD])
def test_bad_model_files(tmp_path, make, flags, message):
    source = tmp_path / "model"
    source.mkdir()
    arg = make(source)
    out = tmp_path / "plan.json"
    one_line_error(run("-g", arg, "-p", 4, "--output", out, "-d", *flags, cwd=tmp_path, ok=False), message)
    assert not out.exists() and not (tmp_path / "graph.dot").exists()


def test_a_symbolic_dimension_needs_seq(tmp_path):
    H = helper.make_node
    path = model(tmp_path / "lm.onnx", [H("Gather", ["wte", "ids"], ["x"]), H("MatMul", ["x", "w"], ["y"])],
                 [("ids", ["batch", "sequence"])], [("y", None)], [("wte", (50, 8)), ("w", (8, 50))])
    one_line_error(run("-g", path, ok=False), "--seq must be given: dimension 'sequence' (axis 1) of input 'ids'")
    assert "lm, batch 128, seq 16, p = 4" in run("-g", path, "--seq", 16, "-p", 4).stdout


def test_the_same_plan_whatever_the_hash_seed(tmp_path):
    """An ONNX model and a config, read and searched under two hash seeds."""
    folder = tmp_path / "moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    for arg in (os.path.join(LIGHT, "light_inception_v2.onnx"), folder):
        plans = []
        for seed in ("0", "1"):
            path = tmp_path / f"plan{seed}.json"
            flags = ["--seq", "16"] if arg == folder else []
            cmd = [sys.executable, str(ROOT / "scheduler.py"), "-g", str(arg), "-p", "8", *flags, "--output", str(path)]
            subprocess.run(cmd, env={**os.environ, "PYTHONHASHSEED": seed}, check=True, capture_output=True)
            data = json.loads(path.read_text())
            plans.append([(layer["name"], layer["dims"], layer["config"]) for layer in data["layers"]])
        assert plans[0] == plans[1]


def test_a_built_in_run_does_not_import_onnx():
    assert modules_loaded_by_a_plain_run("onnx", "models.onnx") == [False, False]


def test_help_names_the_model_files():
    out = " ".join(run("--help").stdout.split())
    assert ("an ONNX file, a Hugging Face config.json (llama, qwen3, deepseek_v3, gpt_oss ...: docs/models.md lists the "
            "families), or a directory") in out


@pytest.mark.parametrize("layers", [2, 3])  # the same operators, then more of them
def test_evaluate_refuses_a_pipeline_for_a_changed_config(tmp_path, layers):
    """A pipelined plan file is a strategy for its model's file as it was:
    edited (the same operators, or more of them), the file is refused by
    its sha256, as per-operator and standard plans are, not costed on the
    new model or refused for an operator it lacks."""
    folder = tmp_path / "tiny-moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    plan = tmp_path / "plan.json"
    run("-g", folder, "-p", 4, "-b", 8, "--seq", 32, "--pp", 2, "--output", plan)
    data = json.loads(plan.read_text())
    assert data["pipeline"]["pp"] == 2
    (folder / "config.json").write_text(json.dumps(dict(TINY, intermediate_size=128, num_hidden_layers=layers)))
    one_line_error(run("--evaluate", plan, ok=False),
                   f"is a strategy for config.json (sha256 {data['model']['sha256'][:12]}), not for config.json "
                   "(sha256 ")
