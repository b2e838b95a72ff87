"""dp_search.py: exactness against brute force, the reference optima, the
memory limit and determinism."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from conftest import costed, outputs_under_hash_seeds, reference, rel
from dp_search import (
    SearchTooLarge,
    breadth_first,
    generate_seq,
    elimination,
    search,
    solve,
    worth_pruning,
)


def random_problem(seed):
    """3-8 nodes with 2-6 configurations; a random tree plus 0-3 extra edges."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 9))
    sizes = rng.integers(2, 7, size=n)
    edges = {(int(rng.integers(0, v)), v) for v in range(1, n)}  # a random tree
    for _ in range(int(rng.integers(0, 4)) if seed % 3 else 0):  # a third stay trees
        u, v = sorted(rng.choice(n, size=2, replace=False).tolist())
        edges.add((u, v))
    nodes = [rng.uniform(0, 100, size=k) for k in sizes]
    emats = {(u, v): rng.uniform(0, 100, size=(sizes[u], sizes[v])) for u, v in sorted(edges)}
    return nodes, emats


def total(nodes, emats, index):
    return sum(nodes[v][i] for v, i in enumerate(index)) + sum(m[index[u], index[v]] for (u, v), m in emats.items())


def brute_force(nodes, emats):
    return min(total(nodes, emats, idx) for idx in itertools.product(*(range(len(c)) for c in nodes)))


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("order_fn", [generate_seq, breadth_first], ids=["generateseq", "bfs"])
def test_random_graphs_equal_brute_force(seed, order_fn):
    nodes, emats = random_problem(seed)
    order, _ = order_fn(len(nodes), list(emats))
    r = solve(nodes, emats, order, threads=1)
    want = brute_force(nodes, emats)
    assert r.cost == pytest.approx(want, rel=1e-12)
    assert total(nodes, emats, r.index) == pytest.approx(r.cost, rel=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_dependent_sets_are_the_tables_axes(seed):
    nodes, emats = random_problem(seed)
    sizes = [len(c) for c in nodes]
    for order_fn in (generate_seq, breadth_first):
        order, dependent = order_fn(len(nodes), list(emats))
        pl = elimination(order, sizes, list(emats))
        assert [tuple(sorted(pl.scope[v])) for v in order] == dependent


def test_disconnected_graph_and_parallel_threads():
    rng = np.random.default_rng(1)
    nodes = [rng.uniform(0, 9, size=3) for _ in range(5)]
    emats = {(0, 1): rng.uniform(0, 9, (3, 3)), (2, 3): rng.uniform(0, 9, (3, 3))}
    want = brute_force(nodes, emats)
    for order_fn in (generate_seq, breadth_first):
        order, _ = order_fn(5, list(emats))
        for threads in (1, 2):
            assert solve(nodes, emats, order, threads=threads).cost == pytest.approx(want)


class TestGenerateSeq:
    def test_path(self):
        # 0-1-2-3: the ends have one neighbour; ties go to the smaller id
        assert generate_seq(4, [(0, 1), (1, 2), (2, 3)]) == ([0, 1, 2, 3], [(1,), (2,), (3,), ()])

    def test_star(self):
        order, dep = generate_seq(4, [(0, 1), (0, 2), (0, 3)])
        assert order == [1, 2, 0, 3] and dep == [(0,), (0,), (3,), ()]

    def test_cycle(self):
        order, dep = generate_seq(4, [(0, 1), (1, 2), (2, 3), (3, 0)])
        assert order == [0, 1, 2, 3] and dep == [(1, 3), (2, 3), (3,), ()]

    def test_breadth_first_frontier(self):
        # 0 -> {1, 2}, 1 -> 3, 2 -> 3: the frontier carries 2 while 1 is decided
        order, dep = breadth_first(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
        assert order == [0, 1, 2, 3] and dep == [(1, 2), (2, 3), (3,), ()]


@pytest.mark.parametrize("prune", [True, "auto"], ids=["pruned", "auto"])
def test_reference_optimum_generateseq(setting, prune):
    g, p = setting
    cg = costed(g, p)
    r = search(cg, 0, prune=prune)
    want = reference(g, p)["optimal_cost"]
    assert rel(r.cost, want) <= 1e-9
    assert rel(cg.cost_at(r.index), want) <= 1e-9
    assert [d.config for d in r.strategy] == [tuple(cg.configs[v][i].tolist()) for v, i in enumerate(r.index)]


@pytest.mark.parametrize("g, p", [(g, p) for g in ("alexnet", "rnnlm") for p in (4, 8, 16, 32, 64)]
                         + [("resnet101", 4)])
def test_reference_optimum_breadth_first(g, p):
    cg = costed(g, p)
    r = search(cg, 1, memory_limit=4 << 30)
    assert rel(r.cost, reference(g, p)["optimal_cost"]) <= 1e-9


@pytest.mark.parametrize("g", ["inception3", "transformer", "resnet101"])
def test_breadth_first_refuses_cleanly(g):
    with pytest.raises(SearchTooLarge, match=r"the search needs .* GB but the limit is 4.29 GB: "
                                             r"operator \d+ \(.+\) has \d+ dependent operators \{"):
        search(costed(g, 16), 1, memory_limit=4 << 30)


def test_memory_limit_applies_to_generateseq():
    cg = costed("transformer", 16)
    with pytest.raises(SearchTooLarge, match="limit is 1 MB"):
        search(cg, 0, memory_limit=10**6)


def test_plan_statistics():
    cg = costed("inception3", 8)
    r = search(cg, 0, prune=True)
    pl, st = r.elimination, r.stats
    assert st.algo == 0 and st.order == "GENERATESEQ"
    assert st.largest_dependent_set == pl.largest_dependent_set == 2
    assert st.largest_K == max(len(c) for c in cg.configs) == 30
    assert st.configurations == sum(len(c) for c in cg.configs)
    assert st.largest_K_pruned == max(map(len, r.kept)) == max(pl.sizes) < 30
    assert st.configurations_kept == sum(map(len, r.kept)) == sum(pl.sizes)
    assert st.work == sum(pl.sizes[v] * math.prod(pl.sizes[w] for w in pl.scope[v]) for v in pl.order)
    assert st.work_unpruned == elimination(generate_seq(cg.n, list(cg.edge_costs))[0], [len(c) for c in cg.configs],
                                    list(cg.edge_costs)).work > st.work
    assert pl.peak_bytes() >= pl.table_bytes == 8 * sum(pl.table_entries(v) for v in pl.order)
    # the dynamic program runs over the operators left with more than one configuration
    assert sorted(pl.order) == [v for v in range(cg.n) if len(r.kept[v]) > 1]
    # by default a search this small (7e5 entries) is not worth pruning
    auto = search(cg, 0)
    assert not auto.stats.pruned and auto.stats.work == auto.stats.work_unpruned and auto.cost == r.cost


def test_pruning_only_the_operators_worth_it():
    cg = costed("transformer", 32)
    order = generate_seq(cg.n, list(cg.edge_costs))[0]
    unpruned = elimination(order, [len(c) for c in cg.configs], list(cg.edge_costs))
    worth = worth_pruning(unpruned)
    assert 0 < len(worth) < cg.n
    r = solve(cg.node_costs, cg.edge_costs, order)
    assert r.stats.pruned and r.stats.work < unpruned.work
    assert all(len(r.kept[v]) == len(cg.configs[v]) for v in range(cg.n) if v not in worth)
    assert any(len(r.kept[v]) < len(cg.configs[v]) for v in worth)
    with pytest.raises(ValueError, match="prune must be true, false or 'auto'"):
        solve(cg.node_costs, cg.edge_costs, order, prune="yes")


def test_bad_algo_and_shapes():
    with pytest.raises(ValueError, match="algo must be one of"):
        search(costed("alexnet", 4), 2)
    with pytest.raises(ValueError, match=r"edge \(0, 1\) has shape"):
        solve([np.zeros(2), np.zeros(3)], {(0, 1): np.zeros((3, 2))}, [0, 1])
    with pytest.raises(ValueError, match="permutation"):
        solve([np.zeros(2), np.zeros(3)], {}, [0, 0])


def test_same_strategy_whatever_the_hash_seed():
    outs = outputs_under_hash_seeds(
        "from models import build_graph; from cost_model import build_costs; from dp_search import search\n"
        "r = search(build_costs(build_graph('transformer'), 8), 0)\n"
        "print(r.cost, r.strategy)\n")
    assert len(outs) == 1


def test_a_table_with_more_axes_than_numpy_handles_is_refused():
    # breadth-first from the centre of a star: its table spans all 40 leaves
    nodes = [np.array([0.0, 1.0])] + [np.array([0.0, 1.0]) for _ in range(40)]
    emats = {(0, v): np.array([[0.0, 2.0], [3.0, 0.0]]) for v in range(1, 41)}
    order, dependent = breadth_first(41, list(emats))
    assert len(dependent[0]) == 40
    with pytest.raises(SearchTooLarge, match=r"operator 0 has 40 dependent operators; the search handles at most 31"):
        solve(nodes, emats, order, prune=False, memory_limit=10**30)
    # GENERATESEQ takes the leaves first
    assert solve(nodes, emats, generate_seq(41, list(emats))[0], prune=False).cost == 0.0


def test_operators_left_with_one_configuration_leave_the_dynamic_program():
    cg = costed("transformer", 1)  # one configuration each
    for algo in (0, 1):  # breadth-first would otherwise need tables of 37 axes
        r = search(cg, algo)
        assert r.elimination.order == () and r.stats.largest_dependent_set == 0
        assert rel(r.cost, cg.cost_at([0] * cg.n)) <= 1e-12
