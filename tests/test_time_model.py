"""The realistic time model on a real device preset: FLOP counted as the
vendors count them, a roofline per operator, matrix products in waves of
tiles, the gradients' reduction in fp32 and overlapped with the backward
pass, and a warning on plans that leave most devices idle."""

from __future__ import annotations

import json
import re

import pytest

from conftest import ROOT, rel, run_cli

LLAMA8B = ROOT / "tests" / "data" / "configs" / "llama3-8b"
PEAK, MEM_BW = 989.5e12, 3350e9  # H100 SXM: dense bf16 FLOP/s, HBM3 bytes/s


@pytest.fixture(scope="module")
def dp8(tmp_path_factory):
    """Llama 3 8B data parallel on 8 H100s, batch 16 of 2048 tokens, attention materialised."""
    out = tmp_path_factory.mktemp("dp8") / "plan.json"
    run_cli("-g", LLAMA8B, "-p", 8, "-b", 16, "--seq", 2048, "--device", "h100", "--plan", "dp=8",
            "--attention", "materialized", "--output", out)
    return json.loads(out.read_text())


def _layer(rec, name):
    return next(layer for layer in rec["layers"] if layer["name"] == name)


def test_compute_is_at_least_the_model_flop_at_the_peak(dp8):
    """6 x parameters x tokens FLOP over 8 devices at 989.5 TFLOPS is 199 ms:
    a multiply-add counts two, as the vendor counts it."""
    at_peak = 6 * dp8["parameters"] * 16 * 2048 / (8 * PEAK)
    assert rel(at_peak, 0.1994) < 1e-3
    compute = dp8["compute"] / PEAK  # FLOP-equivalents of the device's time
    assert at_peak / 0.75 < compute < 2.5 * at_peak


def test_a_matrix_product_in_waves_of_tiles(dp8):
    """mlp/down on one device: (2 x 2048) x 4096 outputs of 14336 products;
    forward and the two backward products, each at 75% of the peak times
    its waves' share (1024 tiles of 128 x 128 in 8 waves over 132
    multiprocessors; 3584 in 28)."""
    flop = 3 * 2 * (2 * 2048) * 4096 * 14336
    share = 1024 / (8 * 132)
    assert rel(3584 / (28 * 132), share) < 1e-12
    assert rel(_layer(dp8, "layer0/mlp/down")["compute"], flop / (0.75 * share)) < 1e-9


def test_softmax_is_bound_by_the_bytes_it_moves(dp8):
    """The scores' softmax on one device: 2 x 32 heads x 2048^2 elements,
    read and written forward, three passes backward, two bytes each, at 80%
    of the memory bandwidth (not the paper's 4 + D FLOP per element)."""
    e = 2 * 32 * 2048 * 2048
    seconds = 5 * e * 2 / (MEM_BW * 0.8)
    assert rel(_layer(dp8, "layer0/attn/softmax")["compute"] / PEAK, seconds) < 1e-9
    assert _layer(dp8, "layer0/attn/softmax")["compute"] < _layer(dp8, "layer0/mlp/down")["compute"]


def _run(tmp_path, *args):
    out = tmp_path / "r.json"
    run_cli("-g", LLAMA8B, "-p", 16, "-b", 16, "--seq", 512, "--device", "h100", "--plan", "dp=16",
            "--output", out, *args)
    return json.loads(out.read_text())


def test_gradients_reduced_in_fp32_and_overlapped(tmp_path):
    """Without overlap the step is compute plus every collective; the
    gradients reduced in fp32 (the default under bf16) cost twice what bf16
    would; with overlap the reduction hides under the backward pass."""
    fp32 = _run(tmp_path, "--overlap", "0")
    bf16 = _run(tmp_path, "--overlap", "0", "--grad-precision", "bf16")
    hidden = _run(tmp_path)
    assert rel(fp32["communication"], 2 * bf16["communication"]) < 1e-9
    assert fp32["compute"] == bf16["compute"] == hidden["compute"]
    assert rel(fp32["step_seconds"] * PEAK, fp32["compute"] + fp32["communication"]) < 1e-9
    # the overlap hides some, at most what the computation lasts
    assert fp32["communication"] - fp32["compute"] <= hidden["communication"] < 0.95 * fp32["communication"]


def test_the_report_says_the_model_in_force(tmp_path):
    out = run_cli("-g", LLAMA8B, "-p", 8, "-b", 8, "--seq", 1024, "--device", "h100", "--plan", "dp=8", "-q").stdout
    assert "MFU" in out and "tokens/s per device" in out and "critical path" in out
    neutral = run_cli("-g", "alexnet", "-p", 8, "-q").stdout
    assert "MFU" not in neutral


def test_an_mfu_above_100_percent_says_why():
    """MFU counts attention's whole score matrix (Narayanan et al.); a
    causal model's kernels compute half of it, so at every efficiency 1
    and a long sequence the figure passes 100%, and the report says why
    (at the defaults it stays below, unexplained)."""
    args = ("-g", LLAMA8B, "-p", 8, "-b", 8, "--seq", 32768, "--device", "h100", "--plan", "cp=8,zero=3", "-q")
    out = run_cli(*args, "--matmul-eff", 1, "--attention-eff", 1).stdout
    mfu = float(re.search(r"MFU ([\d.]+)%", out).group(1))
    assert mfu > 100 and "above 100% because MFU counts attention's whole score matrix" in out
    usual = run_cli(*args).stdout
    assert float(re.search(r"MFU ([\d.]+)%", usual).group(1)) < 100 and "above 100%" not in usual


def _light(name):
    import onnx

    from pathlib import Path

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"


def test_a_plan_on_one_device_is_flagged():
    """ShuffleNet at p = 64 in the paper's model: every operator on one
    device, a 2.67x 'speed-up' of idle devices; the report says so."""
    out = run_cli("-g", _light("shufflenet"), "-p", 64, "-q").stdout
    assert "206 of 206 operators (100% of the work) run on one device of the 64" in out
    for args in (("-g", "resnet101", "-p", 32), ("-g", _light("shufflenet"), "-p", 64, "--device", "h100")):
        assert "run on one device" not in run_cli(*args, "-q").stdout


def test_idle_note_is_the_rule_not_a_count():
    from types import SimpleNamespace as NS

    from planner import _idle_note

    model = NS(cluster=NS(realistic=False))

    def res(*layers):
        return NS(layers=[NS(devices=d, compute=c) for d, c in layers], pipeline=None)

    assert _idle_note(res((1, 10.0), (1, 10.0), (8, 1.0)), model, 8)
    assert not _idle_note(res((1, 1.0), (1, 1.0), (8, 10.0)), model, 8)  # most of the work is spread
    assert not _idle_note(res((1, 10.0), (8, 1.0), (8, 1.0)), model, 8)  # most operators are spread
    assert not _idle_note(res((1, 10.0), (1, 10.0)), model, 1)
    assert "2 of 2 operators (100% of the work) run on one device of the 2" in _idle_note(
        res((1, 10.0), (1, 10.0)), model, 2)


def test_a_pipeline_is_not_flagged():
    """A stage's operators on one device each are its whole share of the devices."""
    out = run_cli("-g", "transformer", "-p", 4, "--pp", 4, "-q").stdout
    assert "Pipeline: 4 stages" in out and "run on one device" not in out
