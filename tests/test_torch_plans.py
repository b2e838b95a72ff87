"""The ``dtensor`` exports, run: 4 CPU processes (torch.distributed, gloo)
build a small model of each family from its ``transformers`` config class,
apply the exported plan with ``exports/torch_apply.py`` and run a forward
and backward pass; the loss and every gradient equal a single process's.

Needs torch and transformers (``requirements-torch.txt``); CI installs
them in a second environment where this file must not skip."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch", reason="torch is not installed (pip install -r requirements-torch.txt)")
pytest.importorskip("transformers", reason="transformers is not installed (pip install -r requirements-torch.txt)")

WORLD = 4
BATCH, SEQ = 8, 16
SMALL = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 4, "vocab_size": 256, "max_position_embeddings": 64}
FAMILIES = {
    "llama": {"model_type": "llama", **SMALL},
    "mistral": {"model_type": "mistral", **SMALL, "sliding_window": None},
    "qwen2": {"model_type": "qwen2", **SMALL},
    "mixtral": {"model_type": "mixtral", **SMALL, "intermediate_size": 96, "num_local_experts": 4,
                "num_experts_per_tok": 2},
}
#: the plan kinds on 4 processes (context parallelism is PyTorch's ring attention, CUDA only: not run here)
KINDS = {"tp": "tp=2,dp=2", "tp+sp": "tp=2,dp=2,sp=1", "fsdp": "dp=4,zero=3",
         "tp+fsdp": "tp=2,dp=2,zero=3,sp=1,recompute=full", "pp": "pp=2,dp=2", "pp+tp": "pp=2,tp=2,sp=1"}
CASES = [(f, k) for f in FAMILIES for k in KINDS if k != "pp+tp" or f in ("llama", "mixtral")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _export(tmp, family: str, kind: str) -> str:
    """The ``--export dtensor`` file of the plan, written by the project."""
    from exports.frameworks import FRAMEWORKS
    from exports.frameworks.plans import PlanView
    from planner import plan
    from settings import Settings

    folder = tmp / family
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(FAMILIES[family]))
    p = plan(Settings(graph=str(folder / "config.json"), procs=WORLD, batch=BATCH, seq=SEQ, plan=KINDS[kind]))
    path = tmp / f"{family}_{kind}.json"
    path.write_text(FRAMEWORKS["dtensor"].render(PlanView(p.settings, p.graph, p.result)))
    return str(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every case run on 4 processes: ``{name: [result of each rank]}``
    and the wall time."""
    tmp = tmp_path_factory.mktemp("torch_plans")
    cases = [{"name": f"{f}_{k}", "family": f, "kind": k, "config": FAMILIES[f], "plan": _export(tmp, f, k),
              "batch": BATCH, "seq": SEQ, "seed": 0} for f, k in CASES]
    (tmp / "cases.json").write_text(json.dumps(cases))
    out = tmp / "out"
    out.mkdir()
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, str(ROOT / "tests" / "torch_worker.py"), str(r), str(WORLD), str(port),
                               str(tmp / "cases.json"), str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=env) for r in range(WORLD)]
    logs = [p.communicate(timeout=900)[0] for p in procs]
    wall = time.perf_counter() - start
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-4000:]
    results = {c["name"]: [torch.load(out / f"{c['name']}.rank{r}.pt") for r in range(WORLD)] for c in cases}
    return cases, results, wall


def _reference(config: dict):
    """The single process's loss and gradients."""
    sys.path.insert(0, str(ROOT / "tests"))
    from torch_worker import batch_of, loss_of, model_of

    model = model_of(config, 0)
    ids, labels = batch_of(config, BATCH, SEQ, 0)
    loss = loss_of(model(input_ids=ids).logits, labels)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_plan_kind_gives_the_single_process_loss_and_gradients(runs, family):
    cases, results, wall = runs
    loss, grads = _reference(FAMILIES[family])
    for case in (c for c in cases if c["family"] == family):
        ranks = results[case["name"]]
        losses = [r["loss"] for r in ranks if r["loss"] is not None]
        assert losses, case["name"]
        for got in losses:
            assert abs(got.item() - loss.item()) <= 1e-5 * abs(loss.item()), (case["name"], got.item(), loss.item())
        seen = {}
        for r in ranks:
            for name, g in r["grads"].items():
                seen.setdefault(name, g)
                assert torch.allclose(seen[name], g, rtol=0, atol=1e-6), (case["name"], name)  # ranks agree
        assert set(seen) == set(grads), (case["name"], sorted(set(grads) ^ set(seen))[:4])  # every parameter
        for name, want in grads.items():
            err = (seen[name] - want).abs().max() / want.abs().max().clamp_min(1e-12)
            assert err <= 1e-4, (case["name"], name, err.item())


def test_the_plans_are_applied_as_written(runs):
    """What ran is the plan's parallelism: the residual stream split over
    the sequence with sp, the parameters' placements and shards."""
    cases, results, _ = runs
    for case in cases:
        seen = results[case["name"]][0]["seen"]
        kind = case["kind"]
        if "sp" in KINDS[kind] and "tp" in KINDS[kind]:
            assert seen["residual"] == ["Shard(dim=1)"], (case["name"], seen)
        elif "tp" in kind:
            assert seen["residual"] == "local", (case["name"], seen)
        q = seen["placements"].get("model.layers.0.self_attn.q_proj.weight") or \
            seen["placements"].get("model.layers.2.self_attn.q_proj.weight")
        if kind == "fsdp":
            assert q == ["Replicate()", "Shard(dim=0)"], (case["name"], q)  # HSDP mesh: dp_replicate 1, dp_shard 4
        elif kind == "tp+fsdp":  # FSDP's shard of the tensor-parallel shard: strided on dimension 0
            assert q[-1] == "Shard(dim=0)" and q[1].startswith("_StridedShard(dim=0"), (case["name"], q)
        elif kind == "tp":
            assert q[-1] == "Shard(dim=0)", (case["name"], q)
        if case["family"] == "mixtral" and "tp" in kind:
            experts = seen["placements"].get("model.layers.0.mlp.experts.gate_up_proj") or \
                seen["placements"].get("model.layers.2.mlp.experts.gate_up_proj")
            assert experts[-1].startswith("_StridedShard(dim=1"), experts  # gate and up halves split alike
    print(f"\n{len(cases)} plans on {WORLD} processes: {runs[2]:.1f} s")


def test_a_plan_for_another_model_class_is_refused(tmp_path):
    from exports.torch_apply import PlanError, apply, load

    sys.path.insert(0, str(ROOT / "tests"))
    from torch_worker import model_of

    plan = load(_export(tmp_path, "llama", "fsdp"))
    assert plan.mesh_names == ("dp_replicate", "dp_shard") and plan.mesh_shape == (1, 4)
    with pytest.raises(PlanError, match="the plan is for a LlamaForCausalLM, not a Qwen2ForCausalLM"):
        apply(model_of(FAMILIES["qwen2"], 0), plan, mesh=None)
