"""search/contract.py and search/fused.py: the (min, +) contraction with
numpy and with the compiled kernel give the same bits; the back-substitution
re-derives the tables' values exactly; small searches never load numba."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from conftest import ROOT, costed, reference, rel
from dp_search import breadth_first, generate_seq, search, solve
from search.contract import contract, prepare, row_at, separable_axis
from test_dp_search import brute_force, random_problem

PATTERNS = [  # the axes (v, o1, ..., om) each factor spans
    ["X", "X"],
    ["X.", "XX"],
    ["X.", "XX", "XX"],
    ["X..", "X.X", "XX."],  # a (min, +) matrix product
    ["X..", "X..", "X.X", "XX.", "XX."],
    ["X...", "X..X", "X.X.", "XX.."],  # the Transformer's heaviest steps
    ["X..", "X.X", "XX.", "XXX"],  # no separable axis
    ["X...", "XX.X", "X.X.", "X.X."],
    ["X....", "X...X", "X..X.", "X.X..", "XX..."],
]


def random_step(pattern, seed):
    rng = np.random.default_rng(seed)
    m = len(pattern[0]) - 1
    shape = (int(rng.integers(2, 40)),) + tuple(int(rng.integers(2, 12)) for _ in range(m))
    factors = []
    for spans in pattern:
        fshape = [s if c == "X" else 1 for s, c in zip(shape, spans)]
        a = rng.uniform(0, 1e12, size=fshape)
        if sum(c == "X" for c in spans) == 2 and seed % 2:  # a transposed edge matrix, as the search passes them
            a = np.ascontiguousarray(a.reshape(fshape[0], -1).T).T.reshape(fshape)
        factors.append(a)
    return factors, shape


def brute_table(factors, shape):
    total = np.zeros(shape)
    for f in factors:
        total = total + f
    return total.min(axis=0)


@pytest.mark.parametrize("narrow", [0, 64], ids=["wide", "transposed"])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("pattern", PATTERNS, ids=[" ".join(p) for p in PATTERNS])
def test_fused_and_numpy_tables_are_the_same_bits(monkeypatch, pattern, seed, narrow):
    """Both fused forms: the rows of P against Q, and (for few columns) Q's
    rows against P's columns."""
    import search.contract as sc

    monkeypatch.setattr(sc, "NARROW", narrow)
    factors, shape = random_step(pattern, seed)
    want = brute_table(factors, shape)
    tables = []
    with ThreadPoolExecutor(2) as pool:
        for fused in (False, True):
            for threads, p in ((1, None), (2, pool)):
                step = prepare(factors, shape)
                tables.append(contract(step, threads=threads, pool=p, fused=fused))
    assert all(t.shape == shape[1:] for t in tables)
    assert all(np.array_equal(tables[0], t) for t in tables[1:])
    np.testing.assert_allclose(tables[0], want, rtol=1e-14)
    # the back-substitution adds the same numbers in the same order: it finds the table's value again
    step = prepare(factors, shape)
    contract(step, fused=True)
    step.release()
    rng = np.random.default_rng(seed)
    for _ in range(5):
        at = tuple(int(rng.integers(0, s)) for s in shape[1:])
        assert row_at(step, at).min() == tables[0][at]


def test_separable_axis():
    assert separable_axis([(False, False), (True, False), (False, True)], (5, 7)) == 2  # the longer one
    assert separable_axis([(False, False), (True, False), (False, True)], (7, 5)) == 1
    assert separable_axis([(False, False), (True, False), (False, True), (True, True)], (5, 7)) is None
    assert separable_axis([(True,)], (5,)) is None  # nothing left for the other group
    assert separable_axis([(False,), (True,)], (5,)) == 1


@pytest.mark.parametrize("seed", range(40))
def test_fused_and_numpy_searches_pick_the_same_strategy(seed):
    nodes, emats = random_problem(seed)
    for order_fn in (generate_seq, breadth_first):
        order, _ = order_fn(len(nodes), list(emats))
        a = solve(nodes, emats, order, kernel="numpy", threads=2)
        b = solve(nodes, emats, order, kernel="fused", threads=2)
        assert a.cost == b.cost and a.index == b.index
        assert b.cost == pytest.approx(brute_force(nodes, emats), rel=1e-12)


def test_fused_kernel_on_a_real_graph():
    cg = costed("transformer", 32)
    a = search(cg, 0, kernel="numpy")
    b = search(cg, 0, kernel="fused")
    assert b.stats.kernel == "fused" and a.stats.kernel == "numpy"
    assert a.cost == b.cost and a.index == b.index
    assert rel(b.cost, reference("transformer", 32)["optimal_cost"]) <= 1e-9


def test_bad_kernel_name():
    with pytest.raises(ValueError, match="kernel must be one of auto, numpy, fused"):
        solve([np.zeros(2)], {}, [0], kernel="gpu")


def test_a_small_search_does_not_load_numba():
    code = ("import sys; sys.argv = ['scheduler.py', '-g', 'resnet101', '-p', '32']; import scheduler\n"
            "scheduler.main(); print('numba' in sys.modules, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0 and proc.stderr.split() == ["False"]


def test_without_numba_the_search_stays_on_numpy(monkeypatch):
    from search.contract import fused_available

    monkeypatch.setitem(sys.modules, "numba", None)  # as if not installed: importing it fails
    monkeypatch.delitem(sys.modules, "search.fused", raising=False)
    assert not fused_available()


# Neighbour configurations seen alike: merged steps and Spread tables


def step_with_classes(pattern, seed, broken: bool = False):
    """A random step whose outer axes have configurations in classes: every
    factor spanning an axis sees the configurations of a class alike (as
    two splits that leave a shared tensor laid out the same way).  With
    ``broken``, one factor tells two members of a class apart."""
    rng = np.random.default_rng(seed)
    m = len(pattern[0]) - 1
    shape = (int(rng.integers(2, 30)),) + tuple(int(rng.integers(3, 14)) for _ in range(m))
    classes = [np.arange(shape[0])] + [rng.integers(0, max(1, s // 3), size=s) for s in shape[1:]]
    if seed % 4 == 0 and m:
        classes[1][:] = 0  # all alike on this axis
    factors = []
    for spans in pattern:
        base = rng.uniform(0, 1e12, size=[s if c == "X" else 1 for s, c in zip(shape, spans)])
        for axis, c in enumerate(spans):
            if c == "X" and axis:
                base = base.take(classes[axis], axis=axis)
        factors.append(np.ascontiguousarray(base))
    apart = [f for f in factors if f.ndim > 1 and f.shape[1] > 1]
    if broken and apart:
        apart[0][:, 1] = rng.uniform(0, 1e12, size=apart[0][:, 1].shape)
    return factors, shape


def merged(monkeypatch, on: bool):
    import search.contract as sc

    monkeypatch.setattr(sc, "MERGE_WORK", 0 if on else 1 << 62)
    monkeypatch.setattr(sc, "MERGE_SHARE", 1e-6)  # however much there is to read


def whole(table):
    from search.contract import Spread

    return table.full() if isinstance(table, Spread) else table


@pytest.mark.parametrize("broken", [False, True], ids=["alike", "one-apart"])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("pattern", PATTERNS, ids=[" ".join(p) for p in PATTERNS])
def test_merged_steps_give_the_same_bits(monkeypatch, pattern, seed, broken):
    factors, shape = step_with_classes(pattern, seed, broken)
    merged(monkeypatch, False)
    plain = prepare(factors, shape)
    assert plain.shape == shape and not plain.spread
    want = contract(plain)
    merged(monkeypatch, True)
    tables = []
    with ThreadPoolExecutor(2) as pool:
        for fused in (False, True):
            step = prepare(factors, shape)
            tables.append(contract(step, threads=2, pool=pool, fused=fused))
    assert step.work < plain.work or broken or len(shape) == 1  # something was merged
    for t in tables:
        assert whole(t).shape == shape[1:] and np.array_equal(whole(t), want)
    step.release()
    rng = np.random.default_rng(seed)
    for _ in range(5):
        at = tuple(int(rng.integers(0, s)) for s in shape[1:])
        assert row_at(step, at).min() == want[at]
        assert np.array_equal(row_at(step, at), row_at(plain, at))  # the same sums, the same order


@pytest.mark.parametrize("seed", range(6))
def test_a_spread_table_as_a_factor_gives_the_same_bits(monkeypatch, seed):
    """A merged step's table, kept once per class (a Spread), feeds the next
    step: the same table as from the whole array, both kernels, and the
    back-substitution reads it through its classes."""
    from search.contract import Spread

    merged(monkeypatch, True)
    factors, shape = step_with_classes(["X...", "X..X", "X.X.", "XX.."], seed)
    first = contract(prepare(factors, shape), fused=True)
    assert isinstance(first, Spread) and first.shape == shape[1:]
    assert first.array.size < first.full().size
    # the next operator eliminates o1; the table spans it and (o2, o3), as the search places it
    rng = np.random.default_rng(seed + 100)
    K = shape[1]
    shape2 = (K, shape[2], shape[3], 5)
    own = rng.uniform(0, 1e12, size=(K, 1, 1, 1))
    edge = rng.uniform(0, 1e12, size=(K, 1, 1, 5))
    spread = first.placed([0, 1, 2, None])
    as_array = first.full().reshape(shape2[:3] + (1,))
    assert spread.shape == as_array.shape
    for on in (False, True):
        merged(monkeypatch, on)
        for fused in (False, True):
            with_spread = prepare([own, spread, edge], shape2)
            got = whole(contract(with_spread, fused=fused))
            assert np.array_equal(got, whole(contract(prepare([own, as_array, edge], shape2), fused=fused)))
            np.testing.assert_allclose(got, brute_table([own, as_array, edge], shape2), rtol=1e-14)
            with_spread.release()
            at = (1, 2, 3)
            assert row_at(with_spread, at).min() == got[at]


def test_a_hash_collision_leaves_the_axis_whole(monkeypatch):
    """Slices that hash alike but differ are never merged (every merge is
    checked bit for bit)."""
    import search.contract as sc

    merged(monkeypatch, True)
    factors, shape = random_step(["X...", "X..X", "X.X.", "XX.."], 3)  # all configurations distinct
    want = brute_table(factors, shape)
    monkeypatch.setattr(sc, "_row_hash", lambda a, axis, sample=None: np.zeros(a.shape[axis], np.uint64))
    step = prepare(factors, shape)
    assert step.shape == shape and not step.spread
    np.testing.assert_allclose(whole(contract(step)), want, rtol=1e-14)


def test_minus_zero_and_zero_stay_apart(monkeypatch):
    """Equal means equal bits: -0.0 and 0.0 are kept apart (merging them
    could only change which of two equal costs is reported)."""
    merged(monkeypatch, True)
    own = np.zeros((3, 1))
    edge = np.array([[0.0, -0.0, 0.0, 5.0]] * 3)
    step = prepare([own, edge], (3, 4))
    (axis, inverse), = step.spread
    assert step.shape == (3, 3) and axis == 1
    assert inverse[0] == inverse[2] and len({inverse[0], inverse[1], inverse[3]}) == 3


def problem_with_alike_configurations(seed):
    """A random problem where each node's configurations come in classes
    that some of its edges do not tell apart."""
    rng = np.random.default_rng(seed)
    nodes, emats = random_problem(seed)
    for (u, v), m in emats.items():
        if rng.random() < 0.7:
            rows = rng.integers(0, max(1, m.shape[0] // 2), size=m.shape[0])
            cols = rng.integers(0, max(1, m.shape[1] // 2), size=m.shape[1])
            emats[(u, v)] = np.ascontiguousarray(m[rows][:, cols])
    return nodes, emats


@pytest.mark.parametrize("seed", range(40))
def test_searches_with_merged_steps_pick_the_same_strategy(monkeypatch, seed):
    nodes, emats = problem_with_alike_configurations(seed)
    order, _ = generate_seq(len(nodes), list(emats))
    got = []
    for on in (False, True):
        merged(monkeypatch, on)
        for kernel in ("numpy", "fused"):
            r = solve(nodes, emats, order, kernel=kernel, threads=2, prune=False)
            got.append((r.cost, r.index))
    assert all(g == got[0] for g in got[1:])
    assert got[0][0] == pytest.approx(brute_force(nodes, emats), rel=1e-12)


@pytest.mark.parametrize("graph, p", [("transformer", 64), ("inception3", 32), ("rnnlm", 16)])
def test_real_graphs_with_every_step_merged_keep_the_strategy(monkeypatch, graph, p):
    """The reference graphs, every step merging what it can: the same
    optimum and the same strategy as without merging."""
    cg = costed(graph, p)
    merged(monkeypatch, False)
    a = search(cg, 0)
    merged(monkeypatch, True)
    b = search(cg, 0)
    assert a.cost == b.cost and a.index == b.index
    assert rel(b.cost, reference(graph, p)["optimal_cost"]) <= 1e-9


def smallest_limit(run, hi: int) -> int:
    """The smallest memory limit (bytes) under which ``run(limit)`` does not
    raise SearchTooLarge (bisection: needing less never fails more)."""
    from dp_search import SearchTooLarge

    lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            run(mid)
            hi = mid
        except SearchTooLarge:
            lo = mid
    return hi


def limited(nodes, emats, order=None):
    """A function of the memory limit that searches this problem with it
    (one thread, numpy, unpruned: what the limit bounds is the tables)."""
    order = generate_seq(len(nodes), list(emats))[0] if order is None else order
    return lambda limit: solve(nodes, emats, order, kernel="numpy", threads=1, prune=False, memory_limit=limit)


OBJECTS = 100_000  # bytes of Python objects (steps, lists, dicts) beside the arrays the limit counts


def traced_peak(run, limit):
    """``run(limit)`` and the peak of what it allocated (tracemalloc sees
    numpy's arrays, and Python's objects: up to ``OBJECTS`` here)."""
    import tracemalloc

    tracemalloc.start()
    try:
        return run(limit), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("seed", range(12))
def test_merged_tables_are_counted_as_they_are_kept(monkeypatch, seed):
    """A search whose steps merge runs under the smallest limit it accepts
    with the same strategy as without a limit, allocating no more than
    that limit; a byte less and it stops, naming the step it could not
    afford when it got that far."""
    from dp_search import SearchTooLarge

    run = limited(*problem_with_alike_configurations(seed))
    want = run(None)
    merged(monkeypatch, True)
    least = smallest_limit(run, 1 << 30)
    got, peak = traced_peak(run, least)
    assert (got.cost, got.index) == (want.cost, want.index) and peak <= least + OBJECTS
    with pytest.raises(SearchTooLarge, match=r"the search needs (more than the limit of .* after \d+ of its "
                                             r"\d+ steps it holds .* may need|.* GB but the limit is)"):
        run(least - 1)


def layered_problem(seed):
    """120 operators of 40 configurations each in a chain with skips (so
    that tables span two operators), every edge seeing its ends'
    configurations in 4 classes: the tables kept outweigh any one step."""
    rng = np.random.default_rng(seed)
    n, K = 120, 40
    nodes = [rng.uniform(0, 100, size=K) for _ in range(n)]
    emats = {}
    for u, v in [(i, i + 1) for i in range(n - 1)] + [(i, i + 2) for i in range(0, n - 2, 2)]:
        base = rng.uniform(0, 100, size=(4, 4))
        emats[(u, v)] = np.ascontiguousarray(base[rng.integers(0, 4, size=K)][:, rng.integers(0, 4, size=K)])
    return nodes, emats


def test_some_searches_fit_only_merged(monkeypatch):
    """The check as the tables come is not idle: merged tables fit where
    the estimate of whole ones does not, and the search finds the same
    strategy there."""
    fewer = 0
    for seed in range(4):
        run = limited(*layered_problem(seed))
        want = run(None)
        merged(monkeypatch, False)
        plain = smallest_limit(run, 1 << 30)
        merged(monkeypatch, True)
        least = smallest_limit(run, 1 << 30)
        got, peak = traced_peak(run, least)
        assert (got.cost, got.index) == (want.cost, want.index) and peak <= least + OBJECTS
        fewer += least < plain
    assert fewer == 4


def test_a_spread_factor_added_beforehand_gives_the_same_bits(monkeypatch):
    """A merged table read together with a smaller factor over its own axes
    (added to it once beforehand): spread out first, the same sums."""
    from search.contract import Spread

    rng = np.random.default_rng(7)
    K, A, B = 9, 12, 30
    classes = rng.integers(0, 4, size=A)
    table = Spread(rng.uniform(0, 1e12, size=(K, 4, 1)), [None, classes, None])  # over (v, o1), o1 in 4 classes
    small = rng.uniform(0, 1e12, size=(K, 1, 1))  # v's own costs: merged into the table beforehand
    edge = rng.uniform(0, 1e12, size=(K, 1, B))
    whole_table = table.full()
    for on in (False, True):
        merged(monkeypatch, on)
        for fused in (False, True):
            step = prepare([small, table, edge], (K, A, B))
            got = whole(contract(step, fused=fused))
            want = contract(prepare([small, whole_table, edge], (K, A, B)), fused=fused)
            assert np.array_equal(got, whole(want))
            np.testing.assert_allclose(got, brute_table([small, whole_table, edge], (K, A, B)), rtol=1e-14)
            step.release()
            assert row_at(step, (5, 7)).min() == got[5, 7]


def test_axes_left_whole_when_reading_them_costs_too_much(monkeypatch):
    """A step only reads factors worth a share of its work to find what it
    sees alike: past that, the axes stay whole (a merged table read there
    is spread out), with the same bits."""
    import search.contract as sc

    factors, shape = step_with_classes(["X...", "X..X", "X.X.", "XX.."], 1)
    want = brute_table(factors, shape)
    merged(monkeypatch, True)
    monkeypatch.setattr(sc, "MERGE_SHARE", 1e12)  # nothing is worth reading
    step = prepare(factors, shape)
    assert step.shape == shape and not step.spread
    np.testing.assert_allclose(whole(contract(step)), want, rtol=1e-14)
    monkeypatch.setattr(sc, "MERGE_SHARE", 1e-6)
    first = contract(prepare(factors, shape))
    assert isinstance(first, sc.Spread)
    nxt = [first.placed([0, 1, 2]), np.zeros((shape[1], 1, 1))]
    monkeypatch.setattr(sc, "MERGE_SHARE", 1e12)
    step = prepare(nxt, shape[1:])
    assert not step.spread and all(not isinstance(a, sc.Spread) for g in step.groups for a in g) or step.inner is None
    np.testing.assert_array_equal(whole(contract(step)), first.full().min(axis=0))


def test_a_search_counted_as_it_comes_stays_within_its_limit(monkeypatch):
    """Whatever limit the search accepts when it counts merged tables as
    they come, what it allocates (traced) stays within it: the hashes,
    checks and shrunk copies of a large step included."""
    rng = np.random.default_rng(1)
    sizes = [2, 1024, 64, 64, 64]  # u, v, then a, b, c: v's step spans a, b, c

    def classed(ku, kv, cu, cv):
        base = rng.uniform(0, 10, (cu, cv))
        return np.ascontiguousarray(base[rng.integers(0, cu, ku)][:, rng.integers(0, cv, kv)])

    nodes = [rng.uniform(0, 10, k) for k in sizes]
    emats = {(0, 1): rng.uniform(0, 10, (2, 1024)), (0, 2): classed(2, 64, 2, 8), (0, 3): classed(2, 64, 2, 8),
             (1, 4): rng.uniform(0, 10, (1024, 64)), (2, 4): rng.uniform(0, 10, (64, 64)),
             (3, 4): rng.uniform(0, 10, (64, 64))}
    import search.contract as sc

    monkeypatch.setattr(sc, "MERGE_WORK", 1 << 24)
    run = limited(nodes, emats, [0, 1, 2, 3, 4])
    want = run(None)
    least = smallest_limit(run, 1 << 34)
    got, peak = traced_peak(run, least)
    assert (got.cost, got.index) == (want.cost, want.index) and got.stats.work_computed < got.stats.work
    assert peak <= least + OBJECTS
