"""baselines.py and the sparse-embedding rule: hand-checked configurations,
PaSE against every baseline, and the CLI's --compare and --sparse-embeddings."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from baselines import compare, data_parallel, expert, fit, mesh_tensorflow, parallax
from conftest import GRAPH_NAMES, PROCS, built, costed, reference, rel, run_cli
from config_space import dimension_splits
from cost_model import CostModel, build_costs, evaluate, op_cost_parts
from dp_search import search
from graph import operators
from models import build_graph

SPARSE = CostModel(embedding_lookup=True, embedding_sync="best")


def by_name(g, strategy):
    return {op.name: d.config for op, d in zip(operators(g), strategy)}


class TestConfigurations:
    def test_fit(self):
        assert fit(128, 64) == 64 and fit(96, 64) == 48 and fit(8, 16) == 8 and fit(3, 2) == 1 and fit(7, 0) == 1

    def test_alexnet(self):
        g = built("alexnet")
        assert {d.config for d in data_parallel(g, 8)} == {(8, 1, 1, 1, 1, 1, 1), (8, 1, 1, 1), (8, 1), (8, 1, 1)}
        ex = by_name(g, expert(g, 8)[0])
        assert ex["conv1"] == ex["conv5"] == (8, 1, 1, 1, 1, 1, 1) and ex["pool5"] == (8, 1, 1, 1)
        assert ex["flatten/unravel"] == (8, 1)
        assert ex["fc6"] == ex["fc7"] == ex["fc8"] == (1, 8, 1)  # (b, n, k): the output split
        assert ex["softmax"] == (1, 8)

    def test_fallback_to_a_divisor(self):
        g = build_graph("alexnet", 96)
        assert data_parallel(g, 64)[0].config == (48, 1, 1, 1, 1, 1, 1)  # 64 does not divide 96
        ex = by_name(g, expert(g, 64)[0])
        assert ex["fc8"] == (1, 64, 1) and ex["softmax"] == (1, 64)

    def test_rnnlm_gnmt(self):
        g = built("rnnlm")
        ex, label = expert(g, 8)
        assert [d.config for d in ex] == [(8, 1, 1, 1), (2, 1, 4, 1, 1), (8, 1, 1, 1), (8, 1, 1)]  # LSTM (l, s, b, n, k)
        assert label.startswith("GNMT")
        assert expert(g, 1)[0][1].config == (1, 1, 1, 1, 1)

    def test_transformermesh_tensorflow(self):
        g = built("transformer")
        mt = by_name(g, mesh_tensorflow(g, 2, 4))
        assert mt["enc/embed"] == (2, 1, 1, 4)  # (b, l, e, v): vocabulary split n
        assert mt["enc0/attn/qkv"] == (1, 2, 4, 1, 1, 1)  # (s, b, h, l, k, e): heads
        assert mt["enc0/attn/split"] == (1, 2, 4, 1, 1)
        assert mt["enc0/attn/scores"] == mt["enc0/attn/context"] == (2, 4, 1, 1, 1)
        assert mt["enc0/attn/softmax"] == (2, 4, 1, 1)
        assert mt["enc0/attn/out"] == (2, 1, 1, 4, 1)  # (b, l, e, h, k)
        assert mt["enc0/ffn/in"] == (2, 1, 4, 1) and mt["enc0/ffn/out"] == (2, 1, 1, 4)  # f
        assert mt["dec0/cross/stack"] == (1, 2, 1, 1) and mt["enc0/ffn/norm"] == (2, 1, 1)
        assert mt["logits"] == (2, 1, 4, 1) and mt["softmax"] == (2, 1, 4)
        # 8 heads cannot be split 16 ways: the largest divisor, 8
        assert by_name(g, mesh_tensorflow(g, 4, 16))["enc0/attn/qkv"] == (1, 4, 8, 1, 1, 1)

    def test_transformer_expert_is_the_best_mesh(self):
        g = built("transformer")
        ex, label = expert(g, 16)
        costs = {n: evaluate(g, mesh_tensorflow(g, 16 // n, n)).total for n in (1, 2, 4, 8, 16)}
        n = min(costs, key=costs.get)
        assert ex == mesh_tensorflow(g, 16 // n, n)
        assert label == f"Mesh-TensorFlow: batch {16 // n} x model {n}"


def baselines(g, p, model=CostModel()):
    return {b.key: b for b in compare(built(g) if isinstance(g, str) else g, p, model)}


def project(g, strategy, p):
    """A strategy moved into the search space: each split lowered to the
    largest split the space allows for its dimension."""
    out = []
    for op, d in zip(operators(g), strategy):
        out.append(tuple(1 if letter in op.never_split else max(e for e in dimension_splits(size, p, g.graph["cutoff"])
                                                                 if e <= c)
                         for letter, size, c in zip(op.dims, op.space, d.config)))
    return out


@pytest.mark.parametrize("g", GRAPH_NAMES)
@pytest.mark.parametrize("p", PROCS)
def test_pase_beats_baselines_inside_the_search_space(g, p):
    """Data parallel and expert, or where they leave the space (the CNNs at
    p = 64: below the cutoff) their projection into it, never beat PaSE; so
    every setting compares two strategies of the space."""
    graph = built(g)
    cg = costed(g, p)
    pase = search(cg, 0).cost
    base = baselines(g, p)
    for key in ("data_parallel", "expert"):
        strategy = base[key].strategy if base[key].in_search_space else project(graph, base[key].strategy, p)
        index = cg.index_of(strategy)  # raises unless the space holds it
        inside = cg.cost_at(index)
        if base[key].in_search_space:
            # the baseline's cost is also the search's own table entries
            assert rel(inside, base[key].total_cost) <= 1e-12, key
        assert pase <= inside * (1 + 1e-12), key


def test_projection_moves_data_parallel_into_the_space():
    g = built("alexnet")
    dp = data_parallel(g, 64)
    assert dp[0].config == (64, 1, 1, 1, 1, 1, 1) and project(g, dp, 64)[0] == (32, 1, 1, 1, 1, 1, 1)
    assert costed("alexnet", 64).index_of(project(g, dp, 64))


def test_baselines_leave_the_space_where_expected():
    base = baselines("alexnet", 64)
    assert not base["data_parallel"].in_search_space  # 2 samples per device < cutoff 4
    assert [layer.in_space for layer in base["data_parallel"].layers][:2] == [False, False]
    assert baselines("alexnet", 32)["data_parallel"].in_search_space
    assert baselines("transformer", 64)["data_parallel"].in_search_space


class TestParallax:
    @pytest.mark.parametrize("g", ["alexnet", "resnet101", "inception3"])
    def test_equals_data_parallel_without_embeddings(self, g):
        base = baselines(g, 8)
        assert base["parallax"].total_cost == base["data_parallel"].total_cost
        assert "has no embeddings" in base["parallax"].note

    def test_rnnlm_hand_computed(self):
        g = built("rnnlm")
        W = 5000.0
        mm, nn, kk, m = 128 * 256 / 8, 2048, 100000, 8  # data parallel embedding on 8 devices
        dense = W * (nn * kk / m) * 2 * (m - 1)
        sparse = W * 2 * min(mm, kk) * nn
        dp = evaluate(g, data_parallel(g, 8)).total
        strategy, model = parallax(g, 8)
        assert rel(evaluate(g, strategy, model).total, dp - dense + sparse) <= 1e-12
        few = replace(model, distinct_rows=100)  # only 100 distinct tokens per device
        assert rel(evaluate(g, strategy, few).total, dp - dense + W * 2 * 100 * nn) <= 1e-12

    def test_sparse_rule_is_bounded_by_the_shard(self):
        op = operators(built("rnnlm"))[0]  # (b, s, d, v)
        W = 5000.0
        # tokens split 8 ways (4096 per device), vocabulary 32 ways: a device's
        # shard has 3125 rows, so at most 3125 distinct rows can be exchanged
        model = CostModel(embedding_sync="sparse")
        comp, comm = op_cost_parts(op, [(8, 1, 1, 32)], model)
        mm, nn, kk = 4096, 2048, 3125
        want = W * (mm * nn / 32) * 2 * 31 + W * 2 * kk * nn
        assert rel(comm[0], want) <= 1e-12 and rel(comp[0], 3 * mm * nn * kk) <= 1e-12
        # and never more distinct rows than tokens, whatever --distinct-rows says
        _, comm = op_cost_parts(op, [(8, 1, 1, 1)], replace(model, distinct_rows=10**6))
        assert rel(comm[0], W * 2 * 4096 * 2048) <= 1e-12


class TestSparseEmbeddingSearch:
    @pytest.mark.parametrize("g", ["alexnet", "resnet101", "inception3"])
    def test_nothing_changes_without_embeddings(self, g):
        a, b = costed(g, 8), build_costs(built(g), 8, SPARSE)
        assert all(np.array_equal(x, y) for x, y in zip(a.node_costs, b.node_costs))
        assert search(b, 0).strategy == search(a, 0).strategy

    def test_lookup_formula(self):
        op = operators(built("transformer"))[0]  # (b, l, e, v)
        W = 5000.0
        comp, comm = op_cost_parts(op, [(4, 1, 2, 1)], SPARSE)
        mm, nn, kk, m = 128 * 256 / 4, 256, 50000, 4
        assert rel(comp[0], 2 * mm * nn) <= 1e-12
        assert rel(comm[0], min(W * (nn * kk / m) * 2 * (m - 1), W * 2 * min(mm, kk) * nn)) <= 1e-12

    @pytest.mark.parametrize("g", ["rnnlm", "transformer"])
    @pytest.mark.parametrize("p", PROCS)
    def test_search_beats_parallax(self, g, p):
        graph = built(g)
        cg = build_costs(graph, p, SPARSE)
        base = baselines(graph, p, SPARSE)
        r = search(cg, 0)
        if base["parallax"].in_search_space:
            assert r.cost <= base["parallax"].total_cost * (1 + 1e-12)
        assert r.cost <= reference(g, p)["optimal_cost"]  # the lookup is never dearer than the GEMM


def cli(*args, cwd=None):
    return run_cli(*args, cwd=cwd).stdout


def test_compare_report_and_json(tmp_path):
    path = tmp_path / "plan.json"
    out = cli("-g", "transformer", "-p", 8, "--compare", "--output", path)
    assert "Compared with baselines" in out
    for label in ("PaSE", "data parallel", "expert", "Parallax", "Mesh-TensorFlow: batch"):
        assert label in out
    # the default search does not model sparse gradients; here Parallax wins and the report says so
    assert "Parallax is 4.4% cheaper than PaSE" in out and "--sparse-embeddings" in out
    assert out.rstrip().splitlines()[-1].startswith("Total cost: ")
    data = json.loads(path.read_text())
    assert set(data["baselines"]) == {"data_parallel", "fsdp", "expert", "parallax"}
    for key, b in data["baselines"].items():
        assert [layer["id"] for layer in b["layers"]] == list(range(204))
        single = tmp_path / f"{key}.json"
        single.write_text(json.dumps(b))
        again = cli("--evaluate", single).rstrip().splitlines()[-1]
        assert rel(float(again.removeprefix("Total cost: ")), b["total_cost"]) <= 1e-12, key
    assert data["baselines"]["parallax"]["embedding_sync"] == "sparse"
    g = built("transformer")
    dp_cost = evaluate(g, data_parallel(g, 8)).total
    assert data["baselines"]["data_parallel"]["total_cost"] == pytest.approx(dp_cost, rel=1e-12)
    want = dp_cost / reference("transformer", 8)["optimal_cost"]
    assert data["speedup_over_data_parallel"] == pytest.approx(want, rel=1e-9)
    assert f"{want:.2f}x" in out  # 1.13x


def test_compare_marks_baselines_outside_the_space():
    out = cli("-g", "alexnet", "-p", 64, "--compare")
    assert "data parallel *" in out and "* uses configurations the search does not enumerate" in out
    assert "Parallax equals data parallel here: alexnet has no embeddings" in out
    assert all(len(line) <= 80 for line in out.splitlines())


def test_sparse_embeddings_cli():
    out = cli("-g", "rnnlm", "-p", 8, "--sparse-embeddings", "--compare")
    pase = float(out.rstrip().splitlines()[-1].removeprefix("Total cost: "))
    assert pase < reference("rnnlm", 8)["optimal_cost"]
    assert "cheaper than PaSE" not in out


def test_compare_after_evaluate_speaks_of_the_strategy(tmp_path):
    plan = tmp_path / "dp.json"
    g = built("transformer")
    plan.write_text(json.dumps({"graph": "transformer", "procs": 8,
                                "layers": [{"id": i, "config": list(d.config)}
                                           for i, d in enumerate(data_parallel(g, 8))]}))
    out = cli("--evaluate", plan, "--compare")
    assert "this strategy" in out and "cheaper than this strategy" in out
    assert "than PaSE" not in out


def test_baselines_keep_a_reshape_contiguous():
    """A reshape whose sample dimension is not its leading one: data
    parallel splits it from the left instead (the search's own rule), so
    --compare works on such graphs."""
    from cost_model import check_strategy
    from graph import GraphBuilder
    from kinds.pointwise import Elementwise, SoftmaxCrossEntropy

    B = GraphBuilder("t", cutoff=1, batch=8)
    y = B.add("e", Elementwise(), B.data((4, 8, 6), "sbe"))
    B.add("loss", SoftmaxCrossEntropy(), B.reshape("r", y, (32, 6), "be"))
    g = B.graph
    dp = data_parallel(g, 8)
    assert dp[1].config == (4, 2, 1) and dp[2].config == (8, 1)  # the ravel of (s, b, e): s whole, then b
    check_strategy(g, dp)
    assert {b.key for b in compare(g, 8, CostModel())} == {"data_parallel", "fsdp", "expert", "parallax"}
