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


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("pattern", PATTERNS, ids=[" ".join(p) for p in PATTERNS])
def test_fused_and_numpy_tables_are_the_same_bits(pattern, seed):
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
