"""A block's overlapped collectives under the block's passes
(cost.evaluate.block_credits), and sharded gradients reduce-scattered
after every micro-batch where the framework does so
(Framework.sharded_every_micro_batch)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT, rel, run_cli

QWEN3_MOE = ROOT / "tests" / "data" / "families" / "qwen3_moe"
ZOO = json.loads((ROOT / "tests" / "data" / "published" / "megatron_moe_modelzoo.json").read_text())


def planned(*args):
    from cli.args import parse_args
    from planner import plan

    return plan(parse_args([str(a) for a in args])).result


def unpooled(monkeypatch, *args):
    """The same run with each collective windowed by its own operator's
    passes alone."""
    import cost.evaluate

    with monkeypatch.context() as m:
        m.setattr(cost.evaluate, "block_credits", lambda *a, **k: None)
        return planned(*args)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(*[st.floats(0.0, 1e6, allow_nan=False)] * 6, st.booleans()), min_size=1, max_size=12),
       st.floats(0.0, 1.0))
def test_pooling_saves_between_nothing_and_what_the_operators_leave_exposed(ops, contention):
    """For any block: what pooling saves is at least 0 and at most what
    the operators' own windows leave exposed (collectives between nodes
    under their operator's blocking collectives inside a node too),
    nothing where each operator's window covers its collectives, less
    under a framework's contention (what more runs under the passes slows
    them), and no less where the collectives between nodes may run under
    the block's blocking collectives inside a node."""
    from cost.evaluate import RECORD, pooled_saving

    fwd, bwd, t_fwd, t_bwd, n_fwd, n_bwd = (np.array([o[k] for o in ops]) for k in range(6))
    cross = np.array([o[6] for o in ops])
    exposed = (np.maximum(fwd - t_fwd - np.where(cross, n_fwd, 0.0), 0.0)
               + np.maximum(bwd - t_bwd - np.where(cross, n_bwd, 0.0), 0.0))
    under = np.minimum(fwd, t_fwd) + np.minimum(bwd, t_bwd)

    def record(inside_nvlink):
        return [exposed.sum(), fwd[~cross].sum(), bwd[~cross].sum(), fwd[cross].sum(), bwd[cross].sum(),
                t_fwd.sum(), t_bwd.sum(), inside_nvlink * n_fwd.sum(), inside_nvlink * n_bwd.sum(), under.sum()]

    sums = record(1.0)
    assert len(sums) == len(RECORD)
    saved = float(pooled_saving(sums))
    assert 0.0 <= saved <= exposed.sum() * (1 + 1e-12) + 1e-9
    assert 0.0 <= float(pooled_saving(sums, contention)) <= saved + 1e-9
    if not (cross & ((n_fwd > 0) | (n_bwd > 0))).any():  # no operator's own window widened: the block's may be
        assert float(pooled_saving(record(0.0))) <= saved * (1 + 1e-12) + 1e-9
    covered = [0.0, fwd.sum(), bwd.sum(), 0.0, 0.0, fwd.sum() + t_fwd.sum(), bwd.sum() + t_bwd.sum(), 0.0, 0.0,
               fwd.sum() + bwd.sum()]
    assert float(pooled_saving(covered)) == 0.0
    # many blocks at once give each block's own
    many = pooled_saving(np.array([sums, covered]))
    assert many.shape == (2,) and many[0] == pytest.approx(saved) and many[1] == 0.0


def test_collectives_between_nodes_run_under_blocking_collectives_inside_a_node():
    """A block whose gathers cross nodes (sharded experts over 32 devices
    on 4 nodes) and whose all-to-all stays inside one (8 experts' devices):
    pooled, the gathers run under the computation and under the
    all-to-all's time too, where gathers inside the node could not (their
    links are the all-to-all's)."""
    from cost.evaluate import pooled_saving

    t, gathers, alltoall = 10.0, 25.0, 8.0
    exposed = gathers - t  # each operator alone: the gathers' own product's window
    between = [exposed, 0.0, 0.0, gathers, 0.0, t, 0.0, alltoall, 0.0, t]
    inside = [exposed, gathers, 0.0, 0.0, 0.0, t, 0.0, alltoall, 0.0, t]
    assert float(pooled_saving(between)) == pytest.approx(alltoall)  # exposed 15 - 8 = 7 pooled
    assert float(pooled_saving(inside)) == 0.0


def test_a_block_s_collectives_run_under_the_block_not_their_operator_alone(monkeypatch):
    """Fully sharded experts on two nodes: the experts' products gather
    far more than their own passes hide, the attention beside them gathers
    little; pooled under the block, the step is shorter, and by exactly what
    the operators' communication lost; every operator keeps its blocking
    collectives.  The paper's model pools nothing (the reference figures
    stay exact)."""
    from cost.evaluate import block_credits, evaluate
    from models import build_graph

    args = ("-g", QWEN3_MOE, "-p", 16, "-b", 64, "--seq", 1024, "--device", "h100", "--framework", "megatron",
            "--plan", "dp=16,ep=8,zero=3", "--host-ms", 0)  # no expert layer waiting on the host
    pooled, alone = planned(*args), unpooled(monkeypatch, *args)
    assert pooled.step_seconds < 0.95 * alone.step_seconds
    assert pooled.compute == pytest.approx(alone.compute, rel=1e-12)
    lost = alone.operators_comm - pooled.operators_comm
    assert lost > 0 and pooled.total_cost == pytest.approx(alone.total_cost - lost, rel=1e-12)
    assert all(a.communication >= p.communication >= 0 for a, p in zip(alone.layers, pooled.layers))
    g = build_graph(str(QWEN3_MOE), batch=64, seq=1024)
    strategy = [layer.decision for layer in pooled.layers]
    credits = block_credits(g, strategy, pooled.cost_model)
    assert credits is not None and min(credits) >= 0 and sum(credits) == pytest.approx(lost, rel=1e-9)
    # the per-operator costing (what the per-operator search sums) keeps each operator's own window
    per_op = evaluate(g, strategy, pooled.cost_model)
    assert per_op.total == pytest.approx(alone.total_cost - alone.host, rel=1e-12)
    from cost_model import CostModel

    assert block_credits(g, strategy, CostModel()) is None  # the paper's model: nothing pooled


@pytest.mark.parametrize("spec, batch, host", [
    ("dp=16,ep=8,zero=3", 64, None), ("dp=16,ep=8,zero=3,microbatch=1", 32, None),
    ("dp=8,ep=8,pp=2,zero=1,microbatch=1", 32, None), ("dp=16,ep=8,zero=3,microbatch=1,recompute=full", 32, None),
    ("dp=16,ep=8,zero=3", 64, 0), ("dp=16,ep=8,zero=3,microbatch=1", 32, 0),
    ("dp=16,ep=8,zero=3,microbatch=1,recompute=full", 32, 0), ("dp=8,ep=8,pp=2,zero=1,microbatch=1", 32, 0)])
def test_the_standard_search_pools_as_the_plan_does(monkeypatch, spec, batch, host):
    """The standard search's estimate of a configuration equals the plan's
    own costing, blocks pooled: one micro-batch, micro-batches
    accumulated (each reduce-scattering its sharded gradients), stages,
    and full recomputation (the forward re-run under the backward pass
    widening its window); with Megatron-LM's host figure, whose expert
    layers waiting on the host gain nothing from the pooling, and without
    (``--host-ms 0``), where fully sharded experts run faster pooled."""
    import planner
    from cli.args import parse_args
    from models import build_graph
    from planner import Job, cost_model_for
    from standard import complete, parse

    given = () if host is None else ("--host-ms", str(host))
    s = parse_args(["-g", str(QWEN3_MOE), "-p", "16", "-b", str(batch), "--seq", "1024", "--device", "h100",
                    "--framework", "megatron", *given])
    g = build_graph(s.graph, batch=batch, seq=1024)
    job = Job.of(s, cost_model_for(s), 2**40)
    job.seed(g)
    std = complete(parse(spec), 16, batch)
    exact = planner._standard_result(job, std)
    est = planner.standard_costing(job, batch).estimate(std)
    assert est.cost == pytest.approx(exact.total_cost, rel=1e-12)
    if "zero=3" in spec:  # the pooling matters here, where the host does not bound the layers
        alone = unpooled(monkeypatch, "-g", QWEN3_MOE, "-p", 16, "-b", batch, "--seq", 1024, "--device", "h100",
                         "--framework", "megatron", "--plan", spec, *given)
        if host is None:
            assert exact.total_cost <= alone.total_cost * (1 + 1e-12) and exact.pooled > 0
        else:
            assert exact.total_cost < alone.total_cost


def test_sharded_gradients_are_reduced_after_every_micro_batch_where_the_framework_does():
    """Megatron-FSDP (zero=3 under Megatron-LM) and DeepSpeed's ZeRO 2 and
    3 reduce-scatter each micro-batch's gradients under its backward pass:
    nothing is left for the step's end, and the report says so; a
    distributed optimizer (ZeRO 1) and torchtitan's pipeline stages
    (gradients kept whole over the micro-batches) reduce once a step."""
    base = ("-g", QWEN3_MOE, "-p", 16, "-b", 32, "--seq", 1024, "--device", "h100")
    for framework, spec in (("megatron", "dp=16,ep=8,zero=3,microbatch=1"), ("deepspeed", "dp=16,zero=2,microbatch=1"),
                            ("deepspeed", "dp=16,zero=3,microbatch=1")):
        r = planned(*base, "--framework", framework, "--plan", spec)
        assert r.pipeline.stages[0].sync == 0.0 and r.pipeline.sync == 0.0, (framework, spec)
    once = planned(*base, "--framework", "megatron", "--plan", "dp=16,ep=8,zero=1,microbatch=1")
    assert once.pipeline.stages[0].sync > 0
    titan = planned("-g", QWEN3_MOE, "-p", 16, "-b", 32, "--seq", 1024, "--device", "h100", "--framework",
                    "torchtitan", "--plan", "dp=8,pp=2,zero=3,microbatch=1")
    assert all(s.sync > 0 for s in titan.pipeline.stages)
    out = run_cli(*base, "--framework", "megatron", "--plan", "dp=16,ep=8,zero=3,microbatch=1", "-q").stdout
    assert "each micro-batch's sharded gradients reduce-scattered under its backward pass" in out
    out = run_cli(*base, "--framework", "megatron", "--plan", "dp=16,ep=8,zero=1,microbatch=1", "-q").stdout
    assert "the gradients reduced once per step" in out


LLAMA8B = ROOT / "tests" / "data" / "configs" / "llama3-8b"


def test_torchtitan_reduces_each_micro_batch_without_a_pipeline_and_keeps_a_stage_whole_with_one():
    """torchtitan accumulating micro-batches without pipeline stages
    (train.py: one loss.backward() per micro-batch, FSDP2's gradient
    synchronisation left on) reshards and reduce-scatters after each: a
    step of four micro-batches holds what one micro-batch's step holds,
    leaves nothing for the step's end and says so; in a pipeline of two
    stages FSDP2 keeps the stage's bf16 weights and fp32 gradients whole
    over the step and reduces them once."""
    from cost.rules import keeps_stage_whole

    base = ("-g", LLAMA8B, "-p", 8, "--seq", 8192, "--device", "h100-96gb", "--framework", "torchtitan", "--compile")
    spec = "dp=8,zero=3,recompute=selective,microbatch=2"
    one = planned(*base, "-b", 16, "--plan", spec)
    four = planned(*base, "-b", 64, "--plan", spec)
    assert four.pipeline.m == 4 and not keeps_stage_whole(four.pipeline.stages[0].result.cost_model)
    assert four.memory == pytest.approx(one.memory, rel=1e-12)
    assert four.memory_bytes == pytest.approx(one.memory_bytes, rel=1e-12)
    assert four.pipeline.stages[0].sync == 0.0 and four.pipeline.sync == 0.0
    assert 4 * 0.95 * one.step_seconds < four.step_seconds < 4 * 1.05 * one.step_seconds
    out = run_cli(*base, "-b", 64, "--plan", spec, "-q").stdout
    assert ("Gradient accumulation: 4 micro-batches of 16 samples (2 per data-parallel replica), one after the other "
            "on all 8 devices, each " in out)
    assert "; each micro-batch's sharded gradients reduce-scattered under its backward pass\n" in out
    staged = planned(*base, "-b", 64, "--plan", "dp=4,pp=2,zero=3,recompute=selective,microbatch=2")
    stage = staged.pipeline.stages[0]
    assert keeps_stage_whole(stage.result.cost_model) and stage.sync > 0
    weights, grads = stage.result.memory[:2]
    params = 8_030_261_248 / 2  # about half the model's parameters in each stage
    assert 0.9 * params * (2 + 4 / 4) < weights < 1.1 * params * (2 + 4 / 4)  # bf16 whole and fp32 a quarter
    assert 0.9 * params * (4 + 4 / 4) < grads < 1.1 * params * (4 + 4 / 4)  # fp32 whole and fp32 a quarter


def test_gathered_weights_are_copied_at_each_gather():
    """FSDP2 copies each gathered weight out of the all-gather's buffer at
    every gather and each gradient into the reduce-scatter's at every
    reduction: a step of four accumulated micro-batches costs four steps of
    one, less the optimizer step three of them would repeat (92 bytes per
    fp32 parameter a device updates, at 80% of 2.4 TB/s); a pipeline stage
    kept whole gathers once before its first forward pass and reduces
    once; without sharded gradients the reduction is once a step."""
    from types import SimpleNamespace

    from cli.args import parse_args
    from cost.time import copies
    from planner import cost_model_for

    base = ("-g", LLAMA8B, "-p", 8, "--seq", 8192, "--device", "h100-96gb", "--framework", "torchtitan", "--compile")
    spec = "dp=8,zero=3,recompute=selective,microbatch=2"
    one = planned(*base, "-b", 16, "--plan", spec)
    four = planned(*base, "-b", 64, "--plan", spec)
    optimizer = 92 * 8_030_261_248 / 8 / (2400e9 * 0.8)
    assert rel(four.step_seconds - 4 * one.step_seconds, -3 * optimizer) < 1e-9
    model = cost_model_for(parse_args([str(a) for a in base]))
    sharded, whole = SimpleNamespace(sharded=True), SimpleNamespace(sharded=False)
    accumulated, staged = replace(model, micro_batches=4), replace(model, micro_batches=4, pipelined=True)
    assert copies(sharded, accumulated, 10.0, 3.0, 5.0, 2.0) == (20.0, 22.0)
    assert copies(sharded, staged, 10.0, 3.0, 5.0, 2.0) == (36.0, 0.0)
    assert copies(whole, accumulated, 10.0, 3.0, 5.0, 2.0) == (30.0, 12.0)


def test_torchtitan_s_pipeline_stage_gathers_its_weights_once_a_step(monkeypatch):
    """A torchtitan pipeline stage (FSDP2 not resharding after the
    forward pass, the schedule keeping the weights through the backward
    passes) gathers its weights once a step, under the first
    micro-batch's forward pass, and reduce-scatters their gradients once:
    without tensor parallelism, all an operator's communication is once a
    step, each of the m micro-batches paying 1/m of it; without pipeline
    stages each micro-batch gathers its own, whatever m is."""
    base = ("-g", LLAMA8B, "-p", 8, "--seq", 2048, "--device", "h100-96gb", "--framework", "torchtitan", "--compile")

    def comms(spec, batch):
        r = unpooled(monkeypatch, *base, "-b", batch, "--plan", spec)
        return np.array([layer.communication for layer in r.pipeline.stages[0].result.layers])

    staged = "dp=4,pp=2,zero=3,microbatch=1"  # 4 samples a micro-batch
    c2, c4, c8 = (comms(staged, 4 * m) for m in (2, 4, 8))
    assert c2.sum() > 0
    np.testing.assert_allclose(2 * c2, 4 * c4, rtol=1e-9)
    np.testing.assert_allclose(2 * c2, 8 * c8, rtol=1e-9)
    accumulated = "dp=8,zero=3,microbatch=1"  # 8 samples a micro-batch
    np.testing.assert_allclose(comms(accumulated, 16), comms(accumulated, 64), rtol=1e-12)


@pytest.mark.parametrize("spec", ["dp=8,zero=3,recompute=selective,microbatch=2",
                                  "dp=4,pp=2,zero=3,recompute=selective,microbatch=2"])
def test_the_standard_search_estimates_torchtitan_s_accumulation_as_the_plan_costs_it(spec):
    """The standard search's estimate of a torchtitan step with
    micro-batches accumulated, without and with pipeline stages, is the
    plan's own cost and peak."""
    import planner
    from cli.args import parse_args
    from models import build_graph
    from planner import Job, cost_model_for
    from standard import complete, parse

    s = parse_args(["-g", str(LLAMA8B), "-p", "8", "-b", "64", "--seq", "8192", "--device", "h100-96gb",
                    "--framework", "torchtitan", "--compile"])
    g = build_graph(s.graph, batch=64, seq=8192)
    job = Job.of(s, cost_model_for(s), 2**40)
    job.seed(g)
    std = complete(parse(spec), 8, 64)
    exact = planner._standard_result(job, std)
    est = planner.standard_costing(job, 64).estimate(std)
    assert est.cost == pytest.approx(exact.total_cost, rel=1e-12)
    assert est.memory == pytest.approx(exact.memory_bytes, rel=1e-12)


def test_the_model_zoo_s_megatron_fsdp_run_held_out(tmp_path, monkeypatch):
    """The Megatron-MoE Model Zoo's Qwen3-235B-A22B on 256 H100s with
    Megatron-FSDP (TP 2 x EP 8, micro-batch 4 of a global 2,048, full
    recomputation; 17.6 s a step), held out: within 5% with each
    micro-batch's gradients reduce-scattered in bf16, the recomputed
    forward pass's all-to-alls sent again, and each block's collectives
    pooled, those between nodes (the experts' gathers over 32 devices)
    under the all-to-alls inside a node too; the operators' own windows
    alone put it 25% slow, and the block's computation alone 15%."""
    label = "TP 2 x EP 8, ETP 1, Megatron-FSDP, micro-batch 4, full recomputation, DeepEP"
    r = dict(zip(ZOO["columns"], next(v for v in ZOO["rows"] if v[0] == label)))
    assert ZOO["row_flags"][label] == ["--grad-precision", "bf16"] and label in ZOO["row_flags_why"]
    spec = ZOO["models"][r["model"]]
    cfg = json.loads((ROOT / "tests" / "data" / spec["base"] / "config.json").read_text())
    d = tmp_path / r["model"]
    d.mkdir()
    (d / "config.json").write_text(json.dumps({**cfg, **spec["changes"]}))
    args = ("-g", d, "-p", r["gpus"], "-b", r["batch"], "--seq", r["seq"], "--device", r["device"], "--framework",
            "megatron", "--plan", r["plan"], *ZOO["flags"], *ZOO["row_flags"][label])
    res = planned(*args)
    assert abs(r["step_seconds"] / res.step_seconds - 1) < 0.05
    assert unpooled(monkeypatch, *args).step_seconds > 1.25 * r["step_seconds"]
    import cost.evaluate

    with monkeypatch.context() as m:  # the collectives between nodes under the computation alone
        m.setattr(cost.evaluate, "nvlink_windows", lambda nvlink: (0.0, 0.0))
        real = cost.evaluate.overlap_record
        m.setattr(cost.evaluate, "overlap_record", lambda *a, **k: np.concatenate(
            [real(*a, **k)[:7], np.zeros_like(real(*a, **k)[7:9]), real(*a, **k)[9:]]))
        assert planned(*args).step_seconds > 1.15 * r["step_seconds"]


def test_the_report_says_what_pooling_saved_and_what_the_search_bounded():
    """The per-operator search's report (Llama 2 7B on 64 H100s, the
    default search): the operators' total, then what pooling their blocks'
    collectives saved, equal to the plan file's ``pooled``; the memory
    line's verdict is of the operators' own costs, and says so."""
    import tempfile

    llama = ROOT / "tests" / "data" / "families" / "llama"
    with tempfile.TemporaryDirectory() as d:
        out = run_cli("-g", llama, "-p", 64, "--device", "h100", "-b", 128, "--pp", 1, "--output", "plan.json", "-q",
                      cwd=d).stdout
        rec = json.loads((Path(d) / "plan.json").read_text())
    assert rec["pooled"] > 0
    lines = out.splitlines()
    at = next(i for i, x in enumerate(lines) if x.startswith("Operators: "))
    assert lines[at + 1] == (f"  the repeated blocks' overlapped collectives under each block's passes: "
                             f"{rec['pooled']:.4e} less exposed than under each operator's own")
    assert any(x.startswith("Within ") and "(of the operators' own costs, before their blocks pool their "
               "collectives)" in x for x in lines)


@pytest.mark.parametrize("spec, batch", [("dp=16,ep=8,zero=3", 64), ("dp=16,ep=8,zero=3,microbatch=1", 32)])
def test_expert_layers_waiting_on_the_host_gain_nothing_from_pooling(monkeypatch, spec, batch):
    """Where the host's launches bound the expert layers (a slow host,
    ``--host-ms 500``), pooling their collectives shortens nothing: the
    step is the same pooled or not, though the operators' communication
    is less; with one micro-batch and with several."""
    args = ("-g", QWEN3_MOE, "-p", 16, "-b", batch, "--seq", 1024, "--device", "h100", "--framework", "megatron",
            "--plan", spec, "--host-ms", 500)
    pooled, alone = planned(*args), unpooled(monkeypatch, *args)
    assert pooled.pooled > 0
    assert pooled.step_seconds == pytest.approx(alone.step_seconds, rel=1e-12)


@pytest.mark.parametrize("spec, batch", [("dp=16,ep=8,zero=3", 64), ("dp=16,ep=8,zero=3,microbatch=1", 32)])
def test_torchtitan_s_contention_takes_its_share_of_what_pooling_saves(spec, batch):
    """torchtitan's collectives slow the computation they run under (its
    profile's contention): pooled, more of them run under the passes, so
    the block saves less than without contention, and the standard
    search's estimate still equals the plan's costing."""
    import planner
    from cli.args import parse_args
    from cost.evaluate import block_credits
    from models import build_graph
    from planner import Job, cost_model_for
    from standard import complete, parse

    s = parse_args(["-g", str(QWEN3_MOE), "-p", "16", "-b", str(batch), "--seq", "1024", "--device", "h100",
                    "--framework", "torchtitan"])
    g = build_graph(s.graph, batch=batch, seq=1024)
    model = cost_model_for(s)
    assert model.framework.contention > 0
    job = Job.of(s, model, 2**40)
    job.seed(g)
    std = complete(parse(spec), 16, batch)
    exact = planner._standard_result(job, std)
    assert exact.pooled > 0
    assert planner.standard_costing(job, batch).estimate(std).cost == pytest.approx(exact.total_cost, rel=1e-12)
    if exact.pipeline is None:
        strategy = [layer.decision for layer in exact.layers]
        free = replace(model, framework=replace(model.framework, contention=0.0))
        assert sum(block_credits(g, strategy, free)) > exact.pooled
