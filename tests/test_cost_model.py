"""cost_model.py: the reference numbers, and the same formulas at settings the
reference does not cover (checked against a plain per-configuration reading
of the cost formulas written here, and against hand-computed values)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cluster import Cluster
from conftest import GRAPH_NAMES, built, costed, reference, rel
from cost_model import (
    CostModel,
    build_costs,
    check_strategy,
    edge_costs,
    estimate_costs,
    evaluate,
    op_cost_parts,
    op_costs,
)
from graph import operators
from models import build_graph

TOL = 1e-9


# -- the reference: 5 graphs x p = 4..64 ---------------------------------------


def test_node_configurations_and_costs(setting):
    g, p = setting
    ref, cg = reference(g, p), costed(g, p)
    assert cg.n == ref["n_nodes"]
    for v, node in enumerate(ref["nodes"]):
        ours = dict(zip(map(tuple, cg.configs[v].tolist()), cg.node_costs[v].tolist()))
        theirs = dict(zip(map(tuple, node["configs"]), node["costs"]))
        assert ours.keys() == theirs.keys(), f"node {v}: configuration sets differ"
        worst = max(rel(ours[c], theirs[c]) if theirs[c] else abs(ours[c]) for c in theirs)
        assert worst <= TOL, f"node {v} ({node['op']}): relative error {worst:.2e}"


def test_edge_cost_summaries(setting):
    g, p = setting
    ref, cg = reference(g, p), costed(g, p)
    assert len(cg.edge_costs) == ref["n_edges"]
    for e in ref["edges"]:
        m = cg.edge_costs[(e["src"], e["tgt"])]
        assert m.size == e["n_pairs"]
        for stat in ("sum", "min", "max"):
            got, want = float(getattr(m, stat)()), e[stat]
            assert abs(got - want) <= TOL * max(abs(want), 1.0), (e["src"], e["tgt"], stat)


@pytest.mark.parametrize("g", GRAPH_NAMES)
def test_every_edge_matrix_entry_by_entry(g):
    """At p = 8, every entry of every edge's cost matrix against the spec's
    formula computed here from each configuration's tensor splits (the
    reference gives only each matrix's sum, min and max, which a permuted
    matrix would also match)."""
    p, W = 8, 5000.0
    graph, cg = built(g), costed(g, 8)
    ops = operators(graph)
    ref = {(e["src"], e["tgt"]): e for e in reference(g, p)["edges"]}
    for (u, v), m in cg.edge_costs.items():
        d = graph.edges[u, v]
        ts, tt = ops[u].outputs[d["out"]], ops[v].inputs[d["inp"]]
        T = np.array(ts.shape, dtype=float)

        def pieces(op, t, configs):
            splits = np.array([[math.prod(cfg[op.dims.index(c)] for c in a) for a in t.axes]
                               for cfg in configs.tolist()], dtype=float).reshape(len(configs), len(t.axes))
            return T / splits, splits.prod(axis=1)  # per-device extents, devices

        a, ps = pieces(ops[u], ts, cg.configs[u])
        b, pt = pieces(ops[v], tt, cg.configs[v])
        overlap = np.minimum(a[:, None, :], b[None, :, :]).prod(axis=2)
        want = W * 2 * np.maximum(b.prod(axis=1)[None, :] - np.where(pt[None, :] > ps[:, None], 0, overlap), 0)
        np.testing.assert_allclose(m, want, rtol=1e-12, atol=0, err_msg=f"edge {u} -> {v}")
        assert want.sum() == pytest.approx(ref[(u, v)]["sum"], rel=1e-9, abs=1e-6)


def test_reference_optimum_evaluates_to_its_cost(setting):
    g, p = setting
    ref = reference(g, p)
    assert rel(evaluate(built(g), ref["optimal_strategy"]).total, ref["optimal_cost"]) <= TOL
    cg = costed(g, p)
    assert rel(cg.cost_at(cg.index_of(ref["optimal_strategy"])), ref["optimal_cost"]) <= TOL


# -- a plain reading of the cost formulas, one configuration at a time ---------


def plain_op_cost(op, C, W):
    """The cost formulas of the PaSE cost model, one configuration at a time,
    reading the operator's kind and attributes."""
    size, split = dict(zip(op.dims, op.space)), dict(zip(op.dims, C))
    e = math.prod(size[c] / split[c] for c in op.dims)
    P = math.prod(C)

    def Z(letters):
        return math.prod(size[c] for c in letters)

    def S(letters):
        return math.prod(split[c] for c in letters)

    def AR(w, q):
        return W * (w / q) * 2 * (q - 1)

    def gemm(batch, m, n, k, pw):
        bb, mm, nn, kk = Z(batch) / S(batch), Z(m) / S(m), Z(n) / S(n), Z(k) / S(k)
        comp = 3 * mm * nn * kk + 3 * pw * mm * nn
        comm = AR(mm * nn, S(k)) + AR(mm * kk, S(n)) + AR(nn * kk, S(m))
        return bb * (comp + comm)

    def halo(t, r, s):
        b, c, h, w = t.shape
        Q = [S(a) for a in t.axes]
        tb, tc, th, tw = b / Q[0], c / Q[1], h / Q[2], w / Q[3]
        return W * ((th + r * (Q[2] > 1)) * (tw + s * (Q[3] > 1)) - th * tw) * tb * tc

    def need(src, tgt, ps, pt):
        return max(math.prod(tgt) - (0 if pt > ps else math.prod(map(min, src, tgt))), 0)

    kind, a = op.kind.name, op.kind
    if kind == "Conv":
        return gemm("g" if "g" in op.dims else "", "bhw", "n", "crs", a.pw) + halo(op.inputs[0], size["r"], size["s"])
    if kind == "Pooling":
        return e + halo(op.inputs[0], *a.kernel)
    if kind == "FC":
        return gemm("", op.dims[:-2], op.dims[-2], op.dims[-1], a.pw)
    if kind == "Embedding":
        return gemm("", op.dims[:-2], op.dims[-2], op.dims[-1], 0)
    if kind == "Einsum":
        (in1, in2), out = a.equation.split("->")[0].split(","), a.equation.split("->")[1]
        return gemm("".join(c for c in out if c in in1 and c in in2), "".join(c for c in out if c not in in2),
                    "".join(c for c in out if c not in in1), "".join(c for c in in1 if c in in2 and c not in out),
                    a.pw)
    if kind == "LSTM":
        L, s, b, u, _ = op.space
        cl, cs, cb, cn, ck = C
        mm, nn, kk = s * b / (cs * cb), 4 * u / cn, 2 * u / ck
        comp = 3 * mm * nn * kk + 3 * 3 * mm * nn
        comm = AR(mm * nn, ck) + AR(mm * kk, cn) + AR(nn * kk, cs * cb)
        return L / cl * (comp + comm) + L * s * W * need((b / cb, u / cn), (b / cb, u / ck), cb * cn, cb * ck)
    if kind == "Elementwise":
        return (1 + a.pw) * e
    if kind in ("Norm", "RMSNorm"):
        c = op.dims[a.axis]
        da = size[c] / split[c]
        stats, grads = AR(e / da, split[c]), AR(da, P / split[c])
        return 16 * e + 4 * stats + 4 * grads if kind == "Norm" else 8 * e + 2 * stats + 2 * grads
    if kind == "ReduceMean":
        return AR(e, S("".join(op.dims[i] for i in a.axes)))
    if kind == "Softmax":
        c = op.dims[a.axis]
        e1 = e / (size[c] / split[c])
        return 4 * e + e * size[c] + 2 * AR(e1, split[c]) + AR(e1 * size[c], split[c])
    if kind == "SoftmaxCrossEntropy":
        bs = e / (size[op.dims[-1]] / C[-1])
        return 4 * e + 2 * bs + (W * 2 * bs if C[-1] > 1 else 0)
    assert kind in ("Concat", "Split", "Stack", "Unstack", "Ravel", "Unravel", "Transpose"), kind
    return 0.0


def plain_edge_cost(src, out, tgt, inp, Cs, Ct, W):
    ts, tt = src.outputs[out], tgt.inputs[inp]
    S = [math.prod(Cs[src.dims.index(c)] for c in a) for a in ts.axes]
    Q = [math.prod(Ct[tgt.dims.index(c)] for c in a) for a in tt.axes]
    a = [x / s for x, s in zip(ts.shape, S)]
    b = [x / q for x, q in zip(ts.shape, Q)]
    overlap = 0 if math.prod(Q) > math.prod(S) else math.prod(map(min, a, b))
    return W * 2 * max(math.prod(b) - overlap, 0)


OTHER_SETTINGS = [
    # graph, batch, p, flops, bw, width
    ("alexnet", 32, 6, 7.0, 40.0, None),
    ("alexnet", 96, 1, 10.0, 16.0, None),
    ("resnet101", 48, 12, 15.5, 25.0, None),
    ("inception3", 20, 24, 3.0, 100.0, None),
    ("rnnlm", 60, 10, 8.0, 12.0, 1024),
    ("transformer", 18, 12, 125.0, 300.0, 256),
    ("transformer", 8, 3, 10.0, 16.0, None),
]


@pytest.mark.parametrize("g, batch, p, flops, bw, width", OTHER_SETTINGS)
def test_other_settings_match_plain_formulas(g, batch, p, flops, bw, width):
    model = CostModel(Cluster(flops, bw))
    W = 8000 * flops / bw
    graph = build_graph(g, batch, width)
    cg = build_costs(graph, p, model)
    rng = np.random.default_rng(7)
    ops = operators(graph)
    for v, op in enumerate(ops):
        C = cg.configs[v]
        assert len(C) >= 1 and (np.prod(C, axis=1) <= p).all()
        for i in rng.choice(len(C), size=min(len(C), 12), replace=False):
            want = plain_op_cost(op, tuple(C[i].tolist()), W)
            assert abs(cg.node_costs[v][i] - want) <= TOL * max(abs(want), 1.0), (v, op, C[i])
    for (u, v), m in cg.edge_costs.items():
        d = graph.edges[u, v]
        for _ in range(6):
            i, j = rng.integers(len(cg.configs[u])), rng.integers(len(cg.configs[v]))
            want = plain_edge_cost(ops[u], d["out"], ops[v], d["inp"], tuple(cg.configs[u][i].tolist()),
                                   tuple(cg.configs[v][j].tolist()), W)
            assert abs(m[i, j] - want) <= TOL * max(abs(want), 1.0), (u, v)


@pytest.mark.parametrize("g", GRAPH_NAMES)
def test_compute_is_hardware_free_and_communication_scales_with_W(g):
    graph = built(g)
    base, faster = CostModel(Cluster(10, 16)), CostModel(Cluster(30, 8))  # W grows 6x
    for v, op in enumerate(operators(graph)):
        C = costed(g, 8).configs[v]
        comp0, comm0 = op_cost_parts(op, C, base)
        comp1, comm1 = op_cost_parts(op, C, faster)
        np.testing.assert_allclose(comp1, comp0, rtol=1e-12)
        np.testing.assert_allclose(comm1, 6 * comm0, rtol=1e-12)
    for (u, v), m in costed(g, 8).edge_costs.items():
        d = graph.edges[u, v]
        ops = operators(graph)
        m1 = edge_costs(ops[u], d["out"], ops[v], d["inp"], costed(g, 8).configs[u],
                        costed(g, 8).configs[v], faster)
        np.testing.assert_allclose(m1, 6 * m, rtol=1e-12)


@pytest.mark.parametrize("g", GRAPH_NAMES)
def test_one_device_has_no_communication(g):
    graph = built(g)
    cg = build_costs(graph, 1)
    assert all(len(c) == 1 and c.tolist() == [[1] * c.shape[1]] for c in cg.configs)
    assert all(float(m[0, 0]) == 0.0 for m in cg.edge_costs.values())
    for op in operators(graph):
        comp, comm = op_cost_parts(op, [(1,) * len(op.space)], CostModel())
        assert comm[0] == 0.0
    strategy = [tuple(c[0]) for c in cg.configs]
    assert evaluate(graph, strategy).comm_total == 0.0


class TestHandComputed:
    """Values worked out by hand from the formulas, outside the reference."""

    def test_conv1_batch32_hybrid(self):
        op = operators(build_graph("alexnet", 32))[0]  # (b,c,h,w,r,s,n) = (32,3,55,55,11,11,96)
        W = 8000 * 5 / 20  # flops 5, bw 20 -> 2000 FLOP per word
        mm, nn, kk = 32 * 55 * 55 / 2, 96 / 3, 3 * 11 * 11  # b split 2, n split 3
        comp = 3 * mm * nn * kk + 3 * 1 * mm * nn
        comm = W * (mm * kk / 3) * 2 * 2 + W * (nn * kk / 2) * 2 * 1  # AR over n=3, over m=2
        got = op_costs(op, [(2, 1, 1, 1, 1, 1, 3)], CostModel(Cluster(5, 20)))[0]
        assert rel(got, comp + comm) <= 1e-12

    def test_pooling_halo(self):
        op = operators(build_graph("alexnet", 16))[1]  # pool1 (16, 96, 27, 27), input 55x55
        W = 5000.0
        # split h of the output 3 ways: the input image is split (1, 1, 3, 1)
        th, tw = 55 / 3, 55
        ghost = ((th + 3) * tw - th * tw) * 16 * 96
        e = 16 * 96 * 9 * 27
        assert rel(op_costs(op, [(1, 1, 3, 1)], CostModel())[0], e + W * ghost) <= 1e-12

    def test_data_parallel_outside_the_space(self):
        # b split 64 leaves 2 samples per device: below the cutoff of 4, so not
        # enumerated, but the cost model still prices it.
        g = built("alexnet")
        dp = [(64,) + (1,) * (len(op.space) - 1) for op in operators(g)]
        assert (64, 1, 1, 1, 1, 1, 1) not in map(tuple, costed("alexnet", 64).configs[0].tolist())
        sc = evaluate(g, dp)
        assert operators(g)[12].space == (128, 1024, 4096)  # fc8 (b, n, k)
        mm, nn, kk = 2, 1024, 4096
        want = 3 * mm * nn * kk + 5000 * (nn * kk / 64) * 2 * 63
        assert rel(sc.compute[12] + sc.comm[12], want) <= 1e-12
        assert all(c == 0 for c in sc.edges.values())  # every tensor stays split by b

    def test_transformer_edge_between_stack_and_qkv(self):
        g = built("transformer")
        ops = operators(g)
        names = {op.name: v for v, op in enumerate(ops)}
        u, v = names["dec0/cross/stack"], names["dec0/cross/qkv"]
        # Stack (1,b,l,e) unsplit; qkv (s,b,h,l,k,e) split s=3: every device
        # needs a third of the (3,128,256,512) tensor and P(Q)=3 > P(S)=1.
        m = edge_costs(ops[u], 0, ops[v], 0, [(1, 1, 1, 1)], [(3, 1, 1, 1, 1, 1)], CostModel())
        assert m[0, 0] == pytest.approx(5000 * 2 * 128 * 256 * 512)


# -- validation ----------------------------------------------------------------


@pytest.mark.parametrize(
    "make, message",
    [(lambda: Cluster(flops=0), "flops must be a number above 0"), (lambda: Cluster(bw=-1), "bw must be a number above"),
     (lambda: Cluster(flops=float("inf")), "flops must be a number above 0 and at most 1,000,000,000,000, got inf"),
     (lambda: Cluster(bw=float("nan")), "bw must be a number above 0"),
     (lambda: CostModel(distinct_rows=0), "distinct_rows must be an integer >= 1"),
     (lambda: CostModel(embedding_sync="ps"), "embedding_sync must be one of"),
     (lambda: CostModel(embedding_lookup="yes"), "embedding_lookup must be true or false"),
     (lambda: Cluster(flops=1e12, bw=1e-3), "make one word cost 8e\\+18 FLOP"),
     (lambda: Cluster(flops=1e300), "flops must be a number above 0 and at most 1,000,000,000,000"),
     (lambda: Cluster(bw=1e-300), "the model needs 1e-9 to 1e15")],
)
def test_bad_cost_model(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("p", [0, -4, 2.5, True])
def test_bad_procs(p):
    with pytest.raises(ValueError, match="p must be an integer from 1 to 1,000,000"):
        build_costs(built("alexnet"), p)


class TestCheckStrategy:
    def good(self):
        return [(1,) * len(op.space) for op in operators(built("alexnet"))]

    def test_accepts_lists(self):
        assert [d.config for d in check_strategy(built("alexnet"), [list(c) for c in self.good()])] == self.good()

    def test_wrong_count(self):
        with pytest.raises(ValueError, match="has 13 configurations; alexnet has 14"):
            check_strategy(built("alexnet"), self.good()[:-1])

    def test_wrong_length(self):
        s = self.good()
        s[3] = (1, 1)
        with pytest.raises(ValueError, match=r"node 3 \(pool2\): configuration \(1, 1\) has 2 entries"):
            check_strategy(built("alexnet"), s)

    def test_not_dividing(self):
        s = self.good()
        s[4] = (3, 1, 1, 1, 1, 1, 1)
        with pytest.raises(ValueError, match=r"node 4 \(conv3\).*does not divide its space \(128, 256"):
            check_strategy(built("alexnet"), s)

    @pytest.mark.parametrize("bad", [(0, 1), (1.5, 1), ("a", 1), (True, 1)])
    def test_not_positive_integers(self, bad):
        s = self.good()
        s[13] = bad
        with pytest.raises(ValueError, match="node 13 .*must hold integers >= 1"):
            check_strategy(built("alexnet"), s)


# -- memory ----------------------------------------------------------------------------


@pytest.mark.parametrize("g, p", [("alexnet", 64), ("resnet101", 16), ("inception3", 32), ("rnnlm", 8),
                                  ("transformer", 64), ("transformer", 1)])
def test_estimate_is_the_memory_the_arrays_take(g, p):
    est = estimate_costs(built(g), p)
    cg = costed(g, p)
    assert est.held == cg.nbytes
    assert est.largest_K == max(len(c) for c in cg.configs)
    assert est.largest_edge == max(m.size for m in cg.edge_costs.values())
    assert est.peak >= est.held + 8 * est.largest_edge


def test_estimate_counts_the_arrays_of_an_operator_sharing_its_weight():
    """Two identical operators, one reading a weight the other holds: their
    memory differs, so each has arrays of its own."""
    from graph import GraphBuilder
    from kinds.gemm import Einsum

    B = GraphBuilder("tied", cutoff=1, batch=8)
    x = B.data((8, 16), "bk")
    B.add("a", Einsum("bk,nk->bn"), x, B.weight((16, 16), "nk"))
    B.add("b", Einsum("bk,nk->bn"), x, B.weight((16, 16), "nk"), shared=(1,))
    cg = build_costs(B.graph, 4)
    assert cg.weights[0] is not cg.weights[1] and cg.weights[1].max() == 0
    assert estimate_costs(B.graph, 4).held == cg.nbytes


def test_too_large_cost_arrays_are_refused_before_anything_is_enumerated(monkeypatch):
    import cost.tables
    import cost_model

    def enumerate_nothing(*args):
        raise AssertionError("enumerated")

    monkeypatch.setattr(cost.tables, "configurations", enumerate_nothing)
    with pytest.raises(cost_model.CostTablesTooLarge, match=r"the cost arrays over 1,000,000 devices need \d+.\d+ GB "
                                                            r"but the limit is 1 GB \(up to 27545 configurations"):
        build_costs(built("transformer"), 10**6, memory_limit=10**9)


@pytest.mark.parametrize("g, p", [("transformer", 64), ("inception3", 32), ("rnnlm", 16), ("alexnet", 8)])
def test_edges_worked_out_per_distinct_split_are_the_same_numbers(monkeypatch, g, p):
    import cost.edges

    graph = built(g)
    ops = operators(graph)
    cg = costed(g, p)
    for spread in (0, 10**18):  # every matrix per distinct split, or none
        monkeypatch.setattr(cost.edges, "_SPREAD", spread)
        for u, v, d in sorted(graph.edges(data=True))[:40]:
            m = edge_costs(ops[u], d["out"], ops[v], d["inp"], cg.configs[u], cg.configs[v], cg.model)
            assert np.array_equal(m, cg.edge_costs[(u, v)])


def test_communication_is_summed_by_itself_whatever_the_compute():
    """Taking the compute from the total would round tiny communication
    away when the compute is astronomically larger."""
    from cost_model import StrategyCost

    sc = StrategyCost([(1,), (1,)], (1e40, 1e40), (1.0, 0.0), {(0, 1): 2.0}, (True, True), (0.0, 0.0), (0.0, 0.0))
    assert sc.comm_total == 3.0 and sc.total == 2e40
