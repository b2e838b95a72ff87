"""Repeated blocks searched once when blocks choose options together
(recomputation, ZeRO: a variable per block) and the graph holds more than
one chain (dense layers, then layers with experts) or blocks outside every
chain: each block option's variable placed by its block (dp_search.places_of),
with exactly the plain search's optimum."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

import dp_search
from cluster import Cluster
from conftest import ROOT, rel
from cost_model import CostModel, build_costs, with_edges
from dp_search import places_of, problem_of, runs_of, search, search_within, stage_costs
from models import build_graph
from search.chain import Run, series, solve_chained
from search.elimination import solve
from search.order import generate_seq
from test_chain import append_blocks
from test_dp_search import total

FAMILIES = ROOT / "tests" / "data" / "families"
CLUSTER = Cluster(flops=312, bw=300, inter_bw=25, gpus_per_node=8, latency=5, precision="bf16")
SEARCHED = CostModel(CLUSTER, options=(("recompute", "auto"), ("zero", "auto")))


def two_runs(seed, K=2, a_blocks=2, b_blocks=2, a_size=1, b_size=2):
    """A random problem: a plain operator, a block of one operator outside
    every run with its option variable, a run ``A`` then a run ``B`` (its
    entry ``A``'s last exit) of different arrays, each block with an option
    variable of two values read by every operator of the block, and a last
    operator.  Returns ``(nodes, edges, runs, place, n_ops)``."""
    rng = np.random.default_rng(seed)
    nodes, edges, options = [rng.uniform(0, 10, K), rng.uniform(0, 10, K)], {}, []  # 0, and 1: the lone block
    edges[(0, 1)] = rng.uniform(0, 10, (K, K))
    options.append(([1], rng.uniform(0, 3, 2), [rng.uniform(0, 3, (K, 2))]))
    runs, prev = [], 1
    for count, size in ((a_blocks, a_size), (b_blocks, b_size)):
        costs = [rng.uniform(0, 10, K) for _ in range(size)]
        inner = [rng.uniform(0, 10, (K, K)) for _ in range(size - 1)]
        into = rng.uniform(0, 10, (K, K))
        opt_cost, opt_edges = rng.uniform(0, 3, 2), [rng.uniform(0, 3, (K, 2)) for _ in range(size)]
        start, entry = len(nodes), prev
        blocks = append_blocks(nodes, edges, prev, count, costs, inner, into)
        options += [(ids, opt_cost, opt_edges) for ids in blocks]
        prev = blocks[-1][-1]
        runs.append((blocks, entry, start, len(nodes)))
    tail = len(nodes)
    nodes.append(rng.uniform(0, 10, K))
    edges[(prev, tail)] = rng.uniform(0, 10, (K, K))
    n_ops, place, z_of = len(nodes), {}, {}
    for ids, cost, into_z in options:
        z = len(nodes)
        nodes.append(cost.copy())
        for v, m in zip(ids, into_z):
            edges[(v, z)] = m
        place[z], z_of[ids[0]] = ids[0], z
    out = [Run(tuple(tuple(b) + (z_of[b[0]],) for b in blocks), tuple(b[-1] for b in blocks), entry, start, stop)
           for blocks, entry, start, stop in runs]
    return nodes, edges, out, place, n_ops


@pytest.mark.parametrize("seed", range(4))
def test_two_runs_with_block_options_against_brute_force(seed):
    nodes, edges, runs, place, n_ops = two_runs(seed)
    assert len(nodes) == 14  # 9 operators, 5 option variables: 2**14 strategies
    assert series(runs, n_ops, list(edges), place)
    order, _ = generate_seq(len(nodes), list(edges))
    r = solve_chained(nodes, edges, order, runs, place=place, prune=False, threads=1)
    want = min(total(nodes, edges, c) for c in itertools.product(*[range(len(c)) for c in nodes]))
    assert r.cost == pytest.approx(want, rel=1e-12)
    assert total(nodes, edges, r.index) == pytest.approx(want, rel=1e-12)  # the plan recovered costs it


@pytest.mark.parametrize("seed", range(4))
def test_two_longer_runs_with_block_options_equal_the_plain_search(seed):
    nodes, edges, runs, place, n_ops = two_runs(seed, K=4, a_blocks=5, b_blocks=7, a_size=2, b_size=3)
    order, _ = generate_seq(len(nodes), list(edges))
    plain = solve(nodes, edges, order, threads=1)
    for prune in (False, True):
        r = solve_chained(nodes, edges, order, runs, place=place, prune=prune, threads=1)
        assert r.cost == pytest.approx(plain.cost, rel=1e-12)
        assert total(nodes, edges, r.index) == pytest.approx(plain.cost, rel=1e-12)


def test_series_places_block_options_and_refuses_one_reaching_another_block():
    nodes, edges, runs, place, n_ops = two_runs(0)
    assert not series(runs, n_ops, list(edges))  # without places, the lone block's variable stands nowhere
    a = runs[0]
    z = a.blocks[0][-1]
    across = dict(edges)
    across[(a.blocks[1][0], z)] = np.zeros((2, 2))  # block 0's option read by block 1
    assert not series(runs, n_ops, list(across), place)
    lone = n_ops  # the lone block's variable, in the segment before the runs
    reach = dict(edges)
    reach[(a.blocks[0][0], lone)] = np.zeros((2, 2))
    assert not series(runs, n_ops, list(reach), place)


def tiny(tmp_path, family, **changes):
    """A family's config made small: its structure (dense layers, then
    layers with experts) kept."""
    cfg = json.loads((FAMILIES / family / "config.json").read_text())
    cfg.update(hidden_size=256, intermediate_size=512, num_attention_heads=8, num_key_value_heads=8, head_dim=32,
               vocab_size=1024, **changes)
    d = tmp_path / family
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return build_graph(str(d / "config.json"), batch=16, seq=256)


DEEPSEEK = dict(moe_intermediate_size=64, num_hidden_layers=12, first_k_dense_replace=4, n_routed_experts=16,
                n_group=4, topk_group=2, num_experts_per_tok=2, q_lora_rank=64, kv_lora_rank=32, qk_nope_head_dim=16,
                qk_rope_head_dim=8, qk_head_dim=24, v_head_dim=16)
GLM = dict(moe_intermediate_size=64, num_hidden_layers=10, first_k_dense_replace=1, n_routed_experts=16, n_group=1,
           topk_group=1, num_experts_per_tok=2)


@pytest.mark.parametrize("family, changes, chains", [
    ("deepseek_v3", DEEPSEEK, ("4 x block of 20 operators", "8 x block of 29 operators")),  # two chains
    ("glm4_moe", GLM, ("9 x block of 21 operators",)),  # after a dense first layer, outside the chain
])
def test_families_with_block_options_chained_equal_the_plain_search(tmp_path, monkeypatch, family, changes, chains):
    """Recomputation and ZeRO searched: every block's option variable sits
    in a run or in a segment, the repeated blocks are searched once, and
    the optimum (alone and within a memory bound) is the plain search's."""
    monkeypatch.setattr(dp_search, "CHAIN_WORK", 0)  # small enough for the plain search: chained all the same
    cg = build_costs(tiny(tmp_path, family, **changes), 16, SEARCHED)
    problem = problem_of(cg)
    place = places_of(cg, problem)
    runs = runs_of(cg, problem, groups=True)
    assert len(runs) == len(chains) and len(place) == len(problem.groups)
    assert all(any(v >= cg.n for v in b) for r in runs for b in r.blocks)  # each block holds its variables
    assert set(place) <= {v for r in runs for v in r.variables}  # a lone dense layer is no block: none of its own
    plain, chained = search(cg, chained=False), search(cg, chained=True)
    assert chained.stats.repeated == chains
    assert chained.cost == pytest.approx(plain.cost, rel=1e-12)
    assert rel(cg.cost_at(chained.index, chained.choices), plain.cost) <= 1e-9
    capacity = 0.4 * sum(float(m.max()) for m in cg.memory)
    a, b = search_within(cg, capacity, chained=False), search_within(cg, capacity, chained=True)
    assert b.result.stats.repeated == chains
    assert a.cost == pytest.approx(b.cost, rel=1e-12) and a.status == b.status
    assert b.memory <= capacity


def test_stage_costs_of_the_longest_of_two_chains(tmp_path):
    """Two chains: the stages' costs are those of the longest one's blocks,
    what precedes it (the dense chain included) in the first stage; each
    equals the plain search of that stage's operators."""
    from pipeline_search import stage_ranges

    g = tiny(tmp_path, "deepseek_v3", **DEEPSEEK)
    cg = with_edges(build_costs(g, 16, CostModel(CLUSTER), edges=False))
    long = max(cg.chains, key=lambda c: c.count * c.size)
    assert len(cg.chains) == 2 and long.count == 8
    first, middle, last, whole = stage_costs(cg)
    assert whole == pytest.approx(search(cg, chained=False).cost, rel=1e-12)
    counts = (3, 2, 3)
    ranges = stage_ranges(g.number_of_nodes(), long, counts)
    for i, ((lo, hi), c) in enumerate(zip(ranges, counts)):
        want = search(cg.restrict(range(lo, hi)), chained=False).cost
        got = (first, middle, last)[i][c - 1]
        assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("layers", [2, 3, 4, 5, 6])
def test_stage_costs_whatever_the_number_of_blocks(tmp_path, layers):
    """The chain shortened to three blocks stands for any number of them
    (with four, the last block's edge in from the third is left out, not
    laid onto the third's own operators): the whole and each stage equal
    the plain search of their operators."""
    from pipeline_search import stage_ranges

    g = tiny(tmp_path, "llama", num_hidden_layers=layers)
    cg = with_edges(build_costs(g, 16, CostModel(CLUSTER), edges=False))
    long = max(cg.chains, key=lambda c: c.count * c.size)
    assert long.count == layers
    first, middle, last, whole = stage_costs(cg)
    assert whole == pytest.approx(search(cg, chained=False).cost, rel=1e-12)
    counts = (1, layers - 2, 1) if layers > 2 else (1, 1)
    ranges = stage_ranges(g.number_of_nodes(), long, counts)
    for i, ((lo, hi), c) in enumerate(zip(ranges, counts)):
        want = search(cg.restrict(range(lo, hi)), chained=False).cost
        got = (first, middle, last)[i if i < len(counts) - 1 else 2][c - 1]
        assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("layers", [2, 3, 4, 5])
def test_the_shortened_chain_keeps_every_edge_of_its_blocks(tmp_path, monkeypatch, layers):
    """The chain shortened for the stages' costs keeps the edges between
    its kept blocks (with two or three blocks, all of them: an edge into
    the last block was once dropped there too, block 0's exit into block 1
    with two), and with four or more the last block's own edges on the
    third's operators, never an edge of an operator to itself."""
    import search.chain

    seen = {}

    def capture(nodes, edges, order, run, **options):
        seen.update(edges=dict(edges), run=run)
        return np.zeros(1), np.zeros(1), np.zeros(1), 0.0

    monkeypatch.setattr(search.chain, "stage_costs", capture)
    g = tiny(tmp_path, "llama", num_hidden_layers=layers)
    cg = with_edges(build_costs(g, 16, CostModel(CLUSTER), edges=False))
    stage_costs(cg)
    edges, run = seen["edges"], seen["run"]
    assert all(u != v for u, v in edges)
    blocks = run.blocks
    size = len(blocks[0])
    for k in range(1, len(blocks)):  # each kept block entered from the one before, as block 1 is from block 0
        into = {(u - blocks[k - 1][0], v - blocks[k][0]) for u, v in edges if u in blocks[k - 1] and v in blocks[k]}
        first = {(u - blocks[0][0], v - blocks[1][0]) for u, v in edges if u in blocks[0] and v in blocks[1]}
        assert into == first and into, k
    if layers <= 3:  # nothing cut: every edge of the graph
        assert len(edges) == len(cg.edge_costs) and size
