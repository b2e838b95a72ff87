"""The decoder families read from configs written by transformers' own
config classes (``tests/data/families``, by ``tests/make_family_configs.py``):
their parameter counts against those transformers' models gave, the
structure each family's parts build (latent attention, experts with shared
ones and dense first layers, windows and chunks, sinks, q/k norms,
soft-capping, post-norms), what windows and experts cost, and expert
parallelism in a standard configuration and in the per-operator search."""

from __future__ import annotations

import json
from pathlib import Path
import subprocess
import sys
from functools import lru_cache

import pytest

from conftest import ROOT
from cost_model import CostModel, build_costs, evaluate
from dp_search import search
from graph import operators, parameter_count
from models import build_graph
from models.hf_config import FAMILIES, read_config

DATA = ROOT / "tests" / "data" / "families"
COUNTS = json.loads((DATA / "counts.json").read_text())["parameters"]


def path(family: str) -> str:
    return str(DATA / family / "config.json")


@lru_cache(maxsize=None)
def graph(family: str, **params):
    return build_graph(path(family), **{"batch": 8, "seq": 4096, **params})


def ops(family: str, **params) -> dict:
    return {op.name: op for op in operators(graph(family, **params))}


def edges(family: str) -> set:
    """(producer, consumer) operator names of the family's graph."""
    g = graph(family)
    return {(g.nodes[a]["op"].name, g.nodes[b]["op"].name) for a, b in g.edges}


def test_every_family_is_shipped_and_every_shipped_one_read():
    assert sorted(COUNTS) == sorted(FAMILIES)


@pytest.mark.parametrize("family", sorted(COUNTS))
def test_parameters_equal_the_transformers_model(family):
    assert parameter_count(graph(family)) == COUNTS[family]


@pytest.mark.parametrize("family", sorted(f for f in COUNTS if read_config(path(f)).experts))
def test_active_parameters_leave_out_the_experts_a_token_does_not_use(family):
    cfg = read_config(path(family))
    moe = sum(cfg.moe) if cfg.moe else cfg.layers
    per_expert = 3 * cfg.width * cfg.expert_ffn + (2 * cfg.expert_ffn + cfg.width if cfg.expert_bias else 0)
    active = COUNTS[family] - moe * (cfg.experts - cfg.top_k) * per_expert
    assert graph(family).graph["active_parameters"] == active < COUNTS[family]


def test_deepseek_v3_latent_attention_and_experts():
    o = ops("deepseek_v3")
    assert o["layer0/attn/q_a"].space == (8, 4096, 1536, 7168)  # b s q e
    assert o["layer0/attn/q_b"].outputs[0].shape == (8, 128, 4096, 192)  # 128 heads of 128 + 64 rotary
    assert o["layer0/attn/kv_a"].outputs[0].shape == (8, 4096, 576)  # latent 512, rotary key 64
    assert o["layer0/attn/k"].outputs[0].shape == (8, 128, 4096, 192)  # the rotary key shared by every head
    att = o["layer0/attn/attention"]
    assert att.inputs[2].shape == (8, 128, 4096, 128) and att.outputs[0].shape == (8, 128, 4096, 128)
    assert "layer2/mlp/router" not in o and o["layer2/mlp/gate_up"].space == (2, 8, 4096, 18432, 7168)
    assert o["layer3/mlp/gate"].kind.k == 8 and o["layer3/mlp/gate"].kind.groups == 8
    assert o["layer3/mlp/dispatch"].outputs[0].shape == (256, 8, 128, 7168)  # 8 x 4096 / 256 slots an expert
    assert o["layer3/mlp/shared/gate_up"].space == (2, 8, 4096, 2048, 7168)
    assert o["layer60/mlp/combine"].outputs[0].shape == (8, 4096, 7168)


def test_windows_chunks_and_their_patterns():
    gemma3 = ops("gemma3_text")  # five sliding layers of 4096, then a global one
    assert [gemma3[f"layer{i}/attn/attention"].kind.window for i in range(7)] == [4096] * 5 + [0, 4096]
    assert ops("gemma2")["layer1/attn/attention"].kind.window == 0 and ops("gemma2")["layer0/attn/attention"].kind.window
    llama4 = ops("llama4")  # chunks of 8192 but every fourth layer global
    assert [llama4[f"layer{i}/attn/attention"].kind.chunk for i in range(4)] == [8192, 8192, 8192, 0]
    assert ops("mistral")["layer0/attn/attention"].kind.window == 4096
    assert ops("qwen3")["layer0/attn/attention"].kind.window == 0  # use_sliding_window false


def test_parts_of_the_other_families():
    oss = ops("gpt_oss")
    assert oss["layer0/attn/attention"].inputs[3].shape == (8, 8) and oss["layer0/attn/attention"].kind.window == 128
    assert oss["layer0/mlp/gate_up"].inputs[2].shape == (2, 128, 2880)  # one bias per expert
    assert ops("qwen3")["layer0/attn/q_norm"].inputs[1].shape == (128,)  # one scale per head width
    olmo = ops("olmo2")
    assert olmo["layer0/attn/q_norm"].inputs[1].shape == (32, 128) and "layer0/attn/norm" not in olmo
    assert "layer0/attn/post_norm" in olmo
    gemma2 = ops("gemma2")
    assert {"layer0/attn/norm", "layer0/attn/post_norm", "layer0/mlp/norm", "layer0/mlp/post_norm"} <= set(gemma2)
    assert gemma2["layer0/attn/attention"].kind.softcap and "logits/softcap" in gemma2
    assert ops("llama4")["layer0/attn/q_norm"].kind.params == 0  # an L2 norm without weights
    assert "layer0/mlp/shared/gate" in ops("qwen2_moe") and "layer0/mlp/shared/gate" not in ops("deepseek_v2")
    seed = ops("seed_oss")  # residual_dropout on both branches, as SeedOssAttention and SeedOssMLP drop them
    assert seed["layer0/attn/dropout_out"].kind.p == seed["layer0/mlp/dropout"].kind.p == 0.1
    assert "layer0/attn/dropout_out" not in ops("llama")
    neox = edges("gpt_neox")  # attention and feed-forward side by side, each normalising the layer's input
    assert ("layer0/attn/norm", "layer0/attn/qkv") in neox and ("layer0/mlp/norm", "layer0/mlp/up") in neox
    feeds = lambda name: {a for a, b in neox if b == name}  # noqa: E731
    assert feeds("layer0/mlp/norm") == feeds("layer0/attn/norm") == {"embed"}
    assert feeds("layer0/mlp/residual") == {"layer0/attn/residual", "layer0/mlp/down"}
    phi = ops("phi")  # one norm feeding both; a plain feed-forward; the head's bias
    assert "layer0/mlp/norm" not in phi and ("layer0/attn/norm", "layer0/mlp/up") in edges("phi")
    assert phi["logits"].inputs[-1].shape == (51200,) and "layer0/mlp/gate_up" not in phi
    assert ops("olmo")["layer0/attn/norm"].kind.params == 0 and ops("cohere")["norm"].kind.params == 1
    assert "embed/scale" in ops("granite") and "layer0/mlp/scale" in ops("granite") and "logits/scale" in ops("granite")
    exaone = read_config(path("exaone4"))  # its layer_types: three sliding layers to one global
    assert [w > 0 for w, _ in exaone.windows[:8]] == [True, True, True, False] * 2


@pytest.mark.parametrize("family, key", [("exaone4", "layer_types"), ("glm4", "attention_bias"),
                                         ("seed_oss", "attention_bias")])
def test_a_key_left_out_takes_the_config_class_default(tmp_path, family, key):
    """Without ``layer_types`` EXAONE 4 slides three layers in four (its
    class's sliding_window_pattern 4); without ``attention_bias`` GLM-4 and
    Seed-OSS keep their q/k/v biases (their classes default it on)."""
    data = json.loads(Path(path(family)).read_text())
    del data[key]
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert read_config(str(tmp_path / "config.json")) == read_config(path(family))


@pytest.mark.parametrize("family, switches, names", [
    ("phi", {"qk_layernorm": True, "resid_pdrop": 0.1, "embd_pdrop": 0.1},
     ("layer0/attn/q_norm", "layer0/attn/dropout_out", "layer0/mlp/dropout", "embed/dropout")),
    ("starcoder2", {"residual_dropout": 0.1, "embedding_dropout": 0.1},
     ("layer0/attn/dropout_out", "layer0/mlp/dropout", "embed/dropout")),
    ("gpt_neox", {"hidden_dropout": 0.1}, ("layer0/attn/dropout_out", "layer0/mlp/dropout", "embed/dropout")),
])
def test_a_family_switch_adds_its_operators(tmp_path, family, switches, names):
    """Phi's q/k LayerNorms (one scale and shift over the head width), and
    the dropouts each family's own keys switch on."""
    data = {**json.loads(Path(path(family)).read_text()), **switches}
    (tmp_path / "config.json").write_text(json.dumps(data))
    g = build_graph(str(tmp_path / "config.json"), batch=2, seq=64)
    found = {op.name: op for op in operators(g)}
    assert all(n in found for n in names) and not any(n in ops(family) for n in names)
    if family == "phi":
        assert found["layer0/attn/q_norm"].kind.params == 2 and found["layer0/attn/q_norm"].inputs[1].shape == (64,)


def test_a_window_costs_its_window_not_the_sequence():
    """Gemma 3 at 32768 tokens: a sliding layer's attention does about
    4096 / 16384 of a global layer's work, keeps as much, and under context
    parallelism receives a window of keys instead of the whole sequence."""
    o = ops("gemma3_text", seq=32768, batch=1)
    model = CostModel()
    sliding, full = o["layer0/attn/attention"], o["layer5/attn/attention"]
    one = (1,) * len(sliding.space)
    flops = [evaluate_op(op, one, model)[0] for op in (sliding, full)]
    assert flops[0] / flops[1] == pytest.approx((4096 * 4096 / 2 + (32768 - 4096) * 4096) / (32768 ** 2 / 2), rel=1e-3)
    g = graph("gemma3_text", seq=32768, batch=1)
    cp = [evaluate(g, _cp(g, 4)).edges, evaluate(g, _cp(g, 1)).edges]
    names = {v: op.name for v, op in enumerate(operators(g))}
    into = {names[v]: sum(c for (u, w), c in cp[0].items() if w == v) for v in names}
    assert into["layer5/attn/attention"] > 0 and into["layer0/attn/attention"] == 0  # keys gathered for the global


def evaluate_op(op, cfg, model):
    from cost_model import op_cost_parts

    comp, comm = op_cost_parts(op, [cfg], model)
    return float(comp[0]), float(comm[0])


def _cp(g, cp: int):
    from standard import complete, parse, strategy

    return strategy(g, complete(parse(f"cp={cp},tp=1"), cp, g.graph["batch"]))


def test_expert_parallelism_all_to_all_on_the_link_it_crosses():
    """Qwen3-MoE on 16 devices in nodes of 8: the dispatch's all-to-all
    over 8 experts' devices stays in a node; over 16 it crosses nodes and
    costs more, though each device sends the same copies."""
    from cluster import Cluster
    from standard import complete, parse, strategy

    g = graph("qwen3_moe", batch=16)
    model = CostModel(Cluster(gpus_per_node=8, inter_bw=2.0))
    names = [op.name for op in operators(g)]
    v = names.index("layer0/mlp/dispatch")
    comm = {}
    for ep in (1, 8, 16):
        sc = evaluate(g, strategy(g, complete(parse(f"ep={ep}"), 16, 16)), model)
        comm[ep] = sc.comm[v]
    assert comm[1] == 0 < comm[8] < comm[16]


def test_the_search_splits_experts():
    g = build_graph(path("granitemoe"), batch=8, seq=512)
    costed = build_costs(g, 8)
    assert any("x" in op.dims and costed.configs[v][:, op.dims.index("x")].max() == 8
               for v, op in enumerate(operators(g)))
    r = search(costed)
    assert r.cost == pytest.approx(evaluate(g, r.strategy).total, rel=1e-12)


def run(*args):
    return subprocess.run([sys.executable, str(ROOT / "scheduler.py"), *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT)


def test_the_report_gives_active_parameters_and_a_standard_plan_with_ep():
    proc = run("-g", DATA / "qwen3_moe", "-p", 16, "-b", 16, "--seq", 1024, "--device", "h100",
               "--plan", "tp=2,ep=8,zero=1", "-q")
    assert proc.returncode == 0, proc.stderr
    assert "15,350,731,776 parameters (1,761,186,816 active)" in proc.stdout
    assert "MFU" in proc.stdout and "on the active parameters" in proc.stdout
    bad = run("-g", DATA / "qwen3_moe", "-p", 16, "-b", 16, "--plan", "ep=3")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "ep=3 does not divide cp x dp = 16" in bad.stderr
