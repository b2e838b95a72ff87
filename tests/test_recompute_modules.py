"""Megatron-LM's recomputation of single modules (``--recompute-modules``):
which operators of a block each module is, what selective recomputation
then drops and re-runs, the switch's refusals and records, and the export.
Megatron Core's own config takes the exported flags in
tests/test_torch_megatron.py."""

from __future__ import annotations

import json

import pytest

from conftest import ROOT, bash_array, export_text, one_line_error, run_cli

QWEN3_MOE = str(ROOT / "tests" / "data" / "families" / "qwen3_moe" / "config.json")
GPT_OSS = str(ROOT / "tests" / "data" / "families" / "gpt_oss" / "config.json")
LLAMA = str(ROOT / "tests" / "data" / "configs" / "llama3-8b" / "config.json")
MIXTRAL = str(ROOT / "tests" / "data" / "configs" / "mixtral-8x7b" / "config.json")
DEEPSEEK_V3 = str(ROOT / "tests" / "data" / "families" / "deepseek_v3" / "config.json")


def _modules(graph: str, layer: str = "layer1") -> dict:
    """The single modules of one layer's operators, by name."""
    from blocks import find_chains
    from graph import operators
    from options.base import contexts
    from planner import plan
    from settings import Settings

    g = plan(Settings(graph=graph, procs=1, batch=1, seq=256)).graph
    ctx = contexts(g, find_chains(g))
    return {op.name: c.module for op, c in zip(operators(g), ctx) if op.name.startswith(layer + "/") and c.module}


def test_the_modules_of_a_block():
    """A mixture of experts' pre-MLP norm, read by the router and the
    dispatch, is a ``layernorm`` module; the norm before attention, which
    Megatron Core fuses into the query-key-value product, is none, nor are
    the query and key norms, nor a latent attention's own norms; the
    experts' activation is ``moe_act``.  A
    dense model's norms are each fused into the product after them."""
    assert _modules(QWEN3_MOE) == {"layer1/mlp/norm": "layernorm", "layer1/mlp/act": "moe_act"}
    assert _modules(MIXTRAL) == {"layer1/mlp/norm": "layernorm", "layer1/mlp/act": "moe_act"}
    # DeepSeek-V3: the norm before multi-head latent attention feeds two products (Megatron Core's MLA keeps it
    # apart too); its first layers are dense, their feed-forward norm fused; no latent norm is a layer norm
    cfg = json.loads(open(DEEPSEEK_V3).read())
    dense, moe = "layer0", f"layer{cfg['first_k_dense_replace']}"
    assert _modules(DEEPSEEK_V3, dense) == {f"{dense}/attn/norm": "layernorm"}
    assert _modules(DEEPSEEK_V3, moe) == {f"{moe}/attn/norm": "layernorm", f"{moe}/mlp/norm": "layernorm",
                                          f"{moe}/mlp/act": "moe_act"}
    assert _modules(GPT_OSS) == {"layer1/mlp/norm": "layernorm", "layer1/mlp/act": "moe_act"}
    assert _modules(LLAMA) == {}


def _run(recompute: str, modules=None, framework="megatron"):
    from planner import plan
    from settings import Settings

    return plan(Settings(graph=QWEN3_MOE, procs=16, batch=16, seq=1024, device="h100", framework=framework,
                         plan=f"tp=2,ep=16,etp=1,sp=1,zero=1,recompute={recompute}", recompute_modules=modules))


def _layer(p, name):
    return next(x for x in p.result.layers if x.name == name)


def test_selective_recomputation_of_the_norms_and_the_experts_activation():
    """``layernorm`` and ``moe_act``: the router and the dispatch no longer
    keep the pre-MLP norm's output, nor the experts' down product the
    activation's (each held again while it is recomputed), and the norm
    and the activation run their forward pass twice; nothing else
    changes.  Megatron's default, the attention core, is what ``selective``
    was (a fused attention keeps no probabilities: the same as none)."""
    none, default = _run("none"), _run("selective")
    core = _run("selective", "core_attn")
    mods = _run("selective", "layernorm,moe_act")
    assert default.result.step_seconds == core.result.step_seconds == none.result.step_seconds
    assert default.result.memory_bytes == core.result.memory_bytes == none.result.memory_bytes
    b = 2.0  # bf16
    tokens = 16 * 1024 / 16  # a device's tokens: the sequence split 2 (sequence parallel), the samples 8
    width, k, ffn = 2048, 8, 768
    for name, dropped in (("layer3/mlp/down", b * k * tokens * ffn),  # the activation's output (each copy's)
                          ("layer3/mlp/router", b * tokens * width)):  # the norm's
        before, after = _layer(none, name), _layer(mods, name)
        assert before.memory[3] - after.memory[3] == pytest.approx(dropped, rel=1e-9), name
        assert after.transient - before.transient == pytest.approx(dropped, rel=1e-9), name
    assert _layer(mods, "layer3/mlp/act").compute > _layer(none, "layer3/mlp/act").compute
    assert _layer(mods, "layer3/attn/qkv").compute == _layer(none, "layer3/attn/qkv").compute
    assert mods.result.memory_bytes < none.result.memory_bytes
    # a thousand tokens a device: the layers wait on the host's launches (frameworks/host.py), which hide the
    # recomputation; the device's own time grows
    assert none.result.host > 0 and mods.result.step_seconds == pytest.approx(none.result.step_seconds, rel=1e-12)
    assert mods.result.total_cost - mods.result.host > none.result.total_cost - none.result.host
    both = _run("selective", "core_attn,moe_act,layernorm")
    assert both.result.step_seconds == pytest.approx(mods.result.step_seconds, rel=1e-12)


def test_the_switch_is_megatrons_and_says_so(tmp_path):
    """Refused in one line without Megatron or with a module it does not
    know; the report's header names the modules, the plan file records
    them for ``--evaluate``, a cluster file may give them, and the export
    writes them as Megatron-LM's ``--recompute-modules``."""
    args = ("-g", QWEN3_MOE, "-p", 16, "-b", 64, "--seq", 4096, "--device", "h100", "--plan",
            "tp=2,ep=16,etp=1,sp=1,zero=1,recompute=selective")  # the layers slower than the host's launches
    for extra, message in ((("--framework", "torchtitan", "--recompute-modules", "moe_act"),
                            "--recompute-modules needs --framework megatron (its --recompute-modules)"),
                           (("--framework", "megatron", "--recompute-modules", "moe_act,mlp"),
                            "--recompute-modules must name some of core_attn, layernorm, moe_act, each once, "
                            "comma-separated, got 'moe_act,mlp'")):
        proc = run_cli(*args, *extra, "--output", tmp_path / "refused.json", ok=False, cwd=tmp_path)
        assert proc.returncode == 2 and one_line_error(proc) == message
        assert list(tmp_path.iterdir()) == []  # nothing written
    out = tmp_path / "plan.json"
    first = run_cli(*args, "--framework", "megatron", "--recompute-modules", "layernorm,moe_act", "--output", out,
                    cwd=tmp_path)
    assert "Framework: Megatron-LM (sequence parallel, selective recomputation of layernorm and moe_act)" in \
        first.stdout
    assert json.loads(out.read_text())["framework"]["recompute_modules"] == ["layernorm", "moe_act"]

    def step(*more):
        again = tmp_path / "again.json"
        run_cli(*more, "--output", again, "-q", cwd=tmp_path)
        return json.loads(again.read_text())["step_seconds"]
    recorded = json.loads(out.read_text())["step_seconds"]
    assert step("-g", QWEN3_MOE, "--evaluate", out) == recorded
    cluster = tmp_path / "run.toml"
    cluster.write_text('framework = "megatron"\nrecompute_modules = ["LayerNorm", " moe_act"]\n')
    assert step(*args, "--cluster", cluster) == recorded
    assert step(*args, "--framework", "megatron") < recorded  # nothing recomputed: faster
    # the record is Megatron's: evaluated under another framework, it is dropped, not refused
    assert step("-g", QWEN3_MOE, "--evaluate", out, "--framework", "torchtitan") > 0
    cluster.write_text('framework = "megatron"\nrecompute_modules = ["mlp"]\n')
    proc = run_cli(*args, "--cluster", cluster, ok=False, cwd=tmp_path)
    assert proc.returncode == 2 and one_line_error(proc) == \
        f"--cluster: {cluster}: recompute_modules must name some of core_attn, layernorm, moe_act, each once, " \
        "comma-separated, got ['mlp']"
    words = bash_array(export_text("megatron", QWEN3_MOE, 16, batch=16, seq=1024, framework="megatron",
                                   recompute_modules="layernorm,moe_act",
                                   plan="tp=2,ep=16,etp=1,sp=1,zero=1,recompute=selective"), "PASE_PARALLEL_ARGS")
    i = words.index("--recompute-modules")
    assert words[i - 2:i + 3] == ["--recompute-granularity", "selective", "--recompute-modules", "layernorm",
                                  "moe_act"]
    plain = bash_array(export_text("megatron", QWEN3_MOE, 16, batch=16, seq=1024, framework="megatron",
                                   plan="tp=2,ep=16,etp=1,sp=1,zero=1,recompute=selective"), "PASE_PARALLEL_ARGS")
    assert "--recompute-modules" not in plain  # the attention core: Megatron-LM's default


def test_the_report_says_when_the_modules_change_nothing():
    """Named modules where no block is recomputed selectively, or in a
    model without them (a dense model's norms are fused into its
    products): a note says so, as it does for --deepep without experts."""
    base = ("-p", 8, "-b", 8, "--seq", 1024, "--device", "h100", "--framework", "megatron", "-q")
    dense = run_cli("-g", LLAMA, *base, "--deepep", "--recompute-modules", "layernorm",
                    "--plan", "tp=2,sp=1,zero=1,recompute=selective").stdout
    assert "--deepep has no effect here: the model has no mixture of experts." in dense
    assert "--recompute-modules has no effect here: llama3-8b has no layernorm module apart from a fused " \
        "product." in dense
    moe = run_cli("-g", QWEN3_MOE, *base, "--recompute-modules", "moe_act", "--plan",
                  "tp=2,ep=8,etp=1,sp=1,zero=1").stdout
    assert "--recompute-modules has no effect here: no block of the plan is recomputed selectively " \
        "(recompute=selective)." in moe
    used = run_cli("-g", QWEN3_MOE, *base, "--deepep", "--recompute-modules", "moe_act", "--plan",
                   "tp=2,ep=8,etp=1,sp=1,zero=1,recompute=selective").stdout
    assert "no effect" not in used
