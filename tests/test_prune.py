"""search/prune.py: dominance pruning keeps an optimum, is deterministic,
and shrinks the real graphs' searches."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from conftest import costed, outputs_under_hash_seeds, reference, rel
from dp_search import generate_seq, solve
from search.prune import prune


def random_problem(seed, ties=False):
    """2-7 nodes with 1-6 configurations, a random tree plus 0-3 extra
    edges; with ``ties`` small integer costs, so that equal costs abound."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 8))
    sizes = rng.integers(1, 7, size=n)
    edges = {(int(rng.integers(0, v)), v) for v in range(1, n)}
    for _ in range(int(rng.integers(0, 4))):
        u, v = sorted(rng.choice(n, size=2, replace=False).tolist())
        edges.add((u, v))
    if ties:
        nodes = [rng.integers(0, 4, size=k).astype(float) for k in sizes]
        emats = {(u, v): rng.integers(0, 4, size=(sizes[u], sizes[v])).astype(float) for u, v in sorted(edges)}
    else:
        nodes = [rng.uniform(0, 100, size=k) for k in sizes]
        emats = {(u, v): rng.uniform(0, 30, size=(sizes[u], sizes[v])) for u, v in sorted(edges)}
    return nodes, emats


def total(nodes, emats, index):
    return sum(nodes[v][i] for v, i in enumerate(index)) + sum(m[index[u], index[v]] for (u, v), m in emats.items())


def brute_force(nodes, emats, choices=None):
    choices = choices or [range(len(c)) for c in nodes]
    return min(total(nodes, emats, idx) for idx in itertools.product(*choices))


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
@pytest.mark.parametrize("seed", range(150))
def test_the_kept_configurations_hold_an_optimum(seed, ties):
    nodes, emats = random_problem(seed, ties)
    kept = prune(nodes, emats)
    assert all(len(k) >= 1 and np.all(np.diff(k) > 0) and 0 <= k[0] and k[-1] < len(c)
               for k, c in zip(kept, nodes))
    assert brute_force(nodes, emats, [k.tolist() for k in kept]) == pytest.approx(brute_force(nodes, emats),
                                                                                    rel=1e-12)


@pytest.mark.parametrize("ties", [False, True], ids=["distinct", "ties"])
@pytest.mark.parametrize("seed", range(150))
def test_pruned_search_equals_brute_force(seed, ties):
    nodes, emats = random_problem(seed, ties)
    r = solve(nodes, emats, generate_seq(len(nodes), list(emats))[0], prune=True, threads=1)
    want = brute_force(nodes, emats)
    assert r.cost == pytest.approx(want, rel=1e-12)
    assert total(nodes, emats, r.index) == pytest.approx(want, rel=1e-12)
    assert all(i in k for i, k in zip(r.index, r.kept))  # indices of the unpruned arrays, among the kept


def test_pruning_removes_something_on_random_problems():
    removed = 0
    for seed in range(40):
        nodes, emats = random_problem(seed)
        removed += sum(len(c) - len(k) for c, k in zip(nodes, prune(nodes, emats)))
    assert removed > 100


def test_an_isolated_node_keeps_its_cheapest_configuration_and_ties_keep_the_lowest_index():
    assert prune([np.array([5.0, 2.0, 7.0, 2.0])], {})[0].tolist() == [1]
    # two configurations alike in every array: only the first stays
    nodes = [np.array([3.0, 1.0, 1.0]), np.array([0.0, 0.0])]
    emats = {(0, 1): np.array([[0.0, 9.0], [4.0, 1.0], [4.0, 1.0]])}
    assert prune(nodes, emats)[0].tolist() == [0, 1]


def test_a_configuration_cheaper_with_every_neighbour_is_kept():
    # 0 is dearer on the node, but cheaper on the edge by more than that whatever the neighbour does
    nodes = [np.array([10.0, 1.0]), np.array([0.0, 0.0, 0.0])]
    emats = {(0, 1): np.array([[0.0, 0.0, 0.0], [20.0, 20.0, 20.0]])}
    assert prune(nodes, emats)[0].tolist() == [0]
    # here neither wins everywhere: both stay
    emats = {(0, 1): np.array([[0.0, 30.0, 0.0], [20.0, 0.0, 20.0]])}
    assert prune(nodes, emats)[0].tolist() == [0, 1]


def test_loops_are_refused():
    with pytest.raises(ValueError, match=r"edge \(0, 0\) is a loop"):
        prune([np.zeros(2)], {(0, 0): np.zeros((2, 2))})


@pytest.mark.parametrize("g, p", [("resnet101", 16), ("inception3", 8), ("transformer", 16), ("rnnlm", 32)])
def test_pruned_search_equals_the_unpruned_one_for_many_node_costs(g, p):
    """What a memory-constrained search does: the same edges, node costs
    ``cost + lambda * memory`` (here random) for many lambdas."""
    cg = costed(g, p)
    order = generate_seq(cg.n, list(cg.edge_costs))[0]
    rng = np.random.default_rng(7)
    extra = [rng.uniform(0, 1, size=len(c)) * float(np.mean(c)) for c in cg.node_costs]
    for lam in (0.0, 0.1, 1.0, 10.0):
        nodes = [c + lam * e for c, e in zip(cg.node_costs, extra)]
        pruned = solve(nodes, cg.edge_costs, order, prune=True, threads=1)
        full = solve(nodes, cg.edge_costs, order, prune=False, threads=1)
        assert rel(pruned.cost, full.cost) <= 1e-12
        assert rel(total(nodes, cg.edge_costs, pruned.index), full.cost) <= 1e-12


def test_the_real_graphs_shrink():
    cg = costed("transformer", 32)
    kept = prune(cg.node_costs, cg.edge_costs)
    assert max(map(len, kept)) < max(len(c) for c in cg.node_costs) * 0.6
    order = generate_seq(cg.n, list(cg.edge_costs))[0]
    r = solve(cg.node_costs, cg.edge_costs, order, prune=True)
    assert r.stats.work * 2 < r.stats.work_unpruned
    assert rel(r.cost, reference("transformer", 32)["optimal_cost"]) <= 1e-9


def test_same_kept_sets_whatever_the_hash_seed():
    outs = outputs_under_hash_seeds(
        "from models import build_graph; from cost_model import build_costs; from search.prune import prune\n"
        "cg = build_costs(build_graph('inception3'), 8)\n"
        "print([k.tolist() for k in prune(cg.node_costs, cg.edge_costs)])\n", seeds=("0", "1", "98765"))
    assert len(outs) == 1


@pytest.mark.parametrize("collide", [False, True], ids=["hashed", "colliding hashes"])
def test_equal_rows_and_columns_share_a_class(monkeypatch, collide):
    import search.prune as pruning

    if collide:  # every row and column hashes to 0: the check must catch it and sort instead
        monkeypatch.setattr(pruning, "weights", lambda n: np.zeros(n, np.uint64))
    rng = np.random.default_rng(3)
    base = rng.integers(0, 3, size=(5, 4)).astype(float)
    m = base[rng.integers(0, 5, size=40)][:, rng.integers(0, 4, size=30)]  # repeated rows and columns
    m[0, 0] = -0.0 if m[0, 0] == 0 else m[0, 0]
    rows, cols = pruning._Classes.of_matrix(m)
    for classes, a in ((rows, m), (cols, m.T)):
        assert np.array_equal(a, a[classes.rep[classes.of]])  # every row equals its class's first
        assert len({a[r].tobytes() for r in classes.rep}) == len(classes.rep)  # classes differ
        assert all(classes.of[r] == c for c, r in enumerate(classes.rep))


def _random_setting(seed):
    rng = np.random.default_rng(seed)
    g = ["alexnet", "resnet101", "inception3", "rnnlm", "transformer"][seed % 5]
    p = int(rng.choice([6, 12, 16, 24, 32, 48]))
    batch = int(rng.choice([32, 64, 96, 128, 256]))
    flops, bw = float(rng.uniform(1, 100)), float(rng.uniform(1, 400))
    return g, p, batch, flops, bw


@pytest.mark.parametrize("seed", range(15))
def test_pruned_search_equals_the_unpruned_one_in_random_settings(seed):
    from cluster import Cluster
    from cost_model import CostModel, build_costs
    from models import build_graph

    g, p, batch, flops, bw = _random_setting(seed)
    cg = build_costs(build_graph(g, batch), p, CostModel(Cluster(flops, bw)))
    order = generate_seq(cg.n, list(cg.edge_costs))[0]
    pruned = solve(cg.node_costs, cg.edge_costs, order, prune=True)
    full = solve(cg.node_costs, cg.edge_costs, order, prune=False)
    assert rel(pruned.cost, full.cost) <= 1e-12
    assert rel(cg.cost_at(pruned.index), full.cost) <= 1e-12


def test_an_operator_kept_whole_with_one_configuration_has_its_edges_cut_to_it():
    """A variable the reduction keeps (a chain's boundary, ``free``) though
    pruning left it one configuration: its edges are cut to that one (they
    were used unpruned, and a later elimination read a 3 x 2 matrix as 1 x 2)."""
    from search.elimination import eliminate, reduce_problem

    nodes = [np.array([0.0, 5.0, 5.0]), np.array([0.0, 0.0]), np.array([0.0, 0.0])]
    edges = {(0, 1): np.array([[0.0, 1.0]] * 3), (1, 2): np.array([[0.0, 3.0], [3.0, 0.0]])}
    order = generate_seq(3, list(edges))[0]
    red = reduce_problem(nodes, edges, order, prune=True, free={0})
    assert red.sizes == [1, 2, 2] and red.edges[(0, 1)].shape == (1, 2)
    done = eliminate(red, [1, 2], (0,))
    assert float(np.asarray(done.table).min()) == 0.0
