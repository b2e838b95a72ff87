"""How a plan file's cluster, a device preset and the flags combine; model
files beyond the flags' bounds; errors that name the file and key they come
from; the comparison's notes; sweeps of model files; notes the run owes the
user."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, one_line_error, run_cli

CONFIGS = ROOT / "tests" / "data" / "configs"


def run(*args, cwd, ok=True, **kw):
    """``scheduler.py`` in a subprocess in ``cwd``, as users run it."""
    return run_cli(*args, cwd=cwd, ok=ok, **kw)


def cluster_of(path) -> dict:
    return json.loads(path.read_text())["cluster"]


# -- 1. a plan file's cluster, a device preset and the flags --------------------------


@pytest.fixture(scope="module")
def h100_plan(tmp_path_factory):
    """AlexNet planned on H100s at their default precision (bf16), with a
    bandwidth given by hand."""
    where = tmp_path_factory.mktemp("h100")
    run("-g", "alexnet", "-p", 8, "--device", "h100", "--bw", 600, "--gpus-per-node", 4, "-q",
        "--output", "plan.json", cwd=where)
    return where / "plan.json"


def test_a_precision_flag_looks_the_peak_up_again_and_keeps_the_recorded_figures(h100_plan, tmp_path):
    run("--evaluate", h100_plan, "--precision", "fp32", "-q", "--output", "out.json", cwd=tmp_path)
    c = cluster_of(tmp_path / "out.json")
    assert (c["device"], c["precision"], c["flops"]) == ("h100", "fp32", 67.0)  # the H100's fp32 peak
    assert (c["bw"], c["gpus_per_node"]) == (600.0, 4)  # what the file records stays


def test_a_device_flag_keeps_the_recorded_precision_and_nodes(h100_plan, tmp_path):
    plan = tmp_path / "fp32.json"
    run("--evaluate", h100_plan, "--precision", "fp32", "-q", "--output", plan, cwd=tmp_path)
    run("--evaluate", plan, "--device", "a100-80gb", "-q", "--output", "out.json", cwd=tmp_path)
    c = cluster_of(tmp_path / "out.json")
    assert (c["device"], c["precision"], c["gpus_per_node"]) == ("a100-80gb", "fp32", 4)
    assert (c["flops"], c["bw"], c["device_memory"]) == (19.5, 300.0, 85.0)  # the A100's, not the H100's


def test_an_explicit_peak_beats_the_table_at_any_precision(h100_plan, tmp_path):
    run("--evaluate", h100_plan, "--precision", "fp32", "--flops", 50, "-q", "--output", "out.json", cwd=tmp_path)
    assert cluster_of(tmp_path / "out.json")["flops"] == 50.0


def test_a_recorded_precision_the_new_device_lacks_is_refused_naming_the_file(h100_plan, tmp_path):
    shutil.copy(h100_plan, tmp_path / "plan.json")
    msg = one_line_error(run("--evaluate", "plan.json", "--device", "v100", cwd=tmp_path, ok=False))
    assert msg.startswith("--evaluate: plan.json: precision bf16 is not supported by v100"), msg


def test_a_hand_edited_peak_at_the_top_of_a_plan_file_is_used(tmp_path):
    run("-g", "alexnet", "-p", 8, "-q", "--output", "plan.json", cwd=tmp_path)
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["cluster"]["flops"] == data["flops"] == 10.0
    data["flops"] = 20.0
    (tmp_path / "edited.json").write_text(json.dumps(data))
    out = run("--evaluate", "edited.json", "-q", "--output", "out.json", cwd=tmp_path).stdout
    assert cluster_of(tmp_path / "out.json")["flops"] == 20.0
    assert "20 TFLOPS and 16 GB/s per device" in out


def test_the_precedence_is_stated_in_the_manual():
    text = (ROOT / "docs" / "cluster.md").read_text()
    assert "looked up again" in text and "recorded cluster" in text


# -- 2, 3. model files: zero dimensions, and the flags' bounds --------------------------


def _onnx(path, x_shape, w_shape):
    pytest.importorskip("onnx")
    from onnx import helper

    from onnx_models import model

    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"], name="fc", transB=1),
             helper.make_node("Softmax", ["y"], ["z"], name="sm")]
    return model(path, nodes, [("x", x_shape)], [("z", None)], [("w", w_shape)])


def test_a_zero_input_dimension_is_refused_not_taken_as_symbolic(tmp_path):
    _onnx(tmp_path / "m.onnx", ["N", 0], (10, 0))
    for extra in ((), ("--seq", 8)):
        msg = one_line_error(run("-g", "m.onnx", "-p", 4, *extra, cwd=tmp_path, ok=False))
        assert msg.startswith("m.onnx: input 'x' has a dimension of size 0 (axis 1)"), msg


def test_a_zero_size_output_is_refused_naming_the_file_and_the_node(tmp_path):
    _onnx(tmp_path / "m.onnx", ["N", 16], (0, 16))
    msg = one_line_error(run("-g", "m.onnx", "-p", 4, cwd=tmp_path, ok=False))
    assert msg.startswith("m.onnx: node 'fc': ") and "size 0" in msg, msg


def test_an_onnx_dimension_beyond_the_flags_bound_is_refused(tmp_path):
    _onnx(tmp_path / "m.onnx", ["N", 2**40], (10, 2**40))
    msg = one_line_error(run("-g", "m.onnx", "-p", 4, cwd=tmp_path, ok=False))
    assert msg.startswith("m.onnx: input 'x' has a dimension of 1,099,511,627,776 (axis 1); "
                          "the tool plans at most 1,000,000,000"), msg


def _config(where, **changes):
    data = json.loads((CONFIGS / "gpt2" / "config.json").read_text())
    data.update(changes)
    where.mkdir(parents=True, exist_ok=True)
    (where / "config.json").write_text(json.dumps(data))
    return where / "config.json"


@pytest.mark.parametrize("key, value", [("n_embd", 10**12), ("vocab_size", 2 * 10**9), ("n_inner", 10**10)])
def test_a_config_size_beyond_the_flags_bound_is_refused(tmp_path, key, value):
    _config(tmp_path / "big", **{key: value, "n_head": 1})
    msg = one_line_error(run("-g", "big/config.json", "-p", 8, cwd=tmp_path, ok=False))
    assert msg == f"big/config.json: {key} is {value:,}; the tool plans at most 1,000,000,000", msg


# -- 4. the comparison's notes -------------------------------------------------------------


def test_parallax_without_embeddings_is_not_said_to_exchange_them_sparsely(tmp_path):
    out = run("-g", "inception3", "-p", 8, "--plan", "tp=2", "--compare", "-q", cwd=tmp_path).stdout
    assert re.search(r"data parallel is \d+\.\d% cheaper than this standard configuration", out)  # it loses
    assert "Parallax equals data parallel here: inception3 has no embeddings" in out
    assert "sparsely" not in out
    assert "Parallax is" not in out  # data parallel's own line says it


def test_parallax_with_embeddings_explains_its_lead_only_over_data_parallel(tmp_path):
    out = run("-g", "transformer", "-p", 16, "--compare", "-q", cwd=tmp_path).stdout
    assert "data parallel is" not in out
    assert "Parallax is 2.0% cheaper than PaSE: it exchanges embedding" in out  # and cheaper than data parallel


# -- 6. errors name the file and key, or the standard output ----------------------------


def test_a_cluster_file_pair_out_of_bounds_names_the_file(tmp_path):
    (tmp_path / "c.json").write_text('{"flops": 1e12, "bw": 0.001}')
    msg = one_line_error(run("-g", "alexnet", "-p", 4, "--cluster", "c.json", cwd=tmp_path, ok=False))
    assert msg.startswith("--cluster: c.json: flops and bw (1e+12 TFLOPS, 0.001 GB/s) make one word cost"), msg
    (tmp_path / "b.json").write_text('{"bw": -1}')
    msg = one_line_error(run("-g", "alexnet", "-p", 4, "--cluster", "b.json", cwd=tmp_path, ok=False))
    assert msg.startswith("--cluster: b.json: bw must be"), msg


def test_a_plan_files_bad_cluster_names_the_file(tmp_path):
    run("-g", "alexnet", "-p", 8, "-q", "--output", "plan.json", cwd=tmp_path)
    data = json.loads((tmp_path / "plan.json").read_text())
    data["cluster"]["bw"] = data["bw"] = -1
    (tmp_path / "bad.json").write_text(json.dumps(data))
    msg = one_line_error(run("--evaluate", "bad.json", cwd=tmp_path, ok=False))
    assert msg.startswith("--evaluate: bad.json: bw must be"), msg


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_standard_output_is_named(tmp_path):
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, str(ROOT / "scheduler.py"), "-g", "alexnet", "-p", "4"], stdout=full,
                              stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr == "scheduler.py: error: cannot write the standard output: no space left on device\n"


# -- 7. sweeps of config.json models -----------------------------------------------------


def test_sweeps_name_a_config_by_its_directory(tmp_path):
    gpt2, qwen = CONFIGS / "gpt2" / "config.json", CONFIGS / "qwen2-0.5b" / "config.json"
    shutil.copytree(CONFIGS / "gpt2", tmp_path / "other" / "gpt2")  # the same name in another directory
    other = tmp_path / "other" / "gpt2" / "config.json"
    out = run("-g", f"{gpt2},{qwen},{other}", "-p", 8, "--seq", 64, "--jobs", 1, "--plans", "plans",
              "--output", "t.csv", cwd=tmp_path).stdout
    assert sorted(os.listdir(tmp_path / "plans")) == ["gpt2-2.json", "gpt2.json", "qwen2-0.5b.json"]
    import csv

    rows = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert [r["graph"] for r in rows] == ["gpt2", "qwen2-0.5b", "gpt2-2"]
    assert "config" not in out
    one = run("-g", gpt2, "-p", "8,16", "--seq", 64, "--jobs", 1, cwd=tmp_path).stdout
    assert one.splitlines()[0] == "PaSE sweep: 2 settings (2 -p); -g gpt2, --seq 64"


# -- 8. flags that would be ignored, and limits of a model ---------------------------------


def test_inter_bw_needs_nodes(tmp_path):
    msg = one_line_error(run("-g", "alexnet", "-p", 8, "--inter-bw", 10, cwd=tmp_path, ok=False))
    assert msg.startswith("--inter-bw needs --gpus-per-node"), msg
    (tmp_path / "c.json").write_text('{"inter_bw": 10}')
    msg = one_line_error(run("-g", "alexnet", "-p", 8, "--cluster", "c.json", cwd=tmp_path, ok=False))
    assert msg.startswith("--cluster: c.json: inter_bw needs gpus_per_node"), msg
    run("-g", "alexnet", "-p", 8, "--inter-bw", 10, "--gpus-per-node", 4, "-q", cwd=tmp_path)
    (tmp_path / "n.json").write_text('{"gpus_per_node": 4}')
    run("-g", "alexnet", "-p", 8, "--inter-bw", 10, "--cluster", "n.json", "-q", cwd=tmp_path)
    run("-g", "alexnet", "-p", 8, "--inter-bw", 10, "--device", "h100", "-q", cwd=tmp_path)  # a DGX node of 8


def test_a_sequence_beyond_the_models_positions_is_noted(tmp_path):
    cfg = CONFIGS / "gpt2" / "config.json"
    out = run("-g", cfg, "-p", 8, "--seq", 4096, "-q", cwd=tmp_path).stdout
    assert "The sequence of 4,096 tokens exceeds the 1,024 positions gpt2 has (n_positions)" in out
    assert "exceeds" not in run("-g", cfg, "-p", 8, "--seq", 1024, "-q", cwd=tmp_path).stdout


# -- 9. sweeps keep the does-not-fit mark ----------------------------------------------------


def test_sweeps_show_a_baseline_that_does_not_fit_as_not_fitting(tmp_path):
    out = run("-g", "transformer", "-p", "16,32", "--device-memory", 2.5, "--precision", "fp32", "--compare",
              "--jobs", 1, "--output", "t.csv", cwd=tmp_path).stdout
    import csv

    rows = list(csv.DictReader((tmp_path / "t.csv").open()))
    assert [(r["expert_fits"], r["parallax_fits"], r["data_parallel_fits"]) for r in rows] == [
        ("False", "False", "False"), ("True", "False", "False")]
    assert float(rows[0]["parallax_speedup"]) > 1  # the figure stays in the file, beside its mark
    table = out.splitlines()
    head = table[1].split()
    cells = [dict(zip(head, line.split())) for line in table[2:4]]
    assert [(c["expert_speedup"], c["parallax_speedup"]) for c in cells] == [
        ("no-fit", "no-fit"), (f"{float(rows[1]['expert_speedup']):.2f}x", "no-fit")]
    assert all(c["speedup"].endswith("x!") for c in cells)  # over a data parallel that does not fit
    assert "expert_fits" not in head
    assert table[4:6] == ["! over a data-parallel plan that does not fit the device memory",
                          "no-fit: the baseline does not fit the device memory (the --output file keeps its "
                          "speedup)"]

