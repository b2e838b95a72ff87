"""blocks.py and search/chain.py: repeated blocks found from the structure
alone, and searched once with exactly the plain search's optimum."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blocks import find_chains
from cluster import Cluster
from conftest import ROOT, built, reference, rel, run_cli
from cost_model import CostModel, build_costs
from dp_search import pieces_bound, pieces_within, runs_of, search, search_within
from graph import GraphBuilder, operators
from models import build_graph
from search.chain import Run, _Blocks, _reduced, minplus_vector, series, solve_chained, stage_costs
from search.order import generate_seq

CONFIGS = ROOT / "tests" / "data" / "configs"
TWO_LEVEL = CostModel(Cluster(flops=312, bw=300, inter_bw=25, gpus_per_node=8, latency=5, precision="bf16"))


def config(name, **params):
    return build_graph(str(CONFIGS / name / "config.json"), **params)


class TestDetection:
    def test_decoders_repeat_their_layers(self):
        for name, layers, size in (("llama3-8b", 32, 12), ("gpt2", 12, 12), ("mixtral-8x7b", 32, 16)):
            g = config(name, batch=8, seq=64)
            (c,) = find_chains(g)
            ops = operators(g)
            assert (c.count, c.size) == (layers, size)
            assert ops[c.start].name == "layer0/attn/norm" and ops[c.boundary(0)].name == "layer0/mlp/residual"
            assert ops[c.entry].name in ("embed", "embed/dropout")

    def test_materialized_attention_makes_larger_blocks(self):
        (c,) = find_chains(config("llama3-8b", batch=8, seq=64, attention="materialized"))
        assert (c.count, c.size) == (32, 14)

    def test_the_resnet_stages_and_the_transformer_encoder(self):
        resnet = find_chains(built("resnet101"))
        assert [(c.count, c.size) for c in resnet] == [(2, 7), (3, 7), (22, 7), (2, 7)]  # each stage's blocks 2..
        (enc,) = find_chains(built("transformer"))  # the decoder reads the encoder's output in every layer
        assert (enc.count, enc.size) == (6, 12) and operators(built("transformer"))[enc.start].name == "enc0/attn/qkv"
        assert find_chains(built("alexnet")) == ()

    def test_never_by_name(self):
        """Two identical layers named alike or not are found alike; layers
        that differ in a size are not."""
        from kinds.pointwise import Elementwise, Norm

        def graph(names, widths=(16, 16, 16)):
            B = GraphBuilder("t", cutoff=1)
            x = B.add("first", Elementwise(), B.data((8, widths[0]), "be"))
            for i, n in enumerate(names):
                y = B.add(f"{n}/a", Elementwise(pw=1), x)
                x = B.add(f"{n}/n", Norm(-1), y)
            return B.graph

        assert [(c.count, c.size) for c in find_chains(graph(["x", "y", "z"]))] == [(3, 2)]
        assert [(c.count, c.size) for c in find_chains(graph(["l0", "l1", "l2"]))] == [(3, 2)]

    def test_a_skip_across_blocks_is_no_chain(self):
        from kinds.pointwise import Elementwise

        B = GraphBuilder("t", cutoff=1)
        x0 = B.add("in", Elementwise(), B.data((8, 16), "be"))
        x = x0
        for i in range(4):
            x = B.add(f"b{i}", Elementwise(), x, x0)  # every block reads the first output: a wider boundary
        assert find_chains(B.graph) == ()


def append_blocks(nodes, edges, prev, count, costs, inner, into) -> list:
    """``count`` identical blocks appended to ``nodes`` and ``edges``: each a
    path of ``len(costs)`` nodes (copies of ``costs``, joined by the
    ``inner`` matrices), its first read from the last node before it
    (``prev``, then each block's last) through ``into``; their ids."""
    blocks = []
    for _ in range(count):
        ids = list(range(len(nodes), len(nodes) + len(costs)))
        nodes += [c.copy() for c in costs]
        edges[(prev, ids[0])] = into
        for j in range(len(costs) - 1):
            edges[(ids[j], ids[j + 1])] = inner[j]
        blocks.append(ids)
        prev = ids[-1]
    return blocks


def random_chain_problem(seed, blocks=4, size=3, K=3):
    """A chain of identical blocks (a path of ``size`` nodes each, the last
    one read by the next block) between a prefix node and a suffix node,
    with random costs: the same arrays in every block."""
    rng = np.random.default_rng(seed)
    nodes = [rng.uniform(0, 10, K)]  # 0: the entry
    block_costs = [rng.uniform(0, 10, K) for _ in range(size)]
    inner = [rng.uniform(0, 10, (K, K)) for _ in range(size - 1)]
    into = rng.uniform(0, 10, (K, K))
    edges = {}
    runs_blocks = [tuple(ids) for ids in append_blocks(nodes, edges, 0, blocks, block_costs, inner, into)]
    exits = [ids[-1] for ids in runs_blocks]
    prev = exits[-1]
    tail = len(nodes)
    nodes.append(rng.uniform(0, 10, K))
    edges[(prev, tail)] = rng.uniform(0, 10, (K, K))
    run = Run(tuple(runs_blocks), tuple(exits), 0, 1, tail)
    return nodes, edges, run


def brute_force(nodes, edges):
    import itertools

    best = np.inf
    for choice in itertools.product(*[range(len(c)) for c in nodes]):
        cost = sum(c[i] for c, i in zip(nodes, choice)) + sum(m[choice[u], choice[v]] for (u, v), m in edges.items())
        best = min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_chained_against_brute_force(seed):
    nodes, edges, run = random_chain_problem(seed, blocks=3, size=2, K=3)
    order, _ = generate_seq(len(nodes), list(edges))
    assert series([run], len(nodes), list(edges))
    r = solve_chained(nodes, edges, order, [run], prune=False, threads=1)
    want = brute_force(nodes, edges)
    assert r.cost == pytest.approx(want, rel=1e-12)
    got = sum(c[i] for c, i in zip(nodes, r.index)) + sum(m[r.index[u], r.index[v]] for (u, v), m in edges.items())
    assert got == pytest.approx(want, rel=1e-12)  # the recovered plan costs the optimum


def sub_problem(nodes, edges, keep, free=None):
    """The problem of the nodes ``keep`` alone (renumbered in order), the
    node ``free`` costing nothing (a stage's input from the stage before)."""
    at = {v: i for i, v in enumerate(keep)}
    costs = [np.zeros(len(nodes[v])) if v == free else nodes[v] for v in keep]
    return costs, {(at[u], at[v]): m for (u, v), m in edges.items() if u in at and v in at}


@pytest.mark.parametrize("entry_alike", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_stage_costs_against_brute_force(seed, entry_alike):
    """Every length of the first stage (with what precedes the blocks), a
    middle one (its input free) and the last (with what follows), and the
    whole chain: each the least cost of those operators alone, whether the
    first block reads the entry as the others read an exit (its matrix is
    then theirs) or not."""
    nodes, edges, run = random_chain_problem(seed, blocks=4, size=2, K=3)
    if not entry_alike:
        edges[(0, run.blocks[0][0])] = np.random.default_rng(seed + 100).uniform(0, 10, (3, 3))
    order, _ = generate_seq(len(nodes), list(edges))
    first, middle, last, whole = stage_costs(nodes, edges, order, run, prune=True, threads=1)
    blocks, tail = run.blocks, len(nodes) - 1
    for c in (1, 2, 3):
        held = [v for b in blocks[:c] for v in b]
        assert first[c - 1] == pytest.approx(brute_force(*sub_problem(nodes, edges, [0] + held)), rel=1e-12)
        prev = blocks[0][-1]  # the boundary the stage reads, costing nothing
        held = [v for b in blocks[1:1 + c] for v in b]
        assert middle[c - 1] == pytest.approx(brute_force(*sub_problem(nodes, edges, [prev] + held, prev)),
                                              rel=1e-12)
        prev = blocks[3 - c][-1]
        held = [v for b in blocks[4 - c:] for v in b]
        assert last[c - 1] == pytest.approx(brute_force(*sub_problem(nodes, edges, [prev] + held + [tail], prev)),
                                            rel=1e-12)
    assert whole == pytest.approx(brute_force(nodes, edges), rel=1e-12)
    red = _reduced(nodes, edges, order, [run], fold=False, prune=True, threads=1)
    assert _Blocks(red, run, None).first_like_the_rest() == entry_alike


def test_series_refuses_an_edge_that_bypasses_the_chain():
    nodes, edges, run = random_chain_problem(0)
    assert series([run], len(nodes), list(edges))
    bypass = dict(edges)
    bypass[(0, len(nodes) - 1)] = np.zeros((3, 3))  # the entry straight to the suffix
    assert not series([run], len(nodes), list(bypass))
    skip = dict(edges)
    skip[(run.blocks[0][0], run.blocks[2][1])] = np.zeros((3, 3))  # across blocks
    assert not series([run], len(nodes), list(skip))


def test_minplus_vector():
    v = np.array([1.0, 5.0, 0.0])
    M = np.array([[0.0, 9.0], [0.0, 0.0], [4.0, 0.5]])
    out, arg = minplus_vector(v, M)
    assert out.tolist() == [1.0, 0.5] and arg.tolist() == [0, 2]


@pytest.mark.parametrize("graph, p, model", [
    ("transformer", 32, CostModel()), ("transformer", 64, TWO_LEVEL), ("resnet101", 64, CostModel()),
    ("resnet101", 32, TWO_LEVEL), ("inception3", 32, CostModel()),
])
def test_chained_equals_the_plain_search_on_real_graphs(graph, p, model):
    cg = build_costs(built(graph), p, model)
    plain, chained = search(cg, chained=False), search(cg, chained=True)
    assert runs_of(cg)  # chains to use
    assert chained.cost == plain.cost  # exactly
    assert rel(cg.cost_at(chained.index), plain.cost) <= 1e-12
    if model == CostModel():
        assert rel(chained.cost, reference(graph, p)["optimal_cost"]) <= 1e-9


@pytest.mark.parametrize("name", ["llama3-8b", "gpt2", "mixtral-8x7b"])
def test_chained_equals_the_plain_search_on_configs(name):
    cg = build_costs(config(name, batch=16, seq=512), 32, TWO_LEVEL)
    assert search(cg, chained=True).cost == search(cg, chained=False).cost


def test_chained_with_options_and_within_memory():
    """With recomputation searched (a variable per block) and ZeRO, within a
    memory bound: the chained search finds the plain search's answer."""
    g = config("llama3-8b", batch=8, seq=1024)
    model = CostModel(Cluster(flops=312, bw=300, inter_bw=25, gpus_per_node=8, latency=5, precision="bf16"),
                      options=(("recompute", "auto"), ("zero", "auto")))
    cg = build_costs(g, 16, model)
    capacity = 0.45 * sum(float(m.max()) for m in cg.memory)
    a = search_within(cg, capacity, chained=False)
    b = search_within(cg, capacity, chained=True)
    assert a.cost == pytest.approx(b.cost, rel=1e-12) and a.status == b.status
    assert b.memory <= capacity


def test_the_report_names_the_repeated_blocks():
    out = run_cli("-g", CONFIGS / "llama3-8b" / "config.json", "-p", 64, "-b", 64, "--seq", 2048, "-q",
                  "--attention", "materialized").stdout
    assert "repeated blocks searched once: 32 x block of 14 operators" in out


@pytest.mark.parametrize("name", ["llama3-8b", "gpt2"])
def test_chained_searches_with_every_step_merged_keep_the_strategy(monkeypatch, name):
    """Repeated blocks searched once, every step merging what it sees
    alike (the blocks' boundary matrices and the segments' kept tables
    included): the same optimum and strategy as without merging, and the
    statistics count what was computed."""
    import search.contract as sc

    cg = build_costs(config(name, batch=16, seq=512), 32, TWO_LEVEL)
    plain = search(cg, chained=True)
    assert plain.stats.work_computed == plain.stats.work  # nothing this small merges by default
    monkeypatch.setattr(sc, "MERGE_WORK", 0)
    monkeypatch.setattr(sc, "MERGE_SHARE", 1e-6)
    merged = search(cg, chained=True)
    assert merged.stats.repeated and (merged.cost, merged.index) == (plain.cost, plain.index)
    assert merged.stats.work == plain.stats.work and merged.stats.work_computed < merged.stats.work


@pytest.mark.parametrize("name, options", [("gpt2", ()), ("llama3-8b", (("recompute", "auto"), ("zero", "auto")))])
def test_the_pieces_bound_lies_between_the_cheapest_operators_and_the_optimum(name, options):
    """What precedes the blocks, each block and what follows, each searched
    alone over a spanning tree of its edges: at most the whole search's
    optimum, more than every operator at its cheapest."""
    cg = build_costs(config(name, batch=16, seq=512), 32, CostModel(TWO_LEVEL.cluster, options=options))
    floor = math.fsum(float(c.min()) for c in cg.node_costs)
    bound = pieces_bound(cg)
    assert floor < bound <= search(cg).cost * (1 + 1e-12)
    assert pieces_bound(build_costs(built("alexnet"), 8, TWO_LEVEL)) == -math.inf  # no repeated blocks


def test_the_pieces_bound_within_the_memory_lies_below_the_search_within_it():
    """The Lagrangian dual of a memory capacity on the pieces
    (:func:`dp_search.pieces_within`): at least the pieces' bound, at most
    the cheapest strategy that fits (the search within the capacity,
    optimal or not); the pieces' bound itself where their own solution
    fits; a capacity that binds raises it; a cutoff stops it once
    reached."""
    cg = build_costs(config("llama3-8b", batch=16, seq=512), 32,
                     CostModel(TWO_LEVEL.cluster, options=(("recompute", "auto"), ("zero", "auto"))))
    free = pieces_bound(cg)
    unconstrained = search_within(cg, 1e15)
    assert unconstrained.status == "unconstrained optimum fits"
    assert pieces_within(cg, 1e15) == free  # the pieces' own solution fits: nothing to walk
    raised = 0
    for share in (0.9, 0.6, 0.3, 0.15):
        capacity = cg.least_memory + share * (unconstrained.memory - cg.least_memory)
        within = search_within(cg, capacity)
        bound = pieces_within(cg, capacity)
        assert free <= bound <= within.cost * (1 + 1e-12)
        raised += bound > free * (1 + 1e-6)
        if bound > free:
            cutoff = (free + bound) / 2
            assert cutoff <= pieces_within(cg, capacity, cutoff=cutoff) <= bound
    assert raised >= 2
    assert pieces_within(build_costs(built("alexnet"), 8, TWO_LEVEL), 1e9) == -math.inf
